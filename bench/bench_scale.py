"""How the front end grows with the size of a spec: 1x, 4x and 16x, up to the 1 MiB limit.

The spec is a real one followed by repeated blocks, comments and long expressions, and one
duplicated block per repetition (a P009 each), so the diagnostic path is measured too. Each
stage is timed in process, in processor seconds (best of --runs): parse, check (parse + resolve + rules), render the
diagnostics, fmt. Linear growth shows as ratios near 4 and 16; a quadratic pass as 16 and 256.

Run: python bench/bench_scale.py [--runs 3] [--base-kib 64]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEAD = (ROOT / "examples" / "llama3-8b-fsdp.par").read_text()


def chunk(i: int) -> str:
    return (f"# review note {i}: the batch divides, tp stays inside a node\n"
            f"schedule {{\n"
            f"  micro_batch  = 1\n"
            f"  global_batch = 8 * 16 + 0 * ({i} + 1 - 1)  # {i}\n"
            f"}}\n\n")


def spec_of(size: int) -> str:
    text, i = HEAD, 0
    while len(text) < size:
        text += chunk(i)
        i += 1
    return text


def best(fn, runs: int) -> float:
    """Processor seconds (best of ``runs``): on a shared machine wall time measures the load."""
    times = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base-kib", type=int, default=64)
    args = ap.parse_args()

    from parc.api import check_file
    from parc.language.diagnostics import ParcError
    from parc.report.diagnostics.text import render_text
    from parc.language.fmt import format_text
    from parc.language.parser import MAX_INPUT, get_parser, parse_text

    get_parser()
    folder = Path(tempfile.mkdtemp())
    rows = []
    for mult in (1, 4, 16):
        size = min(args.base_kib * 1024 * mult, MAX_INPUT)
        text = spec_of(size)
        text = text[:MAX_INPUT - 200] if len(text) > MAX_INPUT else text
        text = text[:text.rfind("\n\n") + 2] if len(text) >= MAX_INPUT - 200 else text
        f = folder / "spec.par"
        f.write_text(text)
        res = {}

        def check():
            res["r"] = check_file(f, root=folder, text=text)

        def fmt():
            try:
                format_text(text)
            except ParcError:
                pass

        t_parse = best(lambda: parse_text(text, str(f)), args.runs)
        t_check = best(check, args.runs)
        r = res["r"]
        t_render = best(lambda: render_text(r.diagnostics, dict(r.sources)), args.runs)
        t_fmt = best(fmt, args.runs)
        rows.append((mult, len(text), len(r.diagnostics), t_parse, t_check, t_render, t_fmt))
    base = rows[0]
    print(f"{'size':>6} {'bytes':>9} {'diags':>6} {'parse s':>9} {'check s':>9} {'render s':>9} {'fmt s':>9}"
          f"   ratios to 1x (parse, check, render, fmt)")
    for m, n, nd, *ts in rows:
        ratios = ", ".join(f"{t / b:.1f}" for t, b in zip(ts, base[3:]))
        print(f"{m:>5}x {n:>9,} {nd:>6} " + " ".join(f"{t:>9.3f}" for t in ts) + f"   {ratios}")


if __name__ == "__main__":
    main()
