"""A suggestion is a promise: every fix a diagnostic offers (a value to write) passes.

Each fire test of a rule (``assert_fires`` in tests/support/specs.py) applies every fix its
finding offers and checks it with the whole rule set: the finding goes, no error the spec did
not have appears, and the memory headroom is kept (P405). Here the same check walks every spec
the repository ships (examples, fixtures, the published configs of tests/wild) and every
diagnostic with a fix in them, and the check itself is shown to refuse a fix that fails.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.specs import fix_refusals

from parc.api import check_file
from parc.language.diagnostics import Edit, Fix, Span

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted({*ROOT.glob("examples/*.par"), *ROOT.glob("tests/data/**/*.par"), *ROOT.glob("tests/wild/**/*.par")})


def _checker(folder: Path):
    def check(text: str, targets=()):
        p = folder / "spec.par"
        p.write_text(text)
        return check_file(p, targets, root=folder)
    return check


def _copy_folder(src: Path, tmp_path: Path) -> Path:
    """The spec's folder copied (its `use`d files come with it)."""
    dst = tmp_path / "specs"
    shutil.copytree(src.parent, dst, ignore=shutil.ignore_patterns("*.txt", "*.json", "*.yaml", "*.sh"))
    return dst


def _with_fixes(path: Path):
    return [d for d in check_file(path, root=path.parent).diagnostics
            if d.fixes and d.span.file.endswith(path.name)]


WITH_FIXES = [p for p in SPECS if _with_fixes(p)]


def test_the_walk_meets_fixes_of_several_kinds():
    codes = {d.code for p in WITH_FIXES for d in _with_fixes(p)}
    assert len(WITH_FIXES) >= 5 and len(codes) >= 5, (WITH_FIXES, codes)


@pytest.mark.parametrize("path", WITH_FIXES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fix_a_shipped_spec_is_offered_passes(path, tmp_path):
    folder = _copy_folder(path, tmp_path)
    check = _checker(folder)
    text = path.read_text()
    before = check(text)
    for d in before.diagnostics:
        if d.fixes and d.span.file.endswith("spec.par"):
            assert not fix_refusals(check, text, d, (), before), (d.code, d.help)


def test_a_fix_that_fails_is_refused(check_spec):
    # tp = 6 over 64 heads on 12 GPUs (P102); a "fix" writing tp = 5 leaves P102, one writing
    # tp = 16 brings P101
    text = (ROOT / "tests" / "data" / "render" / "heads.par").read_text()
    d = next(x for x in check_spec(text).diagnostics if x.code == "P102")
    at = text.index("tp = 6") + len("tp = ")
    span = Span.of(d.span.file, text, at, at + 1)
    bad = d.__class__(d.code, d.severity, d.message, d.span, help=d.help,
                      fixes=[Fix("set `tp = 5`", (Edit(span, "5"),), safe=False),
                             Fix("set `tp = 16`", (Edit(span, "16"),), safe=False)])
    why = fix_refusals(check_spec, text, bad)
    assert "P102 is still reported" in why["set `tp = 5`"]
    assert any(w.startswith("brings P101") for w in why["set `tp = 16`"]), why
    # the fixes the rule itself offers all pass
    assert d.fixes and not fix_refusals(check_spec, text, d)
