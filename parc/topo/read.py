"""The text of ``nvidia-smi topo -m`` and ``rocm-smi --showtopo``, and a NIC list, read into a
:class:`Reading`: one node's GPU-to-GPU link classes, NUMA nodes and nearest NICs.

``nvidia-smi topo -m`` prints a matrix whose columns are the GPUs and NICs (``GPU0 ... NIC0 ...``),
then ``CPU Affinity``, ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID``; one row per GPU and
per NIC; a legend of the classes; and a ``NIC Legend`` naming each NIC (``NIC0: mlx5_0``). Older
drivers name the NIC columns by device (``mlx5_0``) and have no NIC legend. ``rocm-smi
--showtopo`` prints tables headed ``Weight``, ``Hops`` and ``Link Type between two GPUs`` (``XGMI``
or ``PCIE``; ``0`` on the diagonal) and ``Numa Nodes`` lines (``GPU[0] : (Topology) Numa Node: 0``).
A PCIe pair of AMD GPUs reads as ``SYS`` across NUMA nodes and ``PHB`` within one: rocm-smi's hops
say no more (2: through one CPU socket, 3: through two).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.model.topology import RANK, base, known

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU(\d+)$")


class TopoError(ValueError):
    """The text is not the tool's output parc reads; the message says what was expected."""


@dataclass
class Reading:
    matrix: list[list[str]]                           # GPU-to-GPU classes, "X" on the diagonal
    numa: list[int] = field(default_factory=list)     # NUMA node of each GPU ([]: not reported)
    nics: list[str] = field(default_factory=list)     # the NIC nearest each GPU ([]: none)
    nic_class: list[str] = field(default_factory=list)   # the class of that path (PIX, NODE, ...)
    amd: bool = False
    source: str = "nvidia-smi topo -m"

    @property
    def gpus(self) -> int:
        return len(self.matrix)


def _lines(text: str) -> list[str]:
    return [_ANSI.sub("", ln).rstrip() for ln in text.replace("\r\n", "\n").split("\n")]


def _nic_legend(lines: list[str]) -> dict[str, str]:
    out, on = {}, False
    for ln in lines:
        if ln.strip().startswith("NIC Legend"):
            on = True
            continue
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", ln) if on else None
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _nearest(row: list[str], names: list[str]) -> tuple[str, str]:
    """The nearest NIC of a GPU row's NIC columns, and its class (ties: the first)."""
    best = min(range(len(names)), key=lambda i: (RANK.get(base(row[i]), 9), i))
    return names[best], base(row[best])


def read_nvidia(text: str) -> Reading:
    """``nvidia-smi topo -m`` output read into a :class:`Reading`."""
    lines = _lines(text)
    head_at = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"]
                    and not known(ln.split()[1] if len(ln.split()) > 1 else "X")), None)
    if head_at is None:
        raise TopoError("no `GPU0 GPU1 ...` header line: is this the output of `nvidia-smi topo -m`?")
    head = lines[head_at].split()
    cut = head.index("CPU") if "CPU" in head else len(head)
    cols = head[:cut]
    has_numa = "NUMA" in head[cut:] and "Affinity" in head[cut:]
    gpus = [c for c in cols if _GPU.match(c)]
    if [int(_GPU.match(c).group(1)) for c in gpus] != list(range(len(gpus))) or cols[:len(gpus)] != gpus:
        raise TopoError(f"the GPU columns are {' '.join(gpus)}; expected GPU0, GPU1, ... in order, first")
    odd = next((c for c in cols[len(gpus):] if c.upper().startswith("GPU")), None)
    if odd is not None:
        raise TopoError(f"column `{odd}` is neither a GPU (GPU0 ... GPU{len(gpus) - 1}) nor a NIC: "
                        "is this the output of `nvidia-smi topo -m` as it printed it?")
    rows: dict[str, list[str]] = {}
    numa: dict[str, str] = {}
    for ln in lines[head_at + 1:]:
        t = ln.split()
        if t and t[0] not in cols and t[0].upper().startswith("GPU") and t[0] != "GPU" and len(t) > 1 \
                and known(t[1]):
            raise TopoError(f"row `{t[0]}` names no column of the header ({' '.join(cols)})")
        if not t or t[0] not in cols:
            if t and t[0] == "Legend:":
                break
            continue
        if len(t) < 1 + len(cols):
            raise TopoError(f"row {t[0]} has {len(t) - 1} classes for {len(cols)} columns")
        rows[t[0]] = t[1:1 + len(cols)]
        rest = t[1 + len(cols):]
        if has_numa and len(rest) >= 2:
            numa[t[0]] = rest[1]
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise TopoError(f"no row for {', '.join(missing)}")
    n = len(gpus)
    matrix = [rows[g][:n] for g in gpus]
    bad = next((c for r in matrix for c in r if not known(c)), None)
    if bad is not None:
        raise TopoError(f"`{bad}` is not a class of the nvidia-smi legend (X, NV#, PIX, PXB, PHB, NODE, SYS)")
    legend = _nic_legend(lines)
    nic_cols = cols[n:]
    for g in gpus:
        bad = next(((c, v) for c, v in zip(nic_cols, rows[g][n:]) if not known(v)), None)
        if bad is not None:
            raise TopoError(f"row {g} holds `{bad[1]}` under NIC column {bad[0]}, not a class of the legend: the "
                            "columns are misaligned (a header naming columns the rows do not fill)")
    names = [legend.get(c, c) for c in nic_cols]
    near = [_nearest(rows[g][n:], names) for g in gpus] if names else []
    nodes = [numa.get(g, "") for g in gpus]
    return Reading(matrix=matrix, numa=[int(x) for x in nodes] if all(x.isdigit() for x in nodes) else [],
                   nics=[a for a, _ in near], nic_class=[b for _, b in near])


def _sections(lines: list[str]) -> dict[str, list[str]]:
    out, cur = {}, None
    for ln in lines:
        m = re.match(r"^=+\s*(.*?)\s*=+$", ln.strip())
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur is not None and ln.strip():
            out[cur].append(ln)
    return out


def _table(body: list[str]) -> list[list[str]]:
    head = body[0].split()
    n = len(head)
    rows = {t[0]: t[1:1 + n] for t in (ln.split() for ln in body[1:]) if t and _GPU.match(t[0])}
    return [rows[f"GPU{i}"] for i in range(n) if f"GPU{i}" in rows]


def read_rocm(text: str) -> Reading:
    """``rocm-smi --showtopo`` output read into a :class:`Reading`."""
    sec = _sections(_lines(text))
    link = next((v for k, v in sec.items() if k.lower().startswith("link type")), None)
    if not link:
        raise TopoError("no `Link Type between two GPUs` table: is this the output of `rocm-smi --showtopo`?")
    kinds = _table(link)
    n = len(kinds)
    if n == 0 or any(len(r) != n for r in kinds):
        raise TopoError(f"the link type table is not square ({n} GPU rows)")
    numa = [-1] * n
    for ln in next((v for k, v in sec.items() if k.lower().startswith("numa")), []):
        m = re.match(r"^\s*GPU\[(\d+)\]\s*:.*Numa Node:\s*(-?\d+)", ln)
        if m and int(m.group(1)) < n:
            numa[int(m.group(1))] = int(m.group(2))
    have_numa = all(x >= 0 for x in numa)
    matrix = []
    for a in range(n):
        row = []
        for b in range(n):
            k = kinds[a][b].upper()
            if a == b:
                row.append("X")
            elif k == "XGMI":
                row.append("XGMI")
            elif k == "PCIE":
                row.append("SYS" if have_numa and numa[a] != numa[b] else "PHB")
            else:
                raise TopoError(f"link type `{kinds[a][b]}` between GPU{a} and GPU{b}: expected XGMI or PCIE")
        matrix.append(row)
    return Reading(matrix=matrix, numa=numa if have_numa else [], amd=True, source="rocm-smi --showtopo")


def read_nics(text: str, reading: Reading) -> Reading:
    """A NIC list (one line per NIC: its name and NUMA node, e.g. from
    ``/sys/class/infiniband/*/device/numa_node``) applied to ``reading``: each GPU takes a NIC of
    its NUMA node, the NUMA node's NICs dealt out in turn; ``NODE`` is the class given."""
    nics = []
    for ln in _lines(text):
        t = ln.split("#", 1)[0].split()
        if not t:
            continue
        if len(t) != 2 or not t[1].lstrip("-").isdigit():
            raise TopoError(f"`{ln.strip()}`: a NIC line is its name and NUMA node, like `mlx5_0 0`")
        nics.append((t[0], int(t[1])))
    if not nics:
        raise TopoError("the NIC list is empty")
    if not reading.numa:
        raise TopoError("the GPUs' NUMA nodes are not known, so the nearest NIC cannot be told")
    out, cls, dealt = [], [], {}
    for node in reading.numa:
        here = [n for n, k in nics if k == node]
        pick = here[dealt.get(node, 0) % len(here)] if here else nics[0][0]
        dealt[node] = dealt.get(node, 0) + 1
        out.append(pick)
        cls.append("NODE" if here else "SYS")
    reading.nics, reading.nic_class = out, cls
    return reading
