"""P305, P306: the plan's groups judged against the GPUs they would really use inside a node.

With a cluster `topology` (`parc topo` writes it), each rank's local GPU (rank % gpus_per_node,
:mod:`parc.model.rankmap`) is a physical GPU under the device order the launch sets
(:func:`parc.model.topology.visible_devices`), and every pair of a group has a link class. A TP,
CP or EP group whose slowest pair is PCIe (PIX, PXB, PHB) on a node that has NVLink islands is a
warning with the cost in the plan's numbers; one whose slowest pair crosses host bridges or NUMA
nodes (NODE, SYS) is an error. A group that crosses nodes is P301's.
"""
from __future__ import annotations

from dataclasses import replace

from parc.model import topology as T
from parc.rules import WARNING, rule
from parc.rules.util import fixed_order, join, offer, rank_map
from parc.units import seconds
from parc.words import count

AXES = ("tp", "cp", "ep")
WHAT = {"tp": "tensor parallelism all-reduces activations twice per layer",
        "cp": "context parallelism passes key/value blocks around its ring every layer",
        "ep": "expert parallelism exchanges tokens all-to-all in every MoE layer"}


def worst_groups(plan, c):
    """Per axis whose groups stay inside a node: (axis, class, the physical GPUs of the group
    that has it, the pair) for the slowest class any group meets."""
    cl = plan.cluster
    if cl.topology is None:
        return
    fixed = fixed_order(plan, c)
    rm = rank_map(plan, fixed and fixed[1])
    if rm is None or rm.gpus_per_node != cl.gpus_per_node:
        return
    import numpy as np

    phys = np.asarray(T.physical_gpus(plan, fixed and fixed[1]))
    for ax in AXES:
        if rm.size(ax) <= 1 or rm.crosses_node(ax) or (ax == "ep" and rm.ep != plan.mesh.ep):
            continue
        sets = np.unique(np.sort(phys[rm.groups(ax) % cl.gpus_per_node], axis=1), axis=0)
        judged = [(T.worst(cl.topology, [int(g) for g in row]), [int(g) for g in row]) for row in sets]
        (cls, pair), gpus = max(judged, key=lambda j: T.RANK[j[0][0]])
        yield ax, cls, gpus, pair


def _cost(plan, ax: str) -> str:
    """The axis's communication per step (per token when serving) on the cluster's intra-node
    link and over the GPUs' PCIe link, from the cost model."""
    from parc.cost.estimate import estimate
    from parc.model.plan import Link

    cl = plan.cluster
    if cl.intra_node is None or cl.intra_node.kind == "pcie" or not cl.gpu.pcie_bandwidth:
        return ""
    try:
        fast = estimate(plan).comm_time.get(ax, 0.0)
        slow_plan = replace(plan, cluster=replace(cl, intra_node=Link("pcie", cl.gpu.pcie_bandwidth)))
        slow = estimate(slow_plan, cache=False).comm_time.get(ax, 0.0)
    except (ValueError, ZeroDivisionError, KeyError):
        return ""
    if not fast or not slow:
        return ""
    per = "step" if plan.mode == "train" else "decoded token"
    fast_name = {"nvlink": "NVLink", "xgmi": "XGMI"}.get(cl.intra_node.kind, cl.intra_node.kind)
    return (f"; that takes {seconds(slow)} per {per} over PCIe ({cl.gpu.pcie_bandwidth / 1e9:.0f} GB/s) "
            f"where {fast_name} ({cl.intra_node.bandwidth / 1e9:.0f} GB/s) would take {seconds(fast)}")


def _fix(plan, c, ax: str) -> str:
    cl = plan.cluster
    size = plan.mesh.size(ax)
    sets = T.fitting_sets(cl.topology, cl.gpus_per_node, size)
    if sets:
        return (f"keep each {ax.upper()} group inside an NVLink island: GPU sets {T.sets_text(sets)} (list {ax} "
                f"last in the mesh so each group is consecutive ranks; the launch orders the GPUs to match)")
    isl = T.sets_text(cl.topology.islands) if cl.topology.islands else "none"
    fits = sorted({len(i) for i in cl.topology.islands}) or [1]
    return f"no {count(size, 'GPU')} of this node share NVLink (islands: {isl}): " + \
        _smaller(plan, c, ax, max(fits), "the islands")


def _smaller(plan, c, ax: str, size: int, across: str) -> str:
    """``use tp = 2 with pp = 4 across the islands``: a smaller group, the factor given to the
    pipeline or to data parallelism, each only if the whole rule set accepts the plan it makes."""
    m = plan.mesh
    cur = m.size(ax)
    k = cur // size if size and cur % size == 0 else 0
    if k <= 1:
        return f"keep {ax} within {size} GPUs"
    options = [{f"mesh.{ax}": size, "mesh.pp": m.pp * k},
               {f"mesh.{ax}": size, "mesh.dp": m.dp * k} if m.auto != "dp" else {f"mesh.{ax}": size}]
    kept, _ = offer(plan, c, options)
    if not kept:
        return f"keep {ax} within {size} GPUs"
    ways = [f"pp = {o['mesh.pp']}" if "mesh.pp" in o else f"dp = {o.get('mesh.dp', 'auto')}" for o in kept]
    return f"use {ax} = {size} with {join(ways)} across {across}"


def _message(plan, ax, cls, gpus, pair) -> str:
    a, b = pair
    return (f"{ax} = {plan.mesh.size(ax)} puts GPUs {', '.join(map(str, gpus))} in one {ax.upper()} group, and "
            f"GPU {a} reaches GPU {b} over {T.WORDS[cls]}; {WHAT[ax]}")


@rule("P305", "group-over-pcie", severity=WARNING)
def group_over_pcie(plan, c):
    topo = plan.cluster.topology
    if topo is None or not topo.islands:
        return   # a node without NVLink: P303 says what tensor parallelism costs there
    for ax, cls, gpus, pair in worst_groups(plan, c):
        if cls in T.PCIE_CLASSES:
            c.report(c.at(f"mesh.{ax}"), _message(plan, ax, cls, gpus, pair) + _cost(plan, ax),
                     help=_fix(plan, c, ax), related=[(c.at("cluster.topology"), "the node's topology")])


@rule("P306", "group-across-numa")
def group_across_numa(plan, c):
    for ax, cls, gpus, pair in worst_groups(plan, c):
        if cls in T.FAR_CLASSES:
            c.report(c.at(f"mesh.{ax}"), _message(plan, ax, cls, gpus, pair) +
                     ", and that path crosses the CPUs' interconnect, the slowest inside a node",
                     help=_fix(plan, c, ax) if plan.cluster.topology.islands else _near_fix(plan, c, ax),
                     related=[(c.at("cluster.topology"), "the node's topology")])


def _near_fix(plan, c, ax: str) -> str:
    """The GPU sets joined by links this rule accepts (better than NODE) that hold whole groups,
    or the widest such set where none does."""
    cls = "NODE"
    cl = plan.cluster
    size = plan.mesh.size(ax)
    comps = T.near_sets(cl.topology, cl.gpus_per_node, cls)
    sets = [c[i:i + size] for c in comps for i in range(0, len(c) - len(c) % size, size)]
    if len(sets) * size == cl.gpus_per_node:
        return f"keep each {ax.upper()} group on GPUs joined by better than {cls}: GPU sets {T.sets_text(sets)}"
    best = max(len(s) for s in comps)
    return (f"the GPUs joined by better than {cls} come {best} at a time ({T.sets_text(comps)}): "
            + _smaller(plan, c, ax, best, "those sets"))
