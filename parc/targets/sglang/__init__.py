"""SGLang: ``python -m sglang.launch_server`` commands (serve.sh on one node, one launch.sh that
every node runs with its node rank on several) and, in front of several servers, ``router.sh``
running ``python -m sglang_router.launch_router``.

How the mesh becomes SGLang's sizes (SGLang's ServerArgs, arg_groups/fields/parallel.py):

* a server of ``tp_size`` · ``pp_size`` GPUs, tp on consecutive ranks;
* data parallelism, one of three ways: on one node the server's own DP controller
  (``--dp-size``: dp replicas of tp·pp GPUs behind one API); across nodes, where SGLang refuses
  ``--dp-size`` with ``--nnodes`` ("multi-node data-parallel replicas are not supported",
  arg_groups/validation_hook.py check_server_args), independent servers (each node one server
  with its local replicas, or each replica one server over whole nodes) with router.sh in front;
  or, with ``dp_attention = true``, attention data parallelism inside one server of dp·tp GPUs
  (``--tp-size dp·tp --attn-dp-size dp``), the expert layers spanning all of them;
* expert parallelism inside the server's tp_size (``--ep-size``; the MoE tensor-parallel size is
  what is left, tp_size / ep); the all-to-all backends (``--moe-a2a-backend``) set ep = tp_size;
* decode context parallelism inside each attention TP group (``--dcp-size``), EPLB
  (``--enable-eplb``, ``--ep-num-redundant-experts``, ``--eplb-rebalance-num-iterations``, the
  statistics window as ``--expert-distribution-recorder-buffer-size``);
* prefill/decode disaggregation: a spec with ``prefill`` and ``decode`` pools compiles into
  prefill.sh and decode.sh (each pool's servers, ``--disaggregation-mode`` and the transfer
  backend of ``serve.kv_transfer``) and router.sh with ``--pd-disaggregation``; the older
  one-side spec (``disaggregation = prefill``) still compiles one side.

Across nodes a server is started with ``--nnodes``/``--node-rank``/``--dist-init-addr`` on each
of its nodes; MASTER_ADDR names the server's first node. P691 to P697, P683 and P623 to P645
(serving_rules.py) refuse what SGLang cannot run or parc cannot express.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parc.targets.base import Cat, File, Var, device_env, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.words import count

TARGET = "sglang"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16"}
# SGLang's --kv-cache-dtype choices (arg_groups/fields/model.py); fp16 is only "auto" on an fp16 model (P695)
KV_DTYPES = {"auto": "auto", "bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
PORT = 30000
DIST_PORT = 5000
ROUTER_PORT = 8000
# SGLang's default --disaggregation-bootstrap-port (arg_groups/fields/disagg.py), which the PD
# router pairs with each prefill server's URL
BOOTSTRAP_PORT = 8998
# serve.kv_transfer as --disaggregation-transfer-backend (arg_groups/choices.py
# DISAGG_TRANSFER_BACKEND_CHOICES); lmcache and p2p_nccl are vLLM connectors SGLang has not (P639)
KV_TRANSFER = {"mooncake": "mooncake", "nixl": "nixl"}
# the all-to-all backends whose mode --deepep-mode selects (arg_groups/fields/exec_.py)
DEEPEP_MODE_BACKENDS = ("deepep", "deepep_v2", "mori")


@dataclass(frozen=True)
class Layout:
    """What SGLang runs: ``servers`` servers of ``nnodes`` nodes each, every one with these sizes."""

    tp_size: int
    pp_size: int
    dp_size: int        # --dp-size: replicas behind one server's DP controller
    attn_dp: int        # --attn-dp-size: attention data parallelism inside the server
    ep_size: int
    servers: int
    nnodes: int         # nodes per server

    @property
    def nodes(self) -> int:
        return self.servers * self.nnodes


def replica(plan) -> int:
    """The GPUs of one data-parallel replica (:func:`parc.model.pools.replica_gpus`)."""
    from parc.model.pools import replica_gpus

    return replica_gpus(plan.mesh)


def dp_attention_asked(plan) -> bool:
    """Whether the spec asks for attention data parallelism: ``serve.dp_attention``, or the
    target block's ``dp_attention``, its older spelling (P623 asks to move it)."""
    sv = plan.serve
    return bool((sv is not None and sv.dp_attention) or settings(plan, TARGET).get("dp_attention"))


def dp_attention(plan) -> bool:
    """Whether the plan's dp runs as attention data parallelism inside one server (P697 warns
    where it is asked with dp = 1)."""
    return dp_attention_asked(plan) and plan.mesh.dp > 1


def transfer_backend(plan) -> str:
    """--disaggregation-transfer-backend: ``serve.kv_transfer`` where SGLang has it, else the
    target block's ``transfer_backend`` (P640 refuses the two disagreeing), else SGLang's
    default, mooncake."""
    kv = plan.serve.kv_transfer if plan.serve is not None else None
    return KV_TRANSFER.get(kv) or settings(plan, TARGET).get("transfer_backend") or "mooncake"


def server_ep(plan) -> int:
    """The expert-parallel size SGLang serves: the server's tp_size under an all-to-all backend
    (it overrides --ep-size, P694), else the mesh's ep; 1 for a dense model."""
    if not plan.model.is_moe:
        return 1
    return layout(plan).tp_size if settings(plan, TARGET).get("moe_a2a_backend") else plan.mesh.ep


def layout(plan) -> Layout:
    """SGLang's sizes for the plan (see the module doc); P696 refuses the meshes whose nodes
    this does not divide evenly."""
    me, cl = plan.mesh, plan.cluster
    ep = me.ep if plan.model.is_moe else 1
    if dp_attention(plan):
        return Layout(me.dp * me.tp, me.pp, 1, me.dp, ep, 1, cl.nodes)
    r = replica(plan)
    if cl.nodes == 1 or me.dp == 1:
        return Layout(me.tp, me.pp, me.dp, 1, ep, 1, cl.nodes)
    if r > cl.gpus_per_node:       # a replica spans whole nodes: one server each
        return Layout(me.tp, me.pp, 1, 1, ep, me.dp, max(1, r // cl.gpus_per_node))
    servers = min(cl.nodes, me.dp)  # each node one server with its local replicas
    return Layout(me.tp, me.pp, max(1, me.dp // servers), 1, ep, servers, 1)


def attn_dp_words(plan, n: int) -> list:
    """Attention data parallelism of size ``n`` as the release the plan launches spells it
    (flags.toml): ``--attn-dp-size n`` from 0.5.22, ``--dp-size n --enable-dp-attention`` before."""
    from parc.model.targets import flag, pinned

    version = pinned(plan, TARGET)
    new = flag(TARGET, "attn_dp_size", version)
    if new:   # the older spelling still parses there, deprecated
        return [new, n]
    return [flag(TARGET, "dp_size", version), n, flag(TARGET, "enable_dp_attention", version)]


def server_lines(plan, node_rank, side: str | None = None, slotted: bool = False) -> list[list]:
    """The options of ``sglang.launch_server`` after ``--model-path``; ``node_rank`` is the node's
    rank inside its server (an int or a shell variable); ``side`` the pool (prefill or decode)
    of a disaggregated plan's instance, default the target block's ``disaggregation``; with
    ``slotted`` the instance shares its node, and its first GPU and ports come from the script's
    slot (:func:`pool_slots`)."""
    s = settings(plan, TARGET)
    sv, m = plan.serve, plan.model
    lay = layout(plan)
    F = options(plan)
    out: list[list] = [[F("host"), "0.0.0.0"], [F("port"), Var("port") if slotted else s.get("port", PORT)]]
    if slotted:   # SGLang's own one-node disaggregation: the decode server with --base-gpu-id 1
        out.append([F("base_gpu_id"), Var("base_gpu_id")])
    out += [[F("tp_size"), lay.tp_size], [F("pp_size"), lay.pp_size]]
    a = out.append
    if lay.dp_size > 1:
        a([F("dp_size"), lay.dp_size])
    if lay.attn_dp > 1:
        a(attn_dp_words(plan, lay.attn_dp))
    if lay.ep_size > 1:
        a([F("ep_size"), lay.ep_size])
    if s.get("moe_a2a_backend"):
        a([F("moe_a2a_backend"), s["moe_a2a_backend"]])
    out += _serving_lines(plan) + _scheduler_lines(plan)
    a([F("kv_cache_dtype"), KV_DTYPES.get(sv.kv_cache_dtype, "auto")])
    out += model_lines(plan)
    side = side or s.get("disaggregation")
    if side:
        a([F("disaggregation_mode"), side])
        a([F("disaggregation_transfer_backend"), transfer_backend(plan)])
        if slotted and side == "prefill":
            a([F("disaggregation_bootstrap_port"), Var("bootstrap_port")])
    if lay.nnodes > 1:
        a([F("nnodes"), lay.nnodes])
        a([F("node_rank"), node_rank])
        a([F("dist_init_addr"), Cat((Var("master_addr"), f":{s.get('dist_port', DIST_PORT)}"))])
    return out + [[x] for x in s.get("extra_args") or []]


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml)."""
    from parc.model.targets import flag, pinned

    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def model_lines(plan) -> list[list]:
    """The model as SGLang loads it: ``--dtype`` where the spec states a 16- or 32-bit dtype or
    SGLang's ``auto`` would run another (:func:`parc.model.checkpoints.engine_dtype`), ``--quantization fp8`` only for a 16-bit
    checkpoint served in FP8 (never for an FP8 checkpoint, as SGLang's DeepSeek guide says: it
    reads the method from the checkpoint; P619), and ``--json-model-override-args`` with the
    config.json keys of the fields that differ from the preset's checkpoint (P620 otherwise)."""
    import json

    from parc.model.checkpoints import engine_dtype, load_quantization
    from parc.targets.hf import overrides

    from parc.rules.util import given

    m, F = plan.model, options(plan)
    dtype = engine_dtype(m, TARGET, given(plan, "model.dtype"))
    out: list[list] = [[F("dtype"), DTYPES[dtype]]] if dtype else []
    if load_quantization(m):
        out.append([F("quantization"), load_quantization(m)])
    found, _ = overrides(m)
    if found:
        out.append([F("json_model_override_args"), json.dumps(found, separators=(",", ":"), sort_keys=True)])
    return out


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each model field SGLang cannot be told (P620)."""
    from parc.targets.hf import inexpressible as changed

    return changed(plan, "SGLang", options(plan)("json_model_override_args"))


def _serving_lines(plan) -> list[list]:
    """The options of the 2026 serving keys, each spelled as the pinned release does
    (flags.toml): decode context parallelism, the DeepEP mode and EPLB (MoE models only)."""
    from parc.model.targets import flag, pinned

    def opt(what, *value):
        return [flag(TARGET, what, pinned(plan, TARGET)), *value]

    s, sv = settings(plan, TARGET), plan.serve
    out = [opt("dcp_size", plan.mesh.dcp)] if plan.mesh.dcp > 1 else []
    if not plan.model.is_moe:
        return out
    if s.get("deepep_mode"):
        out.append(opt("deepep_mode", s["deepep_mode"]))
    if sv.eplb:
        out.append(opt("enable_eplb"))
    if sv.redundant_experts:
        out.append(opt("ep_num_redundant_experts", sv.redundant_experts))
    if sv.eplb and sv.eplb_interval:
        out.append(opt("eplb_rebalance_num_iterations", sv.eplb_interval))
    if sv.eplb and sv.eplb_window:
        out.append(opt("expert_distribution_recorder_buffer_size", sv.eplb_window))
    return out


SPECULATIVE = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3"}


def _scheduler_lines(plan) -> list[list]:
    """The scheduler and speculative options the spec gives (a key it leaves out is SGLang's own
    default: not written); max_num_seqs is --max-running-requests, the whole server's."""
    from parc.model.targets import flag, pinned

    version, sv = pinned(plan, TARGET), plan.serve

    def opt(what, *value):
        return [flag(TARGET, what, version), *value]

    out = [opt("context_length", sv.max_model_len)] if sv.max_model_len is not None else []
    if sv.gpu_memory_utilization is not None:
        out.append(opt("mem_fraction_static", repr(float(sv.gpu_memory_utilization))))
    if sv.max_num_seqs is not None:
        out.append(opt("max_running_requests", sv.max_num_seqs))
    if sv.max_num_batched_tokens is not None:
        out.append(opt("chunked_prefill_size", sv.max_num_batched_tokens))
    if sv.two_batch_overlap:
        out.append(opt("enable_two_batch_overlap"))
    if sv.speculative:
        k = sv.speculative_tokens or 1
        out += [opt("speculative_algorithm", SPECULATIVE[sv.speculative]), opt("speculative_num_steps", k),
                opt("speculative_eagle_topk", 1), opt("speculative_num_draft_tokens", k + 1)]
        if sv.draft_model:
            out.append(opt("speculative_draft_model_path", sv.draft_model))
    return out


def _header(plan, lay: Layout, side: str | None = None, script: str = "launch.sh") -> list[str]:
    """The comment of a launch script: what it starts, how to run it, the mesh; ``side`` names
    the pool of a disaggregated plan whose servers ``script`` starts."""
    cl = plan.cluster
    nodes = lay.nodes if side else cl.nodes
    mesh = f"Mesh: {mesh_text(plan)}; {nodes} node{'s' if nodes > 1 else ''} x {count(cl.gpus_per_node, 'GPU')}."
    pd = " (one side of a prefill/decode pair: the PD router joins it to the other side's servers)"
    what = (f"one SGLang server over {count(lay.nnodes, 'node')}" if lay.servers == 1 else
            f"{count(lay.servers, 'SGLang server')} of {count(lay.nnodes, 'node')} each"
            + (pd if side or settings(plan, TARGET).get("disaggregation") else ", with router.sh in front"))
    role = f"SGLang {side} servers of a prefill/decode-disaggregated plan" if side else "SGLang server"
    if side:
        what += "; router.sh pairs them with the other pool's servers"
    if lay.nodes == 1:
        return [f"{role}, compiled by parc from {spec_name(plan)}" + (f": {what}." if side else "."), mesh]
    first = ("the first node of this node's server (node rank · "
             f"{lay.nnodes} rounded down)" if lay.servers > 1 else "node 0")
    rank = f", the node's rank within the {side} pool" if side else ""
    return [f"{'SGLang ' + side + ' pool' if side else 'SGLang'} launch for any node of {lay.nodes}, compiled by parc "
            f"from {spec_name(plan)}: {what}.",
            f"Usage: {script} NODE_RANK (0 to {lay.nodes - 1}{rank}); without an argument the rank comes from "
            "SLURM_NODEID or NODE_RANK.", mesh]\
        + ([f"Set MASTER_ADDR to the address of {first} before running it."] if lay.nnodes > 1 else [])


def router(plan) -> bool:
    """Whether several servers serve the plan behind router.sh (not for a disaggregated side:
    its router pairs prefill and decode servers from two specs)."""
    return layout(plan).servers > 1 and not settings(plan, TARGET).get("disaggregation")


def _router_script(plan, lay: Layout) -> str:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    return render("sglang/router.sh.j2", need_here=False, servers=lay.servers, port=s.get("port", PORT),
                  router_port=s.get("router_port", ROUTER_PORT), nnodes=lay.nnodes, prefill=0,
                  header=[f"sglang_router in front of the {lay.servers} SGLang servers of {spec_name(plan)}.",
                          f"Usage: router.sh HOST... (the address of each server's first node: node ranks "
                          f"0, {lay.nnodes}, ...; {lay.servers} in all)."])


def _script(plan, lay: Layout, side: str | None = None, script: str = "launch.sh", slots: dict | None = None) -> str:
    from parc.targets.render import render

    node = Var("local_rank") if lay.servers > 1 else Var("node_rank")
    header = _header(plan, lay, side, script) if not slots else _slot_header(plan, side, script, slots)
    return render("sglang/launch.sh.j2", header=header, need_here=False,
                  env=device_env(plan, TARGET) + nccl_env(plan), multi=lay.nodes > 1 and not slots, nnodes=lay.nodes,
                  per_server=lay.nnodes, servers=lay.servers, model=settings(plan, TARGET)["model"],
                  model_flag=options(plan)("model_path"),
                  lines=server_lines(plan, node, side, slotted=bool(slots)), slots=slots)


def pool_slots(plan, side: str) -> dict | None:
    """Where the instances of pool ``side`` sit on nodes they share, with each other or with the
    other pool (:func:`parc.model.pools.placements`): per slot the first GPU (``--base-gpu-id``),
    the API port (the target's port plus that GPU, so the decode server beside a prefill server on
    GPU 0 listens on 30001, as in SGLang's one-node disaggregation example) and the prefill
    server's bootstrap port (8998 plus that GPU); None where every instance has its nodes to itself."""
    from parc.model.pools import placements, shares_nodes

    if not shares_nodes(plan, side):
        return None
    port = settings(plan, TARGET).get("port", PORT)
    places = placements(plan, side)
    return {"count": len(places), "gpu": [p.first for p in places], "port": [port + p.first for p in places],
            "bootstrap": [BOOTSTRAP_PORT + p.first for p in places] if side == "prefill" else None}


def _slot_header(plan, side: str, script: str, slots: dict) -> list[str]:
    cl = plan.cluster
    first, g = slots["gpu"][0], cl.gpus_per_node
    usage = (f"Usage: {script} SLOT (0 to {slots['count'] - 1}, or PARC_SLOT): the place of this instance on its "
             "node, each with its own GPUs and ports." if slots["count"] > 1 else
             f"It takes GPU{'s' if g > 1 else ''} {first}{f' to {first + g - 1}' if g > 1 else ''} of its node.")
    return [f"SGLang {side} server of a prefill/decode-disaggregated plan, compiled by parc from {spec_name(plan)}: "
            "one instance on part of a node that other instances share; router.sh pairs it with the other pool's "
            "servers.", usage, f"Mesh: {mesh_text(plan)}; {count(cl.gpus_per_node, 'GPU')}."]


def pool_layouts(plan) -> list[tuple[str, object, Layout]]:
    """Each pool of a disaggregated plan: its name, the plan of one instance
    (:func:`parc.model.pools.pool_plan`) and SGLang's layout of the whole pool, the instance's
    servers repeated ``instances`` times (instances on a shared node: :func:`pool_slots`)."""
    from parc.model.pools import pool_plans

    out = []
    for pool, pp in pool_plans(plan):
        lay = layout(pp)
        out.append((pool.name, pp, dataclasses.replace(lay, servers=lay.servers * pool.instances)))
    return out


def server_ports(plan, side: str, servers: int) -> tuple[list[int], list[int]]:
    """(API ports, bootstrap ports) of the ``servers`` servers of pool ``side`` in order: where its
    instances share nodes, each instance is one server with its slot's ports (:func:`pool_slots`);
    else every server has the target's port and SGLang's bootstrap port."""
    from parc.model.pools import instances, slot_of

    s = settings(plan, TARGET)
    slots = pool_slots(plan, side)
    placed = [i for i in instances(plan) if i.pool == side]
    if slots is None:
        return [s.get("port", PORT)] * servers, [BOOTSTRAP_PORT] * servers
    k = [slot_of(plan, i) for i in placed]
    return [slots["port"][j] for j in k], [(slots["bootstrap"] or [BOOTSTRAP_PORT] * len(k))[j] for j in k]


def _pd_router_script(plan, pools, apart: bool = False) -> str:
    """router.sh of a disaggregated plan; ``apart``: every server has an address of its own (a pod
    each), on the target's port and SGLang's bootstrap port."""
    from parc.targets.render import render

    s = settings(plan, TARGET)
    (_, _, pre), (_, _, dec) = pools
    pre_ports, boot = server_ports(plan, "prefill", pre.servers)
    dec_ports, _ = server_ports(plan, "decode", dec.servers)
    if apart:
        pre_ports, dec_ports = [s.get("port", PORT)] * pre.servers, [s.get("port", PORT)] * dec.servers
        boot = [BOOTSTRAP_PORT] * pre.servers
    return render("sglang/router.sh.j2", need_here=False, servers=pre.servers + dec.servers,
                  port=s.get("port", PORT), router_port=s.get("router_port", ROUTER_PORT),
                  prefill=pre.servers, ports=pre_ports + dec_ports, bootstraps=boot,
                  header=[f"sglang_router pairing the {count(pre.servers, 'prefill server')} and "
                          f"{count(dec.servers, 'decode server')} of {spec_name(plan)} (--pd-disaggregation).",
                          f"Usage: router.sh HOST... (the first node of each prefill server, prefill.sh node ranks "
                          f"0, {pre.nnodes}, ...; then of each decode server, decode.sh node ranks 0, {dec.nnodes}, "
                          f"...; {pre.servers + dec.servers} in all)."])


def build(plan) -> list[File]:
    if plan.pools:
        pools = pool_layouts(plan)
        files = [File(f"{side}.sh", _script(pp, lay, side, f"{side}.sh", pool_slots(plan, side)), True)
                 for side, pp, lay in pools]
        return files + [File("router.sh", _pd_router_script(plan, pools), True), File("plan.json", plan_json(plan))]
    lay = layout(plan)
    files = [File("launch.sh" if lay.nodes > 1 else "serve.sh", _script(plan, lay), True)]
    if router(plan):
        files.append(File("router.sh", _router_script(plan, lay), True))
    return files + [File("plan.json", plan_json(plan))]


def node_launch(plan, s: dict):
    """SGLang under a scheduler: parc/targets/sglang/scheduled.py (``s``: the block's settings)."""
    from parc.targets.sglang.scheduled import node_launch as scheduled

    return scheduled(plan)
