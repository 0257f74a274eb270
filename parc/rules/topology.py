"""P3xx: where the mesh's groups land on nodes and links.

Group membership comes from the rank map (:mod:`parc.model.rankmap`): ranks follow the mesh
order (the last axis innermost) and land on nodes as torchrun's static rendezvous places them
(node = rank // gpus_per_node). "Stays on the fast link" means inside one NVLink domain
(``cluster.nvlink_domain``, a node unless the cluster says more: a GB200 NVL72 rack's 72 GPUs on
18 trays), the rank map's :meth:`~parc.model.rankmap.RankMap.crosses_domain`.
"""
from __future__ import annotations

from itertools import permutations

from parc.model import targets as T
from parc.rules import NOTE, WARNING, rule
from parc.rules.util import (divisors, fixed_order, group_ranks, join, nearest, offer, order_words, plural,
                             rank_map, target_name, value_fixes)
from parc.units import rate, seconds
from parc.words import count

AXES = ("pp", "dp", "cp", "tp")


def _unit(rm) -> str:
    """What the fast link reaches: a node, or an NVLink domain where it spans nodes."""
    return "node" if rm.domain == rm.gpus_per_node else "NVLink domain"


def _span_desc(rm, axis: str) -> str:
    g, unit = rm.domain, _unit(rm)
    n = rm.domains_spanned(axis)
    if rm.world // rm.size(axis) <= 1:
        return f"the {axis.upper()} group (ranks {group_ranks(rm, axis)}) spans {plural(n, unit)} of {count(g, 'GPU')}"
    return (f"{axis.upper()} groups such as ranks {group_ranks(rm, axis)} span {plural(n, unit)} "
            f"of {count(g, 'GPU')}")


def _order_satisfying(plan, want: dict[str, str]) -> list[str] | None:
    """A mesh order (outermost first) under which every axis in ``want`` is placed as asked
    (``intra_node``: its groups stay inside a node; ``inter_node``: they cross), or None."""
    from parc.model.rankmap import RankMap

    m = plan.mesh
    sizes = {ax: m.size(ax) for ax in AXES}
    cur = list(m.order)
    best = None
    for order in permutations(AXES):
        try:
            rm = RankMap(order=list(order), sizes=sizes, gpus_per_node=plan.cluster.gpus_per_node,
                         domain=plan.cluster.domain)
        except ValueError:
            continue
        if all((rm.crosses_domain(ax) == (link == "inter_node")) for ax, link in want.items()):
            # prefer tp innermost, then the order closest to the current one
            inner = [ax for ax in order if sizes[ax] > 1]
            canon = [ax for ax in AXES if sizes[ax] > 1]
            key = (bool(inner) and sizes["tp"] > 1 and inner[-1] != "tp", inner != canon,
                   sum(a != b for a, b in zip(order, cur)))
            if best is None or key < best[0]:
                best = (key, list(order))
    return best[1] if best else None


def _order_hint(plan, want: dict[str, str], fixed=None) -> str:
    if fixed:
        return ""  # the target lays ranks out in its own order: listing the mesh otherwise changes nothing
    order = _order_satisfying(plan, want)
    if not order or order == list(plan.mesh.order):
        return ""
    shown = [ax for ax in order if plan.mesh.size(ax) > 1]
    return f"list the mesh axes in the order {', '.join(shown)} (outermost first; the last is innermost)"


def _wanted(plan) -> dict[str, str]:
    """Placement rules on mesh axes of size > 1, plus TP inside a node unless placed otherwise."""
    m = plan.mesh
    want = {ax: link for ax, link in plan.placement.links.items() if ax in AXES and m.size(ax) > 1}
    if m.tp > 1 and "tp" not in want and m.tp <= plan.cluster.domain:
        want["tp"] = "intra_node"
    return want


# ------------------------------------------------------------------------------------ P301

def _tp_help(plan, rm, c, fixed=None) -> tuple[list[str], list]:
    """The ways to keep each TP group inside a node, each only if the whole rule set accepts the
    plan it makes (:func:`parc.rules.util.offer`), and their fixes."""
    m, g = plan.mesh, plan.cluster.domain
    where = "gpus_per_node" if g == plan.cluster.gpus_per_node else "nvlink_domain"
    helps, options = [], []
    if m.tp > g or g % m.tp:
        ok = [d for d in divisors(g) if d > 1 and plan.model.heads % d == 0]
        small = [d for d in ok if d <= m.tp and m.tp % d == 0]
        if small and m.tp // max(small) > 1:
            t = max(small)
            k = m.tp // t
            deeper, _ = offer(plan, c, [{"mesh.tp": t, "mesh.pp": m.pp * k}])
            wider, _ = offer(plan, c, [{"mesh.tp": t, "mesh.dp": m.dp * k}] if m.auto != "dp" else [{"mesh.tp": t}])
            words = ([f"tp = {t} inside each node with pp = {m.pp * k} across nodes (pipeline stages "
                      f"exchange only activations)"] if deeper else []) + \
                ([f"tp = {t} with dp = {m.dp * k} (one copy of the model fits in {count(t * m.pp, 'GPU')})"]
                 if wider else [])
            helps += words
            options += deeper + wider
        elif ok:
            kept, _ = offer(plan, c, [{"mesh.tp": d} for d in ok])
            if kept:
                helps.append(f"keep tp a divisor of {where} = {g}: tp = {join(o['mesh.tp'] for o in kept)}")
                options += kept
    else:
        hint = _order_hint(plan, _wanted(plan), fixed)
        if hint:
            helps.append(hint + f" so that the {count(m.tp, 'GPU')} of each TP group are consecutive ranks on one "
                         + _unit(rm))
    return helps, value_fixes(plan, options)


def tp_decode_seconds(plan, crossing: bool) -> tuple[float, float]:
    """(seconds, bytes/s of the link) of the tensor-parallel all-reduces of one decode step of one
    sequence on the busiest pipeline stage: across the nodes as the rank map places the TP group
    (``crossing``), or with the whole group on the intra-node link."""
    from parc.cost.comm import axis_time, link_params, serving_calls
    from parc.cost.estimate import estimate
    from parc.cost.serving import activation_bytes, decode_comm_bytes

    est, m, tp = estimate(plan), plan.model, plan.mesh.tp
    st = max(est.stages, key=lambda s_: s_.layers)
    nbytes = decode_comm_bytes(m, st.layers, st.moe_layers, tp, 1, plan.mesh.pp, activation_bytes(m))["tp"]
    lp = link_params(plan.profile, est.link_bandwidth, est.link_kind)
    local = est.comm_local.get("tp", tp) if crossing else tp
    link = lp.get("inter_node") if crossing else lp["intra_node"]
    t, _ = axis_time("tp", nbytes, tp, serving_calls(st.layers, st.moe_layers)["tp"], local, lp["intra_node"],
                     lp.get("inter_node") if crossing else None, plan.cluster.gpu.nvls and not crossing)
    return float(t), (link or lp["intra_node"])[0]


def _serving_tp_across(plan, c, rm, under: str) -> None:
    """vLLM and SGLang run a TP group across nodes (SGLang's own DeepSeek-V3 launch is --tp 16
    --nnodes 2): slow, not wrong; the warning states what it costs per decode step."""
    cl = plan.cluster
    across, bw_x = tp_decode_seconds(plan, True)
    inside, bw_i = tp_decode_seconds(plan, False)
    who = sorted({target_name(t) for t in c.active if T.tp_across_nodes(t)})
    slower = f", {across / inside:.1f}× as long" if inside > 0 else ""
    net = cl.inter_node.kind if cl.inter_node else "the inter-node network"
    helps, fixes = _tp_help(plan, rm, c)
    c.report(c.at("mesh.tp"),
             f"{under}{_span_desc(rm, 'tp')}: {join(who, 'and')} run{'s' if len(who) == 1 else ''} it, but every "
             f"decode step's tensor-parallel all-reduces cross {net}: {seconds(across)} per step of one sequence at "
             f"{rate(bw_x)} per GPU, against {seconds(inside)} with the group on the intra-node link at "
             f"{rate(bw_i)}{slower}",
             help="; or ".join(helps) or f"keep each TP group inside one {_unit(rm)} of {count(cl.domain, 'GPU')}",
             severity=WARNING, fixes=fixes,
             related=[(c.at("cluster.gpus_per_node", "cluster.nodes"), f"gpus_per_node = {cl.gpus_per_node}")])


@rule("P301", "group-crosses-node")
def group_crosses_node(plan, c):
    m, cl = plan.mesh, plan.cluster
    fixed = fixed_order(plan, c)
    rm = rank_map(plan, fixed and fixed[1])
    under = order_words(fixed)
    if rm is None:
        return
    g, unit = cl.domain, _unit(rm)
    key = "gpus_per_node" if unit == "node" else "nvlink_domain"
    inter = cl.inter_node.kind if cl.inter_node else "the inter-node network"
    links = plan.placement.links
    # TP always (unless deliberately placed across nodes: P503); CP and EP where pinned to a node
    if m.tp > 1 and links.get("tp") != "inter_node" and rm.crosses_domain("tp"):
        pinned = links.get("tp") == "intra_node"
        if plan.mode == "serve" and not pinned and any(T.tp_across_nodes(t) for t in c.active):
            _serving_tp_across(plan, c, rm, under)
            return
        helps, fixes = _tp_help(plan, rm, c, fixed)
        c.report(c.at("placement.tp") if pinned else c.at("mesh.tp"),
                 f"{under}{_span_desc(rm, 'tp')}: tensor parallelism all-reduces activations twice per layer and "
                 f"microbatch, and here that traffic would cross {inter}"
                 + (", though the placement pins tp to intra_node" if pinned else ""),
                 help="; or ".join(helps) or f"keep each TP group inside one {unit} of {count(g, 'GPU')}", fixes=fixes,
                 related=[(c.at(f"cluster.{key}", "cluster.nodes"), f"{key} = {g}")]
                 + ([(c.at("mesh.tp"), f"tp = {m.tp}")] if pinned else []))
    for ax, what in (("cp", "context parallelism passes key/value blocks around its ring every layer"),
                     ("ep", "expert parallelism exchanges tokens all-to-all in every MoE layer")):
        if links.get(ax) != "intra_node" or getattr(m, ax) <= 1:
            continue
        if ax == "ep" and (rm.ep != m.ep or rm.etp != m.etp):
            continue  # the expert grid does not divide: P112
        if not rm.crosses_domain(ax):
            continue
        hint = _order_hint(plan, _wanted(plan), fixed) if ax == "cp" else ""
        c.report(c.at(f"placement.{ax}"),
                 f"{under}{_span_desc(rm, ax)}, though the placement pins {ax} to intra_node: {what}",
                 help=hint or (f"keep {ax}" + (" · etp" if ax == "ep" else " · tp") +
                               f" within a {unit} of {count(g, 'GPU')}"),
                 related=[(c.at(f"mesh.{ax}"), f"{ax} = {getattr(m, ax)}")])


# ------------------------------------------------------------------------------------ P302

@rule("P302", "idle-gpus")
def idle_gpus(plan, c):
    m, cl = plan.mesh, plan.cluster
    need, world = m.product, cl.world
    if m.auto and m.size(m.auto) == 0 or need >= world:
        return
    shown = " · ".join(f"{ax}={m.size(ax)}" for ax in m.order if m.size(ax) > 1) or "a single GPU"
    found = []
    if world % (need // m.dp) == 0:
        found.append((f"set `dp = {world // (need // m.dp)}` (or `dp = auto`) to use all {world}",
                      {"mesh.dp": world // (need // m.dp)}))
    if need % cl.gpus_per_node == 0:
        found.append((f"ask for `nodes = {need // cl.gpus_per_node}`", {"cluster.nodes": need // cl.gpus_per_node}))
    elif need < cl.gpus_per_node and cl.nodes == 1:
        found.append((f"declare `gpus_per_node = {need}`", {"cluster.gpus_per_node": need}))
    kept, fixes = offer(plan, c, [o for _, o in found])   # only what the other rules accept too
    helps = [h for h, o in found if o in kept]
    c.report(c.at("mesh.dp" if m.dp > 1 else "mesh"),
             f"the mesh uses {count(need, 'GPU')} ({shown}) of cluster \"{cl.name}\"'s {world} "
             f"({plural(cl.nodes, 'node')} × {cl.gpus_per_node}): {world - need} would sit idle, and torchrun would "
             f"start {world} processes for a {need}-rank mesh",
             help="; or ".join(helps) or f"pp · dp · cp · tp must equal {world}", fixes=fixes,
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}, gpus_per_node = {cl.gpus_per_node}")])


# ------------------------------------------------------------------------------------ P303

@rule("P303", "tp-over-pcie", severity=WARNING)
def tp_over_pcie(plan, c):
    m, cl = plan.mesh, plan.cluster
    link = cl.intra_node
    if m.tp <= 1 or link is None or link.kind != "pcie":
        return
    fixed = fixed_order(plan, c)
    rm = rank_map(plan, fixed and fixed[1])
    if rm is None or rm.crosses_domain("tp"):
        return  # P301
    bw = link.bandwidth / 1e9
    if plan.mode == "train":
        c.report(c.at("mesh.tp"),
                 f"tp = {m.tp} runs its per-layer all-reduces over PCIe ({bw:.0f} GB/s per GPU): in training they "
                 f"take longer than the matrix multiplies they split",
                 help="use pipeline or data parallelism (with zero = 3 if memory is short) over PCIe, "
                      "and keep tensor parallelism for NVLink",
                 related=[(c.at("cluster.intra_node"), f"intra_node = pcie({bw:.0f}GB/s)")])
    else:
        c.report(c.at("mesh.tp"),
                 f"tp = {m.tp} all-reduces every layer's output over PCIe ({bw:.0f} GB/s per GPU), which adds "
                 f"latency to every token; worth it only when the model or its KV cache does not fit with fewer GPUs",
                 severity=NOTE,
                 help="if one GPU holds the model with room for the KV cache, serve with dp replicas instead")


# ------------------------------------------------------------------------------------ P304

@rule("P304", "placement-violated")
def placement_violated(plan, c):
    m, cl = plan.mesh, plan.cluster
    links = plan.placement.links
    if not links:
        return
    fixed = fixed_order(plan, c)
    rm = rank_map(plan, fixed and fixed[1])
    if rm is None:
        return
    under = order_words(fixed)
    want = _wanted(plan)
    if (not fixed and m.tp > 1 and links.get("tp") != "inter_node" and rm.crosses_domain("tp")
            and m.tp <= cl.domain and _order_satisfying(plan, want)):
        return  # P301 reports the TP group with a mesh order that satisfies every placement
    for ax, link in links.items():
        if link == "intra_node" and ax in ("tp", "cp", "ep"):
            continue  # P301
        size = m.size(ax) if ax in AXES else getattr(m, ax, 1)
        if size <= 1:
            continue
        if ax in ("ep", "etp") and (rm.ep != m.ep or rm.etp != m.etp):
            continue  # the expert grid does not divide: P112
        crosses = rm.crosses_domain(ax)
        if link == "intra_node" and crosses:
            hint = _order_hint(plan, want, fixed) if ax in AXES else ""
            c.report(c.at(f"placement.{ax}"),
                     f"{under}`{ax} on intra_node` cannot hold: {_span_desc(rm, ax)}",
                     help=(hint or (f"make {ax} and the axes inside it fit a {_unit(rm)} of {count(cl.domain, 'GPU')}"
                                    if ax in AXES else
                                    f"keep ep · etp within a {_unit(rm)}: at most {count(cl.domain, 'rank')}")),
                     related=[(c.at(f"mesh.{ax}"), f"{ax} = {size}")])
        elif link == "inter_node" and not crosses:
            if cl.nodes == 1:
                msg = f"`{ax} on inter_node` cannot hold: the cluster has a single node"
                hint = "remove the placement rule, or describe the cluster's nodes"
            else:
                msg = (f"{under}`{ax} on inter_node` does not hold: every {ax.upper()} group (such as ranks "
                       f"{group_ranks(rm, ax)}) stays inside one {_unit(rm)}")
                hint = _order_hint(plan, want, fixed) if ax in AXES else ""
                hint = hint or "remove the placement rule if the axis may stay inside a node"
            c.report(c.at(f"placement.{ax}"), msg, help=hint,
                     related=[(c.at(f"mesh.{ax}"), f"{ax} = {size}")])
