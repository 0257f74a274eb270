"""P3xx: where the mesh's groups land on nodes and links."""
from __future__ import annotations

from . import rule


def _inner(plan, axis):
    """Consecutive-rank stride of ``axis`` under the mesh order (innermost axis has stride 1)."""
    stride = 1
    for ax in reversed(plan.mesh.order):
        if ax == axis:
            return stride
        stride *= plan.mesh.size(ax)
    return stride


@rule("P301", "group-crosses-node")
def group_crosses_node(plan, c):
    g = plan.cluster.gpus_per_node
    for axis in ("tp", "cp"):
        size = plan.mesh.size(axis)
        if size <= 1:
            continue
        span_ranks = _inner(plan, axis) * size
        if span_ranks <= g and g % span_ranks == 0:
            continue
        pinned = plan.placement.links.get(axis) == "intra_node"
        if axis == "cp" and not pinned:
            continue
        c.report(c.at(f"placement.{axis}" if pinned else f"mesh.{axis}", f"mesh.{axis}"),
                 f"each {axis.upper()} group spans {span_ranks} consecutive ranks but a node holds "
                 f"{g} GPUs: {axis} = {size} crosses the node boundary"
                 + (", though the placement pins it to intra_node" if pinned else ""),
                 help=f"keep {axis} at most {g} and a divisor of it, or use nodes with more GPUs")
