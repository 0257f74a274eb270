"""The judges' processes: each judge is a script under tests/judges/ that runs in an isolated
virtual environment made (once, cached) by its ``<name>_env.sh``, reads one JSON batch a line on
stdin and answers one line that starts with its mark. A test module opens one process for the
module with :func:`start` and asks it with :func:`ask`.

The judges run when ``PARC_JUDGES`` asks for them, never by surprise: their environments are
several GB from the package registry. ``.ci/run`` builds them and sets ``PARC_JUDGES``; a plain
``python -m pytest`` skips every judge test with one line saying how to turn them on.

* ``PARC_JUDGES`` unset or empty: skip.
* ``PARC_JUDGES=1``: run each judge whose environment exists or can be built (``<name>_env.sh``
  builds it, once); skip with the reason where it cannot be built.
* ``PARC_JUDGES=required``: as ``1``, but a judge that cannot run fails the test.

``PARC_<NAME>_PYTHON`` names an existing environment's python instead of the cached one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JUDGES = Path(__file__).resolve().parent.parent / "judges"
HOW = ("judge tests are off: PARC_JUDGES=1 python -m pytest runs them (their environments are built once "
       "by tests/judges/*_env.sh, several GB from the package registry; .ci/run does this)")


def enabled() -> bool:
    """Whether this run asked for the judges (PARC_JUDGES set to 1 or required)."""
    return os.environ.get("PARC_JUDGES", "").strip().lower() not in ("", "0", "no", "off", "false")


def missing(reason: str):
    if os.environ.get("PARC_JUDGES") == "required":
        pytest.fail(reason)
    pytest.skip(reason)


def python(name: str, python_var: str, timeout: int = 1200) -> str:
    """The python of judge ``name``'s environment: ``python_var`` where set, else the one
    ``<name>_env.sh`` makes (or finds cached). Skips (fails under required) where judges are off
    or the environment cannot be made."""
    if not enabled():
        pytest.skip(HOW)
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
    return py


def start(name: str, python_var: str, stderr_path: Path, timeout: int = 1200,
          env: dict | None = None, script: list | None = None) -> subprocess.Popen:
    """The judge ``tests/judges/<name>_judge.py`` running in :func:`python`'s environment (or
    ``script``: another judge script of tests/judges and its arguments, in that environment)."""
    py = python(name, python_var, timeout)
    err = open(stderr_path, "w+")
    argv = [str(JUDGES / script[0]), *script[1:]] if script else [str(JUDGES / f"{name}_judge.py")]
    proc = subprocess.Popen([py, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True, env={**os.environ, **(env or {})})
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
