"""What ``parc calibrate`` prints and writes: the `profile` block (in the layout ``parc fmt``
gives, with a comment header naming the runs and the errors before and after), a text report,
and the JSON object docs/json.md describes."""
from __future__ import annotations

import json
from dataclasses import fields

from parc.calibrate.fit import FitReport
from parc.model.plan import Profile


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _rounded(v: float) -> str:
    return repr(float(f"{v:.4g}"))


def written_fields(report: FitReport) -> list[str]:
    """The fields the block sets: those the fit moved, and those the start already set apart
    from parc's defaults (the rest are left to the defaults, or to a later `profile` block)."""
    default = Profile()
    moved = set(report.fitted) | set(report.weak) | {f for g in report.confounded for f in g}
    return [f for f in report.fields
            if f in moved or getattr(report.start, f) != getattr(default, f)]


def error_line(summary: dict, quantity: str) -> str | None:
    s = summary.get(quantity)
    if not s:
        return None
    return (f"median {_abs_pct(s['median_before'])} before, {_abs_pct(s['median_after'])} after; "
            f"worst {_abs_pct(s['worst_before'])} before, {_abs_pct(s['worst_after'])} after")


def profile_text(report: FitReport, spec: str, name: str, sources: list[str]) -> str:
    """The `profile` block of the fit, with its header, as ``parc fmt`` lays it out."""
    from parc.language.fmt import format_text

    n = len(report.runs)
    head = [f"# Fitted by `parc calibrate` to {n} measured run{'s' if n != 1 else ''} of {spec}:"]
    for r, src in zip(report.runs, sources):
        head.append(f"#   {r.label}: {r.measured_step_time:.4g} s per step ({src})")
    summary = report.summary()
    for q, word in (("step_time", "step time"), ("memory", "peak memory")):
        if (line := error_line(summary, q)):
            head.append(f"# {word} error: {line}")
    head.append(f"# fitted: {', '.join(report.fitted) or 'none'}")
    for g in report.confounded:
        head.append(f"# only together (these runs do not tell them apart): {', '.join(g)}")
    if report.weak:
        head.append(f"# barely moved by these runs (kept near where they were): {', '.join(report.weak)}")
    if report.unidentified:
        head.append(f"# not moved by these runs, left as they were: {', '.join(report.unidentified)}")
    body = [f"  {k} = {json.dumps(v) if k == 'gpu' else v}" for k in ("framework", "gpu")
            if (v := getattr(report.profile, k))]
    body += [f"  {f} = {_rounded(getattr(report.profile, f))}" for f in written_fields(report)]
    text = "\n".join(head) + f"\nprofile {json.dumps(name)} {{\n" + "\n".join(body) + "\n}\n"
    return format_text(text)


def render_text(report: FitReport, sources: list[str]) -> str:
    """The report a person reads: each run's measured and predicted step time, the fitted values."""
    rows = [("run", "measured", "before", "error", "after", "error")]
    for r in report.runs:
        e = r.errors()
        rows.append((r.label, f"{r.measured_step_time:.4g} s", f"{r.step_time_before:.4g} s",
                     _pct(e["step_time_before"]), f"{r.step_time_after:.4g} s", _pct(e["step_time_after"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["step time per run:"]
    out += ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in rows]
    summary = report.summary()
    for q, word in (("step_time", "step time"), ("memory", "peak memory")):
        if (line := error_line(summary, q)):
            out.append(f"{word} error: {line}")
    out.append("")
    out.append("profile:")
    for f in report.fields:
        before, after = getattr(report.start, f), getattr(report.profile, f)
        how = ("fitted" if f in report.fitted else
               "not identified: left as it was" if f in report.unidentified else
               "weakly determined: kept near where it was" if f in report.weak else
               "set together with " + ", ".join(x for g in report.confounded if f in g for x in g if x != f))
        if f in report.at_bound:
            how += " (at the end of its range)"
        out.append(f"  {f:<24} {_rounded(before):>8} -> {_rounded(after):<8} {how}")
    return "\n".join(out)


def render_json(report: FitReport, spec: str, runs, output: str | None, text: str) -> str:
    """The ``--format json`` object (docs/json.md: "parc calibrate")."""
    data = report.to_json()
    for row, run in zip(data["runs"], runs):
        row["source"] = run.source
        row["steps"] = run.steps
        row["settings"] = dict(run.settings) | ({"world_size": run.world_size} if run.world_size else {})
    known = {f.name for f in fields(Profile)}
    data["profile"] = {k: v for k, v in data["profile"].items() if k in known}
    return json.dumps({"spec": spec, **data, "written_fields": written_fields(report), "output": output,
                       "profile_text": text}, indent=2)
