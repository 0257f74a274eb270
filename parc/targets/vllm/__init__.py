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

import json
import re

from parc.model.targets import flag, pinned
from parc.targets.base import (Cat, Env, File, Var, device_env, need, settings, mesh_text, nccl_env, plain_ifname, plan_json,
                    spec_name)
from parc.words import count

TARGET = "vllm"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16"}
KV_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
             "fp8_e5m2": "fp8_e5m2"}
MASTER_PORT = 29501
DP_RPC_PORT = 13345
RAY_PORT = 6379
# The ports of the two pools' API servers and of the NIXL side channel, as vLLM's NixlConnector
# usage guide and its toy proxy (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py) use them.
POOL_PORTS = {"prefill": 8100, "decode": 8200}
NIXL_PORT = 5600
PROXY_PORT = 8000


def replica(plan) -> int:
    """The GPUs of one data-parallel rank (:func:`parc.model.pools.replica_gpus`)."""
    from parc.model.pools import replica_gpus

    return replica_gpus(plan.mesh)


def launch_mode(plan) -> str:
    """single | ray | nnodes | dp (see the module doc)."""
    if plan.cluster.nodes == 1:
        return "single"
    if settings(plan, TARGET).get("executor") == "ray":
        return "ray"
    return "nnodes" if replica(plan) > plan.cluster.gpus_per_node else "dp"


def uneven_partition(plan) -> list[int] | None:
    """The spec's uneven split for VLLM_PP_LAYER_PARTITION; None for an even one, or where the spec
    leaves the split to vLLM (``placement.layers`` then holds vLLM's own, which it makes unasked)."""
    layers = plan.placement.layers
    if plan.placement.layers_mode == "even":
        return None
    if plan.mesh.pp > 1 and layers and len(layers) == plan.mesh.pp and len(set(layers)) > 1:
        return list(layers)
    return None


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml)."""
    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def _lines(plan, node_rank, pool: str | None = None) -> tuple[list[list], list[list], list[list], list[list]]:
    """The options of ``vllm serve`` in four parts: (every node's, node 0's own, the other nodes'
    own, the spec's extra_args); ``node_rank`` is the node's rank, an int or a shell variable;
    ``pool`` the pool of a disaggregated plan whose instance this is (``plan`` is its instance plan)."""
    s = settings(plan, TARGET)
    me, cl = plan.mesh, plan.cluster
    F = options(plan)
    mode = launch_mode(plan)
    out = engine_lines(plan, pool)
    a = out.append
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
    port = Var("port") if pool else s.get("port", 8000)
    return out, [[F("port"), port]], others, [[x] for x in s.get("extra_args") or []]


def engine_lines(plan, pool: str | None = None) -> list[list]:
    """The options that make the engine what the plan says, whoever starts it: its degrees, MoE,
    scheduler, KV cache and model (the launch's own, ranks and addresses, are :func:`_lines`')."""
    s, me, sv = settings(plan, TARGET), plan.mesh, plan.serve
    F = options(plan)
    out: list[list] = [[F("tensor_parallel_size"), me.tp], [F("pipeline_parallel_size"), me.pp]]
    a = out.append
    if me.cp > 1:
        a([F("prefill_context_parallel_size"), me.cp])
    if me.dp > 1:
        a([F("data_parallel_size"), me.dp])
    if me.dcp > 1:
        a([F("decode_context_parallel_size"), me.dcp])
    if me.ep > 1:
        a([F("enable_expert_parallel")])
    out += _moe_lines(plan, F, s, pool)
    out += _scheduler_lines(sv, F)
    a([F("kv_cache_dtype"), KV_DTYPES[sv.kv_cache_dtype]])
    return out + model_lines(plan, F)


def engine_config(plan, s: dict, pool: str | None = None) -> tuple[dict, list[Env]]:
    """The engine as keyword arguments of vLLM's EngineArgs (what a launcher that builds the
    engine itself, Ray Serve LLM's ``engine_kwargs``, passes) and the environment it needs:
    :func:`engine_lines`, each option's field (vLLM's CLI spells each EngineArgs field
    ``--field-name``), a flag ``True``, a JSON value its object, a number its number."""
    kwargs = {}
    for line in engine_lines(plan, pool):
        key = line[0].lstrip("-").replace("-", "_")
        kwargs[key] = True if len(line) == 1 else _typed(line[1])
    part = uneven_partition(plan)
    env = [Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part)))] if part else []
    return kwargs, env


def _typed(v):
    """An option's value as its Python value: JSON (an object, a number) read back, else as written."""
    if isinstance(v, str) and (v[:1] == "{" or re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", v)):
        return json.loads(v)
    return v


def model_lines(plan, F) -> list[list]:
    """The model as vLLM loads it: ``--dtype`` where the spec states a 16- or 32-bit dtype or vLLM's
    ``auto`` (the checkpoint's dtype) would run another (:func:`parc.model.checkpoints.engine_dtype`),
    ``--quantization fp8`` only for a 16-bit checkpoint served in FP8 (vLLM quantizes it at load;
    a quantized checkpoint names its own method, and another --quantization is refused: P619),
    ``--allow-deprecated-quantization`` for a method vLLM deprecates (FBGEMM FP8),
    and ``--hf-overrides`` with the config.json keys of the fields that differ from the preset's
    checkpoint (parc/targets/hf_config.toml; P620 refuses a field without one)."""
    from parc.model.checkpoints import engine_deprecated, engine_dtype, load_quantization
    from parc.targets.hf import overrides

    from parc.rules.util import given

    m = plan.model
    dtype = engine_dtype(m, TARGET, given(plan, "model.dtype"))
    out: list[list] = [[F("dtype"), DTYPES[dtype]]] if dtype else []
    if load_quantization(m):
        out.append([F("quantization"), load_quantization(m)])
    if engine_deprecated(m.checkpoint_format, TARGET) and F("allow_deprecated_quantization"):
        out.append([F("allow_deprecated_quantization")])   # else vLLM refuses an FBGEMM FP8 checkpoint
    found, _ = overrides(m)
    if found:
        out.append([F("hf_overrides"), json.dumps(found, separators=(",", ":"), sort_keys=True)])
    return out


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each model field vLLM cannot be told (P620)."""
    from parc.targets.hf import inexpressible as changed

    return changed(plan, "vLLM", options(plan)("hf_overrides"))


def _scheduler_lines(sv, F) -> list[list]:
    """The scheduler and speculative options the spec gives (a key it leaves out is vLLM's own
    default: not written)."""
    out = [[F(k), getattr(sv, k)] for k in ("max_model_len",) if getattr(sv, k) is not None]
    if sv.gpu_memory_utilization is not None:
        out.append([F("gpu_memory_utilization"), repr(float(sv.gpu_memory_utilization))])
    out += [[F(k), getattr(sv, k)] for k in ("max_num_seqs", "max_num_batched_tokens") if getattr(sv, k) is not None]
    if sv.two_batch_overlap:
        out.append([F("enable_dbo")])
    if sv.speculative:
        cfg = {"method": sv.speculative, "model": sv.draft_model, "num_speculative_tokens": sv.speculative_tokens or 1}
        out.append([F("speculative_config"), json.dumps({k: v for k, v in cfg.items() if v is not None},
                                                        separators=(",", ":"))])
    return out


def eplb_config(sv) -> dict:
    """The JSON of the EPLB options: the keys the spec sets (vLLM's EPLBConfig defaults the others)."""
    cfg = {"window_size": sv.eplb_window, "step_interval": sv.eplb_interval,
           "num_redundant_experts": sv.redundant_experts or None}
    return {k: v for k, v in cfg.items() if v is not None}


def kv_transfer_config(plan, pool: str) -> dict | None:
    """The JSON of the KV transfer option for an instance of ``pool`` (``plan`` is its instance
    plan; target.toml [kv_connectors]): an instance with prefill context parallelism takes the
    role the connector requires of it (``<pool>_cp``: NixlConnector's kv_producer)."""
    from parc.model.targets import spec

    kv = plan.serve.kv_transfer if plan.serve else None
    found = spec(TARGET)["kv_connectors"].get(kv) if kv else None
    if not found:
        return None
    role = found.get(f"{pool}_cp", found[pool]) if plan.mesh.cp > 1 else found[pool]
    return {"kv_connector": found["connector"], "kv_role": role}


def _moe_lines(plan, F, s, pool: str | None) -> list[list]:
    """EPLB, the all-to-all backend and the KV connector of a pool's instance."""
    sv, out = plan.serve, []
    if sv.eplb:
        out.append([F("enable_eplb")])
    if eplb_config(sv):   # as the spec says even without eplb: vLLM refuses redundant experts then (P124)
        out.append([F("eplb_config"), json.dumps(eplb_config(sv), separators=(",", ":"))])
    if s.get("all2all_backend"):
        out.append([F("all2all_backend"), s["all2all_backend"]])
    if pool and kv_transfer_config(plan, pool):
        out.append([F("kv_transfer_config"), json.dumps(kv_transfer_config(plan, pool), separators=(",", ":"))])
    return out


def serve_lines(plan, node: int | Var | None, pool: str | None = None) -> list[list]:
    """Every option of ``vllm serve`` for node ``node`` (None: the only node; a :class:`Var`: a
    node other than 0 whose rank the launcher fills in, as the lws target's pods do)."""
    common, head, others, extra = _lines(plan, 0 if node is None else node, pool)
    return (head + common if node in (None, 0) else common + others) + extra


def _env(plan) -> list[Env]:
    env = []
    part = uneven_partition(plan)
    if part:
        env.append(Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part)),
                       "the plan's uneven layer split, one count per pipeline stage", default=False))
    return env + device_env(plan, TARGET) + nccl_env(plan)


def _header(plan, pool) -> list[str]:
    """The comment at the top of serve.sh / launch.sh (of one pool's instance, with ``pool``)."""
    cl = plan.cluster
    mode = launch_mode(plan)
    mesh = f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x {count(cl.gpus_per_node, 'GPU')}."
    what = f"a {pool.name} instance (of {pool.instances}) of the disaggregated plan" if pool else None
    if mode == "single":
        return [f"vllm serve{', ' + what if what else ''}, compiled by parc from {spec_name(plan)}.", mesh]
    roles = ("node 0 is the Ray head and serves, the others join it as Ray workers" if mode == "ray"
             else "node 0 serves the API, the others run headless")
    return [f"vLLM launch for any node of {cl.nodes}{' of ' + what if what else ''}, compiled by parc from "
            f"{spec_name(plan)}: {roles}.",
            f"Usage: launch.sh NODE_RANK (0 to {cl.nodes - 1}); without an argument the rank comes from "
            "SLURM_NODEID or NODE_RANK.", mesh,
            "Set MASTER_ADDR to the address of node 0 before running it"
            + (" on the other nodes." if mode == "ray" else ".")]


def pool_slots(plan, pool) -> int:
    """How many places on a node the instances of ``pool`` take (:func:`parc.model.pools.placements`):
    the slots its script chooses between (1 for an instance of a node or more)."""
    from parc.model.pools import placements

    return len(placements(plan, pool.name))


def instance_port(plan, inst) -> int:
    """The API port of instance ``inst`` (:class:`parc.model.pools.Instance`): its pool's port plus
    its slot, so that the instances sharing a node listen apart."""
    from parc.model.pools import slot_of

    return POOL_PORTS[inst.pool] + slot_of(plan, inst)


def _pool_ctx(plan, pool) -> dict | None:
    """What a pool's script sets before `vllm serve`: the slot its instance takes on its node
    (:func:`parc.model.pools.placements`): its GPUs where it leaves some of the node to other
    instances, of either pool, its API port (the pool's port plus the slot) and, with
    NixlConnector, its side-channel port (NIXL's port plus its first GPU: unique on the node
    whatever pool shares it) and, where the instances span nodes, its side-channel host
    (:func:`nixl_host`)."""
    from parc.model.pools import nodes_needed, placements, shares_nodes

    if pool is None:
        return None
    places = placements(plan, pool.name)
    nixl = plan.serve.kv_transfer == "nixl"
    return {"name": pool.name, "slots": len(places), "port": POOL_PORTS[pool.name],
            "gpus": [p.devices for p in places] if shares_nodes(plan, pool.name) else None,
            "nixl": [NIXL_PORT + p.first for p in places] if nixl else None,
            "nixl_host": nixl_host(plan) and nodes_needed(plan) > 1}


def nixl_host(plan) -> bool:
    """Whether the instances of disaggregated ``plan`` each need VLLM_NIXL_SIDE_CHANNEL_HOST: with
    NixlConnector, a prefill instance listens for the decode instances' handshake on that address
    and hands it to them in its response's kv_transfer_params (vLLM 0.33 envs.py, default
    ``localhost``; distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py
    ``remote_host=self.side_channel_host``), so an instance another node (or pod) reaches must say
    its own reachable address."""
    return bool(plan.pools) and plan.serve.kv_transfer == "nixl"


def _script(plan, pool=None, whole=None) -> str:
    """serve.sh for one node; for several, launch.sh, which every node runs with its node rank
    (its first argument, SLURM_NODEID or NODE_RANK). With ``pool`` (and the disaggregated plan
    ``whole``), the script of an instance of that pool: ``plan`` is the instance's plan."""
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    mode = launch_mode(plan)
    multi = mode != "single"
    common, head, others, extra = _lines(plan, Var("node_rank"), pool.name if pool else None)
    if multi and mode != "ray":   # the node's own options come from the array `role` (Var renders "${role[@]}")
        lines, role = common + [[Var("role[@]")]] + extra, ([w for ln in head for w in ln], [w for ln in others for w in ln])
    else:
        lines, role = head + common + extra, None
    ifname = plain_ifname(cl.socket_ifname)
    return render("vllm/serve.sh.j2", header=_header(plan, pool), need_here=False, env=_env(plan), multi=multi,
                  nnodes=cl.nodes, ray=mode == "ray", ifname=ifname.split(",")[0] if ifname else None,
                  ray_port=RAY_PORT, ray_address=Cat((Var("master_addr"), f":{RAY_PORT}")), model=need(plan, TARGET, "model"),
                  serve_lines=lines, role=role, pool=_pool_ctx(whole, pool) if pool else None,
                  start_rank=cl.gpus_per_node // replica(plan) if mode == "dp" else None)


def _proxy(plan, apart: bool = False) -> str:
    """proxy.sh: the proxy in front of the pools, vLLM's toy proxy of its NixlConnector guide;
    ``apart``: every instance has an address of its own (a pod each), on its pool's port."""
    from parc.targets.render import render

    from parc.model.pools import instances

    placed = instances(plan)
    ports = {p.name: [POOL_PORTS[p.name] if apart else instance_port(plan, i) for i in placed if i.pool == p.name]
             for p in plan.pools}
    return render("vllm/proxy.sh.j2", spec=spec_name(plan), ports=ports, port=PROXY_PORT,
                  counts={p.name: p.instances for p in plan.pools})


def build(plan) -> list[File]:
    """serve.sh or launch.sh; for a disaggregated plan one per pool (``prefill-serve.sh`` or
    ``prefill-launch.sh``, the same for decode: each the script of any instance of the pool; flat
    names, as a Kubernetes ConfigMap's keys must be) and ``proxy.sh`` in front of them."""
    if plan.pools:
        from parc.model.pools import pool_plans

        files = []
        for pool, pp in pool_plans(plan):
            name = "launch.sh" if launch_mode(pp) != "single" else "serve.sh"
            files.append(File(f"{pool.name}-{name}", _script(pp, pool, plan), True))
        return files + [File("proxy.sh", _proxy(plan), True), File("plan.json", plan_json(plan))]
    name = "launch.sh" if launch_mode(plan) != "single" else "serve.sh"
    return [File(name, _script(plan), True), File("plan.json", plan_json(plan))]


def node_launch(plan, s: dict):
    """vLLM under a scheduler: parc/targets/vllm/scheduled.py (``s``: the block's settings)."""
    from parc.targets.vllm.scheduled import node_launch as scheduled

    return scheduled(plan)
