"""From a spec and its measured logs to a fitted profile: the library side of ``parc calibrate``."""
from __future__ import annotations

from dataclasses import dataclass

from parc.calibrate.fit import FitReport, fit
from parc.calibrate.logs import Run, read_log
from parc.calibrate.render import profile_text
from parc.calibrate.runs import plan_of_run


@dataclass
class Calibration:
    runs: list[Run]
    report: FitReport
    text: str          # the `profile` block with its header


def read_logs(paths: list[str]) -> list[Run]:
    """Every run in ``paths`` (OSError or LogError from the first file that cannot be read)."""
    runs: list[Run] = []
    for path in paths:
        got = read_log(path)
        if len(paths) > 1 and len(got) == 1 and got[0].label in {r.label for r in runs}:
            got[0].label = path
        runs.extend(got)
    return runs


def calibrate(spec: str, plan, logs: list[str], root=None, name: str | None = None,
              text: str | None = None) -> Calibration:
    """Fit ``plan``'s profile (the plan of ``spec``) to the runs in ``logs``. Raises OSError,
    LogError, RunError or FitError, each naming what it could not use. ``text``: the spec's
    text when it is not on disk (standard input), served to the runs under ``spec``'s name."""
    runs = read_logs(logs)
    reader = None
    if text is not None:
        from pathlib import Path

        from parc.calibrate.runs import TextReader

        reader = TextReader(Path(spec).resolve(), text)
    plans = [plan_of_run(spec, plan, r, root=root, reader=reader) for r in runs]
    prof, report = fit([(p, r.measured, r.label) for p, r in zip(plans, runs)], start=plan.profile)
    report.profile.name = name or plan.profile.name or f"{plan.cluster.name}-measured"
    text = profile_text(report, spec, report.profile.name, [r.source for r in runs])
    return Calibration(runs, report, text)
