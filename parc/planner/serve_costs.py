"""What one serving engine instance costs: the seam between ``parc plan --serve`` and the cost model.

The serving search (:mod:`parc.planner.serve_search`) combines engine instances into
deployments: one mesh of ``n`` replicas, or a prefill pool and a decode pool. Everything it
knows about one instance comes from here, and everything here comes from the cost layer:

* memory (weights per GPU, KV bytes per token, tokens of KV cache that fit) is
  :func:`parc.cost.estimate.estimate`'s for the plan the instance runs, on the GPUs a pool
  instance of that size gets (:func:`parc.model.pools.pool_cluster`);
* a decode step at ``b`` sequences of ``context`` tokens is :func:`parc.cost.serving.serve_perf`'s
  (the roofline of each pipeline stage, its all-reduces and all-to-alls);
* a prompt's prefill is :func:`parc.cost.serving.prefill_phases` over its stages one after
  another, and the KV cache a prefill instance hands to a decode instance
  :func:`parc.cost.serving.kv_transfer`'s, as ``parc explain`` reports them for a plan.

How instances combine into a deployment (a mesh's ranks prefilling between decode steps, a
prefill pool keeping its decode pool fed) is the search's (:mod:`parc.planner.serve_search`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

from parc.cost import estimate as cm
from parc.cost.serving import kv_transfer, prefill_phases, serve_perf
from parc.model.plan import Mesh, Pool
from parc.model.pools import pool_cluster
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
        return self.tp * self.pp * self.dp

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
    """An instance of ``shape`` running the problem's model: memory, prefill, decode."""
    shape: Shape
    plan: object                       # the serving Plan one instance runs
    est: object                        # its estimate
    weights: float                     # bytes per GPU (the fullest stage)
    memory_capacity: float
    kv_capacity_tokens: int            # per data-parallel rank
    weights_fit: bool
    prefill: float = 0.0               # seconds to prefill one prompt
    _steps: dict = field(default_factory=dict, repr=False)

    def step(self, batch: int, context: int) -> float:
        """Seconds between two tokens of a sequence (``pp`` decode steps) with ``batch``
        sequences of ``context`` tokens on each data-parallel rank."""
        key = (int(batch), int(context))
        got = self._steps.get(key)
        if got is None:
            got = self._steps[key] = decode_latency(self.plan, self.est, int(batch), int(context))
        return got

    def memory_at(self, batch: int, tokens: int) -> float:
        """Bytes per GPU with ``batch`` sequences of ``tokens`` tokens in the KV cache."""
        return self.weights + batch * tokens * self.est.kv_bytes_per_token


def decode_latency(plan, est, batch: int, context: int) -> float:
    """:func:`serve_perf`'s inter-token latency of ``plan`` at ``batch`` sequences per replica,
    each ``context`` tokens long (its KV read and attention FLOPs are the context's). Only the
    distinct stages are timed: the pipeline advances at the pace of the slowest, and stages
    alike in layers and weights take alike times."""
    srv = dataclasses.replace(plan.serve, max_model_len=context, max_num_seqs=batch)
    distinct = list({_stage_key(st): st for st in est.stages}.values())
    perf = serve_perf(dataclasses.replace(plan, serve=srv),
                      dataclasses.replace(est, stages=distinct, max_concurrent_seqs=batch))
    return perf.latency


def _stage_key(st) -> tuple:
    return (st.layers, st.moe_layers, st.memory.weights, st.kv_bytes_per_token)


def prefill_time(plan, est, prompt: int) -> float:
    """Seconds to prefill one ``prompt``-token request: :func:`parc.cost.serving.prefill_phases`,
    the stages one after another (explain's ``prefill_time``); stages alike in layers and
    weights are timed once."""
    counts, distinct = {}, {}
    for st in est.stages:
        key = _stage_key(st)
        counts[key] = counts.get(key, 0) + 1
        distinct.setdefault(key, st)
    phases = prefill_phases(plan, dataclasses.replace(est, stages=list(distinct.values())), prompt,
                            plan.profile.gemm_efficiency)
    return sum(ph.time * counts[key] for key, ph in zip(distinct, phases))


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
    c = Candidate(rank=0, pp=shape.pp, dp=shape.dp, cp=1, tp=shape.tp, ep=shape.ep, etp=1, layers=split,
                  max_num_seqs=1)
    plan = build_plan(pr, c)
    plan.mesh.dcp = shape.dcp
    plan.serve.dp_attention = shape.dp_attention
    return plan


def cost_instance(pr: Problem, shape: Shape, split: str, prompt: int) -> InstanceCost:
    """The memory and prefill of one instance of ``shape`` (``pr`` from :func:`instance_problem`)."""
    plan = instance_plan(pr, shape, split)
    est = cm.estimate(plan, pr.profile.gemm_efficiency, cache=False)
    cap = float(est.memory.capacity)
    fits = est.memory.weights <= plan.serve.gpu_memory_utilization * cap
    ic = InstanceCost(shape, plan, est, float(est.memory.weights), cap, int(est.kv_capacity_tokens), fits)
    if fits:
        ic.prefill = prefill_time(plan, est, prompt)
    return ic


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
