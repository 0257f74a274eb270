"""TTFT, TPOT and ITL are defined in one place, the tool's (``explain_serve.DEFINITIONS``, which
`parc explain` prints under its serving table), and every page that states a definition states
that one, word for word."""
from __future__ import annotations

import re
from pathlib import Path

from parc.report.explain_serve import DEFINITIONS

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def _tool() -> dict[str, str]:
    return dict(part.split(": ", 1) for part in DEFINITIONS.split("; "))


def test_the_tool_defines_each_metric_once():
    assert set(_tool()) == {"TTFT", "TPOT", "ITL"}


def test_every_tpot_formula_in_the_docs_is_the_tools():
    tpot = _tool()["TPOT"]
    found = []
    for page in PAGES:
        for m in re.finditer(r"\(E2E − TTFT\) / \([^)]*\)", page.read_text()):
            found.append((page.name, m.group()))
    assert found and all(f == tpot for _, f in found), found


def test_the_language_reference_defines_ttft_as_the_tool_does():
    text = (ROOT / "docs" / "language.md").read_text()
    assert f"**TTFT**, time to first token: {_tool()['TTFT']}." in text
    assert f"**TPOT**, time per output token: {_tool()['TPOT']}," in text
    planner = (ROOT / "docs" / "planner.md").read_text()
    assert f"TTFT {_tool()['TTFT']}, TPOT {_tool()['TPOT']}" in " ".join(planner.split())
