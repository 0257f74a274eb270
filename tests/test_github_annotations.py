"""`parc lint --format github`: one workflow command per finding, escaped so that every field
(file, line, column, code, message) can be read back exactly."""
from __future__ import annotations

import json
import re

import pytest

from parc.cli.main import main
from parc.language.diagnostics import ERROR, NOTE, WARNING, Diagnostic, Span
from parc.report.ci import escape_data, escape_property, parse_github_line, render_github

SPEC = """\
model "m" { from = llama3_8b }

cluster "box" {
  nodes         = 1
  gpus_per_node = 6
  gpu           = h100_sxm
  intra_node    = nvlink(450GB)
}

mesh {
  tp = 6
  tensor_parallel = 2
}
"""

STYLE = """\
model "m" {
  from   = llama3_8b
  layers = 32
}

cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}

mesh { dp = 8 }
"""

LINE = re.compile(r"^::(error|warning|notice) (?P<props>[^:]*)::(?P<msg>.*)$")


def test_annotation_lines_round_trip_against_the_json_report(tmp_path, capsys, monkeypatch):
    (tmp_path / "dir, with: odd%chars").mkdir()
    a = tmp_path / "dir, with: odd%chars" / "a.par"
    a.write_text(SPEC)
    (tmp_path / "b.par").write_text(STYLE)
    monkeypatch.chdir(tmp_path)
    rc_gh = main(["lint", ".", "--format", "github"])
    lines = capsys.readouterr().out.splitlines()
    rc_js = main(["lint", ".", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc_gh == rc_js == 1
    commands = [ln for ln in lines if ln.startswith("::")]
    assert lines[-1] == "2 errors, 2 warnings in 2 files"  # the plain summary after the annotations
    assert len(commands) == len(report["diagnostics"]) == 4
    for line, d in zip(commands, report["diagnostics"]):
        m = LINE.match(line)
        assert m, line
        assert "\n" not in line and "\r" not in line
        got = parse_github_line(line)
        assert got["command"] == {"error": "error", "warning": "warning"}[d["severity"]]
        assert got["file"] == d["file"]
        assert (int(got["line"]), int(got["col"])) == (d["line"], d["column"])
        assert (int(got["endLine"]), int(got["endColumn"])) == (d["end_line"], d["end_column"])
        assert got["title"] == d["code"]
        assert got["message"] == d["message"] + (f"\nhelp: {d['help']}" if d["help"] else "")
    assert {parse_github_line(c)["file"] for c in commands} == {"b.par", "dir, with: odd%chars/a.par"}
    # the property separators inside the file name are escaped, not taken literally
    assert any(c.startswith("::error file=dir%2C with%3A odd%25chars/a.par,line=") for c in commands)


def test_escaping_follows_actions_core():
    assert escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert escape_property("a:b,c%d\ne") == "a%3Ab%2Cc%25d%0Ae"
    tricky = "50%0A is literal, 100%, a:b, c,d\nsecond line"
    d = Diagnostic("P102", WARNING, tricky, Span("x%2C.par", 3, 4, 3, 9))
    got = parse_github_line(render_github([d]))
    assert got["message"] == tricky and got["file"] == "x%2C.par"


@pytest.mark.parametrize("severity,command", [(ERROR, "error"), (WARNING, "warning"), (NOTE, "notice")])
def test_severities_map_to_commands(severity, command):
    line = render_github([Diagnostic("P501", severity, "m", Span("f.par", 1, 1, 1, 2))])
    assert line.startswith(f"::{command} ")


def test_a_multi_line_span_gives_no_end_column():
    got = parse_github_line(render_github([Diagnostic("P018", ERROR, "m", Span("f.par", 2, 5, 7, 2))]))
    assert (got["line"], got["col"], got["endLine"]) == ("2", "5", "7") and "endColumn" not in got


def test_quiet_clean_run_prints_nothing(tmp_path, capsys):
    p = tmp_path / "ok.par"
    p.write_text(STYLE.replace("model \"m\" {\n  from   = llama3_8b\n  layers = 32\n}", 'model "m" { from = llama3_8b }'))
    assert main(["lint", str(p), "--format", "github", "-q"]) == 0
    assert capsys.readouterr().out == ""
