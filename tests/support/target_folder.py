"""A copy of the package with one target folder added, and parc run from that copy: how the
tests show that a new target needs its folder and nothing else."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def package_with_target(base: Path, name: str, files: dict[str, str]) -> Path:
    """Copy ``parc/`` under ``base`` and add ``parc/targets/<name>/`` holding ``files`` (name ->
    text, dedented); the copy's root, to put on PYTHONPATH."""
    shutil.copytree(ROOT / "parc", base / "parc", ignore=shutil.ignore_patterns("__pycache__"))
    folder = base / "parc" / "targets" / name
    folder.mkdir()
    for fname, text in files.items():
        (folder / fname).write_text(textwrap.dedent(text).lstrip("\n"))
    return base


def run_parc(package: Path, cwd: Path, spec_text: str, *args: str, with_spec: bool = True):
    """``python -m parc ARGS [spec.par]`` with the copy first on the path (the installed parc's
    PYTHONPATH left out), the spec written to ``cwd``."""
    spec = cwd / "spec.par"
    spec.write_text(spec_text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(package)
    return subprocess.run([sys.executable, "-m", "parc", *args, *([str(spec)] if with_spec else [])],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
