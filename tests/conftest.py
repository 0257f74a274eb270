"""Shared fixtures: write spec text to a file and check it the way the CLI does."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"



@pytest.fixture
def write_spec(tmp_path):
    """write_spec(text, name="spec.par") -> Path: the dedented text saved under tmp_path."""

    def _write(text: str, name: str = "spec.par") -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return p

    return _write


@pytest.fixture
def check_spec(write_spec, tmp_path):
    """check_spec(text, targets=()) -> CheckResult for the dedented text."""
    from parc.api import check_file

    def _check(text: str, targets=(), name: str = "spec.par"):
        p = write_spec(text, name)
        return check_file(p, targets, root=tmp_path)

    return _check


def pytest_terminal_summary(terminalreporter):
    """One line, when the judges were off, saying how to run them (tests/support/judges.py)."""
    from support.judges import HOW, enabled

    skipped = terminalreporter.stats.get("skipped", [])
    if not enabled() and any(HOW in str(getattr(r, "longrepr", "")) for r in skipped):
        terminalreporter.write_line(HOW)
