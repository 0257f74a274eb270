"""The judges' processes: each judge is a script under tests/judges/ that runs in an isolated
virtual environment made (once, cached) by its ``<name>_env.sh``, reads one JSON batch a line on
stdin and answers one line that starts with its mark. A test module opens one process for the
module with :func:`start` and asks it with :func:`ask`; without its environment the test skips
with the reason (PARC_JUDGES=required makes that a failure)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JUDGES = Path(__file__).resolve().parent.parent / "judges"


def missing(reason: str):
    if os.environ.get("PARC_JUDGES") == "required":
        pytest.fail(reason)
    pytest.skip(reason)


def start(name: str, python_var: str, stderr_path: Path, timeout: int = 1200) -> subprocess.Popen:
    """The judge ``tests/judges/<name>_judge.py`` running in the python ``python_var`` names, or
    in the environment ``<name>_env.sh`` makes."""
    py = os.environ.get(python_var)
    if not py:
        try:
            r = subprocess.run(["bash", str(JUDGES / f"{name}_env.sh")], capture_output=True, text=True,
                               timeout=timeout, env={**os.environ, "PYTHON": sys.executable})
        except subprocess.TimeoutExpired:
            missing(f"creating the {name} judge's environment took more than {timeout} s")
        if r.returncode:
            missing(f"no {name} judge environment: " + (r.stderr.strip().splitlines() or [f"{name}_env.sh failed"])[-1])
        py = r.stdout.strip().splitlines()[-1]
    if not os.access(py, os.X_OK):
        missing(f"no {name} judge environment: {py} ({python_var}) is not an executable python")
    err = open(stderr_path, "w+")
    proc = subprocess.Popen([py, str(JUDGES / f"{name}_judge.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True)
    proc.stderr_file = err
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=60)
    proc.stderr_file.close()


def ask(proc: subprocess.Popen, mark: str, batch: list) -> list:
    """Send one batch; the answer is the first line that starts with ``mark`` (a tool may log to
    stdout too)."""
    proc.stdin.write(json.dumps(batch) + "\n")
    proc.stdin.flush()
    for line in proc.stdout:
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    proc.stderr_file.seek(0)
    raise AssertionError("the judge stopped: " + proc.stderr_file.read()[-3000:])
