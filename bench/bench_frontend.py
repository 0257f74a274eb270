"""Front-end performance: in-process parse + resolve, and `parc check` as a whole process.

Targets (issue: the .par language end to end):
* parse + resolve of a 100-line spec, in process: median <= 5 ms;
* `parc check examples/<spec>.par` as a process: median <= 1.5 x `python -c "import lark, pydantic"`,
  measured side by side (runs interleaved) in the same invocation, by bench/bench_startup.py.

Run: python bench/bench_frontend.py [--runs 30]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def hundred_line_spec() -> str:
    base = (ROOT / "examples" / "llama3-70b-train.par").read_text()
    base = base.replace('use "clusters/dgx-h100-8node.par"\n', (ROOT / "examples" / "clusters" /
                                                                 "dgx-h100-8node.par").read_text())
    lines = base.splitlines()
    # pad to 100 lines with comments and overrides the way real specs grow
    extra = ["", "# notes for reviewers", "# - tp stays inside a node", "# - pp crosses nodes over IB"]
    while len(lines) + len(extra) < 100:
        extra.append(f"# review note {len(extra)}: checked against the cluster's topology")
    return "\n".join(lines + extra) + "\n"


def bench_inprocess(runs: int) -> tuple[float, int]:
    from parc.resolve.resolver import resolve_text

    text = hundred_line_spec()
    d = Path(tempfile.mkdtemp())
    f = d / "spec.par"
    f.write_text(text)
    resolve_text(text, str(f))  # warm: the parser is built once per process
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = resolve_text(text, str(f))
        times.append(time.perf_counter() - t)
        assert r.plan is not None and not r.diagnostics, r.diagnostics
    shutil.rmtree(d)
    return statistics.median(times), len(text.splitlines())


def bench_process(runs: int, spec: str):
    """`parc check` against the import floor, side by side (bench/bench_startup.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_startup import measure

    m = measure(runs, spec)
    return m["check"], m["floor"], m["check_min"], m["floor_min"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--spec", default=str(ROOT / "examples" / "llama3-70b-train.par"))
    args = ap.parse_args()
    med, n = bench_inprocess(max(args.runs * 5, 100))
    print(f"parse + resolve, {n}-line spec, in process: median {med * 1e3:.2f} ms (target <= 5 ms)")
    c, b, cmin, bmin = bench_process(args.runs, args.spec)
    print(f"`parc check` process:                   median {c * 1e3:.1f} ms (min {cmin * 1e3:.1f})")
    print(f"`python -c 'import lark, pydantic'`:    median {b * 1e3:.1f} ms (min {bmin * 1e3:.1f})")
    print(f"ratio check / imports: {c / b:.2f} (target <= 1.5); by minimum {cmin / bmin:.2f}")


if __name__ == "__main__":
    main()
