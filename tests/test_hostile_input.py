"""Hostile input: no code runs from data, and no input crashes or stalls the front end.

Each test here failed before its fix: a planted parser cache ran code, numbers past Python's
4,300-digit limit or a float's range escaped as exceptions, a flat sum was refused as "nested",
long tokens cost hundreds of times their size in memory, and every diagnostic re-split the text.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parc.api import check_file
from parc.language import parser as P
from parc.language.diagnostics import Diagnostic, ParcError, Span
from parc.report.diagnostics.text import render_text

ROOT = Path(__file__).resolve().parent.parent

BASE = '''model "m" { from = llama3_8b }
cluster "c" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}
mesh { dp = 8 }
'''


def _check(tmp_path: Path, text: str):
    return check_file(tmp_path / "spec.par", root=tmp_path, text=text)


def _codes(r):
    return [(d.code, d.span.line, d.span.column) for d in r.diagnostics]


# ----------------------------------------------------------------------------- no code from data

class _Plant:
    """Unpickling this opens (and so creates) the marker file: proof that the pickle ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant_everywhere(folder: Path, marker: Path) -> None:
    """A malicious pickle under every name a parser cache in ``folder`` could have had."""
    import lark

    folder.mkdir(parents=True, exist_ok=True)
    grammar = P.GRAMMAR_PATH.read_text(encoding="utf-8")
    opts = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True)
    key = hashlib.sha256((grammar + lark.__version__ + repr(sorted(opts.items()))).encode()).hexdigest()[:16]
    payload = pickle.dumps(_Plant(marker))
    for name in (f"par-{key}.lark.pickle", "par.lark.pickle", "parser.pickle", "par_table.json"):
        (folder / name).write_bytes(payload)


def test_planted_parser_cache_is_never_executed(tmp_path):
    marker = tmp_path / "PWNED"
    home, xdg, pcd = tmp_path / "home", tmp_path / "xdg", tmp_path / "pcd"
    _plant_everywhere(home / ".cache" / "parc", marker)
    _plant_everywhere(xdg / "parc", marker)
    _plant_everywhere(pcd, marker)
    spec = tmp_path / "spec.par"
    spec.write_text(BASE)
    for env_over in ({"PARC_CACHE_DIR": str(pcd)}, {"XDG_CACHE_HOME": str(xdg)}, {}):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PARC_CACHE_DIR", "XDG_CACHE_HOME", "HOME")}
        env.update(HOME=str(home), PYTHONPATH=str(ROOT), **env_over)
        p = subprocess.run([sys.executable, "-m", "parc", "check", str(spec)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert not marker.exists(), f"a planted cache file ran code ({env_over or 'HOME'})"


def test_parse_table_is_data_and_matches_the_grammar():
    """The shipped table is JSON built from today's par.lark (rebuild: python -m parc.language.build_table)."""
    doc = json.loads(P.TABLE_PATH.read_text(encoding="utf-8"))
    assert doc["grammar_sha256"] == P.grammar_hash(), "run `python -m parc.language.build_table`"


def test_parse_table_parses_like_the_grammar():
    import lark

    fresh = lark.Lark(P.GRAMMAR_PATH.read_text(encoding="utf-8"), **P._LARK_OPTIONS)
    shipped = P.get_parser()
    assert type(shipped.parser).__name__ == "ParsingFrontend"
    texts = [p.read_text() for p in sorted((ROOT / "examples").rglob("*.par"))]
    texts.append('x "a\\"b\\n" { "k\\\\" = [1, -2 * (3 + 4) % 5, f(6GB/s)]; y on z }\r\n')
    for text in texts:
        assert shipped.parse(text) == fresh.parse(text)


# ----------------------------------------------------------------------------- numbers

NUMBER_CASES = {
    # name: (replacement for `dp = 8` or the gpu line, expected code)
    "int-5000-digits": ("dp = " + "9" * 5000, "P001"),
    "int-4096-digits": ("dp = " + "9" * 4096, "P017"),
    "decimal-5000-digits": ("dp = 0." + "0" * 4999 + "1", "P001"),
    "decimal-4000-places": ("dp = 0." + "0" * 3999 + "1", "P017"),
    "product-past-4300-digits": ("dp = " + " * ".join(["9" * 3000] * 3), "P017"),
    "product-of-small-literals": ("dp = " + " * ".join(["1000000000000"] * 40), "P017"),
    "quotient-of-huge": ("dp = " + "1" + "0" * 3000 + " / " + "1" + "0" * 2999, "P017"),
}


@pytest.mark.parametrize("name", list(NUMBER_CASES))
def test_huge_numbers_are_diagnostics_with_spans(tmp_path, name):
    repl, code = NUMBER_CASES[name]
    r = _check(tmp_path, BASE.replace("dp = 8", repl))
    assert [(c, ln, col) for c, ln, col in _codes(r) if c == code] == [(code, 8, 13)], _codes(r)


def test_flops_that_overflow_a_float_is_a_diagnostic(tmp_path):
    text = BASE.replace("gpu           = h100_sxm",
                        "gpu {\n    memory = 80GB\n    flops  = " + "9" * 400 + "TFLOPS\n  }")
    r = _check(tmp_path, text)
    assert ("P017", 7, 14) in _codes(r), _codes(r)
    assert "10^60" in next(d.message for d in r.diagnostics if d.code == "P017")


def test_huge_number_in_the_cli_is_no_internal_error(tmp_path):
    spec = tmp_path / "spec.par"
    spec.write_text(BASE.replace("dp = 8", "dp = " + "9" * 5000))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "parc", "check", str(spec)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert "P001" in p.stdout


# ----------------------------------------------------------------------------- depth limits

def test_flat_sum_of_thousands_of_terms_is_no_nesting(tmp_path):
    for n in (65, 3000):
        expr = "8" + " + 1 - 1" * n
        r = _check(tmp_path, BASE.replace("dp = 8", "dp = " + expr))
        assert r.ok, _codes(r)
        assert r.plan.to_dict()["mesh"]["dp"] == 8


def test_flat_product_and_parenthesised_chain(tmp_path):
    r = _check(tmp_path, BASE.replace("dp = 8", "dp = " + " * ".join(["1"] * 2000) + " * 8"))
    assert r.ok, _codes(r)
    r = _check(tmp_path, BASE.replace("dp = 8", "dp = " + "(" * 200 + "8" + " + 0)" * 200))
    assert r.ok, _codes(r)


def test_real_nesting_past_the_limit_is_refused(tmp_path):
    deep = "8" + " + (0" * 70 + ")" * 70
    r = _check(tmp_path, BASE.replace("dp = 8", "dp = " + deep))
    assert [d.message for d in r.diagnostics] == ["value nested more than 64 levels deep"]
    ok = "8" + " + (0" * 60 + ")" * 60
    assert _check(tmp_path, BASE.replace("dp = 8", "dp = " + ok)).ok


def test_deeply_nested_blocks_are_a_diagnostic(tmp_path):
    r = _check(tmp_path, BASE + "a {\n" * 2000 + "}\n" * 2000)
    assert [(d.code, d.message) for d in r.diagnostics] == [("P001", "blocks nested more than 64 levels deep")]
    assert r.diagnostics[0].span.line == 9 + 64


# ----------------------------------------------------------------------------- size and memory

def test_token_longer_than_the_limit_is_a_diagnostic(tmp_path):
    r = _check(tmp_path, BASE + 'target torchrun { entrypoint = "' + "x" * (P.MAX_TOKEN + 1) + '" }\n')
    assert _codes(r) == [("P001", 9, 32)]
    assert f"{P.MAX_TOKEN:,} characters" in r.diagnostics[0].message


def test_input_larger_than_the_limit_is_a_diagnostic(tmp_path):
    text = BASE + ("# padding line\n" * (P.MAX_INPUT // 15 + 10))
    r = _check(tmp_path, text)
    assert [d.code for d in r.diagnostics] == ["P001"]
    d = r.diagnostics[0]
    assert "1 MiB" in d.message and d.span.start == P.MAX_INPUT
    assert text[:d.span.start].count("\n") + 1 == d.span.line


def _peak_rss_kib(code: str) -> int:
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run([sys.executable, '-c', sys.argv[1]], check=True)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", probe, code], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.parametrize("body", ["'y' * 1_000_000", "'\\\\n' * 500_000"], ids=["plain", "escapes"])
def test_long_string_costs_no_memory_amplification(body):
    code = textwrap.dedent(f"""
        from parc.language.parser import parse_text, get_parser
        from parc.language.diagnostics import ParcError
        get_parser()
        text = 'x {{ a = "' + {body} + '" }}\\n'
        try:
            parse_text(text)
        except ParcError as e:
            assert e.diagnostic.code == "P001", e.diagnostic
    """)
    base = _peak_rss_kib("from parc.language.parser import get_parser; get_parser()")
    peak = _peak_rss_kib(code)
    # a 1 MB token may cost a few copies of itself, not hundreds of megabytes
    assert peak - base < 40_000, f"{(peak - base) / 1024:.0f} MiB for a 1 MB string"


# ----------------------------------------------------------------------------- linear passes

def test_rendering_many_diagnostics_is_linear():
    lines = 50_000
    text = "".join(f"x{i} {{ a = {i} }}\n" for i in range(lines))
    diags = [Diagnostic("P001", "error", "m", Span("f.par", ln, 1, ln, 2)) for ln in range(1, lines, 10)]
    t = time.perf_counter()
    out = render_text(diags, {"f.par": text})
    took = time.perf_counter() - t
    assert out.count("error: m") == len(diags)
    assert f"{lines - 9} | x{lines - 10} {{ a = {lines - 10} }}" in out
    assert took < 5, f"{took:.1f}s for {len(diags)} diagnostics"


def test_every_independent_syntax_error_of_many_blocks(tmp_path):
    text = "".join(f"b{i} {{ a = = {i} }}\n" for i in range(500))
    with pytest.raises(ParcError) as e:
        P.parse_text(text, "f.par")
    got = [e.value.diagnostic, *e.value.more]
    assert len(got) == P.MAX_SYNTAX_ERRORS
    lines = text.split("\n")
    assert [(d.span.line, d.span.column) for d in got] == [
        (i + 1, lines[i].index("= =") + 3) for i in range(P.MAX_SYNTAX_ERRORS)]
    last = P.MAX_SYNTAX_ERRORS - 1
    assert got[-1].span.start == text.index(f"b{last} ") + lines[last].index("= =") + 2
