"""Diagnostics as JSON: ``{"diagnostics": [...], "summary": {...}}``."""
from __future__ import annotations

import json
from typing import Sequence

from parc.language.diagnostics import ERROR, WARNING, Diagnostic, summarize


def listed(diags: Sequence[Diagnostic]) -> list[dict]:
    return [d.to_json() for d in diags]


def render_json(diags: Sequence[Diagnostic], files: int) -> str:
    """`parc check --format json`."""
    return json.dumps({"diagnostics": listed(diags), "summary": summarize(diags, files)}, indent=2)


def render_file_errors(file: str, diags: Sequence[Diagnostic]) -> str:
    """One spec's diagnostics when a command that reports on a plan cannot build it."""
    return json.dumps({"file": file, "diagnostics": listed(diags), "summary": summarize(diags, 1)}, indent=2)


def render_lint(res, diags: Sequence[Diagnostic]) -> str:
    """`parc lint --format json`: the findings shown, and counts with the suppressed ones."""
    return json.dumps({
        "diagnostics": listed(diags),
        "summary": {"files": res.named, "errors": sum(d.severity == ERROR for d in diags),
                    "warnings": sum(d.severity == WARNING for d in diags), "suppressed": res.suppressed},
    }, indent=2)
