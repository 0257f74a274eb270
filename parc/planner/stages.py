"""Stage layouts and the parameters each stage holds, for the bulk search (:mod:`parc.planner.vector`):
the distinct stage classes of every layout option and their tables, each computed through the
scalar cost model once per distinct shape."""
from __future__ import annotations

import numpy as np

from parc.cost import estimate as cm
from parc.cost.memory import double_buffer_asked
from parc.cost.params import fsdp_unit_kinds, one_layer_params
from parc.model import schedules
from parc.planner.inputs import Problem
from parc.planner.plans import stage_split
from parc.planner.space import PIPELINES, SPLITS, layout_options


class Shapes:
    """Memoised stage classes and parameter counts (scalar cost-model calls, once per shape)."""

    def __init__(self, pr: Problem):
        self.pr = pr
        self.layouts: dict[tuple, list] = {}
        self.params: dict[tuple, tuple[int, ...]] = {}
        self.tensors: dict[tuple, tuple] = {}   # per shape: (layout_tensors, their unsharded parts)
        self.by_mesh: dict[tuple, tuple[int, ...]] = {}   # the same parameters by (dp, cp) + shape
        self.kinds: dict[int, frozenset] = {}   # per stage class (by id): its double-buffered units' kinds
        self.buffers = double_buffer_asked(pr)  # Megatron-FSDP's double buffer asked for (ZeRO-3 rows)

    def classes(self, pp: int, v: int, pipeline: str, split: int) -> list:
        """The distinct stages of a layout, first stage of each kind, by stage index: pipeline rank
        ``i`` and the next ranks that hold the same layers, embedding and head have the same
        memory and FLOPs except for fewer microbatches in flight, so the first one bounds them."""
        key = (pp, v, schedules.placement_style(pipeline, v), split)
        got = self.layouts.get(key)
        if got is None:
            m = self.pr.model
            split = cm.split_layers(m.layers, pp, v, stage_split(self.pr, SPLITS[split], pp * v))
            seen, got = set(), []
            for st in cm.layouts_of(m, pipeline, pp, split):
                k = (st.layers, st.moe_layers, st.embedding, st.head)
                if k not in seen:
                    seen.add(k)
                    got.append(st)
                    self.kinds[id(st)] = frozenset(fsdp_unit_kinds(m, split, st.chunks) if self.buffers else ())
            self.layouts[key] = got
        return got

    def stage_params(self, mesh: tuple, st) -> tuple[int, ...]:
        """(dense, expert) parameters of one GPU of stage ``st`` before ZeRO-3, and after it (the
        first, largest torch.chunk shard), then the linear parameters FP8 copies (before and after),
        then the unit Megatron-FSDP's double buffer holds (:func:`parc.cost.params.fsdp_unit_params`;
        0 where no double buffer is asked for)."""
        pp, dp, cp, tp, ep, etp = mesh
        kinds = self.kinds.get(id(st), frozenset())
        full_key = (dp, cp, kinds) + (shape := (tp, ep, etp, st.layers, st.moe_layers, st.embedding, st.head))
        got = self.by_mesh.get(full_key)
        if got is not None:
            return got
        groups = cm.shard_groups(dp, cp, tp, ep, etp)   # the ZeRO-3 shards depend on dp and cp only through these
        key = shape + groups + (kinds,)
        got = self.params.get(key)
        if got is None:
            m = self.pr.model
            held = self.tensors.get(shape)
            if held is None:
                tensors = cm.layout_tensors(m, st, tp, ep, etp)
                held = self.tensors[shape] = (tensors, cm.tensor_parts(m, tensors, 1, 1))
            tensors, full = held
            z3 = cm.tensor_parts(m, tensors, *groups)
            got = (sum(full.values()) - full["experts"], full["experts"],
                   sum(z3.values()) - z3["experts"], z3["experts"], cm.linear_params(full), cm.linear_params(z3),
                   max((one_layer_params(m, moe, tp, ep, etp) for moe in kinds), default=0))
            self.params[key] = got
        self.by_mesh[full_key] = got
        return got


def layouts(pr: Problem, meshes):
    """The layout options (mesh index, pipeline, virtual stages, split) and, per option, the
    table of its stage classes: stage index, layers, MoE layers, embedding, head, validity and
    the parameters of one GPU (dense, expert, and their ZeRO-3 shards; the linear ones; the double
    buffer's unit). Each table row is built
    once per distinct class list, and the parameters once per (mesh, class list)."""
    shapes = Shapes(pr)
    by_pp: dict[int, list] = {}
    lo_mesh, lo_pipe, lo_v, lo_split, lo_cls = [], [], [], [], []
    for mi, mesh in enumerate(meshes):
        opts = by_pp.get(mesh[0])
        if opts is None:
            opts = by_pp[mesh[0]] = [(pi, v, split, shapes.classes(mesh[0], v, PIPELINES[pi], split))
                                     for pi, v, split in layout_options(pr, mesh[0])]
        for pi, v, split, cls in opts:
            lo_mesh.append(mi)
            lo_pipe.append(pi)
            lo_v.append(v)
            lo_split.append(split)
            lo_cls.append(cls)
    n_lo, K = len(lo_mesh), max((len(c) for c in lo_cls), default=0)
    kinds: dict[int, int] = {}          # id of a class list -> its row in `rows`
    sigs: list[tuple] = []              # per row of `rows`: what the compute of its classes reads
    twins: dict[tuple, int] = {}        # (mesh index, signature) -> the first layout option with them
    twin = np.zeros(n_lo, dtype=np.int64)
    rows, lo_kind = [], np.zeros(n_lo, dtype=np.int64)
    blocks: dict[tuple, int] = {}       # (mesh index, class list row) -> its row in `pars`
    pars, lo_block = [], np.zeros(n_lo, dtype=np.int64)
    for i, cls in enumerate(lo_cls):
        kind = kinds.get(id(cls))
        if kind is None:
            kind = kinds[id(cls)] = len(rows)
            row = np.zeros((6, K), dtype=np.int64)     # stage, layers, MoE layers, embedding, head, valid
            for k, st in enumerate(cls):
                row[:, k] = (st.stage, st.layers, st.moe_layers, st.embedding, st.head, True)
            rows.append(row)
            sigs.append(tuple((st.layers, st.moe_layers, st.embedding, st.head) for st in cls))
        lo_kind[i] = kind
        twin[i] = twins.setdefault((lo_mesh[i], sigs[kind]), i)
        key = (lo_mesh[i], kind)
        b = blocks.get(key)
        if b is None:
            b = blocks[key] = len(pars)
            block = np.zeros((7, K), dtype=np.float64)  # dense, expert, their ZeRO-3 shards, linear (both), unit
            for k, st in enumerate(cls):
                block[:, k] = shapes.stage_params(meshes[lo_mesh[i]], st)
            pars.append(block)
        lo_block[i] = b
    table = np.stack(rows)[lo_kind] if n_lo else np.zeros((0, 6, K), dtype=np.int64)
    c_par = (np.stack(pars)[lo_block] if n_lo else np.zeros((0, 7, K))).transpose(1, 0, 2).copy()
    ints = [table[:, j].copy() for j in range(3)]
    flags = [table[:, j].astype(bool) for j in range(3, 6)]
    return lo_mesh, lo_pipe, lo_v, lo_split, (*ints, *flags, c_par[:4], c_par[4:6], c_par[6]), twin
