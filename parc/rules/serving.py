"""The serving rules both engines share.

P117–P120: a prefill/decode-disaggregated serving plan as a whole, its pools on the cluster. Each
pool's own mesh is judged by every other rule, on the plan of one of its instances
(:func:`parc.model.pools.pool_plan`); these rules look at the pools together, once.

P121–P126: decode context parallel and expert-parallel load balancing, as vLLM
(vllm/config/parallel.py, vllm/config/model.py) and SGLang form them."""
from __future__ import annotations

from parc.model.pools import instance_gpus, nodes_needed
from parc.rules import WARNING, rule
from parc.rules.util import divisors, join, offer, plural
from parc.words import count


def _pools_desc(plan) -> str:
    return " and ".join(f"{p.name} {p.instances} × {count(instance_gpus(p.mesh), 'GPU')}" for p in plan.pools)


# ------------------------------------------------------------------------------------ P117

@rule("P117", "pools-fit-cluster", whole=True)
def pools_fit(plan, c):
    if not plan.pools:
        return
    cl = plan.cluster
    need = plan.world_size
    nodes = nodes_needed(plan)
    if need <= cl.world and nodes <= cl.nodes:
        return
    fix = f"ask for `nodes = {nodes}` in the cluster"
    big = max(plan.pools, key=lambda p: p.gpus)
    if big.instances > 1:
        fix += f", or fewer {big.name} `instances`"
    why = (f"{count(need, 'GPU')}" if need > cl.world else
           f"{plural(nodes, 'node')} (an instance of a node or more takes whole nodes of its own)")
    c.report(c.at(f"{big.name}.instances", big.name),
             f"the pools need {why} ({_pools_desc(plan)}) but cluster \"{cl.name}\" has "
             f"{count(cl.world, 'GPU')} on {plural(cl.nodes, 'node')}", help=fix,
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}, gpus_per_node = {cl.gpus_per_node}")])


# ------------------------------------------------------------------------------------ P118

@rule("P118", "pools-idle-gpus", severity=WARNING, whole=True)
def pools_idle(plan, c):
    if not plan.pools:
        return
    cl = plan.cluster
    need = plan.world_size
    if need >= cl.world:
        return
    c.report(c.at("serve"),
             f"the pools use {count(need, 'GPU')} ({_pools_desc(plan)}) of cluster \"{cl.name}\"'s "
             f"{cl.world}: {cl.world - need} would sit idle",
             help="add `instances` to the pool that limits the service (the decode pool when requests "
                  "wait for tokens, the prefill pool when they wait for their first), or ask for fewer nodes")


# ------------------------------------------------------------------------------------ P119

@rule("P119", "pool-instance-whole-nodes", whole=True)
def pool_whole_nodes(plan, c):
    per = plan.cluster.gpus_per_node
    for p in plan.pools:
        g = instance_gpus(p.mesh)
        if g <= per or g % per == 0:
            if g < per and per % g:
                c.report(c.at(p.name),
                         f"a {p.name} instance takes {count(g, 'GPU')}, which does not divide a node's {per}: "
                         f"{per % g} GPUs of every node its instances share would sit idle",
                         help=f"choose an instance size that divides {per}", severity=WARNING)
            continue
        c.report(c.at(p.name),
                 f"a {p.name} instance takes {count(g, 'GPU')}, more than a node's {per} but not a whole "
                 f"number of nodes: the engines give every node of an instance the same number of GPUs",
                 help=f"make the {p.name} mesh a multiple of {per} GPUs ({per * (g // per)} or {per * (g // per + 1)})")


# ------------------------------------------------------------------------------------ P120

@rule("P120", "kv-transfer-needs-pools", severity=WARNING, whole=True)
def kv_transfer_alone(plan, c):
    srv = plan.serve
    if plan.pools or srv is None or srv.kv_transfer is None:
        return
    c.report(c.at("serve.kv_transfer"),
             f"`kv_transfer = {srv.kv_transfer}` moves KV caches between prefill and decode instances, but "
             "this plan serves both on one mesh: nothing uses it",
             help="add `prefill { ... }` and `decode { ... }` pools inside `serve`, or remove `kv_transfer`")


# --- the serving degrees: decode context parallel, EPLB ---------------------------------------
# Both engines form them the same way; the releases and files each was read from are in
# rules.toml (`source`) and in the targets' audit entries.

# ------------------------------------------------------------------------------------ P121

@rule("P121", "dcp-divides-tp", reads=("tp", "cp"))
def dcp_divides_tp(plan, c):
    m = plan.mesh
    if plan.mode != "serve" or m.dcp <= 1 or m.cp > 1 or m.tp % m.dcp == 0:
        return   # with prefill context parallel the engines differ (vLLM: P666)
    ok, fixes = offer(plan, c, [{"mesh.dcp": d} for d in divisors(m.tp) if d > 1])
    c.report(c.at("mesh.dcp", "mesh"),
             f"decode context parallel splits each sequence's KV cache over dcp GPUs of a tensor-parallel "
             f"group, so dcp must divide tp: dcp = {m.dcp} does not divide tp = {m.tp}",
             help=f"use dcp = {join(o['mesh.dcp'] for o in ok)}" if ok else
             "remove `dcp`" + (": tp = 1 has no GPUs to share the KV cache" if m.tp == 1 else ""), fixes=fixes,
             related=[(c.at("mesh.tp", "mesh"), f"tp = {m.tp}")])


# ------------------------------------------------------------------------------------ P122

@rule("P122", "dcp-beyond-kv-heads", severity=WARNING, reads=("tp",))
def dcp_useful_range(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or m.dcp <= 1 or md.is_mla or not md.kv_heads:
        return
    useful = max(1, m.tp // md.kv_heads)
    if m.dcp <= useful:
        return
    why = (f"tp = {m.tp} does not exceed the model's {md.kv_heads} KV heads, so every GPU already holds KV "
           f"heads of its own and none is duplicated" if m.tp <= md.kv_heads else
           f"tp = {m.tp} over {md.kv_heads} KV heads duplicates each head on tp / kv_heads = {useful} GPUs, "
           f"and only those copies can be split by token")
    kept, fixes = offer(plan, c, [{"mesh.dcp": useful}] if useful > 1 else [])
    c.report(c.at("mesh.dcp", "mesh"),
             f"dcp = {m.dcp} gains nothing beyond {useful}: {why}",
             help=f"use dcp = {useful} or less" if kept else "remove `dcp`, or raise tp above the KV heads",
             fixes=fixes)


# ------------------------------------------------------------------------------------ P123

@rule("P123", "eplb-needs-expert-parallel", reads=("ep",))
def eplb_needs_ep(plan, c):
    sv, m = plan.serve, plan.mesh
    if plan.mode != "serve" or sv is None or not sv.eplb or (plan.model.is_moe and m.ep > 1):
        return
    if not plan.model.is_moe:
        msg = f"`eplb = true` balances experts, but model `{plan.model.name}` has none"
        fix = "remove `eplb`"
    else:
        msg = ("`eplb = true` re-places whole experts among the GPUs of an expert-parallel group, but this plan "
               "has no expert parallelism (ep = 1: every GPU holds a slice of every expert)")
        fix = "set ep (= dp · cp · tp for vLLM, which has no other size), or remove `eplb`"
    c.report(c.at("serve.eplb", "serve"), msg, help=fix)


# ------------------------------------------------------------------------------------ P124

@rule("P124", "redundant-experts-need-eplb", reads=())
def redundant_need_eplb(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.redundant_experts == 0 or sv.eplb:
        return
    c.report(c.at("serve.redundant_experts", "serve"),
             f"redundant_experts = {sv.redundant_experts} are copies of the busiest experts that expert-parallel "
             f"load balancing places; without `eplb = true` nothing places them",
             help="add `eplb = true`, or remove `redundant_experts`")


# ------------------------------------------------------------------------------------ P125

@rule("P125", "eplb-even-experts", reads=("ep",))
def eplb_even(plan, c):
    sv, m, md = plan.serve, plan.mesh, plan.model
    if plan.mode != "serve" or sv is None or not sv.eplb or not md.is_moe or m.ep <= 1:
        return
    n = md.experts + sv.redundant_experts
    if n % m.ep == 0:
        return
    up = -n % m.ep
    kept, fixes = offer(plan, c, [{"serve.redundant_experts": sv.redundant_experts + up}])
    c.report(c.at("serve.redundant_experts", "serve.eplb", "serve"),
             f"with EPLB every GPU of the expert-parallel group holds the same number of experts: "
             f"{md.experts} experts + {sv.redundant_experts} redundant = {n} do not divide over ep = {m.ep}",
             help=(f"set redundant_experts = {sv.redundant_experts + up} ({n + up} = {m.ep} × {(n + up) // m.ep}), "
                   f"or an ep that divides {n}" if kept else f"choose an ep that divides {n}"), fixes=fixes,
             related=[(c.at("mesh.ep", "mesh"), f"ep = {m.ep}")])


# ------------------------------------------------------------------------------------ P126

@rule("P126", "eplb-settings-unused", severity=WARNING, reads=())
def eplb_settings_unused(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.eplb:
        return
    for key in ("eplb_window", "eplb_interval"):
        if getattr(sv, key) is not None:
            c.report(c.at(f"serve.{key}", "serve"),
                     f"`{key} = {getattr(sv, key)}` tunes expert-parallel load balancing, which this plan does "
                     f"not enable: the engines ignore it", help="add `eplb = true`, or remove the key")


# ------------------------------------------------------------------------------------ P412–P416
# The scheduler and speculative keys of the serve block (parc.cost.scheduler, parc.cost.serve_step).

@rule("P412", "speculative-without-acceptance-rate", severity=WARNING, reads=())
def speculative_acceptance(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or not sv.speculative or sv.acceptance_rate is not None:
        return
    c.report(c.at("serve.speculative", "serve"),
             f"speculative = {sv.speculative} without `acceptance_rate`: how many drafts the model keeps depends "
             "on the model, the draft and the requests, so parc does not assume one; explain counts every draft "
             "rejected (one token per step, the drafts' cost paid)",
             help="add `acceptance_rate = 0.8` (the share of draft tokens your engine's metrics report accepted)")


@rule("P413", "speculative-draft-model")
def speculative_draft(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or not sv.speculative:
        return
    if sv.speculative in ("eagle", "eagle3") and not sv.draft_model:
        c.report(c.at("serve.speculative", "serve"),
                 f"speculative = {sv.speculative} drafts with a separate EAGLE model, and the spec names none: vLLM "
                 "needs the speculative config's `model` and SGLang --speculative-draft-model-path",
                 help='add `draft_model = "..."` (the EAGLE head trained for this model), or use `speculative = mtp` '
                      "on a model with multi-token-prediction layers")
    elif sv.speculative == "mtp" and not plan.model.mtp_layers:
        c.report(c.at("serve.speculative", "serve"),
                 f"speculative = mtp drafts with the model's multi-token-prediction layers, and `{plan.model.name}` "
                 "has none (mtp_layers = 0): vLLM's mtp method and SGLang's NEXTN find no draft layer to load",
                 help='use `speculative = eagle` with `draft_model = "..."`, or remove `speculative`',
                 related=[(c.at("model"), f"model {plan.model.name}")])


@rule("P414", "two-batch-overlap-without-experts", severity=WARNING, reads=("ep",))
def tbo_without_experts(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or not sv.two_batch_overlap:
        return
    if plan.model.is_moe and plan.mesh.ep > 1:
        return
    why = "has no experts" if not plan.model.is_moe else "keeps every expert on every GPU (ep = 1)"
    c.report(c.at("serve.two_batch_overlap", "serve"),
             f"two_batch_overlap hides an expert all-to-all under the other micro-batch's compute, and this plan {why}: "
             "there is no all-to-all to hide, and each micro-batch reads the weights again",
             help="remove `two_batch_overlap`, or spread the experts with ep > 1")


@rule("P415", "workload-concurrency-and-rate", severity=WARNING, reads=(), whole=True)
def concurrency_and_rate(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.concurrency is None or sv.request_rate is None:
        return
    c.report(c.at("serve.request_rate", "serve"),
             f"the workload is a closed loop of `concurrency = {sv.concurrency}` users or requests arriving at "
             f"`request_rate = {sv.request_rate:g}` per second, not both (vllm bench serve takes one load): explain "
             "uses the rate", help="remove one of the two",
             related=[(c.at("serve.concurrency", "serve"), f"concurrency = {sv.concurrency}")])
