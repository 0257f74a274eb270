"""Where every global rank lands, and which ranks form each axis's groups.

Ranks follow the mesh order (``mesh.order``, outermost first; the last axis is innermost, i.e.
consecutive ranks), as torch's ``DeviceMesh`` and Megatron-LM's ``RankGenerator`` lay them out.
Ranks land on nodes as torchrun's static rendezvous places them:
``RANK = node_rank · nproc_per_node + local_rank``, so ``node = rank // gpus_per_node`` and
``local = rank % gpus_per_node``.

Expert parallelism adds no GPUs: ``ep`` and ``etp`` are carved out of the dp·cp·tp ranks of each
pipeline stage the way Megatron-LM's expert ``RankGenerator`` does (order ``etp-ep-edp-pp``:
``etp`` innermost, then ``ep``, then the expert-data-parallel ``edp`` = dp·cp·tp / (ep·etp)).
Within a stage, the dp·cp·tp ranks are flattened in mesh order (the last axis innermost) and
that flat index ``j`` splits as ``j = etp_r + etp·(ep_r + ep·edp_r)``.

The fast link is a separate question from the host: an NVLink domain (``cluster.nvlink_domain``,
:attr:`parc.model.plan.Cluster.domain`; the node unless the cluster says more) holds ``domain``
consecutive ranks, ``domain = rank // domain``. A GB200 NVL72 rack is 18 nodes (trays) of 4
GPUs in one domain of 72, so a group of 8 ranks on two trays crosses a node but stays on NVLink.
:meth:`RankMap.link`, :meth:`RankMap.domains_spanned` and :meth:`RankMap.crosses_domain` answer
"does this group stay on the fast link"; :meth:`RankMap.nodes_spanned` and
:meth:`RankMap.crosses_node` answer "does it span hosts" (launch scripts, nnodes).

Everything is a closed form or a numpy array over all ranks; nothing builds a Python object per
rank, so a 131,072-GPU cluster maps in a few milliseconds. ``nodes_spanned`` and ``crosses_node``
are pure integer arithmetic whenever a group is an arithmetic progression of ranks (every mesh
axis, and the expert axes when pp is outermost), so the topology rules need no numpy at all.
"""
from __future__ import annotations

from math import prod
from typing import Iterable

MESH_AXES = ("pp", "dp", "cp", "tp")
EXPERT_AXES = ("ep", "etp", "edp")


class RankMap:
    """The rank map of a plan: ``RankMap(plan)``, or :meth:`from_sizes` without one."""

    __slots__ = ("order", "sizes", "gpus_per_node", "domain", "world", "ep", "etp", "edp", "stride", "_cache")

    def __init__(self, plan=None, *, order: Iterable[str] | None = None, sizes: dict[str, int] | None = None,
                 gpus_per_node: int | None = None, ep: int | None = None, etp: int | None = None,
                 domain: int | None = None):
        if plan is not None:
            m = plan.mesh
            order = order or m.order
            sizes = sizes or {ax: m.size(ax) for ax in MESH_AXES}
            if gpus_per_node is None:
                gpus_per_node, domain = plan.cluster.gpus_per_node, domain or plan.cluster.domain
            dense = not getattr(plan.model, "is_moe", True)   # no expert layer: no expert grid to lay out
            ep = (1 if dense else m.ep) if ep is None else ep
            etp = (1 if dense else m.etp) if etp is None else etp
        order = [ax for ax in (order or MESH_AXES) if ax in MESH_AXES]
        for ax in MESH_AXES:  # axes left out of the order are size 1; put them outermost
            if ax not in order:
                order.insert(0, ax)
        sizes = {ax: int((sizes or {}).get(ax, 1)) for ax in MESH_AXES}
        if any(v < 1 for v in sizes.values()):
            raise ValueError(f"every mesh axis needs a size of at least 1, got {sizes}")
        self.order = tuple(order)
        self.sizes = sizes
        self.gpus_per_node = max(1, int(gpus_per_node or 1))
        self.domain = max(1, int(domain or self.gpus_per_node))   # GPUs per NVLink domain
        self.world = prod(sizes.values())
        self.ep = max(1, int(ep or 1))
        self.etp = max(1, int(etp or 1))
        block = self.world // sizes["pp"]
        if block % (self.ep * self.etp):
            raise ValueError(f"ep·etp = {self.ep * self.etp} does not divide dp·cp·tp = {block}")
        self.edp = block // (self.ep * self.etp)
        stride, s = {}, 1
        for ax in reversed(self.order):
            stride[ax] = s
            s *= sizes[ax]
        self.stride = stride
        self._cache: dict = {}

    @classmethod
    def from_sizes(cls, gpus_per_node: int, order: Iterable[str] = MESH_AXES, ep: int = 1, etp: int = 1,
                   domain: int | None = None, **sizes: int) -> "RankMap":
        """A rank map without a plan: ``RankMap.from_sizes(8, pp=4, dp=2, tp=8)``."""
        return cls(order=list(order), sizes=sizes, gpus_per_node=gpus_per_node, ep=ep, etp=etp, domain=domain)

    # --- sizes -----------------------------------------------------------------------------
    def size(self, axis: str) -> int:
        if axis in MESH_AXES:
            return self.sizes[axis]
        if axis in EXPERT_AXES:
            return getattr(self, axis)
        raise KeyError(f"unknown axis {axis!r}")

    @property
    def nodes(self) -> int:
        """Nodes the mesh occupies (the last one may be partly used if the mesh is smaller)."""
        return -(-self.world // self.gpus_per_node)

    # --- rank <-> coordinates ----------------------------------------------------------------
    def coords(self, ranks) -> dict:
        """Coordinates of ``ranks`` (an int or array) on pp, dp, cp, tp, in the mesh's order."""
        import numpy as np

        r = np.asarray(ranks, dtype=np.int64)
        return {ax: (r // self.stride[ax]) % self.sizes[ax] for ax in self.order}

    def rank_of(self, **coords):
        """The global rank of the given coordinates (ints or arrays; missing axes are 0)."""
        unknown = set(coords) - set(MESH_AXES)
        if unknown:
            raise KeyError(f"unknown axes {sorted(unknown)}")
        r = 0
        for ax, c in coords.items():
            r = r + c * self.stride[ax]
        return r

    def node_of(self, ranks):
        """Node index of each rank under torchrun's static rendezvous: rank // gpus_per_node."""
        return _div(ranks, self.gpus_per_node)

    def local_of(self, ranks):
        """Local GPU index (LOCAL_RANK) of each rank: rank % gpus_per_node."""
        return _mod(ranks, self.gpus_per_node)

    def expert_coords(self, ranks) -> dict:
        """Coordinates of ``ranks`` on the expert grid: pp, edp, ep, etp."""
        import numpy as np

        r = np.asarray(ranks, dtype=np.int64)
        j = self._flat_in_stage(r)
        return {"pp": (r // self.stride["pp"]) % self.sizes["pp"], "edp": j // (self.ep * self.etp),
                "ep": (j // self.etp) % self.ep, "etp": j % self.etp}

    def _flat_in_stage(self, r):
        """Index of each rank among its stage's dp·cp·tp ranks, flattened in mesh order."""
        j, s = 0, 1
        for ax in reversed(self.order):
            if ax == "pp":
                continue
            j = j + ((r // self.stride[ax]) % self.sizes[ax]) * s
            s *= self.sizes[ax]
        return j

    # --- groups ------------------------------------------------------------------------------
    def groups(self, axis) -> "np.ndarray":
        """Every group of ``axis`` as a 2-D int64 array ``[n_groups, size]`` of global ranks.

        ``axis`` is a mesh axis (pp, dp, cp, tp), an expert axis (ep, etp, edp) or a tuple of
        mesh axes (``("dp", "cp")``: the gradient-reduction group), whose ranks are listed with
        the innermost axis varying fastest. Rows are ordered by the smallest rank they hold.
        """
        key = axis if isinstance(axis, str) else tuple(axis)
        got = self._cache.get(key)
        if got is not None:
            return got
        import numpy as np

        if key in EXPERT_AXES:
            g = self._expert_groups(key)
        else:
            axes = (key,) if isinstance(key, str) else key
            for ax in axes:
                if ax not in MESH_AXES:
                    raise KeyError(f"unknown axis {ax!r}")
            grid = np.arange(self.world, dtype=np.int64).reshape([self.sizes[a] for a in self.order])
            inner = [self.order.index(a) for a in self.order if a in axes]
            outer = [i for i in range(len(self.order)) if i not in inner]
            n = prod(self.sizes[a] for a in axes)
            g = grid.transpose(outer + inner).reshape(-1, n)
        g.setflags(write=False)
        self._cache[key] = g
        return g

    def _expert_groups(self, axis: str):
        import numpy as np

        others = [a for a in self.order if a != "pp"]
        grid = np.arange(self.world, dtype=np.int64).reshape([self.sizes[a] for a in self.order])
        # one row per stage holding its dp·cp·tp ranks in flattened mesh order
        stages = grid.transpose([self.order.index("pp")] + [self.order.index(a) for a in others])
        stages = stages.reshape(self.sizes["pp"], self.edp, self.ep, self.etp)
        pos = {"edp": 1, "ep": 2, "etp": 3}[axis]
        rest = [i for i in (0, 1, 2, 3) if i != pos]
        return stages.transpose(rest + [pos]).reshape(-1, self.size(axis))

    def group_of(self, axis, rank: int):
        """The group of ``axis`` that holds ``rank`` (a 1-D array)."""
        import numpy as np

        g = self.groups(axis)
        row = np.nonzero((g == rank).any(axis=1))[0]
        return g[int(row[0])]

    # --- nodes -------------------------------------------------------------------------------
    def _progression(self, axis):
        """(stride, size, inner, block) when every group of ``axis`` is the arithmetic progression
        ``r0 + k·stride`` (k < size) with ``r0 = i + o·block`` (i < inner), else None."""
        if axis in MESH_AXES:
            st = self.stride[axis]
            return st, self.sizes[axis], st, st * self.sizes[axis]
        if axis in EXPERT_AXES and (self.order[0] == "pp" or self.sizes["pp"] == 1):
            # a stage's dp·cp·tp ranks are contiguous, so expert grid index = rank offset
            st = {"etp": 1, "ep": self.etp, "edp": self.etp * self.ep}[axis]
            return st, self.size(axis), st, st * self.size(axis)
        return None

    def nodes_spanned(self, axis) -> int:
        """The most nodes (hosts) any one group of ``axis`` touches (1: every group stays inside a node)."""
        return self._spanned(axis, self.gpus_per_node)

    def domains_spanned(self, axis) -> int:
        """The most NVLink domains any one group of ``axis`` touches (1: every group stays on NVLink)."""
        return self._spanned(axis, self.domain)

    def crosses_domain(self, axis) -> bool:
        """Whether some group of ``axis`` leaves its NVLink domain (its collectives take the
        inter-node network)."""
        return self.domains_spanned(axis) > 1

    def _spanned(self, axis, g: int) -> int:
        """The most blocks of ``g`` consecutive ranks any one group of ``axis`` touches."""
        key = ("spanned", g, axis if isinstance(axis, str) else tuple(axis))
        got = self._cache.get(key)
        if got is not None:
            return got
        ap = self._progression(axis) if isinstance(axis, str) else None
        if ap is not None:
            st, n, inner, block = ap
            if n == 1:
                out = 1
            elif st >= g:
                out = n  # consecutive members are at least a node apart
            else:
                # consecutive members are less than a node apart, so a group touches every node
                # between its first and last rank; only r0 mod g matters, maximise it
                outers = max(1, self.world // block)
                best = 0
                for o in range(min(outers, g)):
                    b = (o * block) % g
                    best = max(best, g - 1 if b + inner - 1 >= g else b + inner - 1)
                    if best == g - 1:
                        break
                out = (best + (n - 1) * st) // g + 1
        else:
            import numpy as np

            nodes = np.sort(self.groups(axis) // g, axis=1)
            out = int((np.diff(nodes, axis=1) != 0).sum(axis=1).max()) + 1 if nodes.shape[1] > 1 else 1
        self._cache[key] = out
        return out

    def crosses_node(self, axis) -> bool:
        """Whether some group of ``axis`` spans more than one node (host)."""
        return self.nodes_spanned(axis) > 1

    def domain_of(self, ranks):
        """NVLink domain index of each rank: rank // domain."""
        return _div(ranks, self.domain)

    def link(self, axis) -> str:
        """The link an axis's collectives run on: ``intra_node`` (NVLink, or the node's own link)
        when its groups stay inside an NVLink domain, else ``inter_node``."""
        return "inter_node" if self.crosses_domain(axis) else "intra_node"

    # --- summary -----------------------------------------------------------------------------
    def summary(self) -> dict:
        """A compact description for ``parc explain``: per axis its size, rank stride, group
        count, the most nodes a group spans, the link, and the first group's ranks."""
        axes = {}
        names = list(self.order)
        if self.ep > 1 or self.etp > 1:
            names += [a for a in ("ep", "etp") if self.size(a) > 1]
        for ax in names:
            n = self.size(ax)
            ap = self._progression(ax)
            first = self._first_group(ax, ap)
            axes[ax] = {
                "size": n,
                "stride": ap[0] if ap else None,
                "groups": self.world // n,
                "nodes_spanned": self.nodes_spanned(ax),
                "domains_spanned": self.domains_spanned(ax),
                "link": self.link(ax),
                "first_group": first,
            }
        return {"world": self.world, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "nvlink_domain": self.domain, "order": list(self.order), "axes": axes}

    def _first_group(self, axis, ap, limit: int = 8) -> list[int]:
        if ap is not None:
            st, n = ap[0], ap[1]
            return [k * st for k in range(min(n, limit))]
        return [int(x) for x in self.groups(axis)[0][:limit]]

    def __repr__(self) -> str:
        dims = " × ".join(f"{a}={self.sizes[a]}" for a in self.order)
        dom = f", domain={self.domain}" if self.domain != self.gpus_per_node else ""
        return f"RankMap({dims}, gpus_per_node={self.gpus_per_node}{dom}, ep={self.ep}, etp={self.etp})"


def _div(x, d):
    if isinstance(x, int):
        return x // d
    import numpy as np

    return np.asarray(x, dtype=np.int64) // d


def _mod(x, d):
    if isinstance(x, int):
        return x % d
    import numpy as np

    return np.asarray(x, dtype=np.int64) % d
