"""A :class:`~parc.topo.read.Reading` written as a `cluster` block, in the short form where it
says enough (:mod:`parc.model.topology`): NVLink islands and NUMA nodes, the link matrix only
where a pair's class differs from what they imply, the nearest NIC of each GPU."""
from __future__ import annotations

from parc.model.topology import Topology, base, islands_of, needs_matrix
from parc.topo.read import Reading


def topology_of(reading: Reading) -> Topology:
    islands = islands_of(reading.matrix)
    links = [" ".join(r) for r in reading.matrix] if needs_matrix(islands, reading.numa, reading.matrix) else []
    return Topology(islands=islands, numa=list(reading.numa), links=links, nics=list(reading.nics))


def _intra(reading: Reading, topo: Topology) -> str:
    """``nvlink`` (``xgmi``) when every GPU has an NVLink (XGMI) peer, else ``pcie``."""
    covered = sum(len(i) for i in topo.islands) == reading.gpus and reading.gpus > 1
    if not covered:
        return "pcie"
    return "xgmi" if reading.amd else "nvlink"


def _fast_link(gpu: str) -> float:
    """The GPU preset's NVLink (XGMI) bandwidth; 0 where it has none or is not a preset."""
    from parc.resolve.catalog import presets

    return float(presets("gpus").get(gpu, {}).get("nvlink_bandwidth", 0))


def _list(xs) -> str:
    return "[" + ", ".join(xs) + "]"


def _matrix(matrix: list[list[str]]) -> str:
    """``links = [...]``, a row per line with its columns aligned and the GPU named in a comment
    (the formatter keeps a value with comments inside as written: at the block's indent)."""
    w = max(len(c) for r in matrix for c in r) + 1
    pad = " " * 6
    cells = [f'"{"".join(c.ljust(w) for c in r[:-1])}{r[-1]}",' for r in matrix]
    rows = [f"{pad}{c.ljust(max(map(len, cells)))}  # GPU{i}" for i, c in enumerate(cells)]
    return "links = [\n" + "\n".join(rows) + "\n    ]"


def _comment(reading: Reading, topo: Topology) -> list[str]:
    out = [f"# written by `parc topo` from {reading.source}"]
    kinds = sorted({c for r in reading.matrix for c in r if c != "X"}, key=lambda c: (base(c), c))
    if kinds:
        out.append(f"# GPU-to-GPU links seen: {', '.join(kinds)}")
    if reading.nics:
        pairs = [f"GPU{i} {n} ({c})" for i, (n, c) in enumerate(zip(reading.nics, reading.nic_class))]
        out += ["# nearest NIC: " + ", ".join(pairs[i:i + 4]) for i in range(0, len(pairs), 4)]
    return out


def cluster_block(reading: Reading, name: str = "node", gpu: str | None = None, nodes: int = 1) -> str:
    """The `cluster` block of a node like the one read, formatted as `parc fmt` lays it out."""
    from parc.language.fmt import format_text

    topo = topology_of(reading)
    body = [f"nodes = {nodes}", f"gpus_per_node = {reading.gpus}"]
    body.append(f"gpu = {gpu}" if gpu else "# gpu = ...   name the GPU preset here (`parc presets`), or run "
                                               "parc topo --gpu NAME")
    intra = _intra(reading, topo)
    if intra != "pcie" and gpu and not _fast_link(gpu):
        body += [f"# {intra} joins the islands below, but the {gpu} preset has no {intra} figure:",
                 f"# write `intra_node = {intra}(BW)`, the bridge's bandwidth per direction, to plan for it"]
        intra = "pcie"
    body.append(f"intra_node = {intra}")
    inner = []
    if topo.islands:
        inner.append("islands = " + _list(_list(str(g) for g in isl) for isl in topo.islands))
    if topo.numa:
        inner.append("numa = " + _list(str(x) for x in topo.numa))
    if topo.nics:
        inner.append("nics = " + _list(f'"{n}"' for n in topo.nics))
    if topo.links:
        inner.append(_matrix(reading.matrix))
    if inner:
        body += ["topology {", *inner, "}"]
    text = "\n".join(_comment(reading, topo)) + f'\ncluster "{name}" {{\n' + "\n".join(body) + "\n}\n"
    return format_text(text)
