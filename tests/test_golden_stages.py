"""Golden files per stage of the pipeline, for a reviewer to read (tests/golden/README.md).

    syntax/<example>.txt         the syntax tree of each example, with spans
    compile/<example>/json.txt   the resolved plan (plan.json; written by test_backends_golden)
    explain/<example>.json       `parc explain --format json`
    diagnostics/<fixture>.*      per bad spec of tests/data/render: check's text (test_render_golden),
                                 lint's SARIF (.sarif.json) and GitHub annotations (.github.txt)

PARC_UPDATE_GOLDEN=1 rewrites them (tests/support/snapshot.py); read `git diff tests/golden` after.
"""
from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import pytest

from parc.cli.main import main
from parc.language.parser import parse_text
from support.snapshot import assert_snapshot, stray_snapshots

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.par"))
FIXTURES = sorted(p.stem for p in (ROOT / "tests" / "data" / "render").glob("*.par"))
SARIF_RULES = "diagnostics/sarif-rules.json"


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    """Paths in the outputs are as a user in the checkout's root types them."""
    monkeypatch.chdir(ROOT)


def run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


# ----------------------------------------------------------------------------- syntax tree

def _span(s) -> str:
    return f"{s.line}:{s.column}-{s.end_line}:{s.end_column}"


def _is_span(x) -> bool:
    return all(hasattr(x, a) for a in ("line", "column", "end_line", "end_column"))


def _scalar(x) -> str:
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, list):
        return "[" + ", ".join(_scalar(v) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(_scalar(v) for v in x) + ")"
    return repr(x)


def _is_node(x) -> bool:
    return dataclasses.is_dataclass(x) and not _is_span(x)


def dump_tree(node, indent: int = 0, label: str = "") -> list[str]:
    """One line per node: its class, its plain fields, its spans as line:col-line:col; child
    nodes (and lists of them) indented under it. Written over the dataclass fields, so it needs no
    change when a node gains a field."""
    head, children = [type(node).__name__], []
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if _is_span(v):
            head.append(f"@{_span(v)}" if f.name == "span" else f"{f.name}@{_span(v)}")
        elif _is_node(v):
            children.append((f.name, v))
        elif isinstance(v, list) and v and all(_is_node(i) for i in v):
            children += [(f"{f.name}[{i}]", item) for i, item in enumerate(v)]
        elif isinstance(v, list) and v and any(isinstance(i, (tuple, list)) for i in v):
            children += [(f"{f.name}[{i}]", item) for i, item in enumerate(v)]  # e.g. comments
        elif f.name != "file":
            head.append(f"{f.name}={_scalar(v)}")
    out = ["  " * indent + (f"{label}: " if label else "") + " ".join(head)]
    for name, child in children:
        out += (dump_tree(child, indent + 1, name) if _is_node(child)
                else ["  " * (indent + 1) + f"{name}: {_scalar(child)}"])
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_syntax_tree(name):
    path = f"examples/{name}.par"
    doc = parse_text((ROOT / path).read_text(encoding="utf-8"), path)
    assert_snapshot(f"syntax/{name}.txt", "\n".join(dump_tree(doc)) + "\n")


def test_syntax_dump_shows_spans_and_nesting():
    doc = parse_text('model "m" {\n  layers = 2 * 4\n}\n', "m.par")
    lines = dump_tree(doc)
    assert lines[0].startswith("Document")
    assert lines[1].startswith("  items[0]: Block kind='model'") and "@1:1-3:2" in lines[1]
    assert lines[2].startswith("    items[0]: Assign key='layers'") and "@2:3-2:17" in lines[2]
    assert any("BinOp" in ln and "@2:12-2:17" in ln for ln in lines[3:])


def test_syntax_dump_puts_each_record_of_a_list_on_its_own_line():
    @dataclasses.dataclass
    class Doc:
        file: str
        items: list
        comments: list

    lines = dump_tree(Doc("m.par", [], [(1, 1, "# one"), (3, 5, "# two")]))
    assert lines == ["Doc items=[]", "  comments[0]: (1, 1, '# one')", "  comments[1]: (3, 5, '# two')"]


# ----------------------------------------------------------------------------- explain

@pytest.mark.parametrize("name", EXAMPLES)
def test_explain_json(name, capsys):
    code, out = run(capsys, "explain", f"examples/{name}.par", "--format", "json")
    assert code == 0, out
    json.loads(out)
    assert_snapshot(f"explain/{name}.json", out)


# ----------------------------------------------------------------------------- diagnostics

def _sarif_without_catalog(out: str) -> tuple[str, list]:
    """The SARIF log with the rule catalog (the same 100 rules in every log) cut to its ids, and
    the catalog itself."""
    log = json.loads(out)
    driver = log["runs"][0]["tool"]["driver"]
    catalog = driver["rules"]
    driver["rules"] = f"<the {len(catalog)} rules of {SARIF_RULES}>"
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n", catalog


@pytest.mark.parametrize("name", FIXTURES)
def test_sarif(name, capsys):
    code, out = run(capsys, "lint", f"tests/data/render/{name}.par", "--format", "sarif")
    assert code == 1, "every fixture has at least one error"
    text, catalog = _sarif_without_catalog(out)
    assert_snapshot(f"diagnostics/{name}.sarif.json", text)
    assert_snapshot(SARIF_RULES, json.dumps(catalog, indent=2, ensure_ascii=False) + "\n")


@pytest.mark.parametrize("name", FIXTURES)
def test_github_annotations(name, capsys):
    code, out = run(capsys, "lint", f"tests/data/render/{name}.par", "--format", "github")
    assert code == 1, "every fixture has at least one error"
    assert out.startswith("::"), out
    assert_snapshot(f"diagnostics/{name}.github.txt", out)


def test_no_stray_stage_goldens():
    known = ([f"syntax/{n}.txt" for n in EXAMPLES] + [f"explain/{n}.json" for n in EXAMPLES]
             + [f"diagnostics/{n}{ext}" for n in FIXTURES for ext in (".txt", ".sarif.json", ".github.txt")]
             + [SARIF_RULES])
    stray = [s for folder in ("syntax", "explain", "diagnostics") for s in stray_snapshots(folder, "*", known)]
    assert not stray, f"golden files without a case: {stray}"


def test_fixtures_cover_the_families():
    """The bad specs reach every family a user meets before a GPU is allocated."""
    codes = set()
    for name in FIXTURES:
        for ln in (ROOT / "tests" / "golden" / "diagnostics" / f"{name}.github.txt").read_text().splitlines():
            if ln.startswith("::"):
                codes.add(ln.split("title=", 1)[1].split("::", 1)[0])
    assert {c[:2] for c in codes} >= {"P0", "P1", "P2", "P3", "P4", "P5", "P6"}, sorted(codes)
