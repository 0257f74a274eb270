"""The library entry points the commands are built on."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from parc.language.diagnostics import ERROR, Diagnostic, sort_key
from parc.model.plan import Plan


@dataclass
class CheckResult:
    file: str
    plan: Plan | None
    diagnostics: list[Diagnostic]
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == ERROR]

    @property
    def ok(self) -> bool:
        return not self.errors


def check_file(path: str | os.PathLike, targets: Iterable[str] = (), root=None, text: str | None = None,
               select=None, reader=None, shown: str | None = None) -> CheckResult:
    """Parse, resolve and validate one spec. Raises OSError if the spec itself cannot be read.
    ``reader`` reads the spec and its imports (``parc.resolve.loader``; the working tree by
    default), ``shown`` names the spec in diagnostics."""
    from parc.resolve import load

    targets = tuple(targets)
    res = load(path, root=root, text=text, shown=shown, partial=True, reader=reader)
    diags = list(res.diagnostics)
    # errors confined to `train` or `serve` leave a partial plan: the rules that do not read those
    # blocks still run, so the spec's other mistakes are reported in the same run
    late = [d for d in diags if d.severity == ERROR and not any(d is p for p in res.partial_errors)]
    if res.plan is not None and not late:
        from parc.model.targets import implied
        from parc.rules import active_targets, run_rules

        if targets:   # a target named on the command line splits the layers its own way too
            from parc.model.params import resolve_split

            resolve_split(res.plan, targets)
        from parc.targets import load_rules

        # the own rules of the targets this check judges by (any mode: a pool may serve), found
        # in their folders
        load_rules(implied(active_targets(res.plan, targets), None, res.plan.target_settings))
        diags.extend(run_rules(res.plan, targets, select=select, failed=res.partial))
    # a target whose block did not parse is judged when it parses: its rules' findings would
    # follow from the block's absence
    unparsed = {k.split(".", 1)[1] for k in res.partial if k.startswith("target.")}
    diags = [d for d in diags if d.target not in unparsed]
    plan = res.plan if not res.partial else None   # a partial plan is never handed on
    if select is not None:
        diags = [d for d in diags if select(d.code)]
    diags.sort(key=sort_key)
    shown = res.plan.file if res.plan else (res.sources and next(iter(res.sources))) or str(path)
    return CheckResult(shown, plan, diags, res.sources)


def load_plan(path: str | os.PathLike, targets: Iterable[str] = (), root=None) -> Plan:
    """The resolved plan of a spec that checks without errors; ValueError listing the errors otherwise."""
    r = check_file(path, targets, root)
    if not r.ok or r.plan is None:
        from parc.report.diagnostics.text import render_text

        raise ValueError("the spec has errors:\n" + render_text(r.errors, r.sources))
    return r.plan


def session(spec, targets: Iterable[str] = (), root=None, **options):
    """A :class:`parc.runtime.api.Session` for ``spec`` (a ``.par`` file or a resolved Plan):
    the spec is checked first (ValueError listing its errors), then torch is imported."""
    plan = spec if isinstance(spec, Plan) else load_plan(spec, targets, root)
    from parc.runtime.api import Session

    return Session(plan, **options)
