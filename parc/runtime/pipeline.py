"""Pipeline stages from the plan's layer split, and the named schedule from
``torch.distributed.pipelining``, with every executed compute action recorded."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from parc.model import schedules
from parc.model.plan import Plan
from parc.model.schedules import Action


@dataclass
class Layout:
    """Which virtual stages and layers this pipeline rank holds."""

    n_stages: int
    stage_ids: list[int]                 # this rank's virtual stages, ascending
    layers: dict[int, list[int]]         # stage -> global layer indices
    owner: dict[int, int]                # stage -> pipeline rank

    @property
    def first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def last(self) -> bool:
        return self.n_stages - 1 in self.stage_ids


def layout(plan: Plan, pp_rank: int) -> Layout:
    pp, s = plan.mesh.pp, plan.schedule
    L = plan.model.layers
    if plan.mode == "serve" and pp > 1:     # forward-only: one stage per rank
        split = plan.placement.layers if plan.placement.layers and len(plan.placement.layers) == pp else None
        if split is None:
            split = [L // pp + (1 if i < L % pp else 0) for i in range(pp)]
        starts = [sum(split[:i]) for i in range(pp)]
        return Layout(pp, [pp_rank], {i: list(range(starts[i], starts[i] + split[i])) for i in range(pp)},
                      {i: i for i in range(pp)})
    if pp == 1:
        return Layout(1, [0], {0: list(range(L))}, {0: 0})
    per = schedules.stages_per_rank(s.pipeline, s.virtual_stages)
    n = pp * per
    split = plan.placement.layers
    if not split or len(split) != n or sum(split) != L or min(split) < 1:
        raise ValueError(
            f"the layer split {split} does not give each of the {n} pipeline stages "
            f"({pp} ranks × {per} per rank for {s.pipeline}) at least one of the {L} layers")
    starts = [sum(split[:i]) for i in range(n)]
    layers = {i: list(range(starts[i], starts[i] + split[i])) for i in range(n)}
    ranks = schedules.rank_stages(s.pipeline, pp, s.virtual_stages)
    owner = {st: r for r, sts in enumerate(ranks) for st in sts}
    return Layout(n, ranks[pp_rank], layers, owner)


def record(stage, log: list) -> None:
    """Wrap a PipelineStage's compute entry points to log the actions they run."""
    idx = stage.stage_index
    f, b, w = stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk

    def fwd(mb, *a, **k):
        log.append(Action("F", int(mb), idx))
        return f(mb, *a, **k)

    def bwd(mb, *a, **k):
        log.append(Action("B", int(mb), idx, split=not k.get("full_backward", True)))
        return b(mb, *a, **k)

    def wgt(mb, *a, **k):
        log.append(Action("W", int(mb), idx))
        return w(mb, *a, **k)

    stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk = fwd, bwd, wgt


def build_schedule(plan: Plan, modules: dict[int, torch.nn.Module], lay: Layout, group, device,
                   loss_fn, log: list):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import get_schedule_class

    s = plan.schedule
    stages = []
    for idx in lay.stage_ids:
        st = PipelineStage(modules[idx], idx, lay.n_stages, device, group=group)
        record(st, log)
        stages.append(st)
    if plan.mode == "serve":        # forward passes only: microbatches flow through the stages
        from torch.distributed.pipelining.schedules import _ScheduleForwardOnly

        return _ScheduleForwardOnly(stages[0], n_microbatches=s.microbatches)
    cls = get_schedule_class(schedules.torch_schedule_name(s.pipeline, s.virtual_stages))
    arg = stages if schedules.is_multi_stage(s.pipeline) else stages[0]
    # Each microbatch's loss is divided by the microbatch count here rather than by torch's
    # scale_grads, which scales every stage's gradients once per stage: a weight shared by two
    # stages of one rank (tied embeddings under V placement) would be scaled twice.
    m = s.microbatches

    def scaled(out, target):
        return loss_fn(out, target) / m

    return cls(arg, n_microbatches=m, loss_fn=scaled, scale_grads=False)
