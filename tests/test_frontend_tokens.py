"""The front end reads comments once, from the lexer's token stream, and recovers from syntax
errors through lark's own ``on_error``: what fmt keeps, what suppressions see and what the
token stream holds are the same comments; every independent syntax error is reported once."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings

from parc.language.diagnostics import ParcError
from parc.language.fmt import format_text
from parc.language.parser import comments_of, get_parser, imports, parse_text
from parc.lint.engine import lint_paths
from parc.lint.suppress import suppressions
from spec_strategies import near_valid, spec

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _lark_comments(text: str) -> list[tuple[int, int, str]]:
    """The COMMENT tokens of lark's own standalone lexer, kept rather than skipped."""
    return [(t.line, t.column, t.value.rstrip()) for t in get_parser().lex(text, dont_ignore=True)
            if t.type == "COMMENT"]


@SETTINGS
@given(spec())
def test_comments_of_the_token_stream_are_what_fmt_keeps_and_suppressions_see(text):
    try:
        doc = parse_text(text, "s.par")
    except ParcError:  # a generated spec past a parser limit
        assume(False)
    found = comments_of(text, "s.par")
    assert found == doc.comments == _lark_comments(text)
    # fmt keeps every comment, in order, and reads the same ones back from its output
    assert [c for _, _, c in comments_of(format_text(text))] == [c for _, _, c in found]
    # suppressions are exactly the comments that hold the directive, each inside its comment
    from parc.lint.suppress import _DIRECTIVE

    directive = [(ln, col, c) for ln, col, c in found if _DIRECTIVE.search(c)]
    sups = suppressions("s.par", text)
    assert [s.line for s in sups] == [ln for ln, _, _ in directive]
    for s, (ln, col, c) in zip(sups, directive):
        assert col < s.span.column <= col + len(c) and s.span.end_column <= col + len(c)


@SETTINGS
@given(near_valid())
def test_a_text_that_does_not_parse_still_gives_its_comments(text):
    try:
        doc = parse_text(text, "s.par")
    except ParcError as e:
        assert comments_of(text, "s.par") == e.comments
        return
    assert comments_of(text, "s.par") == doc.comments


def test_comments_after_a_syntax_error_are_found():
    text = 'a = = 1  # parc: ignore[P001]\nb { c = "open\n}  # after\n# last\n'
    got = [c for _, _, c in comments_of(text)]
    assert got == ["# parc: ignore[P001]", "# after", "# last"]


def test_an_error_at_the_end_of_a_line_is_reported_once():
    """The statement pieces were reparsed alone, so an error on the new line that ends one
    came back a second time as "found the end of the file"."""
    with pytest.raises(ParcError) as e:
        parse_text('cluster "c"\n  nodes = 2\n}\nmesh { dp = = 1 }\na = 1\nb =\nc = 2\n', "f.par")
    got = [(d.span.line, d.span.column) for d in (e.value.diagnostic, *e.value.more)]
    assert got == [(1, 12), (3, 1), (4, 13), (6, 4)]
    assert all("found the end of the file" not in d.message for d in (e.value.diagnostic, *e.value.more))


@pytest.mark.parametrize("wrap", ["{}", "a {{\n{}\n}}", "a {{\n  b {{\n    {}\n  }}\n}}"],
                         ids=["top", "in-block", "two-deep"])
def test_every_hint_example_earns_its_hint_at_any_depth(wrap):
    import tomllib

    from parc.language.recover import HINTS_PATH

    data = tomllib.loads(HINTS_PATH.read_text(encoding="utf-8"))
    for entry in data["hint"]:
        for example in entry["examples"]:
            with pytest.raises(ParcError) as e:
                parse_text(wrap.format(example), "f.par")
            assert e.value.diagnostic.help == entry["help"], example


def test_imports_are_read_from_the_syntax_tree():
    text = '# use "not.par"\nuse "a.par"\nx = "use \\"b.par\\""\nblk {\n  use "c.par"\n}\n'
    assert [p for p, _ in imports(text)] == ["a.par", "c.par"]
    (path, span), _ = imports(text)
    assert (span.line, span.column) == (2, 5)
    assert imports("use = = 1\n") == []


def test_lint_reports_every_syntax_error_of_a_fragment(tmp_path):
    """A shared file that does not parse reported only its first syntax error, while `parc
    check` of a spec reports every independent one."""
    f = tmp_path / "shared.par"
    f.write_text('cluster "c" {\n  nodes = = 1\n}\nmesh { dp = = 2 }\n')
    res = lint_paths([str(f)], root=tmp_path)
    assert [(d.code, d.span.line) for d in res.diagnostics if d.code == "P001"] == [("P001", 2), ("P001", 4)]
