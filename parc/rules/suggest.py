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
