"""parc lint --fix: every fixture with a safe fix is fixed, re-checked clean of that code, and
keeps its comments; --diff writes nothing; alternatives and fixes that would add a finding are
left with the reason."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from parc.cli.main import main
from parc.language.diagnostics import apply_edits
from parc.language.parser import comments_of
from parc.lint.engine import lint_files

DATA = Path(__file__).parent / "data"
FIXTURES = sorted([*DATA.glob("render/*.par"), *DATA.glob("fix/*.par")])


def _safe_codes(path: Path) -> set[str]:
    return {d.code for d in lint_files([str(path)]).diagnostics if d.safe_fix}


FIXABLE = [p for p in FIXTURES if _safe_codes(p)]


def _copy(tmp_path: Path, src: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    return dst


def _kept_comments(text: str, name: str) -> list[str]:
    """The comments a fix must keep: all but the suppressions P550 removes."""
    return [c for _, _, c in comments_of(text, name) if "parc:" not in c]


def test_the_fixtures_cover_the_fix_kinds():
    codes = set().union(*(_safe_codes(p) for p in FIXABLE))
    assert {"P001", "P002", "P004", "P007", "P010", "P550", "P551", "P552"} <= codes
    assert len(FIXABLE) >= 6


@pytest.mark.parametrize("src", FIXABLE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fix_clears_the_fixed_codes_and_keeps_comments(tmp_path, src, capsys):
    path = _copy(tmp_path, src)
    before = path.read_text()
    had = _safe_codes(path)
    main(["lint", "--fix", str(path)])
    out = capsys.readouterr().out
    after = path.read_text()
    left = {d.code for d in lint_files([str(path)]).diagnostics}
    refused = set(re.findall(r"^left \S+ (P\d{3}) the fix would", out, re.M))
    assert (after != before) == bool(had - refused)
    assert not (had - refused) & left, out
    assert _kept_comments(before, str(path)) == _kept_comments(after, str(path))
    for code in had - refused:
        assert re.search(rf"^fixed {re.escape(str(path))}:\d+:\d+: {code} ", out, re.M), out


def test_several_mistakes_are_fixed_to_what_the_help_names(tmp_path, capsys):
    path = _copy(tmp_path, DATA / "render" / "several.par")
    assert main(["lint", "--fix", str(path)]) == 1  # P003 and P017 have no single fix: still errors
    text = path.read_text()
    assert "from = llama3_8b\n" in text and "nvlink(450GB/s)" in text and "  tp = 1\n" in text
    assert "tensor_parallel" not in text
    out = capsys.readouterr().out
    assert "fixed 3 findings in 1 file" in out
    assert "P003 error" in out and "P017 error" in out  # the lint report of what is left


def test_diff_writes_nothing_and_exits_1(tmp_path, capsys):
    path = _copy(tmp_path, DATA / "fix" / "commented.par")
    before = path.read_text()
    assert main(["lint", "--fix", "--diff", str(path)]) == 1
    cap = capsys.readouterr()
    assert path.read_text() == before
    assert "-  from   = llama3_8bb  # the preset, misspelt" in cap.out
    assert "+  from = llama3_8b  # the preset, misspelt" in cap.out
    assert "would fix 4 findings in 1 file; 0 fixable findings left" in cap.err
    clean = _copy(tmp_path, DATA / "fix" / "commented.par")
    main(["lint", "--fix", str(clean)])
    capsys.readouterr()
    assert main(["lint", "--fix", "--diff", str(clean)]) == 0
    assert capsys.readouterr().out == ""


def test_diff_needs_fix(capsys):
    assert main(["lint", "--diff", str(DATA / "render" / "heads.par")]) == 2
    assert "--diff" in capsys.readouterr().err


def _fixed_unchanged(tmp_path, capsys, src: Path) -> str:
    """``parc lint --fix`` on a copy of ``src`` that it must leave as it was; what it printed."""
    path = _copy(tmp_path, src)
    before = path.read_text()
    main(["lint", "--fix", str(path)])
    assert path.read_text() == before
    return capsys.readouterr().out


def test_alternatives_are_left_for_the_user(tmp_path, capsys):
    out = _fixed_unchanged(tmp_path, capsys, DATA / "render" / "heads.par")
    # of the degrees that split the heads only tp = 2 passes the other rules (tp = 1 cannot hold
    # the weights, tp = 4 spans the nodes of 6), and the help names pp = 3 as another way: the
    # one fix is an alternative, left for the user
    assert re.search(r"^left \S+:13:3: P102 not applied unasked: set `tp = 2` and `dp = 6`$", out, re.M)


def test_a_fix_that_would_add_a_finding_is_refused(tmp_path, capsys):
    out = _fixed_unchanged(tmp_path, capsys, DATA / "fix" / "duplicate.par")
    assert "P007 the fix would bring P008 at line 13: `tp` is set twice in `mesh`" in out


def test_a_canonical_file_stays_canonical(tmp_path, capsys):
    from parc.language.fmt import format_text

    path = _copy(tmp_path, DATA / "fix" / "duplicate.par")
    text = path.read_text().replace("  tp              = 1\n", "")
    path.write_text(format_text(text, str(path)))
    main(["lint", "--fix", str(path)])
    capsys.readouterr()
    fixed = path.read_text()
    assert "  tp = 1\n" in fixed and format_text(fixed, str(path)) == fixed


def test_every_safe_fix_applies_to_its_own_text():
    """The edits of each fix stay inside the file and apply (no overlap), for every fixture."""
    for p in FIXTURES:
        text = p.read_text()
        for d in lint_files([str(p)]).diagnostics:
            for f in d.fixes:
                same = [e for e in f.edits if e.span.file == str(p)]
                apply_edits(text, same)
                for e in same:
                    assert text.count("\n", 0, e.span.start) + 1 == e.span.line


def test_fix_of_standard_input_prints_the_fixed_text(capsys, monkeypatch):
    import io

    text = (DATA / "fix" / "syntax.par").read_text()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["lint", "--fix", "-"]) == 0
    cap = capsys.readouterr()
    assert 'target vllm { model = "meta-llama/Llama-3.1-8B" }' in cap.out
    assert "fixed 4 findings in 1 file" in cap.err
