"""A long fuzz run of the front end, in process: the properties of tests/test_fuzz.py on many
more inputs. Counts inputs, crashes (any exception, an "internal error" for a user), hangs
(an input over --limit seconds) and property failures (fmt not idempotent, meaning or lint
findings changed); writes every failing input to --out.

Run: python bench/fuzz_frontend.py --inputs 20000 [--lint-every 10] [--out fuzz-failures]
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


class Hang(Exception):
    pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=20000)
    ap.add_argument("--limit", type=int, default=10, help="seconds of processor time one input may take")
    ap.add_argument("--lint-every", type=int, default=10, help="also compare lint findings every Nth input")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz-failures")
    args = ap.parse_args()

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from spec_strategies import check_fmt, near_valid, resolved, spec

    out = Path(args.out)
    counts: Counter = Counter()
    slowest = [0.0, ""]
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="parc-fuzz-"))

    def on_alarm(signum, frame):
        raise Hang()

    # a hang is an input over --limit seconds of processor time (a loaded machine is no hang)
    # or over ten times that in all
    signal.signal(signal.SIGPROF, on_alarm)
    signal.signal(signal.SIGALRM, on_alarm)

    @seed(args.seed)
    @settings(max_examples=args.inputs, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(spec(), near_valid()), st.integers(0, 10**9))
    def one(text, k):
        n = counts["inputs"]
        counts["inputs"] += 1
        folder = tmp / str(n)
        folder.mkdir()
        t = time.perf_counter()
        signal.setitimer(signal.ITIMER_PROF, args.limit)
        signal.alarm(args.limit * 10)
        try:
            resolved(text, folder)
            outcome = check_fmt(text, folder, lint=(n % args.lint_every == 0))
            counts[outcome] += 1
        except Hang:
            counts["hangs"] += 1
            kind, why = "hang", traceback.format_exc()
        except AssertionError:
            counts["property failures"] += 1
            kind, why = "property", traceback.format_exc()
        except Exception:
            counts["crashes"] += 1
            kind, why = "crash", traceback.format_exc()
        else:
            kind = why = None
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.alarm(0)
        took = time.perf_counter() - t
        if took > slowest[0]:
            slowest[:] = [took, text[:80]]
        if kind:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{kind}-{n}.par").write_text(text, encoding="utf-8", newline="")
            (out / f"{kind}-{n}.txt").write_text(why)
        if counts["inputs"] % 100 == 0:
            print(f"{time.perf_counter() - t0:.0f} s:", dict(counts), flush=True)

    one()
    took = time.perf_counter() - t0
    print(f"inputs {counts['inputs']}, crashes {counts['crashes']}, hangs {counts['hangs']}, "
          f"property failures {counts['property failures']}; formatted {counts['formatted']}, "
          f"refused as syntax errors {counts['refused']}; {took:.0f} s, slowest input {slowest[0]:.2f} s")
    return 1 if counts["crashes"] or counts["hangs"] or counts["property failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
