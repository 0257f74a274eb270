"""The engine layouts ``parc plan --serve --objective`` builds deployments from, each costed once.

An engine instance takes ``g`` GPUs: a divisor of a node's GPUs, or whole nodes (P119: an
instance larger than a node takes a whole number of them). Its layouts are
:func:`parc.planner.space.mesh_shapes` of the problem on those GPUs (the same filters the
training search applies, each mirroring an error rule), narrowed to what a serving engine runs:

* no context parallelism for prefill (cp = 1) and no expert tensor parallelism (etp = 1);
* ``dp > 1`` inside an instance only as data-parallel attention of a mixture-of-experts model:
  one engine of dp · tp GPUs whose expert layers span all of them (``ep = dp · tp``, one
  pipeline stage), as vLLM's ``--data-parallel-size`` with ``--enable-expert-parallel`` and
  SGLang's ``--enable-dp-attention`` form it; replicas of a whole engine are instances instead;
* without it, a mixture-of-experts engine spreads its experts over its tp group (``ep = tp``)
  or shards each expert over it (``ep = 1``);
* decode context parallelism ``dcp`` is 1 or tp / kv_heads (tp under multi-head latent
  attention): the degree at which no two GPUs of the tp group hold a copy of the same KV
  heads, which is as far as it is useful (vLLM 0.32 ``vllm/config/parallel.py``); the degrees
  between trade the same memory against the same extra collectives, less of both; a dcp layout
  whose KV cache holds no more tokens than the same layout without it is dropped;
* instance sizes whose GPUs cannot hold the model's weights even split with no copy at all
  (parameters · bytes / g above ``gpu_memory_utilization`` of a GPU) are not costed.
"""
from __future__ import annotations

import dataclasses

from parc.model.dims import divisors
from parc.planner.inputs import Problem
from parc.planner.plans import stage_split
from parc.planner.serve_costs import InstanceCost, Shape, cost_instance, instance_problem
from parc.planner.space import SPLITS, _split_mode, mesh_shapes


def instance_sizes(pr: Problem) -> list[int]:
    """GPUs an engine instance may take on the problem's cluster."""
    cl = pr.cluster
    small = [g for g in divisors(cl.gpus_per_node) if g <= cl.world]
    return small + [k * cl.gpus_per_node for k in range(2, cl.nodes + 1)]


def dcp_options(pr: Problem, tp: int) -> list[int]:
    """Decode context parallel degrees for a tp group (a spec's `dcp`, when it gives one)."""
    m = pr.model
    kv = 1 if m.is_mla else max(1, m.kv_heads)
    opts = sorted({1, max(1, tp // kv)})
    if "mesh.dcp" in pr.fixed:
        opts = [d for d in opts if d == pr.fixed["mesh.dcp"]]
    return opts


def shapes_of(pr: Problem, gpus: int) -> list[tuple[Shape, str]]:
    """Every serving layout of one ``gpus``-GPU instance, with its layer split."""
    sub = instance_problem(pr, gpus)
    moe = pr.model.is_moe
    out = []
    for pp, dp, cp, tp, ep, etp in mesh_shapes(sub):
        if cp > 1 or etp > 1:
            continue
        if dp > 1 and not (moe and pp == 1 and ep == dp * tp):
            continue
        if dp == 1 and ep not in (1, tp):
            continue
        split = _split_mode(sub, pp)
        if split is None or (pp > 1 and stage_split(sub, SPLITS[split], pp) is None and split != 1):
            continue
        for dcp in dcp_options(pr, tp):
            out.append((Shape(tp=tp, pp=pp, dp=dp, ep=ep, dcp=dcp), SPLITS[split]))
    return out


def instance_costs(pr: Problem, goal) -> tuple[list[InstanceCost], int]:
    """Every layout of every instance size, costed (memory, prefill of ``goal``'s prompt), and
    how many layouts were not costed because their instance size cannot hold the weights."""
    from parc.cost.engine import memory_fraction
    from parc.cost.params import model_weight_bytes

    weights = model_weight_bytes(pr.model)
    room = memory_fraction(pr) * pr.cluster.gpu.memory   # SGLang's: its largest, at tp = pp = 1
    out, small = [], 0
    for g in instance_sizes(pr):
        if weights / g > room:
            small += len(shapes_of(pr, g))
            continue
        sub = instance_problem(pr, g)
        plain = {}
        for shape, split in shapes_of(pr, g):
            ic = cost_instance(sub, shape, split, goal.prompt_tokens)
            twin = plain.get(dataclasses.replace(shape, dcp=1))
            if twin is not None and ic.kv_capacity_tokens <= twin.kv_capacity_tokens:
                continue                     # dcp buys no KV room here: the same engine with more collectives
            plain[shape] = ic
            out.append(ic)
    return out, small
