"""The blocks a `cluster` may hold besides `gpu`: `topology { ... }` (one node's wiring, as
`parc topo` writes it) and `group "name" { ... }` (nodes of one kind in a heterogeneous cluster).

A cluster of groups is planned for its slowest group: the cluster's GPU is the group GPU with the
lowest dense BF16 peak (with the smallest memory of any group, since every rank must fit), its
intra-node link the slowest group's, its node count the groups' sum. Every group has the same
number of GPUs per node, since ranks land on nodes as ``rank // gpus_per_node``.
"""
from __future__ import annotations

from dataclasses import replace

from parc.language.diagnostics import ParcError, Span
from parc.model import fields as SC
from parc.model.plan import GPU, Link, NodeGroup
from parc.model.topology import Topology, validate
from parc.resolve.evaluate import Evaluator, Poison, check_range


class Failed(Exception):
    """A value failed; its error is already reported."""


def _eval(r: Evaluator, blk, kind: str, key: str, path: str):
    """The value of ``key`` in the nested block ``blk`` (None if unset); spans under ``path``."""
    a = blk.assigns.get(key)
    if a is None:
        return None
    f = SC.BLOCKS[kind][key]
    try:
        v = check_range(r.eval(a.value, f, key, kind), f, key, a.value.span)
    except ParcError as e:
        r.diags.append(e.diagnostic)
        raise Failed() from None
    except Poison:
        raise Failed() from None
    r.spans[f"{path}.{key}"] = a.span
    return v


def build_topology(r: Evaluator, gpus_per_node: int) -> Topology | None:
    """The cluster's `topology` block checked against a node of ``gpus_per_node`` GPUs."""
    blk = r.blocks["cluster"].children.get("topology")
    if blk is None:
        return None
    r.spans["cluster.topology"] = blk.span
    vals, failed = {}, False
    for key in SC.BLOCKS["topology"]:
        try:
            vals[key] = _eval(r, blk, "topology", key, "cluster.topology")
        except Failed:
            failed = True
    if failed:
        raise Failed()
    topo = Topology(islands=vals["islands"] or [], numa=vals["numa"] or [], links=vals["links"] or [],
                    nics=vals["nics"] or [])
    if topo.islands and not all(isinstance(i, list) for i in topo.islands):
        topo.islands = [topo.islands]   # `islands = [0, 1, 2, 3]`: one island
    problems = validate(topo, gpus_per_node)
    for key, msg in problems:
        r.err("P016", msg, r.spans.get(f"cluster.topology.{key}", blk.span),
              help=f"the node has gpus_per_node = {gpus_per_node} GPUs; `parc topo` writes this block from "
                   f"nvidia-smi topo -m or rocm-smi --showtopo")
    if problems:
        raise Failed()
    return topo


def _group(r: Evaluator, blk, gpu_of) -> NodeGroup:
    path = f"cluster.group.{blk.label}"
    vals, failed = {}, False
    for key in SC.BLOCKS["group"]:
        try:
            vals[key] = _eval(r, blk, "group", key, path)
        except Failed:
            failed = True
    if failed:
        raise Failed()
    missing = [k for k in ("nodes", "gpus_per_node", "gpu") if vals[k] is None]
    if missing:
        r.err("P018", f"group \"{blk.label}\" needs " + ", ".join(f"`{k}`" for k in missing), blk.span,
              help="for example `nodes = 2; gpus_per_node = 8; gpu = l40s`")
        raise Failed()
    gpu = gpu_of(vals["gpu"], r.spans[f"{path}.gpu"])
    if gpu is None:
        raise Failed()
    link = vals["intra_node"]
    if link is not None:
        kind, bw, _ = link
        bw = bw or (gpu.nvlink_bandwidth if kind in ("nvlink", "xgmi") else gpu.pcie_bandwidth)
        if not bw:
            r.err("P018", f"`{kind}` needs a bandwidth here: {gpu.name} has no {kind} figure",
                  r.spans[f"{path}.intra_node"], help=f"write `{kind}(...GB/s)`")
            raise Failed()
        link = Link(kind, float(bw))
    elif gpu.nvlink_bandwidth:
        link = Link("nvlink", gpu.nvlink_bandwidth)
    else:
        link = Link("pcie", gpu.pcie_bandwidth or 32e9)
    return NodeGroup(blk.label, vals["nodes"], vals["gpus_per_node"], gpu, link)


def build_groups(r: Evaluator, gpu_of) -> list[NodeGroup]:
    """The cluster's node groups (none when it has no `group` block); ``gpu_of(name, span)``
    gives a GPU preset (None where it reported the name unknown)."""
    blocks = [b for k, b in r.blocks["cluster"].children.items() if k.startswith("group.")]
    out, failed = [], False
    for blk in blocks:
        try:
            out.append(_group(r, blk, gpu_of))
        except Failed:
            failed = True
    if failed:
        raise Failed()
    sizes = sorted({g.gpus_per_node for g in out})
    if len(sizes) > 1:
        g = next(g for g in out if g.gpus_per_node != out[0].gpus_per_node)
        r.err("P018", f"group \"{g.name}\" has {g.gpus_per_node} GPUs per node and group \"{out[0].name}\" "
                      f"{out[0].gpus_per_node}: every group of a cluster needs the same number",
              r.spans.get(f"cluster.group.{g.name}.gpus_per_node", Span.point(r.blocks["cluster"].span.file)),
              help="ranks land on nodes as rank // gpus_per_node; split the job, or use as many GPUs "
                   f"per node everywhere (gpus_per_node = {sizes[0]})")
        raise Failed()
    return out


def slowest(groups: list[NodeGroup]) -> tuple[GPU, Link | None]:
    """The GPU and intra-node link a cluster of ``groups`` is planned for: the lowest BF16 peak
    (ties: the least memory), with the least memory of any group; the slowest intra-node link."""
    g = min(groups, key=lambda x: (x.gpu.flops, x.gpu.memory))
    gpu = replace(g.gpu, memory=min(x.gpu.memory for x in groups))
    links = [x.intra_node for x in groups if x.intra_node is not None]
    return gpu, (min(links, key=lambda ln: ln.bandwidth) if links else None)
