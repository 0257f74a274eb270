"""What a node looks like inside: which GPUs NVLink (or AMD's XGMI) joins, each GPU's NUMA node,
the PCIe path between GPUs that no fast link joins, and the NIC nearest each GPU.

The words are those of ``nvidia-smi topo -m`` (its legend): ``NV#`` a bonded set of # NVLinks;
``PIX`` at most one PCIe bridge; ``PXB`` several PCIe bridges without the host bridge; ``PHB``
through a PCIe host bridge (the CPU); ``NODE`` across host bridges within a NUMA node; ``SYS``
across the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric). ``XGMI`` is ROCm's
word for AMD's GPU-to-GPU link (``rocm-smi --showtopo``) and ranks with ``NV#``.

A node's topology is short for the common cases: ``islands`` (the GPU sets NVLink joins) and
``numa`` (each GPU's NUMA node) say every pair's class when the rest is the usual one -- a pair
in one island is NVLink, a pair on two NUMA nodes is ``SYS``, any other pair is ``PHB`` --
and ``links`` (one row per GPU, the classes as ``nvidia-smi topo -m`` prints them) is written
only where that rule would be wrong. Everything here is the one place these facts are computed:
the resolver, ``parc topo``, the placement rules, the launch files and explain read it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import combinations

# nearest first; NV# and XGMI rank as "NV"
RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
PCIE_CLASSES = ("PIX", "PXB", "PHB")       # PCIe inside one NUMA node: slow for tensor parallelism
FAR_CLASSES = ("NODE", "SYS")              # across host bridges or NUMA nodes
WORDS = {"NV": "NVLink", "PIX": "PCIe through one switch (PIX)", "PXB": "PCIe through several switches (PXB)",
         "PHB": "PCIe through the host bridge (PHB)", "NODE": "PCIe across host bridges of one NUMA node (NODE)",
         "SYS": "the link between NUMA nodes (SYS)"}


@dataclass(slots=True)
class Topology:
    """One node's GPUs as they are wired (local GPU indices 0..gpus_per_node-1)."""
    islands: list[list[int]] = field(default_factory=list)   # GPU sets NVLink/XGMI joins
    numa: list[int] = field(default_factory=list)            # NUMA node of each GPU ([]: unknown)
    links: list[str] = field(default_factory=list)           # rows of classes, where islands do not say
    nics: list[str] = field(default_factory=list)            # the NIC nearest each GPU ([]: none known)


def base(cls: str) -> str:
    """The class a link word ranks as: ``NV18`` and ``XGMI`` are ``NV``."""
    c = cls.strip().upper()
    if re.fullmatch(r"NV\d*", c) or c == "XGMI":
        return "NV"
    return c


def known(cls: str) -> bool:
    return base(cls) in RANK


def rows(topo: Topology) -> list[list[str]]:
    return [r.split() for r in topo.links]


def _island_of(topo: Topology) -> dict[int, int]:
    return {g: i for i, isl in enumerate(topo.islands) for g in isl}


def derived_class(topo: Topology, a: int, b: int) -> str:
    """The class the short form says for GPUs ``a`` and ``b`` (no link matrix)."""
    if a == b:
        return "X"
    isl = _island_of(topo)
    if a in isl and isl.get(a) == isl.get(b):
        return "NV"
    if topo.numa and a < len(topo.numa) and b < len(topo.numa) and topo.numa[a] != topo.numa[b]:
        return "SYS"
    return "PHB"


def link_class(topo: Topology, a: int, b: int) -> str:
    """The class of the path between local GPUs ``a`` and ``b`` (``NV``, ``PIX``, ... ``SYS``)."""
    if topo.links:
        return base(rows(topo)[a][b])
    return derived_class(topo, a, b)


def worst(topo: Topology, gpus) -> tuple[str, tuple[int, int] | None]:
    """The slowest class among the pairs of ``gpus`` and one pair that has it."""
    out, pair = "X", None
    for a, b in combinations(gpus, 2):
        c = link_class(topo, a, b)
        if RANK[c] > RANK[out]:
            out, pair = c, (a, b)
    return out, pair


def needs_matrix(islands: list[list[int]], numa: list[int], matrix: list[list[str]]) -> bool:
    """Whether islands and NUMA nodes leave some pair's class wrong (``NV18`` and ``NV4`` alike
    read as NVLink), so the cluster block must carry the link matrix."""
    t = Topology(islands=islands, numa=numa)
    n = len(matrix)
    return any(base(matrix[a][b]) != derived_class(t, a, b) for a in range(n) for b in range(n) if a != b)


def islands_of(matrix: list[list[str]]) -> list[list[int]]:
    """The NVLink/XGMI islands of a link matrix: connected sets of GPUs over NV#/XGMI pairs,
    each listed in index order; GPUs with no such link are left out."""
    n = len(matrix)
    seen: set[int] = set()
    out = []
    for s in range(n):
        if s in seen or not any(base(matrix[s][b]) == "NV" for b in range(n) if b != s):
            continue
        stack, comp = [s], set()
        while stack:
            g = stack.pop()
            if g in comp:
                continue
            comp.add(g)
            stack += [b for b in range(n) if b != g and base(matrix[g][b]) == "NV" and b not in comp]
        seen |= comp
        out.append(sorted(comp))
    return out


def fitting_sets(topo: Topology, gpus_per_node: int, size: int) -> list[list[int]]:
    """GPU sets of ``size`` that stay on NVLink, filling the node (each island cut into runs of
    ``size``): what the placement rules' help names. Empty when the islands cannot hold every
    group of ``size`` on the node."""
    out = []
    for isl in topo.islands:
        out += [isl[i:i + size] for i in range(0, len(isl) - len(isl) % size, size)]
    return out if len(out) * size == gpus_per_node else []


def device_order(topo: Topology, gpus_per_node: int, groups: list[list[int]]) -> list[int] | None:
    """The physical GPU of each local rank under which the local ranks of each of ``groups`` (a
    partition of the node's local ranks into equal groups) land on the nearest GPUs the node has:
    each group inside an NVLink island where the islands can hold them all, else inside a NUMA
    node where that helps. None when the natural order 0, 1, ... already does as well."""
    size = len(groups[0]) if groups else 0
    if size <= 1 or sorted(g for grp in groups for g in grp) != list(range(gpus_per_node)):
        return None
    isl = _island_of(topo)
    numa = topo.numa if len(topo.numa) == gpus_per_node else [0] * gpus_per_node
    flat = [sorted(range(gpus_per_node), key=lambda g: (isl.get(g, len(topo.islands) + g), g)),
            sorted(range(gpus_per_node), key=lambda g: (numa[g], isl.get(g, len(topo.islands) + g), g))]
    cands = [[f[i:i + size] for i in range(0, gpus_per_node, size)] for f in flat]
    sets = fitting_sets(topo, gpus_per_node, size)
    if sets:
        cands.insert(0, sets)

    def order(phys_sets):
        out = [0] * gpus_per_node
        for grp, phys in zip(groups, phys_sets):
            for local, g in zip(grp, phys):
                out[local] = g
        return out

    def score(o):
        return sorted((RANK[worst(topo, [o[i] for i in grp])[0]] for grp in groups), reverse=True)

    natural = list(range(gpus_per_node))
    best = min((order(c) for c in cands), key=score)
    return best if score(best) < score(natural) else None


def near_sets(topo: Topology, gpus_per_node: int, worse: str) -> list[list[int]]:
    """The sets of GPUs joined, directly or through one another, by links better than the class
    ``worse`` (connected components; a GPU alone is a set of one)."""
    seen: set[int] = set()
    out = []
    for s in range(gpus_per_node):
        if s in seen:
            continue
        comp, stack = set(), [s]
        while stack:
            g = stack.pop()
            if g not in comp:
                comp.add(g)
                stack += [b for b in range(gpus_per_node)
                          if b not in comp and RANK[link_class(topo, g, b)] < RANK[worse]]
        seen |= comp
        out.append(sorted(comp))
    return out


def sets_text(sets: list[list[int]]) -> str:
    return ", ".join("{" + ",".join(map(str, s)) + "}" for s in sets)


def validate(topo: Topology, gpus_per_node: int) -> list[tuple[str, str]]:
    """What is wrong with a topology for a node of ``gpus_per_node`` GPUs: (key, message) pairs."""
    n = gpus_per_node
    bad = []
    flat = [g for isl in topo.islands for g in isl]
    if any(not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < n for g in flat):
        bad.append(("islands", f"islands list GPUs by their index on the node, 0 to {n - 1}"))
    elif len(set(flat)) != len(flat):
        dup = sorted({g for g in flat if flat.count(g) > 1})
        bad.append(("islands", f"GPU {dup[0]} is in two islands; an island is every GPU NVLink joins"))
    if topo.numa and (len(topo.numa) != n or any(not isinstance(x, int) or x < 0 for x in topo.numa)):
        bad.append(("numa", f"numa gives the NUMA node of each of the {n} GPUs (whole numbers from 0), "
                            f"got {len(topo.numa)}"))
    if topo.links:
        rs = rows(topo)
        if len(rs) != n or any(len(r) != n for r in rs):
            bad.append(("links", f"links is {n} rows of {n} classes (one row per GPU, as nvidia-smi topo -m "
                                 f"prints them)"))
        elif any(not known(c) for r in rs for c in r):
            c = next(c for r in rs for c in r if not known(c))
            bad.append(("links", f"`{c}` is not a link class; classes are X, NV#, XGMI, PIX, PXB, PHB, NODE, SYS"))
        elif any(base(rs[a][b]) != base(rs[b][a]) for a in range(n) for b in range(n)):
            bad.append(("links", "the link matrix is not symmetric: GPU a to b must be the class of b to a"))
    if topo.nics and len(topo.nics) != n:
        bad.append(("nics", f"nics names the NIC nearest each of the {n} GPUs, got {len(topo.nics)}"))
    return bad


def visible_devices_var(cluster) -> str:
    """The variable that orders a node's GPUs for the launched processes: HIP_VISIBLE_DEVICES on
    AMD GPUs (ROCm's HIP runtime reads it), CUDA_VISIBLE_DEVICES elsewhere."""
    amd = (cluster.intra_node is not None and cluster.intra_node.kind == "xgmi") or \
        cluster.gpu.name.lower().startswith("mi")
    return "HIP_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES"


def local_groups(plan, order=None) -> list[list[int]]:
    """The groups of local ranks the device order serves, from the rank map (the mesh's order,
    or ``order``, outermost first, where the target lays ranks out its own way): tensor
    parallelism's (the busiest link), else context parallelism's, else expert parallelism's;
    empty when none is wider than one GPU or its groups leave the node."""
    from parc.model.rankmap import RankMap

    m, gpn = plan.mesh, plan.cluster.gpus_per_node
    axis = next((ax for ax in ("tp", "cp", "ep") if m.size(ax) > 1), None)
    if axis is None or m.product <= 0:
        return []
    try:
        rm = RankMap(plan, order=list(order) if order else None)
    except ValueError:
        return []
    if (axis == "ep" and rm.ep != m.ep) or rm.crosses_node(axis):
        return []
    rows = {tuple(int(r) for r in row) for row in rm.groups(axis) if row.max() < gpn}
    return [list(r) for r in sorted(rows)]


def visible_devices(plan, order=None) -> list[int] | None:
    """The physical GPU order each node's launch sets (CUDA_VISIBLE_DEVICES or the ROCm
    equivalent) so that the plan's innermost groups land on NVLink islands; None where the
    natural order serves (or the cluster has no topology)."""
    cl = plan.cluster
    if cl.topology is None:
        return None
    return device_order(cl.topology, cl.gpus_per_node, local_groups(plan, order))


def physical_gpus(plan, order=None) -> list[int]:
    """The physical GPU of each local rank (LOCAL_RANK 0, 1, ...) under the launch's device order."""
    return visible_devices(plan, order) or list(range(plan.cluster.gpus_per_node))
