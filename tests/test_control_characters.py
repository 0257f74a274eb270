"""A spec's control characters (ESC, BEL, NUL, the bidirectional overrides) never reach the
terminal raw: every command that echoes a spec's text shows them escaped (``\\x1b``), so a spec
in a pull request cannot retitle, clear or reorder the reviewer's terminal."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from parc.printable import printable

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

SPEC = ('model "m\x1b]0;pwned\x07" { from = llama3_8b }\n'
        'cluster "c\x1b[2J" {\n  nodes = 1\n  gpus_per_node = 8\n  gpu = h100_sxm\n'
        '  intra_node = nvlink(450GB/s)\n}\n'
        'mesh { dp = 8 }\n'
        'serve { max_model_len = 4096 }\n'
        'target vllm { model = "a\x1b[31mb\u202e\x00" }\n')


def _parc(tmp_path, *args, stdin=None):
    return subprocess.run([sys.executable, "-m", "parc", *args], cwd=tmp_path, input=stdin,
                          capture_output=True, text=True, encoding="utf-8", errors="replace")


def test_printable_escapes_controls_and_keeps_text():
    assert printable("a\x1bb\x07c\x00d\u202ee") == "a\\x1bb\\x07c\\x00d\\u202ee"
    assert printable("tab\tand\nlines, ü, ∑") == "tab\tand\nlines, ü, ∑"


@pytest.mark.parametrize("args", [
    ["check", "spec.par"],
    ["lint", "spec.par", "--format", "github"],
    ["lint", "spec.par"],
    ["explain", "spec.par"],
    ["fmt", "--diff", "spec.par"],
    ["draw", "spec.par", "--what", "mesh"],
    ["explain", "ok.par"],
    ["diff", "ok.par", "spec.par"],
    ["diff", "ok.par", "spec.par", "--format", "markdown"],
])
def test_no_command_echoes_a_raw_control_character(tmp_path, args):
    (tmp_path / "spec.par").write_text(SPEC, encoding="utf-8")
    (tmp_path / "ok.par").write_text(SPEC.replace("\x00", ""), encoding="utf-8")
    r = _parc(tmp_path, *args)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    for name, out in (("stdout", r.stdout), ("stderr", r.stderr)):
        assert not RAW.search(out), (name, RAW.findall(out), out[:2000])
    assert "\\x1b" in r.stdout + r.stderr


def test_the_carets_follow_the_escaped_columns(tmp_path):
    (tmp_path / "spec.par").write_text('model "m" { from = llama3_8b\x1b[2J }\n', encoding="utf-8")
    r = _parc(tmp_path, "check", "spec.par")
    src, carets = [ln for ln in r.stdout.splitlines() if ln.startswith(("1 |", "  |"))][1:3]
    at = src.index("\\x1b")
    assert carets.index("^") == at and carets.count("^") == len("\\x1b")


def test_a_spec_named_with_a_newline_writes_no_code_into_the_float8_config_function(tmp_path):
    """parc's torchtitan float8 function is Python torchtitan imports: the spec's file name, in its
    header comment, stays one comment line whatever characters the name holds."""
    import ast

    from backends_support import ROOT, compile_rel

    text = (ROOT / "tests/wild/torchtitan-bench-llama3-8b-cp4/plan.par").read_text()
    path = tmp_path / 'x\nimport os; os.system("echo owned")\r.par'
    path.write_text(text)
    r, _, files = compile_rel(str(path), "torchtitan")
    assert files is not None, [d.code for d in r.errors]
    [f8] = [f for f in files if f.path == "parc_float8.py"]
    tree = ast.parse(f8.text)
    assert [type(n).__name__ for n in tree.body] == ["ImportFrom", "ImportFrom", "ImportFrom", "FunctionDef"]
    assert "\r" not in f8.text and "owned" in f8.text.splitlines()[0]
