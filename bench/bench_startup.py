"""`parc check` start-up against the import floor, side by side in one run.

Target: `parc check examples/<spec>.par` as a process takes at most 1.5 x `python -c "import lark,
pydantic"` (the floor: the two libraries parc is built on), by median over interleaved runs.
Measured as an installed package runs: bytecode cached (PYTHONDONTWRITEBYTECODE unset, so the
warm-up runs leave the .pyc files pip would have written), `parc check` started the way the
console script starts it (`from parc.cli.main import main`), never through a shell shim.

Run: python bench/bench_startup.py [--runs 30] [--spec examples/llama3-70b-train.par]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5
FLOOR = [sys.executable, "-c", "import lark, pydantic"]


def check_command(spec: str) -> list[str]:
    """`parc check SPEC` as the console script runs it."""
    return [sys.executable, "-c", "import sys; from parc.cli.main import main; sys.exit(main())", "check", spec]


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as an installed package runs: bytecode cached
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _once(cmd, env) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def measure(runs: int, spec: str) -> dict:
    """Median and minimum seconds of `parc check SPEC` and of the floor, run alternately."""
    env, check = _env(), check_command(spec)
    for _ in range(3):   # warm the OS cache; write the bytecode
        _once(check, env), _once(FLOOR, env)
    a, b = [], []
    for _ in range(runs):
        a.append(_once(check, env))
        b.append(_once(FLOOR, env))
    return {"check": statistics.median(a), "floor": statistics.median(b), "check_min": min(a), "floor_min": min(b),
            "ratio": statistics.median(a) / statistics.median(b), "ratio_min": min(a) / min(b)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--spec", default=str(ROOT / "examples" / "llama3-70b-train.par"))
    args = ap.parse_args()
    m = measure(args.runs, args.spec)
    print(f"`parc check` process:                   median {m['check'] * 1e3:.1f} ms (min {m['check_min'] * 1e3:.1f})")
    print(f"`python -c 'import lark, pydantic'`:    median {m['floor'] * 1e3:.1f} ms (min {m['floor_min'] * 1e3:.1f})")
    print(f"ratio check / imports: {m['ratio']:.2f} (target <= {TARGET}); by minimum {m['ratio_min']:.2f}")
    return 0 if m["ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
