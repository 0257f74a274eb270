"""Golden files: every example (and test spec) x every target that accepts it, byte for byte.

PARC_UPDATE_GOLDEN=1 rewrites the golden files on purpose (tests/support/snapshot.py); review the
diff before committing."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backends_support import EXAMPLES, GOLDEN, ROOT, TARGETS, TEST_SPECS, compile_rel, golden_path, golden_text
from support.snapshot import assert_no_snapshot, assert_snapshot, stray_snapshots

CASES = [(s, t) for s in EXAMPLES + TEST_SPECS for t in TARGETS]


@pytest.mark.parametrize("spec,target", CASES, ids=[f"{os.path.basename(s)}-{t}" for s, t in CASES])
def test_golden(spec, target):
    r, _, files = compile_rel(spec, target)
    path = golden_path(spec, target)
    if files is None:
        assert r.errors, "refused without an error"
        assert_no_snapshot(path, f"{spec} no longer compiles for {target}: " + "; ".join(
            f"{d.code} {d.message}" for d in r.errors))
        return
    if target == "json":
        assert_snapshot(path, golden_text(files))
        return
    from parc.targets.base import plan_json

    text = golden_text(files, plan_json(r.plan))
    assert '"cluster": {' not in text, f"a copy of plan.json in the {target} files is not the plan's"
    assert_snapshot(path, text)


def test_every_target_has_goldens():
    """Each target accepts at least one example or test spec, and every example compiles for json."""
    have = {p.stem for p in GOLDEN.glob("*/*.txt")}
    assert set(TARGETS) <= have
    for spec in EXAMPLES:
        assert golden_path(spec, "json").exists()


def test_no_stray_goldens():
    stray = stray_snapshots(GOLDEN, "*/*.txt", [golden_path(s, t) for s, t in CASES])
    assert not stray, f"golden files without a case: {stray}"


def _compile_in_process(seed: str, out: str, spec: str, target: str) -> bytes:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    r = subprocess.run([sys.executable, "-m", "parc", "compile", spec, "--target", target, "-o", out],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = subprocess.run([sys.executable, "-m", "parc", "compile", spec, "--target", target],
                       cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert s.returncode == 0
    return s.stdout


@pytest.mark.parametrize("spec,target", [("examples/llama3-70b-train.par", "megatron"),
                                         ("tests/data/specs/slurm-kubernetes.par", "kubernetes"),
                                         ("examples/llama3-405b-serve-2node.par", "vllm")])
def test_deterministic_across_processes(tmp_path, spec, target):
    """Two processes with different hash seeds write identical bytes, to files and to stdout."""
    a, b = tmp_path / "a", tmp_path / "b"
    out_a = _compile_in_process("1", str(a), spec, target)
    out_b = _compile_in_process("4242", str(b), spec, target)
    assert out_a == out_b
    names = sorted(p.name for p in a.iterdir() if p.is_file())
    assert names == sorted(p.name for p in b.iterdir() if p.is_file())
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
        assert (a / n).stat().st_mode == (b / n).stat().st_mode
