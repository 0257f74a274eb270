"""The node's GPU topology against the plan: the hook for clusters whose block describes it.

The cluster block of today says how many GPUs a node has and which model: :mod:`parc.doctor.gpus`
checks both. Where the cluster block gains a description of the links inside a node (NVLink
islands, NUMA affinity, NICs near each GPU: issue #16's ``topology``), this check compares it with
what the node reports (``nvidia-smi topo -m``) and names the GPUs whose links differ; until then
it has nothing to compare and reports nothing. A cluster without that description keeps exactly
the checks of :mod:`parc.doctor.gpus`.
"""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed


def described(plan) -> object | None:
    """The cluster's description of the links inside a node, where the plan has one."""
    return getattr(plan.cluster, "topology", None)


def check(ctx: Context) -> list[Finding | Passed]:
    if described(ctx.plan) is None:
        return []
    return [Passed("topology", "the cluster block describes its topology; parc doctor does not compare it with "
                   "the node yet (parc topo reads this node's)")]
