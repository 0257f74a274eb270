"""What one serving engine instance costs: the seam between ``parc plan --serve`` and the cost model.

The serving search (:mod:`parc.planner.serve_search`) combines engine instances into
deployments: one mesh of ``n`` replicas, or a prefill pool and a decode pool. Everything it
knows about one instance comes from here, and everything here comes from the cost layer, the
same owners ``parc explain`` reads:

* memory (weights per GPU, KV bytes per token, tokens of KV cache that fit) is
  :func:`parc.cost.estimate.estimate`'s for the plan the instance runs, on the GPUs a pool
  instance of that size gets (:func:`parc.model.pools.pool_cluster`), and its GPUs
  :func:`parc.model.pools.instance_gpus`;
* its engine's limits are :func:`parc.cost.engine.limits`' (the spec's, or the engine's own
  defaults), its step :class:`parc.cost.serve_step.StepModel`'s, and its scheduler under a load
  :func:`parc.cost.serving.batcher`'s (:mod:`parc.cost.scheduler`);
* the KV cache a prefill instance hands to a decode instance is
  :func:`parc.cost.serving.kv_transfer`'s.

How instances combine into a deployment (the closed loop of the goal's requests over one mesh's
ranks, or over a prefill pool feeding a decode pool) is the scheduler's, which the search calls
over arrays of instance counts (:mod:`parc.planner.serve_search`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

from parc.cost import estimate as cm
from parc.cost.serving import Instance, batcher, kv_transfer
from parc.model.plan import Mesh, Pool
from parc.model.pools import instance_gpus, pool_cluster
from parc.planner.inputs import Problem
from parc.planner.plans import Candidate, build_plan


@dataclass(frozen=True, slots=True)
class Shape:
    """One engine instance's layout: ``tp · pp · dp`` GPUs. ``dp > 1`` only with data-parallel
    attention (``ep = dp · tp``, one engine whose dp ranks each hold their own sequences);
    ``dcp`` splits the KV cache inside the tp group and adds no GPUs."""
    tp: int
    pp: int = 1
    dp: int = 1
    ep: int = 1
    dcp: int = 1

    @property
    def gpus(self) -> int:
        return instance_gpus(SimpleNamespace(pp=self.pp, dp=self.dp, cp=1, tp=self.tp))

    @property
    def ranks(self) -> int:
        """Data-parallel ranks that each serve their own sequences."""
        return self.dp

    @property
    def dp_attention(self) -> bool:
        return self.dp > 1

    def label(self) -> str:
        parts = [f"tp={self.tp}"] + [f"{k}={getattr(self, k)}" for k in ("pp", "dp", "ep", "dcp")
                                     if getattr(self, k) > 1]
        return " ".join(parts) + (" dp-attention" if self.dp_attention else "")


@dataclass
class InstanceCost:
    """An instance of ``shape`` running the problem's model: memory, limits, step, scheduler."""
    shape: Shape
    plan: object                       # the serving Plan one instance runs
    est: object                        # its estimate
    weights: float                     # bytes per GPU (the fullest stage)
    memory_capacity: float
    kv_capacity_tokens: int            # per data-parallel rank
    weights_fit: bool
    inst: Optional[Instance] = None    # its limits and step model (parc.cost.serving)
    _batchers: dict = field(default_factory=dict, repr=False)

    def batcher(self, prompt: int, output: int):
        """The scheduler of one of its dp ranks at the workload's request."""
        key = (prompt, output)
        if key not in self._batchers:
            self._batchers[key] = batcher(self.inst, prompt, output)
        return self._batchers[key]

    def prefill(self, prompt: int, output: int) -> dict:
        """One prompt on a rank that only prefills (:func:`parc.cost.scheduler.prefill_rank`)."""
        from parc.cost.scheduler import prefill_rank

        b = self.batcher(prompt, output)
        key = ("prefill", prompt, output)
        if key not in self._batchers:
            self._batchers[key] = prefill_rank(b.step, prompt, b.budget)
        return self._batchers[key]

    def memory_at(self, batch, tokens: int):
        """Bytes per GPU with ``batch`` sequences of ``tokens`` tokens in the KV cache."""
        return self.weights + batch * tokens * self.est.kv_bytes_per_token


def largest(pred, hi: int) -> Optional[int]:
    """The largest ``b`` in 1..hi with ``pred(b)`` true, for a ``pred`` true up to some point and
    false after it (None when ``pred(1)`` is false)."""
    if hi < 1 or not pred(1):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def kv_transfer_time(pr: Problem, ic: "InstanceCost", prompt: int) -> float:
    """Seconds one request's KV cache takes from a prefill instance of ``ic``'s layout to its
    decode instance, on the problem's cluster (:func:`parc.cost.serving.kv_transfer`)."""
    return kv_transfer(dataclasses.replace(ic.plan, cluster=pr.cluster), ic.est, prompt)[1]


def instance_problem(pr: Problem, gpus: int) -> Problem:
    """``pr`` on the GPUs one instance of ``gpus`` GPUs gets as a pool instance (whole nodes
    above a node, part of one below it): the cluster its rank map and rules see."""
    mesh = Mesh(order=list(pr.order), tp=gpus)
    cl = pool_cluster(SimpleNamespace(cluster=pr.cluster), Pool("instance", mesh))
    return dataclasses.replace(pr, cluster=cl, memo={})


def instance_plan(pr: Problem, shape: Shape, split: str):
    """The serving plan one instance of ``shape`` runs (``pr`` being :func:`instance_problem`'s)."""
    c = Candidate(rank=0, pp=shape.pp, dp=shape.dp, cp=1, tp=shape.tp, ep=shape.ep, etp=1, layers=split)
    plan = build_plan(pr, c)
    plan.mesh.dcp = shape.dcp
    plan.serve.dp_attention = shape.dp_attention
    return plan


def cost_instance(pr: Problem, shape: Shape, split: str, prompt: int) -> InstanceCost:
    """The memory, limits and step model of one instance of ``shape`` (``pr`` from
    :func:`instance_problem`)."""
    from parc.cost.engine import limits, memory_fraction
    from parc.cost.serve_step import StepModel

    plan = instance_plan(pr, shape, split)
    est = cm.estimate(plan, pr.profile.gemm_efficiency, cache=False)
    cap = float(est.memory.capacity)
    fits = est.memory.weights <= memory_fraction(plan) * cap
    ic = InstanceCost(shape, plan, est, float(est.memory.weights), cap, int(est.kv_capacity_tokens), fits)
    if fits:
        ic.inst = Instance("instance", plan, est, 1, limits(plan, est.kv_capacity_tokens),
                           StepModel(plan, est, pr.profile.gemm_efficiency))
    return ic


def instance_cost_of(plan, est, efficiency: float | None = None) -> InstanceCost:
    """An instance the spec itself lays out (its mesh, or a pool's instance plan), costed through
    this seam as the search costs its own layouts."""
    from parc.cost.engine import limits, memory_fraction
    from parc.cost.serve_step import StepModel

    m, srv = plan.mesh, plan.serve
    shape = Shape(tp=m.tp, pp=m.pp, dp=m.dp if srv.dp_attention else 1, ep=m.ep, dcp=m.dcp)
    cap = float(est.memory.capacity)
    ic = InstanceCost(shape, plan, est, float(est.memory.weights), cap, int(est.kv_capacity_tokens),
                      est.memory.weights <= memory_fraction(plan) * cap)
    ic.inst = Instance("instance", plan, est, 1, limits(plan, est.kv_capacity_tokens),
                       StepModel(plan, est, efficiency))
    return ic
