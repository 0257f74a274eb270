"""The shared conformance cases, judged in process by the shared runner's own judge."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from conftest import ROOT

# the conformance cases live beside the checkout; only this test looks there, and it skips
# where they are absent
CONFORMANCE = ROOT.parent / "shared" / "conformance"

RUNNER = CONFORMANCE / "run.py"
pytestmark = pytest.mark.skipif(not RUNNER.is_file(), reason="shared conformance cases not present")


def _runner():
    spec = importlib.util.spec_from_file_location("conformance_run", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cases():
    if not RUNNER.is_file():
        return []
    expect = json.loads((CONFORMANCE / "expect.json").read_text())
    return [(p, None) for p in expect["valid"]] + list(expect["invalid"].items())


@pytest.mark.parametrize("rel,expectation", _cases(), ids=[c[0] for c in _cases()])
def test_conformance_case(rel, expectation, capsys, monkeypatch):
    from parc.cli.main import main

    monkeypatch.chdir(CONFORMANCE)
    rc = main(["check", "--format", "json", rel])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    report = json.loads(out)
    problem = _runner().judge(expectation, rc, report["diagnostics"])
    assert problem is None, problem


def test_runner_as_users_run_it():
    """The runner itself, through the installed command, as CI runs it."""
    import subprocess

    proc = subprocess.run([sys.executable, str(RUNNER), "--parc", f"{sys.executable} -m parc"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " 0 failed" in proc.stdout
