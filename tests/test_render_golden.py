"""What a user sees, byte for byte: the text renderer on a handful of errors.

Regenerate on purpose with PARC_UPDATE_GOLDEN=1 (tests/support/snapshot.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from parc.api import check_file
from parc.report.diagnostics.json import render_json
from parc.report.diagnostics.text import render_text
from support.snapshot import assert_snapshot

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("tests/data/render")
GOLDEN = ROOT / "tests" / "golden" / "diagnostics"
CASES = sorted(p.stem for p in (ROOT / DATA).glob("*.par"))


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", CASES)
def test_text_renderer_golden(name):
    r = check_file(DATA / f"{name}.par")
    assert r.diagnostics, "each golden case has at least one finding"
    got = render_text(r.diagnostics, r.sources, color=False)
    assert_snapshot(GOLDEN / f"{name}.txt", got)


def test_colour_only_when_asked():
    r = check_file(DATA / "heads.par")
    plain = render_text(r.diagnostics, r.sources, color=False)
    coloured = render_text(r.diagnostics, r.sources, color=True)
    assert "\x1b[" not in plain and "\x1b[" in coloured
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_json_shape():
    r = check_file(DATA / "several.par")
    out = json.loads(render_json(r.diagnostics, 1))
    assert set(out) == {"diagnostics", "summary"}
    assert out["summary"] == {"files": 1, "errors": len(r.diagnostics), "warnings": 0}
    for d in out["diagnostics"]:
        assert {"file", "line", "column", "end_line", "end_column", "severity", "code", "message", "help"} <= set(d)
    first = out["diagnostics"][0]
    assert (first["code"], first["line"], first["column"]) == ("P010", 2, 10)
