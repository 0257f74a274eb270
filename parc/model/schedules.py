"""The pipeline schedule model: which compute action each pipeline rank runs, in what order.

Pure Python (no torch). For every schedule the language names, :func:`actions` gives the
per-rank action order that ``torch.distributed.pipelining`` executes (torch 2.13):

=================== =========================================== =========== ==================
``pipeline``        torch class                                 placement   stages per rank
=================== =========================================== =========== ==================
``gpipe``           ``ScheduleGPipe``                           one stage   1
``1f1b``            ``Schedule1F1B``                            one stage   1
``interleaved_1f1b````ScheduleInterleaved1F1B``                 loop        ``virtual_stages``
``zero_bubble``     ``ScheduleZBVZeroBubble`` (virtual_stages=2) V           2
``zero_bubble``     ``ScheduleInterleavedZeroBubble`` (others)  loop        ``virtual_stages``
``dualpipe_v``      ``ScheduleDualPipeV``                       V           2
``dualpipe``        none (deepseek-ai/DualPipe's ``DualPipe``)  dual        2 (of pp stages)
=================== =========================================== =========== ==================

Loop placement gives rank ``r`` the virtual stages ``r, r+pp, r+2pp, …``; V placement gives
it ``r`` and ``2pp-1-r``, so the first and the last stage share rank 0. DualPipe (DeepSeek-V3,
arXiv:2412.19437 §3.2.1) cuts the model into pp stages only and runs two copies of the
pipeline in opposite directions: rank ``r`` holds stage ``r`` for the microbatches fed at rank 0
and stage ``pp-1-r`` for those fed at rank pp−1 ("dual" placement), so every rank holds the
parameters of two stages and ranks 0 and pp−1 both hold the embedding and the output head.
Each microbatch passes one of a rank's two stages (:func:`microbatch_share` is 1/2).

:func:`timeline` places each action on a clock under unit costs (F = 1, a full B = 2, or
B = 1 and W = 1 when the backward is split into its input and weight parts), starting every
action as soon as its rank is free and its inputs exist, so idle time shows as gaps;
:func:`bubble` is the idle share of a step (``pp × makespan``), from a closed form where one is
exact and from the timeline otherwise; :func:`inflight` the microbatches each rank holds at its
peak. ``parc check`` (P209), ``parc explain``, ``parc draw`` and the planner all read these.
The orders themselves are written out in :mod:`parc.model.orders`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from parc.model.fields import PIPELINES
from parc.model.orders import dualpipe, dualpipe_v, interleaved, one_f_one_b, zbv


@dataclass(frozen=True, slots=True)
class Action:
    """One compute action of a pipeline rank.

    ``kind`` is ``"F"`` (forward), ``"B"`` (backward: the full backward, or only the
    input-gradient part when ``split`` is true and a later ``"W"`` computes the weight
    gradients) or ``"W"`` (weight-gradient step). ``stage`` is the virtual stage index
    (0 … pp·stages_per_rank − 1), ``microbatch`` the microbatch index.
    """

    kind: str
    microbatch: int
    stage: int
    split: bool = False

    def __str__(self) -> str:          # torch's notation: stage, kind, microbatch ("1F0")
        return f"{self.stage}{'I' if self.split else self.kind}{self.microbatch}"


@dataclass(frozen=True, slots=True)
class Slot:
    """An action placed on the clock of its rank."""

    action: Action
    rank: int
    start: float
    end: float


def torch_schedule_name(pipeline: str, virtual_stages: int = 1) -> str:
    """The name ``torch.distributed.pipelining.schedules.get_schedule_class`` knows."""
    _check_name(pipeline)
    if pipeline == "zero_bubble":
        return "ZBVZeroBubble" if virtual_stages == 2 else "InterleavedZeroBubble"
    return {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved_1f1b": "Interleaved1F1B",
            "dualpipe_v": "DualPipeV", "dualpipe": "DualPipe"}[pipeline]


def in_torch(pipeline: str) -> bool:
    """Whether torch.distributed.pipelining (torch 2.13) has a schedule class for ``pipeline``
    (the torch family's table in parc/targets/families.toml): every one but ``dualpipe``, which
    only deepseek-ai/DualPipe implements."""
    from parc.model.targets import pipelines

    _check_name(pipeline)
    return pipeline in pipelines("torch")


def placement_style(pipeline: str, virtual_stages: int = 1) -> str:
    """``"v"`` for the V-shaped schedules, ``"dual"`` for DualPipe (rank r holds stages r and
    pp−1−r of a pp-stage model), else ``"loop"``."""
    name = torch_schedule_name(pipeline, virtual_stages)
    return "dual" if name == "DualPipe" else "v" if name in ("ZBVZeroBubble", "DualPipeV") else "loop"


def microbatch_share(pipeline: str) -> float:
    """The share of the layers a rank holds that each microbatch runs through: 1/2 for DualPipe
    (each microbatch passes one of the rank's two stages, one per direction), else 1. A rank's
    FLOPs and per-layer communication per microbatch scale by it; its parameters do not."""
    _check_name(pipeline)
    return 0.5 if pipeline == "dualpipe" else 1.0


def microbatch_share_array(pipeline):
    """:func:`microbatch_share` over a numpy array of :data:`PIPELINES` indices."""
    import numpy as np

    return np.where(np.asarray(pipeline) == PIPELINES.index("dualpipe"), 0.5, 1.0)


def is_multi_stage(pipeline: str) -> bool:
    """Whether the torch schedule takes a list of stages per rank (a ``PipelineScheduleMulti``)."""
    _check_name(pipeline)
    return pipeline not in ("gpipe", "1f1b")


def stages_per_rank(pipeline: str, virtual_stages: int = 1) -> int:
    """How many model chunks (virtual stages) each pipeline rank holds."""
    _check_name(pipeline)
    if pipeline in ("gpipe", "1f1b"):
        return 1
    if pipeline in ("dualpipe_v", "dualpipe"):
        return 2
    return max(1, virtual_stages)


def model_stages(pipeline: str, pp: int, virtual_stages: int = 1) -> int:
    """How many stages the model is cut into: pp · stages per rank, or pp for DualPipe (whose two
    stages per rank are two copies of the same pp-stage cut)."""
    return pp if pipeline == "dualpipe" else pp * stages_per_rank(pipeline, virtual_stages)


def rank_stages(pipeline: str, pp: int, virtual_stages: int = 1) -> list[list[int]]:
    """The virtual stage indices each pipeline rank holds, ascending."""
    v = stages_per_rank(pipeline, virtual_stages)
    style = placement_style(pipeline, virtual_stages)
    if style == "dual":
        return [sorted({r, pp - 1 - r}) for r in range(pp)]
    if style == "v":
        return [sorted((r, 2 * pp - 1 - r)) for r in range(pp)]
    return [[r + k * pp for k in range(v)] for r in range(pp)]


def stage_rank(pipeline: str, pp: int, virtual_stages: int = 1) -> dict[int, int]:
    """Virtual stage index -> pipeline rank (for DualPipe, the rank of the first direction)."""
    if pipeline == "dualpipe":
        return {s: s for s in range(pp)}
    return {s: r for r, ss in enumerate(rank_stages(pipeline, pp, virtual_stages)) for s in ss}


def check(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1) -> Optional[str]:
    """Why torch would refuse this schedule, or ``None`` when it runs."""
    _check_name(pipeline)
    if pp < 1 or microbatches < 1:
        return "pp and the microbatch count must be at least 1"
    name = torch_schedule_name(pipeline, virtual_stages)
    v = stages_per_rank(pipeline, virtual_stages)
    if name == "1F1B" and microbatches < pp:
        return f"1f1b needs at least pp = {pp} microbatches, got {microbatches}"
    if name in ("Interleaved1F1B", "InterleavedZeroBubble"):
        rounds = max(1, microbatches // pp)
        if microbatches % rounds:
            return (f"{pipeline} runs microbatches in {rounds} rounds of pp = {pp}: "
                    f"{microbatches} is not a multiple of {rounds}")
    if name == "DualPipeV" and microbatches < pp * v:
        return f"dualpipe_v needs at least 2·pp = {pp * v} microbatches, got {microbatches}"
    if name == "DualPipe":
        return dualpipe_check(pp, microbatches)
    return None


def dualpipe_check(pp: int, microbatches: int) -> Optional[str]:
    """Why DualPipe.step refuses pp ranks and this many microbatches ("chunks"), or ``None``. It
    asserts ``num_ranks % 2 == 0`` and ``num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >=
    num_ranks * 2`` (deepseek-ai/DualPipe dualpipe/dualpipe.py): half the microbatches enter at each
    end of the pipeline."""
    if pp % 2:
        return f"dualpipe needs an even number of pipeline ranks, got pp = {pp}"
    if microbatches % 2 or microbatches < 2 * pp:
        return f"dualpipe needs an even number of microbatches, at least 2·pp = {2 * pp}, got {microbatches}"
    return None


def actions(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1) -> list[list[Action]]:
    """Each pipeline rank's compute actions in execution order (torch 2.13's order)."""
    why = check(pipeline, pp, microbatches, virtual_stages)
    if why:
        raise ValueError(why)
    name = torch_schedule_name(pipeline, virtual_stages)
    v = stages_per_rank(pipeline, virtual_stages)
    n = microbatches
    if name == "GPipe":
        raw = [[("F", m, r) for m in range(n)] + [("B", m, r) for m in range(n)] for r in range(pp)]
    elif name == "1F1B":
        raw = [one_f_one_b(r, pp, n) for r in range(pp)]
    elif name == "Interleaved1F1B":
        raw = [interleaved(r, pp, n, v, zero_bubble=False) for r in range(pp)]
    elif name == "InterleavedZeroBubble":
        raw = [interleaved(r, pp, n, v, zero_bubble=True) for r in range(pp)]
    elif name == "ZBVZeroBubble":
        raw = [zbv(r, pp, n) for r in range(pp)]
    elif name == "DualPipeV":
        raw = [dualpipe_v(r, pp, n) for r in range(pp)]
    else:
        raw = [dualpipe(r, pp, n) for r in range(pp)]
    return [[Action("B", m, s, split=True) if k == "I" else Action(k, m, s) for k, m, s in ops]
            for ops in raw]


def timeline(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1,
             costs: Optional[dict[str, float]] = None) -> list[list[Slot]]:
    """Every action with a start and end time, per rank, under unit costs.

    ``costs`` maps ``"F"``, ``"B"`` (a full backward), ``"I"`` (the input part of a split
    backward) and ``"W"`` to durations; the defaults are 1, 2, 1, 1. Communication is free.
    An action starts when its rank is free and its input exists: F(s, m) after F(s−1, m);
    B(s, m) after B(s+1, m) (the last stage: after its own F); W(s, m) after B(s, m).
    """
    cost = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, **(costs or {})}
    order = actions(pipeline, pp, microbatches, virtual_stages)
    last = model_stages(pipeline, pp, virtual_stages) - 1
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * pp
    pos = [0] * pp
    out: list[list[Slot]] = [[] for _ in range(pp)]

    def ready(a: Action) -> Optional[float]:
        if a.kind == "F":
            deps = [("F", a.microbatch, a.stage - 1)] if a.stage > 0 else []
        elif a.kind == "B":
            deps = [("F", a.microbatch, a.stage)]
            if a.stage < last:
                deps.append(("B", a.microbatch, a.stage + 1))
        else:
            deps = [("B", a.microbatch, a.stage)]
        if any(d not in done for d in deps):
            return None
        return max((done[d] for d in deps), default=0.0)

    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for r in range(pp):
            while pos[r] < len(order[r]):
                a = order[r][pos[r]]
                t = ready(a)
                if t is None:
                    break
                start = max(free[r], t)
                end = start + cost["I" if a.split else a.kind]
                out[r].append(Slot(a, r, start, end))
                done[(a.kind, a.microbatch, a.stage)] = end
                free[r] = end
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: str(order[r][pos[r]]) for r in range(pp) if pos[r] < len(order[r])}
            raise RuntimeError(f"schedule {pipeline} deadlocks at {stuck}")
    return out


def makespan(slots: list[list[Slot]]) -> float:
    return max((s.end for rank in slots for s in rank), default=0.0)


def bubble_fraction(slots: list[list[Slot]]) -> float:
    """Idle time over total time (ranks × makespan) of a drawn :func:`timeline`. The idle share
    of a plan is :func:`bubble`; this measures a picture."""
    total = makespan(slots) * len(slots)
    if total <= 0:
        return 0.0
    busy = sum(s.end - s.start for rank in slots for s in rank)
    return (total - busy) / total


# -- the facts every command reads: idle share, warm-up depth, microbatches in flight ----------
#
# Under unit costs every rank computes 3·V time units per microbatch (V chunks, F = 1 and a
# backward of 2; DualPipe's microbatches pass one of a rank's two stages, V = 1), so a step lasts 3·V·m + I where I is the idle time of a rank (every rank idles
# the same I: each one is busy 3·V·m and they all end at the makespan). The bubble is I over the
# step. I has a closed form where it is exact (tests/test_schedules.py compares it with the
# simulated timeline over a grid of pp, m and v); elsewhere the timeline itself is run, cached.

def idle_units(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1) -> int:
    """Idle time units of one rank over a step under unit costs: the makespan less 3·V·m.

    * gpipe, 1f1b: 3(pp−1) (Huang et al. 2019; Narayanan et al. 2021 §2.2).
    * interleaved_1f1b: 3(pp−1) + 3(V−1)·max(0, pp−m): with fewer microbatches than ranks the
      later chunks of a round wait for the pipeline to fill.
    * zero_bubble with two chunks per rank (ZBV): max(pp−1, 2(2pp−1−m)).
    * zero_bubble with other chunk counts V: pp−1 + V·max(0, pp−m) + (V−1)·max(0, pp−2m).
    * dualpipe_v: pp−1 (it needs m ≥ 2pp).
    * dualpipe: pp/2 − 1 (it needs an even pp and an even m ≥ 2pp). DeepSeek's table gives the
      bubble as (PP/2 − 1)(F&B + B − 3W), which under these costs (F&B = F + B = 3, B = 2,
      W = 1) is 2(pp/2 − 1): its cells stand for overlapped pairs and their communication, which
      this timeline takes as free; the order itself, run under unit costs, idles pp/2 − 1.

    Each form is checked against :func:`timeline` for pp ≤ 8, m ≤ 24 and V ≤ 4, and for pp ≤ 5,
    m ≤ 12 and V ≤ 8; beyond V = 8 (more than the planner tries) the timeline is run instead.
    """
    _check_name(pipeline)
    p, m = pp, microbatches
    if p <= 1 or m <= 0:
        return 0
    v = stages_per_rank(pipeline, virtual_stages)
    if pipeline in ("gpipe", "1f1b"):
        return 3 * (p - 1)
    if pipeline == "dualpipe_v":
        return p - 1
    if pipeline == "dualpipe":
        return max(0, p // 2 - 1)
    if v > 8:
        return _simulated_idle(pipeline, p, m, virtual_stages)
    if pipeline == "interleaved_1f1b":
        return 3 * (p - 1) + 3 * (v - 1) * max(0, p - m)
    if v == 2:
        return max(p - 1, 2 * (2 * p - 1 - m))
    return p - 1 + v * max(0, p - m) + (v - 1) * max(0, p - 2 * m)


@lru_cache(maxsize=4096)
def _simulated_idle(pipeline: str, pp: int, microbatches: int, virtual_stages: int) -> int:
    v = stage_passes(pipeline, virtual_stages)
    return int(round(makespan(timeline(pipeline, pp, microbatches, virtual_stages)))) - 3 * v * microbatches


def stage_passes(pipeline: str, virtual_stages: int) -> int:
    """Stages a microbatch passes on each rank: the stages per rank, 1 for DualPipe."""
    return 1 if pipeline == "dualpipe" else stages_per_rank(pipeline, virtual_stages)


def bubble(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """The pipeline's idle share of a training step: I / (3·V·m + I) with I from
    :func:`idle_units`. GPipe's definition (idle over the whole step); Megatron-LM reports the
    bubble over ideal time instead, (pp−1)/m for 1F1B. 0 without a pipeline."""
    idle = idle_units(pipeline, pp, microbatches, virtual_stages)
    if idle <= 0:
        return 0.0
    busy = 3 * stage_passes(pipeline, virtual_stages) * microbatches
    return idle / (busy + idle)


def bubble_formula(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1) -> str:
    """How :func:`bubble` comes about, for messages (``(pp−1)/(m+pp−1) = 3/5``)."""
    p, m = pp, microbatches
    v = stage_passes(pipeline, virtual_stages)
    idle = idle_units(pipeline, p, m, virtual_stages)
    if pipeline in ("gpipe", "1f1b"):
        return f"(pp−1)/(m+pp−1) = {p - 1}/{m + p - 1}"
    if pipeline == "interleaved_1f1b" and m >= p:
        return f"(pp−1)/(v·m+pp−1) = {p - 1}/{v * m + p - 1}"
    if pipeline == "dualpipe":
        return f"(pp/2−1)/(3m+pp/2−1) = {idle}/{3 * m + idle} (DualPipe's order under F = 1, B = 2, B = W = 1 when split)"
    return (f"each rank idles {idle} of {3 * v * m + idle} time units in torch's "
            f"{torch_schedule_name(pipeline, virtual_stages)} order (F = 1, B = 2 or B = W = 1 when split)")


def _pipe_keys(pipeline, pp, microbatches, virtual_stages):
    import numpy as np

    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (pipeline, pp, microbatches,
                                                                          virtual_stages)))
    pipe, p, m, v = arrays
    key = ((pipe * (1 << 16) + p) * (1 << 24) + m) * (1 << 8) + v
    return np.unique(key.ravel(), return_inverse=True), key.shape


def _over_arrays(fn, pipeline, pp, microbatches, virtual_stages):
    """``fn(name, pp, m, v)`` for every element, evaluated once per distinct (pipeline, pp, m, v)."""
    import numpy as np

    (uniq, inv), shape = _pipe_keys(pipeline, pp, microbatches, virtual_stages)
    vals = np.array([fn(PIPELINES[int(k >> 48)], int((k >> 32) & 0xFFFF), int((k >> 8) & 0xFFFFFF),
                        int(k & 0xFF)) for k in uniq], dtype=np.float64)
    return vals[inv].reshape(shape)


def bubble_array(pipeline, pp, microbatches, virtual_stages):
    """:func:`bubble` over numpy arrays (``pipeline`` indexes :data:`PIPELINES`); each distinct
    (pipeline, pp, m, v) is evaluated once."""
    return _over_arrays(bubble, pipeline, pp, microbatches, virtual_stages)


def warmup(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1, rank: int = 0) -> int:
    """Forward passes (of single chunks) ``rank`` runs before its first backward, in torch's order."""
    order = _actions_cached(pipeline, pp, microbatches, virtual_stages)[rank]
    return next((i for i, a in enumerate(order) if a.kind != "F"), len(order))


@lru_cache(maxsize=256)
def _actions_cached(pipeline: str, pp: int, microbatches: int, virtual_stages: int):
    return tuple(tuple(r) for r in actions(pipeline, pp, microbatches, virtual_stages))


def inflight(pipeline: str, p: int, m: int, v: int = 1, stage: int = 0) -> float:
    """Microbatches whose activations pipeline rank ``stage`` holds at its peak, in units of all
    the layers that rank holds (the memory the cost model charges):

    * pp = 1: 1 (gradient accumulation runs one microbatch at a time).
    * GPipe: m, every forward before any backward (Huang et al. 2019).
    * 1F1B: min(p - stage, m); the first stage holds p (Narayanan et al. 2021, §2.2).
    * interleaved 1F1B: Megatron-LM's warm-up of 2(p - stage - 1) + (v - 1)p + 1 chunks of 1/v of
      the rank's layers, which for stage 0 is p·(1 + (p-1)/(p·v)) (Korthikanti et al. 2022 §4.2.3).
    * zero_bubble (ZB-H1, Qi et al. 2023): 1F1B's peak, p - stage (p on every rank when V-placed).
    * dualpipe_v: PP+1 chunk activations per device with PP = 2p chunks of half a device's layers
      (DeepSeek-V3 §3.2.1, DualPipe table), i.e. p + 1/2.
    * dualpipe: PP+1 stage activations per device with PP = p stages, each half a device's layers
      (the same table), i.e. (p + 1)/2 on every rank; DualPipe's own order (:func:`actions`)
      peaks at p + 1 forwards without their backward on every rank.

    These are the published schedules' peaks; torch's own orders (:func:`actions`) can hold more
    on some ranks (its interleaved warm-up with one chunk per rank is 2(p−1−stage)+1).
    """
    if p <= 1:
        return 1.0
    m = max(1, m)
    if pipeline == "gpipe":
        return float(m)
    if pipeline == "interleaved_1f1b" and v > 1:
        return min((2 * (p - stage - 1) + (v - 1) * p + 1) / v, float(m))
    if pipeline == "dualpipe_v":
        return min(p + 0.5, float(m))
    if pipeline == "dualpipe":
        return min(p + 1, m) / 2
    if pipeline == "zero_bubble" and v == 2:
        return min(float(p), float(m))
    if pipeline == "zero_bubble" and v > 2:
        return min((2 * (p - stage - 1) + (v - 1) * p + 1) / v, float(m))
    return float(min(p - stage, m))


def inflight_array(pipeline, pp, microbatches, virtual_stages, stage):
    """:func:`inflight` over numpy arrays (``pipeline`` indexes :data:`PIPELINES`); each
    distinct (pipeline, pp, m, v, stage) is evaluated once."""
    import numpy as np

    pipeline, pp, microbatches, virtual_stages, stage = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.int64) for x in (pipeline, pp, microbatches, virtual_stages, stage)))
    (uniq, inv), shape = _pipe_keys(pipeline, pp, microbatches, virtual_stages)
    pairs, back = np.unique(inv.reshape(shape).astype(np.int64) * (1 << 20) + stage, return_inverse=True)
    vals = []
    for pair in pairs:
        k = int(uniq[pair >> 20])
        vals.append(inflight(PIPELINES[k >> 48], (k >> 32) & 0xFFFF, (k >> 8) & 0xFFFFFF, k & 0xFF,
                             int(pair & 0xFFFFF)))
    return np.asarray(vals, dtype=np.float64)[back].reshape(shape)


def format_order(order: list[list[Action]]) -> str:
    """A compact table, one line per rank (``rank 0: 0F0 0F1 0B0 …``)."""
    return "\n".join(f"rank {r}: " + " ".join(str(a) for a in acts) for r, acts in enumerate(order))


def _check_name(pipeline: str) -> None:
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline schedule {pipeline!r}; expected one of {', '.join(PIPELINES)}")
