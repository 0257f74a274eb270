"""Calibration in the accuracy table: fit the cluster's profile on a few rows of a published
table, then predict the rows held out, before and after.

The accuracy benchmark calls :func:`calibration_rows` with the cases of one table (plans of one
model family on one cluster, each with its measured step time) and renders them with
:func:`calibration_section` into docs/accuracy.md. The fit is :func:`parc.calibrate.fit`, the one
``parc calibrate`` runs on a user's logs.

Run alone (python bench/accuracy_calibration.py SPEC STEP_TIME [SPEC STEP_TIME ...]) it fits on
the first two specs and prints the section for all of them.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def calibration_rows(cases, fit_rows: int = 2, start=None) -> list[dict]:
    """One dict per case of ``cases`` ((plan, measured step time in seconds, label) triples):
    the profile is fitted on the first ``fit_rows`` cases, starting from ``start`` (default: the
    first plan's profile), and every case is predicted before and after. Keys: ``label``,
    ``fitted_on`` (whether the case was in the fit), ``measured``, ``before``, ``after`` (seconds),
    ``error_before``, ``error_after`` (predicted / measured - 1) and ``profile`` (the fitted
    values, the same dict on every row)."""
    from dataclasses import replace

    from parc.calibrate import fit, predict

    cases = list(cases)
    if not cases:
        return []
    start = start or cases[0][0].profile
    prof, report = fit([(plan, {"step_time": step}, label) for plan, step, label in cases[:fit_rows]],
                       start=start)
    values = report.values(prof)
    start_values = report.values(start)
    rows = []
    for i, (plan, step, label) in enumerate(cases):
        before = predict(replace(plan, profile=start), start)[0]
        after = predict(plan, prof)[0]
        rows.append({"label": label, "fitted_on": i < fit_rows, "measured": step, "before": before,
                     "after": after, "error_before": before / step - 1, "error_after": after / step - 1,
                     "profile": values, "start": start_values, "fitted": list(report.fitted)})
    return rows


def summary(rows: list[dict], held_out_only: bool = True) -> dict:
    """Median and worst absolute error before and after, over the held-out rows (or all)."""
    use = [r for r in rows if not (held_out_only and r["fitted_on"])] or rows
    out = {}
    for when in ("before", "after"):
        errs = [abs(r[f"error_{when}"]) for r in use]
        out[f"median_{when}"] = statistics.median(errs) if errs else 0.0
        out[f"worst_{when}"] = max(errs) if errs else 0.0
    return out


def calibration_section(rows: list[dict], title: str, source: str) -> str:
    """The markdown of one calibrated table: each row before and after, then the held-out errors."""
    if not rows:
        return ""
    fitted = ", ".join(f"`{k}` = {v:.4g}" for k, v in rows[0]["profile"].items()
                       if k in rows[0]["fitted"] or v != rows[0]["start"].get(k, v))
    lines = [f"### {title}", "", f"Source: {source}. Fitted on the rows marked *fit* "
             f"({fitted or 'nothing identified'}); the other rows are predicted with that profile.", "",
             "| case | | measured (s) | parc before (s) | error | parc after (s) | error |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['label']} | {'fit' if r['fitted_on'] else 'held out'} | {r['measured']:.3g} | "
                     f"{r['before']:.3g} | {100 * r['error_before']:+.1f}% | {r['after']:.3g} | "
                     f"{100 * r['error_after']:+.1f}% |")
    s = summary(rows)
    lines += ["", f"Held-out rows: median error {100 * s['median_before']:.1f}% before calibration, "
              f"{100 * s['median_after']:.1f}% after; worst {100 * s['worst_before']:.1f}% before, "
              f"{100 * s['worst_after']:.1f}% after.", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from parc.api import load_plan

    if len(argv) < 4 or len(argv) % 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    cases = [(load_plan(argv[i]), float(argv[i + 1]), Path(argv[i]).stem) for i in range(0, len(argv), 2)]
    print(calibration_section(calibration_rows(cases), "Calibration", "the command line"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
