"""What every command does alike: `-` reads the spec from stdin, `--format json` puts JSON on
stdout whatever happened, a folder's shared cluster files are fragments for `check` as for
`lint`, counts that count, did-you-mean that finds the near name, and a picture that is
refused rather than drawn as a sentence."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.specs import spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TRAIN = EXAMPLES / "llama3-70b-train.par"
SERVE = EXAMPLES / "llama3-70b-serve.par"
BAD = spec("from = llama3_70b", mesh="tp = 6", schedule="micro_batch = 1; global_batch = 8")


def parc(*args, stdin: str | None = None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "parc", *map(str, args)], cwd=cwd, input=stdin,
                          capture_output=True, text=True)


def test_check_takes_a_folders_shared_cluster_files_as_fragments():
    r = parc("check", "examples/")
    assert "P018" not in r.stdout, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    assert "in 18 files" in r.stdout or "18 files checked" in r.stdout


def test_check_still_reports_a_fragments_syntax(tmp_path):
    (tmp_path / "cluster.par").write_text('cluster "c" {\n  nodes = 1 gpus_per_node = 8\n}\n')
    r = parc("check", tmp_path)
    assert r.returncode == 1 and "P001" in r.stdout and "P018" not in r.stdout


def test_lint_counts_every_file_it_was_given(tmp_path):
    (tmp_path / "a.par").write_text(BAD)
    r = parc("lint", tmp_path / "a.par", tmp_path / "x.par", tmp_path / "y.par")
    assert r.stdout.strip().splitlines()[-1].endswith(" in 3 files"), r.stdout
    r = parc("check", tmp_path / "a.par", tmp_path / "x.par", tmp_path / "y.par")
    assert r.stdout.strip().splitlines()[-1].endswith(" in 3 files"), r.stdout


def test_a_timeline_of_a_training_plan_is_refused():
    r = parc("draw", TRAIN, "--what", "timeline")
    assert r.returncode == 2 and r.stdout == ""
    assert "serving" in r.stderr and "--what schedule" in r.stderr


@pytest.mark.parametrize("args", [
    ["diff", "{bad}", "{bad}", "--format", "json"],
    ["diff", TRAIN, "{bad}", "--format", "json"],
    ["plan", "{bad}", "--format", "json"],
    ["plan", "--model", "llama3_70b", "--cluster", "{missing}", "--format", "json"],
])
def test_format_json_prints_json_on_stdout_also_on_errors(tmp_path, args):
    bad = tmp_path / "bad.par"
    bad.write_text(BAD.replace("tp = 6", 'tp = "six"'))
    args = [str(a).format(bad=bad, missing=tmp_path / "missing.par") for a in args]
    r = parc(*args)
    assert r.returncode in (1, 2), r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False and (out["diagnostics"] or out["error"]), out


SPEC_COMMANDS = [
    ["check", "-"], ["lint", "-"], ["explain", "-"], ["compile", "-", "--target", "json"],
    ["draw", "-", "--what", "mesh"], ["plan", "-", "--top", "1"], ["fmt", "-"],
    ["doctor", "-"], ["diff", TRAIN, "-"],
]


@pytest.mark.parametrize("args", SPEC_COMMANDS, ids=lambda a: a[0])
def test_every_command_that_reads_a_spec_takes_stdin(args):
    r = parc(*args, stdin=TRAIN.read_text().replace('use "clusters/', f'use "{EXAMPLES}/clusters/'))
    assert "No such file" not in r.stderr and "cannot read -" not in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "usage:" not in r.stderr, r.stderr
    assert r.stdout.strip(), r.stderr


def test_calibrate_takes_stdin():
    logs = ROOT / "tests" / "data" / "logs"
    r = parc("calibrate", "-", logs / "runs.csv", stdin=(logs / "base.par").read_text())
    plain = parc("calibrate", logs / "base.par", logs / "runs.csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout.replace(str(logs / "base.par"), "<stdin>.par")


def test_run_takes_stdin():
    r = parc("run", "-", "--steps", "0", stdin="not a spec {\n")
    assert r.returncode == 1 and "<stdin>:1:" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("written, meant", [("gpu = h100", "h100_sxm"), ("pipeline = 1F1B", "1f1b"),
                                            ("recompute = FULL", "full")])
def test_did_you_mean_finds_the_family_and_the_case(check_spec, written, meant):
    text = spec("from = llama3_8b", mesh="pp = 2; dp = 4",
                schedule="pipeline = 1f1b; micro_batch = 1; global_batch = 64", train="zero = 1; recompute = none")
    key = written.split(" =")[0]
    text = "\n".join(f"  {written}" if ln.strip().startswith(key + " ") else ln for ln in text.splitlines()) + "\n"
    r = check_spec(text)
    d = next(d for d in r.diagnostics if d.code in ("P010", "P016"))
    assert d.help.startswith(f"did you mean `{meant}`?"), d.help
