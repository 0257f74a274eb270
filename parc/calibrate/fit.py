"""Fit a cluster's efficiency factors (:class:`~parc.model.plan.Profile`) to measured runs.

Every float field of ``Profile`` that ``parc/model/fields.py`` gives a range is a parameter, read
with ``dataclasses.fields``, so a factor added to the profile is fitted without a change here.
The fit minimises, over the runs, the squares of log(predicted / measured) step time (and peak
memory where a run measured it), plus a small pull of each field toward its starting value
(``regularization`` times its distance in units of its range, squared): a factor the runs do not
move stays where it started, and factors only the runs' combination determines share the change
as little as possible. Levenberg-Marquardt on forward-difference derivatives of
:func:`parc.cost.estimate.estimate`, each step clipped to the fields' ranges; numpy only and
deterministic (no random start, a fixed iteration order).

A field is *fitted* when the runs determine it alone: the data leave it at most a hundredth
of the variance the pull allows (diag of (JᵀJ + λI)⁻¹ · λ ≤ 0.01, J the derivatives per range),
so the pull moves it back by at most 1% of the distance the data moved it. A field that moves
predictions only together with another is *confounded* with it (the runs fit their
combination); one that moves predictions too little to be told from the pull is *weak* (it
moves part of the way); one that moves no prediction is *unidentified*, and keeps its
starting value.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields, replace
from typing import Iterable, Sequence

import numpy as np

from parc.calibrate.runs import measured_step_time
from parc.model.fields import BLOCKS
from parc.model.plan import Profile

REGULARIZATION = 1e-4   # the pull toward the starting values, per range squared
DETERMINED = 0.01       # a fitted field keeps at most this share of its prior variance
MAX_ITERATIONS = 100


class FitError(ValueError):
    """Runs that cannot be fitted (no step time, or a plan parc predicts no step time for)."""


@dataclass
class RunFit:
    """One run's measurement and parc's prediction before and after the fit."""
    label: str
    measured_step_time: float
    step_time_before: float
    step_time_after: float = 0.0
    measured_memory: float | None = None
    memory_before: float = 0.0
    memory_after: float = 0.0

    @staticmethod
    def _err(pred: float, meas: float | None) -> float | None:
        return pred / meas - 1 if meas else None

    def errors(self) -> dict:
        return {"step_time_before": self._err(self.step_time_before, self.measured_step_time),
                "step_time_after": self._err(self.step_time_after, self.measured_step_time),
                "memory_before": self._err(self.memory_before, self.measured_memory),
                "memory_after": self._err(self.memory_after, self.measured_memory)}

    def to_json(self) -> dict:
        return {"label": self.label,
                "measured": {"step_time": self.measured_step_time, "memory": self.measured_memory},
                "before": {"step_time": self.step_time_before, "memory": self.memory_before},
                "after": {"step_time": self.step_time_after, "memory": self.memory_after},
                "error": self.errors()}


@dataclass
class FitReport:
    """What the fit found: the profile it started from and the one it gives, which fields the
    runs determine, and each run's error before and after."""
    start: Profile
    profile: Profile
    fields: list[str]
    fitted: list[str] = field(default_factory=list)
    confounded: list[list[str]] = field(default_factory=list)
    weak: list[str] = field(default_factory=list)
    unidentified: list[str] = field(default_factory=list)
    at_bound: list[str] = field(default_factory=list)
    runs: list[RunFit] = field(default_factory=list)
    iterations: int = 0

    def summary(self) -> dict:
        """Median and worst absolute relative error of step time (and memory), before and after."""
        out = {}
        for q in ("step_time", "memory"):
            for when in ("before", "after"):
                errs = [abs(e) for r in self.runs if (e := r.errors()[f"{q}_{when}"]) is not None]
                if errs:
                    out.setdefault(q, {})[f"median_{when}"] = statistics.median(errs)
                    out[q][f"worst_{when}"] = max(errs)
        return out

    def values(self, profile: Profile | None = None) -> dict:
        p = profile or self.profile
        return {f: getattr(p, f) for f in self.fields}

    def to_json(self) -> dict:
        return {"profile": {"name": self.profile.name, "framework": self.profile.framework, "gpu": self.profile.gpu,
                            **self.values()},
                "start": self.values(self.start), "fitted": list(self.fitted),
                "confounded": [list(g) for g in self.confounded], "weak": list(self.weak),
                "unidentified": list(self.unidentified),
                "at_bound": list(self.at_bound), "iterations": self.iterations,
                "runs": [r.to_json() for r in self.runs], "summary": self.summary()}


def profile_fields(profile: Profile) -> list[tuple[str, float, float]]:
    """(name, low, high) of every float field of ``profile`` that the field table gives a range."""
    table = BLOCKS["profile"]
    out = []
    for f in fields(Profile):
        spec = table.get(f.name)
        if spec is None or spec.kind != "frac":
            continue
        lo = spec.min if spec.min is not None else 0.0
        hi = spec.max if spec.max is not None else max(1.0, 10 * abs(getattr(profile, f.name)))
        out.append((f.name, float(lo), float(hi)))
    return out


def resolved_profile(profile: Profile, plan=None) -> Profile:
    """``profile`` with the fields the resolver fills from the GPU filled (``gemm_efficiency``:
    the plan's GPU's measured matmul rate, else :data:`parc.model.plan.DEFAULT_MATMUL_EFFICIENCY`)."""
    from parc.model.plan import DEFAULT_MATMUL_EFFICIENCY

    if profile.gemm_efficiency is not None:
        return profile
    gpu = getattr(getattr(plan, "cluster", None), "gpu", None)
    return replace(profile, gemm_efficiency=gpu.gemm_efficiency if gpu else DEFAULT_MATMUL_EFFICIENCY)


def predict(plan, profile: Profile) -> tuple[float, float]:
    """(step time in seconds, peak bytes on the fullest GPU) of ``plan`` under ``profile``."""
    from parc.cost.estimate import estimate

    e = estimate(replace(plan, profile=profile), cache=False)
    return e.step_time, e.memory.total


class _Problem:
    """The residuals of the runs as a function of the fields, in units of each field's range."""

    def __init__(self, plans, steps, memories, start: Profile, names, lo, hi, reg: float):
        self.plans, self.steps, self.memories = plans, np.asarray(steps), memories
        self.start, self.names, self.lo, self.hi = start, names, lo, hi
        self.theta0 = np.array([getattr(start, n) for n in names], dtype=float)
        self.scale = hi - lo
        self.reg = reg

    def profile(self, u) -> Profile:
        theta = np.clip(self.theta0 + u * self.scale, self.lo, self.hi)
        return replace(self.start, **{n: float(v) for n, v in zip(self.names, theta)})

    def data(self, u) -> np.ndarray:
        prof = self.profile(u)
        out = []
        for plan, st, mem in zip(self.plans, self.steps, self.memories):
            s, m = predict(plan, prof)
            out.append(math.log(s / st) if s > 0 else 10.0)
            if mem:
                out.append(math.log(m / mem) if m > 0 else 10.0)
        return np.array(out)

    def residuals(self, u) -> np.ndarray:
        return np.concatenate([self.data(u), math.sqrt(self.reg) * u])

    def jacobian(self, u, r0) -> np.ndarray:
        """Forward differences of the data residuals, per unit of each field's range."""
        J = np.zeros((len(r0), len(u)))
        for j in range(len(u)):
            h = 1e-5 if self.theta0[j] + (u[j] + 1e-5) * self.scale[j] <= self.hi[j] else -1e-5
            du = u.copy()
            du[j] += h
            J[:, j] = (self.data(du) - r0) / h
        return J

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return (self.lo - self.theta0) / self.scale, (self.hi - self.theta0) / self.scale


def _solve(pb: _Problem) -> tuple[np.ndarray, np.ndarray, int]:
    """Projected Levenberg-Marquardt from the starting values: (u, data Jacobian there, steps)."""
    n = len(pb.names)
    u, lo, hi = np.zeros(n), *pb.bounds()
    sq = math.sqrt(pb.reg)
    r = pb.data(u)
    cost = float(r @ r + pb.reg * u @ u)
    mu, it = 1e-3, 0
    J = pb.jacobian(u, r)
    for it in range(1, MAX_ITERATIONS + 1):
        A = J.T @ J + pb.reg * np.eye(n)
        g = J.T @ r + pb.reg * u
        step = np.linalg.solve(A + mu * (np.diag(np.diag(A)) + sq * np.eye(n)), -g)
        un = np.clip(u + step, lo, hi)
        rn = pb.data(un)
        cn = float(rn @ rn + pb.reg * un @ un)
        if cn < cost:
            done = cost - cn <= 1e-14 * max(cost, 1e-300) or np.max(np.abs(un - u)) < 1e-10
            u, r, cost, mu = un, rn, cn, max(mu / 3, 1e-12)
            J = pb.jacobian(u, r)
            if done:
                break
        else:
            mu *= 4
            if mu > 1e10:
                break
    return u, J, it


def _identify(pb: _Problem, u, J, report: FitReport) -> None:
    """Sort the fields into fitted, confounded, weak and unidentified from the derivatives at the fit."""
    n = len(pb.names)
    sens = np.sqrt((J * J).sum(axis=0))
    cov = np.linalg.inv(J.T @ J + pb.reg * np.eye(n)) * pb.reg
    moves = sens > 1e-6
    lo, hi = pb.bounds()
    for j, name in enumerate(pb.names):
        if not moves[j]:
            report.unidentified.append(name)
        elif cov[j, j] <= DETERMINED:
            report.fitted.append(name)
        if moves[j] and (u[j] <= lo[j] + 1e-9 or u[j] >= hi[j] - 1e-9):
            report.at_bound.append(name)
    loose = [j for j in range(n) if moves[j] and cov[j, j] > DETERMINED]
    seen: set[int] = set()
    for j in loose:
        if j in seen:
            continue
        group = [k for k in loose if k == j or abs(J[:, j] @ J[:, k]) > 0.95 * sens[j] * sens[k]]
        seen.update(group)
        if len(group) > 1:
            report.confounded.append([pb.names[k] for k in group])
        else:
            report.weak.append(pb.names[j])


# A measured step that implies more than the GPUs' peak FLOP/s did not happen; one that implies less
# than 1/10,000 of it is a unit slip (milliseconds read as seconds) or a stalled run, not a rate to fit.
MAX_UTILIZATION, MIN_UTILIZATION = 1.0, 1e-4


def implausible(plan, step: float) -> str | None:
    """Why a measured ``step`` (seconds) cannot be a run of ``plan``, or None: the model FLOPs of
    its step over the step time, against the GPUs' dense peak in the plan's precision."""
    from parc.cost.estimate import model_flops
    from parc.units import percent, seconds

    try:
        m, sch, world, gpu = plan.model, plan.schedule, plan.world_size, plan.cluster.gpu
        peak = gpu.peak(plan.train.precision if plan.train else "bf16")
    except AttributeError:       # not a resolved plan (a test's stand-in): nothing to judge by
        return None
    tokens = sch.global_batch * m.seq_len
    if not (tokens and world and peak):
        return None
    util = model_flops(m, tokens) / (step * world * peak)
    what = (f"a step of {seconds(step)} for {m.name or 'the model'} ({tokens:,} tokens on {world:,} GPUs) "
            f"means {percent(util)} of their peak FLOP/s")
    if util > MAX_UTILIZATION:
        return what + ": faster than the GPUs can compute, so not a measurement parc can fit (check the units)"
    if util < MIN_UTILIZATION:
        return what + ": under 1/10,000 of it, a unit slip or a stalled run, not a rate parc can fit"
    return None


def _runs(runs: Iterable) -> list[tuple]:
    out = []
    for i, run in enumerate(runs):
        plan, measured, label = (tuple(run) + (None,))[:3]
        if isinstance(measured, (int, float)):
            measured = {"step_time": float(measured)}
        st = measured_step_time(plan, measured)
        if not st or st <= 0:
            raise FitError(f"run {label or i + 1}: no step time or throughput to fit to")
        why = implausible(plan, st)
        if why:
            raise FitError(f"run {label or i + 1}: {why}")
        out.append((plan, st, measured.get("memory") or None, label or measured.get("label") or f"run {i + 1}"))
    if not out:
        raise FitError("no runs to fit")
    return out


def fit(runs: Sequence, start: Profile | None = None, regularization: float = REGULARIZATION
        ) -> tuple[Profile, FitReport]:
    """The profile that best predicts ``runs``: (plan, measured) pairs, or (plan, measured,
    label) triples, where ``measured`` is a dict (``step_time`` in seconds, or
    ``tokens_per_second``, ``tokens_per_second_per_gpu``, ``mfu``, ``tflops_per_gpu``; and
    ``memory`` in bytes) or a step time in seconds. ``start`` (default: the first plan's
    profile) is where the fit begins and what it pulls toward. Returns the profile and the
    :class:`FitReport`."""
    rows = _runs(runs)
    start = resolved_profile(start or rows[0][0].profile, rows[0][0])
    spec = profile_fields(start)
    names = [s[0] for s in spec]
    lo, hi = np.array([s[1] for s in spec]), np.array([s[2] for s in spec])
    start = replace(start, **{n: float(min(max(getattr(start, n), a), b)) for n, a, b in spec})
    for plan, *_, label in rows:
        try:
            step = predict(plan, start)[0]
        except ValueError as e:   # the rank map refuses a mesh it cannot lay out
            raise FitError(f"{label}: parc cannot lay this plan out on ranks: {e}") from None
        if step <= 0:
            raise FitError(f"{label}: parc predicts no step time for this plan (a serving plan, or no "
                           "microbatches), so it cannot be fitted to")
    pb = _Problem([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], start, names, lo, hi,
                  regularization)
    u, J, iterations = _solve(pb)
    prof = pb.profile(u)
    report = FitReport(start=start, profile=prof, fields=names, iterations=iterations)
    _identify(pb, u, J, report)
    for plan, st, mem, label in rows:
        b, a = predict(plan, start), predict(plan, prof)
        report.runs.append(RunFit(label, st, b[0], a[0], mem, b[1], a[1]))
    return prof, report
