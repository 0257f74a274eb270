"""Candidates as plain records, and the full :class:`~parc.compiler.plan.Plan` each one stands for."""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from ..compiler.plan import Mesh, Plan, Schedule
from .inputs import Problem


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
    from ..compiler import costmodel

    L = pr.model.layers
    if mode == "explicit":
        return list(pr.placement.layers or [])
    if mode == "even":
        return [L // stages] * stages if L % stages == 0 else None
    return costmodel.balanced_split(pr.model, stages)


def build_plan(pr: Problem, c: Candidate) -> Plan:
    """The resolved plan a candidate stands for, as the resolver would build it from its spec."""
    mesh = Mesh(order=list(pr.order), pp=c.pp, dp=c.dp, cp=c.cp, tp=c.tp, ep=c.ep, etp=c.etp)
    placement = copy.deepcopy(pr.placement)
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
        serve = replace(pr.serve, max_num_seqs=max(1, c.max_num_seqs))
    return Plan(file=pr.file, model=pr.model, cluster=pr.cluster, mesh=mesh, placement=placement,
                schedule=sched, mode=pr.mode, train=train, serve=serve, targets=dict(pr.targets))
