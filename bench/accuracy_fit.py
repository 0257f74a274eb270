"""The default constants parc fits, fitted on the fit rows of the accuracy table and on nothing else.

``bench/accuracy_cases.toml`` gives every row a role: ``fit`` rows may set a default constant,
``held_out`` rows may not (docs/accuracy.md judges parc on them). The constants below are the only
defaults parc fits to published runs; every other rate comes from the GPU's datasheet and matmul
benchmark (``parc/model/data/gpus.toml``) and the kernels' own benchmarks
(``parc/model/data/kernels.toml``). This script reads the table, keeps the fit rows, and
minimises the sum over them of log(parc / measured)², one constant at a time by golden-section
search over its range (three rounds), from the middle of each range: the same table gives the
same constants, whatever parc's defaults are.

The fit rows are training and serving rows alike: both kinds read the same constants.

Fitted here:

* ``gemm_half_size`` (``Profile.gemm_half_size``): the smallest GEMM side, after sharding, at
  which a GEMM runs at half its largest shapes' rate (parc/cost/gemm.py).
* ``overlap`` (``Profile.overlap``): the share of the communication a plan overlaps with compute
  that is hidden (parc/cost/timing.py).

Run:   python bench/accuracy_fit.py            (prints the fit and the rows it used)
       python bench/accuracy_fit.py --check    (exits 1 when parc's defaults are not what the fit gives)
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = ROOT / "bench" / "accuracy_cases.toml"
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class Constant:
    """A fitted default: its name, the range searched, how many decimals parc keeps of it, how a
    trial value is set on a plan, and where parc's shipped default is read."""
    name: str
    low: float
    high: float
    decimals: int

    def apply(self, plan, value: float):
        return replace(plan, profile=replace(plan.profile, **{self.name: float(value)}))

    def shipped(self) -> float:
        from parc.model.plan import Profile

        return float(getattr(Profile(), self.name))


CONSTANTS = (Constant("gemm_half_size", 0.0, 1024.0, 0), Constant("overlap", 0.0, 1.0, 2))


def fit_rows(cases: list[dict]) -> list[dict]:
    """The rows the fit may read: role ``fit`` and nothing else."""
    return [c for c in cases if c.get("role") == "fit"]


def _plans(rows: list[dict], data: dict) -> list[tuple[dict, object]]:
    """(case, plan) of every fit row that parc can estimate."""
    from bench.accuracy import case_spec
    from parc.api import check_file

    out = []
    with tempfile.TemporaryDirectory() as d:
        for c in rows:
            path, _ = case_spec(c, data, Path(d))
            r = check_file(path)
            if r.plan is not None:
                out.append((c, r.plan))
    return out


def objective(pairs, values: dict) -> float:
    """Sum over the rows of log(parc / measured)² with the constants at ``values``."""
    from bench.accuracy import metric_value
    from parc.cost.estimate import estimate

    total = 0.0
    for case, plan in pairs:
        for k in CONSTANTS:
            plan = k.apply(plan, values[k.name])
        v = metric_value(case["metric"], plan, estimate(plan, cache=False))
        total += math.log(v / case["measured"]) ** 2 if v > 0 else 100.0
    return total


def _golden(f, lo: float, hi: float, tol: float) -> float:
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


@dataclass
class Fit:
    values: dict          # constant -> fitted value, rounded as parc keeps it
    rows: list            # the ids of the rows the fit read
    loss: float


def fit(cases: list[dict], data: dict, rounds: int = 3) -> Fit:
    """Fit :data:`CONSTANTS` on the fit rows of ``cases`` (the rest are never read)."""
    pairs = _plans(fit_rows(cases), data)
    values = {k.name: (k.low + k.high) / 2 for k in CONSTANTS}   # fixed starts, not parc's defaults
    for _ in range(rounds):
        for k in CONSTANTS:
            tol = 10.0 ** -k.decimals / 2
            values[k.name] = _golden(lambda x: objective(pairs, {**values, k.name: x}), k.low, k.high, tol)
    values = {k.name: round(values[k.name], k.decimals) for k in CONSTANTS}
    return Fit(values, [c["id"] for c, _ in pairs], objective(pairs, values))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when parc's defaults differ from the fit")
    args = ap.parse_args(argv)
    data = tomllib.loads(CASES.read_text(encoding="utf-8"))
    got = fit(data["case"], data)
    print(f"fitted on {len(got.rows)} rows: {', '.join(got.rows)}")
    print(f"sum of log(parc / measured)^2: {got.loss:.4f}")
    stale = []
    for k in CONSTANTS:
        shipped = k.shipped()
        print(f"  {k.name} = {got.values[k.name]:g}   (parc's default: {shipped:g})")
        if round(shipped, k.decimals) != got.values[k.name]:
            stale.append(k.name)
    if args.check and stale:
        print("parc's defaults are not the fit's: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
