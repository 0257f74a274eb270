"""Shrink a plan for a rehearsal: a tiny model that keeps every divisibility of the plan.

The mesh, the schedule and the layer split's shape stay exactly as planned; widths, depth,
vocabulary, sequence and batch shrink to the smallest sizes that keep what the parallel axes
rely on: heads and kv_heads divisible by tp (and the GQA grouping), ffn and vocab divisible by
tp, every (virtual) stage holding at least one layer (an uneven split stays uneven), experts
divisible by ep with MoE layers still present, moe_ffn_hidden divisible by etp and tp, the
sequence divisible by 2·cp and tp, the batch divisible by dp and the microbatch count valid for
the schedule. No torch here.
"""
from __future__ import annotations

import copy
from math import gcd

from parc.model import schedules
from parc.model.dims import ParallelDims
from parc.model.plan import Plan


def _lcm(*xs: int) -> int:
    out = 1
    for x in xs:
        out = out * x // gcd(out, x)
    return out


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def rehearsal_microbatches(pipeline: str, pp: int, planned: int | None, virtual_stages: int = 1) -> int:
    """The smallest microbatch count that still exercises the schedule (and torch accepts)."""
    if pp <= 1:
        return min(planned or 1, 2)
    per = schedules.stages_per_rank(pipeline, virtual_stages)
    if planned and planned <= 2 * pp * per and schedules.check(pipeline, pp, planned, virtual_stages) is None:
        return planned
    for m in range(pp, 8 * pp * per + 1):
        if schedules.check(pipeline, pp, m, virtual_stages) is None and (per == 1 or m % pp == 0):
            return m
    return planned or pp      # no count runs it (dualpipe on an odd pp): the runtime's check says why


def shrink_split(layers: list[int]) -> list[int]:
    """One layer per stage, two on the stages that held more than the lightest."""
    low = min(layers)
    return [1 + (n > low) for n in layers]


def rehearse(plan: Plan, seq_len: int | None = None) -> Plan:
    """A copy of ``plan`` with a rehearsal-sized model, sequence and batch (fp32)."""
    p = copy.deepcopy(plan)
    m, mesh, s = p.model, p.mesh, p.schedule
    tp, cp, ep, etp = mesh.tp, mesh.cp, mesh.ep, mesh.etp

    # kv_heads: gcd(kv, 8) lifted to a multiple of tp, so plans that differ only in their tp
    # degree (up to 8) rehearse the same shapes and can load each other's checkpoints
    kv = _lcm(gcd(m.kv_heads, 8), tp) if m.kv_heads % tp == 0 else m.kv_heads
    group = 2 if m.heads > m.kv_heads else 1
    heads = kv * group
    head_dim = 8
    hidden = heads * head_dim
    m.kv_heads, m.heads, m.head_dim, m.hidden = kv, heads, None, hidden
    m.ffn_hidden = _round_up(2 * hidden, tp)
    m.vocab = _round_up(96, tp) if plan.model.vocab % tp == 0 else _round_up(96, tp) + 1

    stages = mesh.pp * schedules.stages_per_rank(s.pipeline, s.virtual_stages) if mesh.pp > 1 else 1
    split = p.placement.layers if p.placement.layers and len(p.placement.layers) == stages else [1] * stages
    new_split = shrink_split(split) if mesh.pp > 1 else [min(plan.model.layers, 2)]
    if m.is_moe:
        m.moe_every = 1 if m.moe_every == 1 else 2
        m.experts = _lcm(gcd(m.experts, 8), ep)
        m.top_k = max(1, min(m.top_k, m.experts))
        m.moe_ffn_hidden = _round_up(16, _lcm(etp, tp))
        m.shared_experts = min(m.shared_experts, 1)
        # keep at least one MoE layer: with moe_every = 2 the model needs two layers
        if sum(new_split) < m.moe_every:
            new_split[-1] += m.moe_every - sum(new_split)
    m.layers = sum(new_split)
    if mesh.pp > 1:
        p.placement.layers = new_split
        p.placement.layers_mode = "explicit" if len(set(new_split)) > 1 else p.placement.layers_mode
    else:
        p.placement.layers = [m.layers] * 1

    step = _lcm(2 * cp, tp, 4)
    m.seq_len = seq_len or _round_up(16, step)
    m.dtype = "fp32"
    m.params = _param_count(m)
    m.preset = None

    s.micro_batch = 1
    s.microbatches = rehearsal_microbatches(s.pipeline, mesh.pp, s.microbatches, s.virtual_stages)
    s.global_batch = ParallelDims(dp=mesh.dp, micro_batch=s.micro_batch).global_batch_for(s.microbatches)
    if p.train is not None:
        p.train.precision = "fp32"
    return p


def _param_count(m) -> int:
    from parc.model.params import param_count

    return param_count(m)
