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


def test_a_rename_onto_a_key_already_set_is_not_offered(tmp_path, capsys):
    # renaming `tensor_parallel` to `tp` would set `tp` twice (P008): the help says so, no fix
    out = _fixed_unchanged(tmp_path, capsys, DATA / "fix" / "duplicate.par")
    d = next(d for d in lint_files([str(DATA / "fix" / "duplicate.par")]).diagnostics if d.code == "P007")
    assert not d.fixes and "sets `tp` already" in d.help
    assert not re.search(r"^(fixed|left) \S+ P007", out, re.M), out


def test_a_fix_that_would_add_a_finding_is_refused():
    from parc.language.diagnostics import Diagnostic, Edit, Fix, Span
    from parc.lint.fix import fix_text

    text = "a = 1\n"
    span = Span.of("f.par", text, 4, 5)
    first = Diagnostic("P999", "error", "one", span, fixes=[Fix("write 2", (Edit(span, "2"),))])

    def lint(t):   # the fixed text would report a finding the file did not have, on the edited line
        return [first] if t == text else [Diagnostic("P998", "error", "two", Span.of("f.par", t, 0, 1))]

    ff = fix_text("f.par", text, lint)
    assert ff.after == text and not ff.fixed
    assert ff.left[0][1] == "the fix would bring P998 at line 1: two"


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


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_fix_with_a_machine_format_keeps_stdout_parseable(tmp_path, fmt, capsys):
    import json

    path = _copy(tmp_path, DATA / "fix" / "commented.par")
    main(["lint", "--fix", "--format", fmt, str(path)])
    out, err = capsys.readouterr()
    json.loads(out)   # the report alone: the fixes were said on stderr
    assert re.search(rf"^fixed {re.escape(str(path))}:3:12: P010 ", err, re.M), err
    assert f"fixed {path}" not in out
