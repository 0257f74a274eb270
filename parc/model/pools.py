"""The pools of a prefill/decode-disaggregated serving plan, each as the plan one of its
instances runs.

A disaggregated spec (`serve { prefill { ... }  decode { ... } }`) describes two kinds of engine
on one cluster: prefill instances that process prompts and hand their KV cache over
(``serve.kv_transfer``), and decode instances that generate. Every engine instance is an ordinary
serving plan with its pool's mesh, so the checks, the estimate and the launch files of a pool are
those of that plan: :func:`pool_plan` builds it, and every command asks here rather than
re-deriving a pool's layout."""
from __future__ import annotations

import dataclasses
import math

from parc.model.plan import Plan, Pool

_MESH_KEYS = ("pp", "dp", "cp", "tp", "ep", "etp", "dcp")


def pool_cluster(plan: Plan, pool: Pool):
    """The hosts one instance of ``pool`` runs on: whole nodes when it is larger than a node,
    else the part of one node it takes (the rank map and the launchers see exactly those GPUs)."""
    cl = plan.cluster
    gpus = pool.mesh.product
    if gpus >= cl.gpus_per_node:
        return dataclasses.replace(cl, nodes=math.ceil(gpus / cl.gpus_per_node))
    return dataclasses.replace(cl, nodes=1, gpus_per_node=gpus)


def pool_plan(plan: Plan, pool: Pool) -> Plan:
    """The serving plan one instance of ``pool`` runs: the spec with the pool's mesh on the GPUs
    of :func:`pool_cluster`; a diagnostic about its mesh points at the pool's keys."""
    spans = dict(plan.spans)
    head = plan.spans.get(pool.name)
    for key in _MESH_KEYS:
        s = plan.spans.get(f"{pool.name}.{key}", head)
        if s is not None:
            spans[f"mesh.{key}"] = s
    if head is not None:
        spans["mesh"] = head
    return dataclasses.replace(plan, mesh=pool.mesh, cluster=pool_cluster(plan, pool), pools=[], spans=spans)


def pool_plans(plan: Plan) -> list[tuple[Pool, Plan]]:
    """Each pool with the plan of one of its instances, prefill first; empty for one mesh."""
    return [(p, pool_plan(plan, p)) for p in plan.pools]


def pool_nodes(plan: Plan, pool: Pool) -> int:
    """The nodes every instance of ``pool`` together takes (instances smaller than a node share
    nodes, packed)."""
    per = plan.cluster.gpus_per_node
    return math.ceil(pool.gpus / per)
