"""Kubernetes' structural-schema pruning as a JSON Schema: what the API server does with a field
a custom resource's schema does not list. Shared by the PyTorchJob schema test and the
LeaderWorkerSet judge (which imports it from its own environment: no pytest here)."""
from __future__ import annotations


def strict(node):
    """The schema with ``additionalProperties: false`` on every object that lists its
    properties and neither admits other keys (``additionalProperties``) nor keeps unknown
    fields (``x-kubernetes-preserve-unknown-fields``): Kubernetes' structural-schema pruning."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out
