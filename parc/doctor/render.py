"""parc doctor's report as text: the findings first (errors, then warnings), each with its fix,
then what passed, then the verdict."""
from __future__ import annotations

from parc.doctor import Report
from parc.doctor.findings import ERROR
from parc.report.term import GREEN, RED, YELLOW, paint
from parc.words import count


def text(rep: Report, color: bool = False) -> str:
    lines = [f"parc doctor: {rep.spec}, node {rep.node_rank} of {rep.nodes}"]
    for f in sorted(rep.findings, key=lambda f: f.severity != ERROR):
        sev = paint(f.severity, RED if f.severity == ERROR else YELLOW, color)
        lines += [f"  {sev} {f.code} {f.name}: {f.message}", f"    fix: {f.fix}"]
    for p in rep.passed:
        lines.append(f"  {paint('ok', GREEN, color)} {p.check}: {p.detail}")
    errors = sum(f.severity == ERROR for f in rep.findings)
    warnings = len(rep.findings) - errors
    if rep.ready:
        tail = " (with " + count(warnings, "warning") + ")" if warnings else ""
        lines.append(f"ready: this node can launch the plan{tail}")
    else:
        lines.append(f"not ready: {count(errors, 'problem')} to fix before the launch"
                     + (f", {count(warnings, 'warning')}" if warnings else "")
                     + " (docs/doctor.md explains each code)")
    return "\n".join(lines) + "\n"
