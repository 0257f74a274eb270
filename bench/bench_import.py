"""`parc import` of one launch file against parc's start-up, both as processes run side by side.

Target: `parc import FILE` is within `parc check SPEC` (parc's start-up with the check of the spec
import writes) + 50 ms, by the median over interleaved rounds of each round's difference (the
fastest runs are printed beside it). The bare start-up (`parc --version`, no parser) is printed
too, and import's difference to it: import lays its spec out in fmt's layout without the parser
(parc/importer/draft.py), so it loads less than check, but it reads the presets and the targets'
tables that the bare start-up does not. The package runs from a copy compiled to bytecode the way
`pip install` leaves it (compileall), so neither side pays for compiling; runs are interleaved so
load affects both.

Run: python bench/bench_import.py [--runs 20] [--file tests/wild/sglang-pd-deepseek-v3-4node/serve.sh]
"""
from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 0.050


def installed_copy(into: Path) -> Path:
    """The parc package copied and compiled to bytecode as pip install leaves it."""
    shutil.copytree(ROOT / "parc", into / "parc", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(str(into / "parc"), quiet=1)
    return into


def timed(cmd: list[str], env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    took = time.perf_counter() - t
    assert r.returncode in (0, 1), (cmd, r.returncode)
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--file", default=str(ROOT / "tests" / "wild" / "sglang-pd-deepseek-v3-4node" / "serve.sh"))
    a = ap.parse_args()
    a.file = str(Path(a.file).resolve())
    # the commands run in the temporary folder: `python -m` puts the working folder first on the
    # path, where the checkout's own parc (run from the repository root) would shadow the copy
    tmp = Path(tempfile.mkdtemp(prefix="parc-bench-import-"))
    try:
        site = installed_copy(tmp / "site")
        env = {**os.environ, "PYTHONPATH": str(site)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        spec = tmp / "imported.par"
        subprocess.run([sys.executable, "-m", "parc", "import", a.file, "-o", str(spec)], env=env, cwd=tmp,
                       check=True, stderr=subprocess.DEVNULL)
        cmds = {"start-up (parc --version)": [sys.executable, "-m", "parc", "--version"],
                "parc check (imported spec)": [sys.executable, "-m", "parc", "check", str(spec)],
                "parc import (one file)": [sys.executable, "-m", "parc", "import", a.file, "-o", str(tmp / "o.par")]}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for k, c in cmds.items():      # warm the file cache once
            timed(c, env, tmp)
        for _ in range(a.runs):
            for k, c in cmds.items():
                times[k].append(timed(c, env, tmp))
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in med.items():
            print(f"{k:32s} median {v * 1000:7.1f} ms  (min {min(times[k]) * 1000:.1f})")
        # the gate: the median over the interleaved rounds of (import - check) in the same round, so
        # that the load one round carries weighs on both sides of its difference
        imp, chk, bare = (times[k] for k in ("parc import (one file)", "parc check (imported spec)",
                                             "start-up (parc --version)"))
        paired = statistics.median(i - c for i, c in zip(imp, chk))
        ok = paired <= BUDGET
        print(f"import - check, median of {len(imp)} interleaved rounds: {paired * 1000:+.1f} ms "
              f"(fastest runs: {(min(imp) - min(chk)) * 1000:+.1f} ms); import - bare start-up: "
              f"{statistics.median(i - b for i, b in zip(imp, bare)) * 1000:+.1f} ms; budget (against check) "
              f"+{BUDGET * 1000:.0f} ms: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
