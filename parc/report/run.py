"""What ``parc run`` prints: the summary of a run's report (the report itself is JSON)."""
from __future__ import annotations

import json


def _bytes_line(rep: dict) -> str:
    ranks = rep["ranks"]
    shown = ", ".join(str(r["param_bytes"]) for r in ranks[:8]) + (", …" if len(ranks) > 8 else "")
    if all(r["param_bytes"] == r["predicted_param_bytes"] for r in ranks):
        return f"  parameter bytes per rank: equal to parc explain's prediction ({shown})"
    held, counted = rep.get("param_bytes_per_param", 4), rep.get("predicted_bytes_per_param", 4)
    if counted and all(r["param_bytes"] * counted == r["predicted_param_bytes"] * held for r in ranks):
        return (f"  parameter bytes per rank: {shown}; the same parameters parc explain counts, held in "
                f"{held}-byte master weights here where explain counts {counted}-byte weights")
    pred = ", ".join(str(r["predicted_param_bytes"]) for r in ranks[:8]) + (", …" if len(ranks) > 8 else "")
    return f"  parameter bytes per rank: {shown} — DIFFERENT from parc explain's prediction ({pred})"


def render_text(rep: dict, spec: str) -> str:
    """The report of a run in a few lines: the mesh, the model, each step, the bytes check,
    the verification, the time and the checkpoint."""
    m = rep["mesh"]
    axes = " · ".join(f"{a}={m[a]}" for a in m["order"] if m.get(a, 1) > 1) or "1 process"
    lines = [f"{spec}: {'rehearsal' if rep['rehearsal'] else 'run'} of {rep['world_size']} rank"
             f"{'s' if rep['world_size'] != 1 else ''} ({axes}{', ep=' + str(m['ep']) if m.get('ep', 1) > 1 else ''})"]
    md = rep["model"]
    lines.append(f"  model: {md['layers']} layers, hidden {md['hidden']}, {md['heads']} heads "
                 f"({md['kv_heads']} kv), vocab {md['vocab']}, seq {md['seq_len']}"
                 + (f", {md['experts']} experts" if md["experts"] else "") + f" ({md['params']:,} params)")
    for s in rep["steps"]:
        lines.append(f"  step {s['step']}: loss {s['loss']:.6f}  {s['seconds'] * 1000:.0f} ms")
    lines.append(_bytes_line(rep))
    v = rep["verify"]
    if v["ran"]:
        verdict = "passed" if v["passed"] else "FAILED"
        lines.append(f"  verify: {verdict} against one process (max diff: loss {v['max_loss_diff']:.1e}, "
                     f"grads {v['max_grad_diff']:.1e}, params {v['max_param_diff']:.1e})")
        if v.get("missing_grads"):
            lines.append(f"  gradients on one side only: {', '.join(v['missing_grads'][:5])}")
    t = rep.get("timing")
    if t:
        lines.append(f"  time: {t['total']:.1f} s (check {t['check']:.1f}, imports {t['imports']:.1f}, "
                     f"reference {t['reference']:.1f}, "
                     f"launch and build {t['launch_and_build']:.1f}, steps {t['steps']:.1f})")
    if rep.get("checkpoint"):
        lines.append(f"  checkpoint: saved to {rep['checkpoint']['path']} at step {rep['checkpoint']['step']}")
    if rep.get("resumed"):
        lines.append(f"  resumed from {rep['resumed']['path']} (step {rep['resumed']['step']})")
    lines.extend(f"  note: {n}" for n in rep.get("notes", ()))
    return "\n".join(lines) + "\n"


def render_json(rep: dict, ok: bool) -> str:
    """The report with ``"ok"`` first."""
    return json.dumps({"ok": ok, **rep}, indent=2) + "\n"


def render_refusal(message: str, code: int, rank, diagnostics) -> str:
    """A run that ended before or instead of a report: why, the exit status, the rank that
    failed and the spec's diagnostics."""
    return json.dumps({"ok": False, "error": message, "exit_code": code, "rank": rank,
                       "diagnostics": [d.to_json() for d in diagnostics]}, indent=2) + "\n"
