"""vLLM: ``serve.sh`` (``vllm serve``) for one node; for several, one ``launch.sh`` that every
node runs with its node rank (its first argument, ``SLURM_NODEID`` or ``NODE_RANK``).

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

from parc.model.targets import flag, pinned
from parc.targets.base import (Cat, Env, File, Var, device_env, settings, mesh_text, nccl_env, plain_ifname, plan_json,
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


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml)."""
    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def _lines(plan, node_rank) -> tuple[list[list], list[list], list[list], list[list]]:
    """The options of ``vllm serve`` in four parts: (every node's, node 0's own, the other nodes'
    own, the spec's extra_args); ``node_rank`` is the node's rank, an int or a shell variable."""
    s = settings(plan, TARGET)
    me, sv, m, cl = plan.mesh, plan.serve, plan.model, plan.cluster
    F = options(plan)
    mode = launch_mode(plan)
    out: list[list] = []
    a = out.append
    a([F("tensor_parallel_size"), me.tp])
    a([F("pipeline_parallel_size"), me.pp])
    if me.cp > 1:
        a([F("prefill_context_parallel_size"), me.cp])
    if me.dp > 1:
        a([F("data_parallel_size"), me.dp])
    if me.ep > 1:
        a([F("enable_expert_parallel")])
    a([F("max_model_len"), sv.max_model_len])
    a([F("gpu_memory_utilization"), repr(float(sv.gpu_memory_utilization))])
    a([F("max_num_seqs"), sv.max_num_seqs])
    a([F("kv_cache_dtype"), KV_DTYPES[sv.kv_cache_dtype]])
    a([F("dtype"), DTYPES[m.dtype]])
    if m.dtype == "fp8":
        a([F("quantization"), "fp8"])
    others: list[list] = []
    if mode == "ray":
        a([F("distributed_executor_backend"), "ray"])
        if me.dp > 1:
            a([F("data_parallel_backend"), "ray"])
            if replica(plan) <= cl.gpus_per_node:
                # without it vLLM places every DP engine on the head node
                a([F("data_parallel_size_local"), min(me.dp, cl.gpus_per_node // replica(plan))])
    elif mode == "single" and s.get("executor"):
        a([F("distributed_executor_backend"), s["executor"]])
    elif mode == "nnodes":
        a([F("distributed_executor_backend"), "mp"])
        a([F("nnodes"), cl.nodes])
        a([F("node_rank"), node_rank])
        a([F("master_addr"), Var("master_addr")])
        a([F("master_port"), MASTER_PORT])
    elif mode == "dp":
        local = cl.gpus_per_node // replica(plan)
        a([F("data_parallel_size_local"), local])
        a([F("data_parallel_address"), Var("master_addr")])
        a([F("data_parallel_rpc_port"), DP_RPC_PORT])
        start = node_rank * local if isinstance(node_rank, int) else Var("start_rank")
        others.append([F("data_parallel_start_rank"), start])
    others.append([F("headless")])
    return out, [[F("port"), s.get("port", 8000)]], others, [[x] for x in s.get("extra_args") or []]


def serve_lines(plan, node: int | Var | None) -> list[list]:
    """Every option of ``vllm serve`` for node ``node`` (None: the only node; a :class:`Var`: a
    node other than 0 whose rank the launcher fills in, as the lws target's pods do)."""
    common, head, others, extra = _lines(plan, 0 if node is None else node)
    return (head + common if node in (None, 0) else common + others) + extra


def _env(plan) -> list[Env]:
    env = []
    part = uneven_partition(plan)
    if part:
        env.append(Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part)),
                       "the plan's uneven layer split, one count per pipeline stage", default=False))
    return env + device_env(plan, TARGET) + nccl_env(plan)


def _script(plan) -> str:
    """serve.sh for one node; for several, launch.sh, which every node runs with its node rank
    (its first argument, SLURM_NODEID or NODE_RANK)."""
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    mode = launch_mode(plan)
    multi = mode != "single"
    mesh = f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x {count(cl.gpus_per_node, 'GPU')}."
    if not multi:
        header = [f"vllm serve, compiled by parc from {spec_name(plan)}.", mesh]
    else:
        roles = ("node 0 is the Ray head and serves, the others join it as Ray workers" if mode == "ray"
                 else "node 0 serves the API, the others run headless")
        header = [f"vLLM launch for any node of {cl.nodes}, compiled by parc from {spec_name(plan)}: {roles}.",
                  f"Usage: launch.sh NODE_RANK (0 to {cl.nodes - 1}); without an argument the rank comes from "
                  "SLURM_NODEID or NODE_RANK.", mesh,
                  "Set MASTER_ADDR to the address of node 0 before running it"
                  + (" on the other nodes." if mode == "ray" else ".")]
    common, head, others, extra = _lines(plan, Var("node_rank"))
    if multi and mode != "ray":   # the node's own options come from the array `role` (Var renders "${role[@]}")
        lines, role = common + [[Var("role[@]")]] + extra, ([w for ln in head for w in ln], [w for ln in others for w in ln])
    else:
        lines, role = head + common + extra, None
    ifname = plain_ifname(cl.socket_ifname)
    return render("vllm/serve.sh.j2", header=header, need_here=False, env=_env(plan), multi=multi,
                  nnodes=cl.nodes, ray=mode == "ray", ifname=ifname.split(",")[0] if ifname else None,
                  ray_port=RAY_PORT, ray_address=Cat((Var("master_addr"), f":{RAY_PORT}")), model=s["model"],
                  serve_lines=lines, role=role,
                  start_rank=cl.gpus_per_node // replica(plan) if mode == "dp" else None)


def build(plan) -> list[File]:
    name = "launch.sh" if launch_mode(plan) != "single" else "serve.sh"
    return [File(name, _script(plan), True), File("plan.json", plan_json(plan))]
