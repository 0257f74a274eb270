"""The node's GPU topology against the cluster block's, where the block describes one.

A cluster block with a ``topology { islands, numa, links }`` (written by ``parc topo``)
says how the GPUs of a node are wired, and the placement rules judged the plan's TP, CP and EP
groups on it. This check reads the node's own (``nvidia-smi topo -m``, else ``rocm-smi
--showtopo``, through ``parc.topo``) and compares the class of every GPU pair
(``parc.model.topology.link_class``): a pair slower here than the block says (NVLink there, PCIe
here) is an error, since a group the rules passed may cross it; a pair faster here is a warning.
A cluster block without a topology has nothing to compare: :mod:`parc.doctor.gpus` checks its
GPU count and model.
"""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding
from parc.words import count

CHECK = "topology"
TOOLS = ((["nvidia-smi", "topo", "-m"], False), (["rocm-smi", "--showtopo"], True))


def described(plan) -> object | None:
    """The cluster's description of the links inside a node, where the plan has one."""
    return getattr(plan.cluster, "topology", None)


def _reading(ctx: Context):
    """The node's topology as ``parc.topo`` reads it, or None where no tool answers."""
    from parc.topo.read import TopoError, read_nvidia, read_rocm

    for argv, amd in TOOLS:
        ran = ctx.probes.run(argv)
        if ran is None:
            continue
        if ran.code != 0:
            return None
        try:
            return (read_rocm if amd else read_nvidia)(ran.out)
        except TopoError:
            return None
    return None


def check(ctx: Context) -> list[Finding | Passed]:
    want = described(ctx.plan)
    if want is None or not (getattr(want, "islands", None) or getattr(want, "links", None)):
        return []
    reading = _reading(ctx)
    if reading is None:
        return []
    from parc.model.topology import RANK, WORDS, link_class
    from parc.topo.write import topology_of

    have = topology_of(reading)
    n = min(ctx.plan.cluster.gpus_per_node, reading.gpus)
    pairs = [(a, b, link_class(want, a, b), link_class(have, a, b)) for a in range(n) for b in range(a + 1, n)]
    slower = [p for p in pairs if RANK[p[3]] > RANK[p[2]]]
    faster = [p for p in pairs if RANK[p[3]] < RANK[p[2]]]
    if not slower and not faster:
        return [Passed(CHECK, f"the links between the {n} GPUs are those of the cluster block's topology")]
    code, which = ("D160", slower) if slower else ("D161", faster)
    a, b, said, is_ = which[0]
    more = f" ({count(len(which) - 1, 'other pair')} likewise)" if len(which) > 1 else ""
    return [finding(code, CHECK, f"GPU {a} and GPU {b}: the cluster block says {WORDS[said]}, this node has "
                    f"{WORDS[is_]}{more}", pairs=[[p[0], p[1], p[2], p[3]] for p in which])]
