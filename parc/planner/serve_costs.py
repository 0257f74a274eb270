"""What one serving engine instance costs: the seam between ``parc plan --serve`` and the cost model.

The serving search (:mod:`parc.planner.serve_search`) combines engine instances into
deployments: one mesh of ``n`` replicas, or a prefill pool and a decode pool. Everything it
knows about one instance comes from here, and everything here comes from the cost layer:

* memory (weights per GPU, KV bytes per token, tokens of KV cache that fit) is
  :func:`parc.cost.estimate.estimate`'s for the plan the instance runs, on the GPUs a pool
  instance of that size gets (:func:`parc.model.pools.pool_cluster`);
* a decode step at ``b`` sequences of ``context`` tokens is :func:`parc.cost.serving.serve_perf`'s
  (the roofline of each pipeline stage, its all-reduces and all-to-alls);
* a prompt's prefill is the same kernels over the ``prompt`` tokens of one request: FLOPs of
  :func:`parc.cost.serving.decode_flops_per_token` at the mean causal context ``prompt / 2``,
  the stage's weights read once (:func:`parc.cost.serving.stage_step_time`'s roofline), the
  per-token collectives of :func:`parc.cost.serving.decode_comm_bytes` for every prompt token;
  the stages run one after another (a single prompt does not fill a pipeline);
* the KV cache a prefill instance hands to a decode instance is
  :func:`parc.cost.memory.model_kv_bytes_per_token` of the whole model per prompt token, sent
  over the inter-node link.

When the cost layer gains its own prefill and time-to-first-token kernels, this module calls
them in place of :func:`prefill_time`'s composition; nothing else in the planner prices a plan.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

from parc.cost import estimate as cm
from parc.cost.comm import axis_time, link_params, serving_calls
from parc.cost.memory import model_kv_bytes_per_token
from parc.cost.params import dtype_bytes
from parc.cost.serving import decode_comm_bytes, decode_flops_per_token, serve_perf, stage_step_time
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
    """Seconds to prefill one ``prompt``-token request: each stage's roofline over the prompt
    (weights read once, the KV written, the FLOPs at the mean causal context) plus its
    collectives for every prompt token, the stages one after another."""
    m, mesh, cl = plan.model, plan.mesh, plan.cluster
    lp = link_params(plan.profile, est.link_bandwidth, est.link_kind)
    sizes = {"tp": mesh.tp, "ep": mesh.ep, "pp": mesh.pp}
    total, seen = 0.0, {}
    for st in est.stages:
        key = _stage_key(st)
        if key in seen:                      # stages alike in layers and weights take alike times
            total += seen[key]
            continue
        nbytes = decode_comm_bytes(m, st.layers, st.moe_layers, mesh.tp, mesh.ep, mesh.pp, dtype_bytes(m.dtype),
                                   prompt)
        calls = serving_calls(st.layers, st.moe_layers)
        comm = sum(float(axis_time(ax, nbytes[ax], sizes[ax], calls[ax], est.comm_local[ax], lp["intra_node"],
                                   lp.get("inter_node"), cl.gpu.nvls)[0])
                   for ax in sizes if est.comm_link.get(ax) is not None)
        flops = prompt * decode_flops_per_token(m, st.layers, st.moe_layers, mesh.tp, mesh.etp, prompt // 2)
        seen[key] = stage_step_time(st.memory.weights, prompt * st.kv_bytes_per_token, flops, comm,
                                    cl.gpu.hbm_bandwidth, cl.gpu.flops, plan.profile.gemm_efficiency,
                                    plan.profile.hbm_efficiency)
        total += seen[key]
    return total


def kv_transfer_bytes(pr: Problem, prompt: int) -> int:
    """Bytes of KV cache one prefilled request hands to its decode instance: the whole model's
    cache for the prompt's tokens."""
    srv = pr.serve
    nbytes = dtype_bytes(srv.kv_cache_dtype if srv.kv_cache_dtype != "auto" else pr.model.dtype)
    return prompt * model_kv_bytes_per_token(pr.model, pr.model.layers, nbytes)


def kv_transfer_time(pr: Problem, prompt: int) -> float:
    """Seconds to send :func:`kv_transfer_bytes` over the inter-node link (the intra-node one
    when the cluster names none) at the profile's efficiency."""
    cl, prof = pr.cluster, pr.profile
    link, eff = (cl.inter_node, prof.inter_node_efficiency) if cl.inter_node else \
        (cl.intra_node, prof.intra_node_efficiency)
    bw = (link.bandwidth if link else 0.0) * eff
    return kv_transfer_bytes(pr, prompt) / bw if bw > 0 else 0.0


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
