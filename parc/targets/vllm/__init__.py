"""vLLM: ``vllm serve`` for one node, and the complete per-node commands for several.

Several nodes are started in one of three ways:

* ``executor = ray``: node 0 starts the Ray head and then ``vllm serve`` with
  ``--distributed-executor-backend ray`` (and, for data parallelism, ``--data-parallel-backend
  ray`` with ``--data-parallel-size-local``, the replicas the head node holds: without it vLLM
  places every replica on the head node); every other node joins the head with ``ray start``.
  Each node gives Ray and vLLM its own address (``--node-ip-address``, ``VLLM_HOST_IP``: the
  cluster's ``socket_ifname`` interface, else the host's first address) and stops a Ray left
  running by an earlier start, so the script can be run again;
* a replica (tp·pp·cp GPUs) larger than a node: the multiprocessing backend, every node runs
  ``vllm serve`` with ``--nnodes``/``--node-rank``/``--master-addr``/``--master-port`` and all but
  node 0 are ``--headless``;
* replicas that fit in a node, data parallelism across nodes: ``--data-parallel-size-local``
  replicas per node, ``--data-parallel-start-rank`` and ``--data-parallel-address`` on every
  node, all but node 0 ``--headless``.

vLLM lays ranks out as (dp, pp, pcp, tp), tp innermost (vLLM's ``ParallelConfig``); parc's cp is
vLLM's prefill context parallelism (``--prefill-context-parallel-size``, with any dp; vLLM runs
it only for MLA models, P605's warning); expert parallelism is ``--enable-expert-parallel`` with
ep = dp·cp·tp. Rules P601, P604, P606 and P614 refuse the plans vLLM cannot run; P651 and P652
here add the multi-node layout and the rank order.
"""
from __future__ import annotations

from parc.targets.base import (Cat, Env, File, Var, settings, mesh_text, nccl_env, plain_ifname, plan_json,
                    spec_name)
from parc.words import count

TARGET = "vllm"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16"}
KV_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
             "fp8_e5m2": "fp8_e5m2"}
MASTER_PORT = 29501
DP_RPC_PORT = 13345
RAY_PORT = 6379


def replica(plan) -> int:
    me = plan.mesh
    return me.tp * me.pp * me.cp


def launch_mode(plan) -> str:
    """single | ray | nnodes | dp (see the module doc)."""
    if plan.cluster.nodes == 1:
        return "single"
    if settings(plan, TARGET).get("executor") == "ray":
        return "ray"
    return "nnodes" if replica(plan) > plan.cluster.gpus_per_node else "dp"


def uneven_partition(plan) -> list[int] | None:
    layers = plan.placement.layers
    if plan.mesh.pp > 1 and layers and len(layers) == plan.mesh.pp and len(set(layers)) > 1:
        return list(layers)
    return None


def serve_lines(plan, node: int | None) -> list[list]:
    """Every option of ``vllm serve`` for node ``node`` (None: the only node)."""
    s = settings(plan, TARGET)
    me, sv, m, cl = plan.mesh, plan.serve, plan.model, plan.cluster
    mode = launch_mode(plan)
    head = node in (None, 0)
    out: list[list] = []
    a = out.append
    if head:
        a(["--port", s.get("port", 8000)])
    a(["--tensor-parallel-size", me.tp])
    a(["--pipeline-parallel-size", me.pp])
    if me.cp > 1:
        a(["--prefill-context-parallel-size", me.cp])
    if me.dp > 1:
        a(["--data-parallel-size", me.dp])
    if me.ep > 1:
        a(["--enable-expert-parallel"])
    a(["--max-model-len", sv.max_model_len])
    a(["--gpu-memory-utilization", repr(float(sv.gpu_memory_utilization))])
    a(["--max-num-seqs", sv.max_num_seqs])
    a(["--kv-cache-dtype", KV_DTYPES[sv.kv_cache_dtype]])
    a(["--dtype", DTYPES[m.dtype]])
    if m.dtype == "fp8":
        a(["--quantization", "fp8"])
    if mode == "ray":
        a(["--distributed-executor-backend", "ray"])
        if me.dp > 1:
            a(["--data-parallel-backend", "ray"])
            if replica(plan) <= cl.gpus_per_node:
                # without it vLLM places every DP engine on the head node
                a(["--data-parallel-size-local", min(me.dp, cl.gpus_per_node // replica(plan))])
    elif mode == "single" and s.get("executor"):
        a(["--distributed-executor-backend", s["executor"]])
    elif mode == "nnodes":
        a(["--distributed-executor-backend", "mp"])
        a(["--nnodes", cl.nodes])
        a(["--node-rank", node])
        a(["--master-addr", Var("master_addr")])
        a(["--master-port", MASTER_PORT])
    elif mode == "dp":
        local = cl.gpus_per_node // replica(plan)
        a(["--data-parallel-size-local", local])
        if not head:
            a(["--data-parallel-start-rank", node * local])
        a(["--data-parallel-address", Var("master_addr")])
        a(["--data-parallel-rpc-port", DP_RPC_PORT])
    if not head:
        a(["--headless"])
    for x in s.get("extra_args") or []:
        a([x])
    return out


def _env(plan) -> list[Env]:
    env = []
    part = uneven_partition(plan)
    if part:
        env.append(Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part)),
                       "the plan's uneven layer split, one count per pipeline stage", default=False))
    return env + nccl_env(plan)


def _script(plan, node: int | None) -> str:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    mode = launch_mode(plan)
    if node is None:
        what = "vllm serve"
    else:
        role = (("Ray head and vllm serve" if node == 0 else "Ray worker") if mode == "ray"
                else ("vllm serve" if node == 0 else "headless vllm serve"))
        what = f"vLLM node {node} of {cl.nodes} ({role})"
    header = [f"{what}, compiled by parc from {spec_name(plan)}.",
              f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x {count(cl.gpus_per_node, 'GPU')}."]
    ray_worker = mode == "ray" and node not in (None, 0)
    need_master = node is not None and (mode != "ray" or ray_worker)
    if need_master:
        header.append("Set MASTER_ADDR to the address of node 0 before running it.")
    ifname = plain_ifname(cl.socket_ifname)
    return render("vllm/serve.sh.j2", header=header, need_here=False, env=_env(plan),
                  need_master=need_master, ray=mode == "ray", ifname=ifname.split(",")[0] if ifname else None,
                  ray_head=mode == "ray" and node == 0, ray_worker=ray_worker, ray_port=RAY_PORT,
                  ray_address=Cat((Var("master_addr"), f":{RAY_PORT}")), model=s["model"],
                  serve_lines=[] if ray_worker else serve_lines(plan, node))


def build(plan) -> list[File]:
    from parc.targets import torchrun

    if launch_mode(plan) == "single":
        return [File("serve.sh", _script(plan, None), True), File("plan.json", plan_json(plan))]
    files = [File("launch.sh", torchrun.dispatcher(plan, "Start this node's part of the vLLM deployment"), True)]
    files += [File(f"node{k}.sh", _script(plan, k), True) for k in range(plan.cluster.nodes)]
    files.append(File("plan.json", plan_json(plan)))
    return files
