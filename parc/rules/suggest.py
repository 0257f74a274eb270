"""Every suggestion is checked before it is offered.

A ``help:`` that proposes a change to the plan (another tp, a ZeRO stage, a mesh that fits)
offers it only when the whole rule set accepts the changed plan: the finding it fixes is gone,
no error appears that the plan did not have already (a tp that would split a NUMA node, P306),
and the plan keeps the memory headroom (no P405). :func:`accepted` is that one check;
:func:`variant` builds the changed plan the way a user's edit would resolve (the microbatch
count, a derived dp and the layer split follow the new degrees). ``lint --fix`` and editors
apply the same check to the edits they offer.

While a changed plan is judged, the rules run as usual but do not search for suggestions of
their own (:func:`checking`): only its verdict is wanted, and the search would recurse.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Iterable

from parc.language.diagnostics import ERROR

HEADROOM_CODE = "P405"   # the memory headroom a suggestion must leave

_CHECKING: ContextVar[bool] = ContextVar("parc_checking_a_suggestion", default=False)
_BEFORE: dict[int, tuple[object, frozenset]] = {}


def checking() -> bool:
    """Whether the rules are judging a suggestion (and need not make suggestions of their own)."""
    return _CHECKING.get()


@contextmanager
def _judging():
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def verdict(plan, targets: Iterable[str] = ()) -> frozenset:
    """The codes the whole rule set reports against ``plan`` that refuse it: its errors, and
    P405 when it leaves less than the memory headroom."""
    from parc.rules import run_rules

    with _judging():
        diags = run_rules(plan, targets)
    return frozenset(d.code for d in diags if d.severity == ERROR or d.code == HEADROOM_CODE)


def _before(plan, targets) -> frozenset:
    key = id(plan)
    hit = _BEFORE.get(key)
    if hit is None or hit[0] is not plan:
        if len(_BEFORE) > 64:
            _BEFORE.clear()
        hit = _BEFORE[key] = (plan, verdict(plan, targets))
    return hit[1]


def accepted(plan, changed, code: str, targets: Iterable[str] = ()) -> bool:
    """Whether ``changed`` (``plan`` with one suggested change; None: no such plan) may be
    offered as the fix of finding ``code``: the rule set no longer reports ``code``, reports no
    error ``plan`` did not have already, and finds the memory headroom kept."""
    if changed is None:
        return False
    if checking():
        return True   # judging another suggestion: only its verdict matters, not this help
    targets = tuple(targets)
    after = verdict(changed, targets)
    return code not in after and HEADROOM_CODE not in after and after <= _before(plan, targets)


def variant(plan, mesh=None, train=None, serve=None):
    """A copy of ``plan`` with another mesh, train or serve block, as a spec so edited would
    resolve: the microbatch count follows the new dp, and a layer split written for another pp
    is left to the default; None when the batch would not divide or a pipeline schedule would
    lack microbatches."""
    from parc.model.dims import ParallelDims

    m = mesh or plan.mesh
    sch = plan.schedule
    mb = ParallelDims.from_plan(plan, m).microbatches if plan.mode == "train" else sch.microbatches
    if plan.mode == "train":
        if mb is None:
            return None
        if m.pp > 1 and mb < m.pp and sch.pipeline != "gpipe":
            return None
    pl = plan.placement if m.pp == plan.mesh.pp else replace(plan.placement, layers=None)
    return replace(plan, mesh=m, train=train or plan.train, serve=serve or plan.serve,
                   schedule=replace(sch, microbatches=mb), placement=pl)


_BLOCKS = ("mesh", "schedule", "train", "serve", "cluster")


def changed(plan, values: dict):
    """``plan`` with the spec values ``values`` set (``{"mesh.tp": 4, "schedule.global_batch":
    64}``, as a fix's edits name them), resolved as :func:`variant` does: an `auto` degree the
    values leave out follows the others. None when a value names no field a suggestion changes."""
    from parc.model.dims import auto_degree

    by: dict[str, dict] = {}
    for path, v in values.items():
        block, _, key = path.partition(".")
        if block not in _BLOCKS or "." in key:
            return None
        by.setdefault(block, {})[key] = v
    try:
        if "cluster" in by or "schedule" in by:
            plan = replace(plan, cluster=replace(plan.cluster, **by.get("cluster", {})),
                           schedule=replace(plan.schedule, **by.get("schedule", {})))
        mesh = replace(plan.mesh, **by["mesh"]) if "mesh" in by else plan.mesh
        if mesh.auto and mesh.auto not in by.get("mesh", {}):
            others = 1
            for ax in ("pp", "dp", "cp", "tp"):
                others *= mesh.size(ax) if ax != mesh.auto else 1
            mesh = replace(mesh, **{mesh.auto: auto_degree(plan.cluster.world, others)})
        train = replace(plan.train, **by["train"]) if "train" in by and plan.train else None
        serve = replace(plan.serve, **by["serve"]) if "serve" in by and plan.serve else None
    except TypeError:   # a key the block does not have
        return None
    return variant(plan, mesh=mesh, train=train, serve=serve)


def refusals(plan, changed_plan, code: str, targets: Iterable[str] = ()) -> list[str]:
    """Why ``changed_plan`` is not offered as the fix of ``code``: the codes the rule set reports
    against it that it did not report against ``plan`` (P405 for the memory headroom)."""
    if changed_plan is None or checking():
        return []
    targets = tuple(targets)
    return sorted(verdict(changed_plan, targets) - (_before(plan, targets) - {code}))


def offered(plan, c, options: list[dict]) -> list[dict]:
    """The ``options`` (spec values to set, as :func:`changed` takes them) that rule check ``c``
    may offer as its fix: those the whole rule set accepts (:func:`accepted`), in order."""
    return [o for o in options if accepted(plan, changed(plan, o), c.rule.code, c.active)]
