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
* prefill/decode disaggregation: ``--disaggregation-mode`` and its transfer backend.

Across nodes a server is started with ``--nnodes``/``--node-rank``/``--dist-init-addr`` on each
of its nodes; MASTER_ADDR names the server's first node. P691 to P697 and P683 refuse what SGLang cannot
run or parc cannot express.
"""
from __future__ import annotations

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
    """The GPUs of one data-parallel replica: tp · pp."""
    return plan.mesh.tp * plan.mesh.pp


def dp_attention(plan) -> bool:
    return bool(settings(plan, TARGET).get("dp_attention")) and plan.mesh.dp > 1


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


def server_lines(plan, node_rank) -> list[list]:
    """The options of ``sglang.launch_server`` after ``--model-path``; ``node_rank`` is the node's
    rank inside its server (an int or a shell variable)."""
    s = settings(plan, TARGET)
    sv, m = plan.serve, plan.model
    lay = layout(plan)
    out: list[list] = [["--host", "0.0.0.0"], ["--port", s.get("port", PORT)],
                       ["--tp-size", lay.tp_size], ["--pp-size", lay.pp_size]]
    a = out.append
    if lay.dp_size > 1:
        a(["--dp-size", lay.dp_size])
    if lay.attn_dp > 1:
        a(attn_dp_words(plan, lay.attn_dp))
    if lay.ep_size > 1:
        a(["--ep-size", lay.ep_size])
    if s.get("moe_a2a_backend"):
        a(["--moe-a2a-backend", s["moe_a2a_backend"]])
    a(["--context-length", sv.max_model_len])
    a(["--mem-fraction-static", repr(float(sv.gpu_memory_utilization))])
    a(["--max-running-requests", sv.max_num_seqs])
    a(["--kv-cache-dtype", KV_DTYPES.get(sv.kv_cache_dtype, "auto")])
    a(["--dtype", DTYPES[m.dtype]])
    if m.dtype == "fp8":
        a(["--quantization", "fp8"])
    if s.get("disaggregation"):
        a(["--disaggregation-mode", s["disaggregation"]])
        a(["--disaggregation-transfer-backend", s.get("transfer_backend", "mooncake")])
    if lay.nnodes > 1:
        a(["--nnodes", lay.nnodes])
        a(["--node-rank", node_rank])
        a(["--dist-init-addr", Cat((Var("master_addr"), f":{s.get('dist_port', DIST_PORT)}"))])
    return out + [[x] for x in s.get("extra_args") or []]


def _header(plan, lay: Layout) -> list[str]:
    cl = plan.cluster
    mesh = f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x {count(cl.gpus_per_node, 'GPU')}."
    what = (f"one SGLang server over {count(lay.nnodes, 'node')}" if lay.servers == 1 else
            f"{count(lay.servers, 'SGLang server')} of {count(lay.nnodes, 'node')} each"
            + (", with router.sh in front" if router(plan) else " (one side of a prefill/decode pair: the PD router joins it to the other side's servers)"))
    if lay.nodes == 1:
        return [f"SGLang server, compiled by parc from {spec_name(plan)}.", mesh]
    first = ("the first node of this node's server (node rank · "
             f"{lay.nnodes} rounded down)" if lay.servers > 1 else "node 0")
    return [f"SGLang launch for any node of {lay.nodes}, compiled by parc from {spec_name(plan)}: {what}.",
            f"Usage: launch.sh NODE_RANK (0 to {lay.nodes - 1}); without an argument the rank comes from "
            "SLURM_NODEID or NODE_RANK.", mesh]\
        + ([f"Set MASTER_ADDR to the address of {first} before running it."] if lay.nnodes > 1 else [])


def router(plan) -> bool:
    """Whether several servers serve the plan behind router.sh (not for a disaggregated side:
    its router pairs prefill and decode servers from two specs)."""
    return layout(plan).servers > 1 and not settings(plan, TARGET).get("disaggregation")


def _router_script(plan) -> str:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    lay = layout(plan)
    return render("sglang/router.sh.j2", need_here=False, servers=lay.servers, port=s.get("port", PORT),
                  router_port=s.get("router_port", ROUTER_PORT), nnodes=lay.nnodes,
                  header=[f"sglang_router in front of the {lay.servers} SGLang servers of {spec_name(plan)}.",
                          f"Usage: router.sh HOST... (the address of each server's first node: node ranks "
                          f"0, {lay.nnodes}, ...; {lay.servers} in all)."])


def _script(plan) -> str:
    from parc.targets.render import render

    lay = layout(plan)
    multi = lay.nodes > 1
    node = Var("local_rank") if lay.servers > 1 else Var("node_rank")
    return render("sglang/launch.sh.j2", header=_header(plan, lay), need_here=False,
                  env=device_env(plan, TARGET) + nccl_env(plan),
                  multi=multi, nnodes=lay.nodes, per_server=lay.nnodes, servers=lay.servers,
                  model=settings(plan, TARGET)["model"], lines=server_lines(plan, node))


def build(plan) -> list[File]:
    name = "launch.sh" if layout(plan).nodes > 1 else "serve.sh"
    files = [File(name, _script(plan), True)]
    if router(plan):
        files.append(File("router.sh", _router_script(plan), True))
    return files + [File("plan.json", plan_json(plan))]
