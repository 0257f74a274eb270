"""Candidates as plain records, and the full :class:`~parc.model.plan.Plan` each one stands for."""
from __future__ import annotations

import copy
from dataclasses import asdict, astuple, dataclass, field, replace
from functools import lru_cache
from typing import Any, Optional

from parc.language.diagnostics import Span
from parc.model.plan import Mesh, Plan, Schedule
from parc.planner.inputs import Problem


@dataclass(slots=True)
class Candidate:
    """One plan of the search with its estimated costs. Times in seconds, memory in bytes,
    communication times per axis in seconds per step (serving: per decode step)."""

    rank: int
    pp: int
    dp: int
    cp: int
    tp: int
    ep: int = 1
    etp: int = 1
    pipeline: str = "1f1b"
    virtual_stages: int = 1
    micro_batch: int = 1
    microbatches: int = 1
    global_batch: int = 1
    layers: str = "even"               # even | balanced | explicit
    zero: int = 0
    recompute: str = "none"
    sequence_parallel: bool = False
    max_num_seqs: int = 0              # serving: concurrent sequences at the memory limit
    step_time: float = 0.0
    tokens_per_second: float = 0.0
    mfu: float = 0.0
    bubble: float = 0.0
    memory_total: float = 0.0
    memory_capacity: float = 0.0
    comm_time: dict = field(default_factory=dict)
    comm_exposed: dict = field(default_factory=dict)   # seconds of comm_time that compute does not hide
    compute_time: float = 0.0
    latency: float = 0.0               # serving: seconds per output token of one sequence
    warnings: list = field(default_factory=list)   # codes of the rule warnings it raises

    @property
    def mesh(self) -> dict[str, int]:
        return {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp, "ep": self.ep}

    @property
    def headroom(self) -> float:
        """Share of GPU memory left free (0..1)."""
        return 1 - self.memory_total / self.memory_capacity if self.memory_capacity else 0.0

    def key(self) -> tuple:
        """The settings, without costs: equal keys are the same plan."""
        return (self.pp, self.dp, self.cp, self.tp, self.ep, self.etp, self.pipeline, self.virtual_stages,
                self.micro_batch, self.microbatches, self.global_batch, self.layers, self.zero,
                self.recompute, self.sequence_parallel, self.max_num_seqs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mesh"] = self.mesh
        d["headroom"] = self.headroom
        return d


def stage_split(pr: Problem, mode: str, stages: int) -> Optional[list[int]]:
    """The layer count per (virtual) stage the resolver would fill in for ``mode``."""
    L = pr.model.layers
    if mode == "explicit":
        return list(pr.placement.layers or [])
    if mode == "even":
        return [L // stages] * stages if L % stages == 0 else None
    got = _balanced(_ByFields(pr.model), stages)
    return list(got) if got is not None else None


class _ByFields:
    """A model compared by its fields, so equal models share one cached split."""

    __slots__ = ("model", "key")

    def __init__(self, model):
        self.model, self.key = model, astuple(model)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _ByFields) and other.key == self.key


@lru_cache(maxsize=4096)
def _balanced(model: _ByFields, stages: int) -> Optional[tuple[int, ...]]:
    """The balanced split of ``model`` over ``stages``: the water-filling is the slow part."""
    from parc.cost import estimate as costmodel

    got = costmodel.balanced_split(model.model, stages)
    return tuple(got) if got is not None else None


def written(pr: Problem, c: Candidate) -> dict[str, list[str]]:
    """The keys, per block, that the spec of ``c`` writes (:func:`parc.planner.emit.plan_text`
    writes exactly these); the rules treat a written key differently from a default."""
    w: dict[str, list[str]] = {"model": ["from"] if pr.model.preset else [], "cluster": [],
                               "mesh": list(pr.order) + [ax for ax in ("ep", "etp") if getattr(c, ax) > 1]}
    place = [ax for ax in placement_links(pr, c)]
    if c.layers != "even":
        place.append("layers")
    if place or pr.placement.modules:
        w["placement"] = place
    if pr.mode == "train":
        w["schedule"] = (["pipeline"] if c.pp > 1 else []) + (["virtual_stages"] if c.virtual_stages > 1 else []) \
            + ["micro_batch", "global_batch"]
        t = pr.train
        w["train"] = (["optimizer"] if t.optimizer != "adam" else []) + ["zero"] \
            + (["sequence_parallel"] if c.tp > 1 or c.sequence_parallel else []) + ["recompute"] \
            + [k for k, d in (("precision", "bf16"), ("main_grads", "fp32"), ("optimizer_state", "fp32"))
               if getattr(t, k) != d]
    else:
        # max_model_len only where given (else the engine's own); max_num_seqs the candidate's
        w["serve"] = (["max_model_len"] if pr.serve.max_model_len is not None else []) \
            + (["gpu_memory_utilization"] if pr.serve.gpu_memory_utilization is not None else []) \
            + ["max_num_seqs"] \
            + (["kv_cache_dtype"] if pr.serve.kv_cache_dtype != "auto" else [])
    return w


def placement_links(pr: Problem, c: Candidate) -> dict[str, str]:
    """The axis-to-link rules of the written spec: the spec's own, else TP pinned inside a node."""
    links = dict(pr.placement.links)
    if not links and c.tp > 1:
        links["tp"] = "intra_node"
    return links


def written_spans(pr: Problem, c: Candidate) -> dict[str, Span]:
    """Spans as the resolver records them for the written spec: one line per block header and
    per written key; keys left out point at their block's header."""
    spans: dict[str, Span] = {}
    line = 1
    for blk, keys in written(pr, c).items():
        head = Span(pr.file, line, 1, line, 1 + len(blk), 0, len(blk))
        spans[blk] = head
        for k in keys:
            line += 1
            spans[f"{blk}.{k}"] = Span(pr.file, line, 3, line, 3 + len(k), 0, len(k))
        line += 2
    return spans


def build_plan(pr: Problem, c: Candidate) -> Plan:
    """The resolved plan a candidate stands for, as the resolver builds it from its written spec."""
    mesh = Mesh(order=list(pr.order), pp=c.pp, dp=c.dp, cp=c.cp, tp=c.tp, ep=c.ep, etp=c.etp)
    placement = copy.deepcopy(pr.placement)
    placement.links = placement_links(pr, c)
    placement.layers_mode = c.layers
    v = c.virtual_stages if pr.mode == "train" else 1
    placement.layers = stage_split(pr, c.layers, c.pp * v)
    if pr.mode == "train":
        sched = Schedule(pipeline=c.pipeline, virtual_stages=c.virtual_stages, micro_batch=c.micro_batch,
                         global_batch=c.global_batch, microbatches=c.microbatches)
        train = replace(pr.train, zero=c.zero, recompute=c.recompute, sequence_parallel=c.sequence_parallel)
        serve = None
    else:
        n = c.pp if c.pp > 1 else 1
        sched = Schedule(global_batch=c.dp * n, microbatches=n)
        train = None
        # a candidate's own max_num_seqs (the memory-limit search's), else the spec's or the engine's
        serve = replace(pr.serve, max_num_seqs=c.max_num_seqs or pr.serve.max_num_seqs)
    return Plan(file=pr.file, model=pr.model, cluster=pr.cluster, mesh=mesh, placement=placement,
                schedule=sched, mode=pr.mode, train=train, serve=serve, targets=dict(pr.targets),
                profile=pr.profile, spans=written_spans(pr, c))
