"""The serving side of bench/accuracy.py: the serving metrics, the target blocks a serving row
may need (the engine's all-to-all backend), and the summary by role that docs/accuracy.md leads
with (held-out rows first, training and serving each)."""
from __future__ import annotations

import math
import statistics

METRICS = {   # metric -> (how the table prints it, unit)
    "ttft": ("{:.3f}", "s TTFT"),
    "itl": ("{:.4f}", "s ITL"),
    "output_tokens_s": ("{:,.0f}", "output tokens/s"),
}
TARGETS = {"held_out": (0.15, 0.35), "fit": (0.10, 0.25)}   # role -> (median, worst) |error|


def value(metric: str, plan, e) -> float:
    """``metric`` of :data:`METRICS` (or a per-node serving rate) in parc's estimate ``e``."""
    sv = e.serving
    if sv is None:
        return 0.0
    if metric == "ttft":
        return sv.ttft
    if metric == "itl":
        return sv.tpot
    if metric == "output_tokens_s":
        return sv.output_tokens_per_s
    return getattr(sv, metric.replace("_per_node_s", "_per_s")) / plan.cluster.nodes


def target_blocks(case: dict) -> list[str]:
    """``target NAME { ... }`` for each entry of the case's ``target`` table."""
    out = []
    for name, keys in (case.get("target") or {}).items():
        body = "\n".join(f"  {k} = " + (f'"{v}"' if k == "model" else str(v)) for k, v in keys.items())
        out.append(f"target {name} {{\n{body}\n}}")
    return out


def kind(case: dict) -> str:
    return "serving" if "serve" in case else "training"


def role_rows(results: list[dict]) -> list[list[str]]:
    """One row per (kind, role): rows, median and worst |error|, and whether the targets hold."""
    rows = []
    for k in ("training", "serving"):
        for role in ("held_out", "fit"):
            errs = [abs(r["error"]) for r in results if r["error"] is not None and kind(r["case"]) == k
                    and r["case"].get("role", "held_out") == role]
            if not errs:
                continue
            med, worst = statistics.median(errs), max(errs)
            tm, tw = TARGETS[role]
            ok = med <= tm and worst <= tw
            rows.append([k, role.replace("_", "-"), str(len(errs)), f"{med:.1%}", f"{worst:.1%}",
                         f"≤ {tm:.0%} / ≤ {tw:.0%}", "met" if ok else "**not met**"])
    return rows


def summary_lines(results: list[dict], table) -> list[str]:
    """The lead of docs/accuracy.md: the held-out error of training and serving rows, then the fit rows'."""
    return (["## Held-out and fit rows", "",
             "A row's role says whether it may set a default constant (`fit`) or not (`held-out`: parc is judged "
             "on it). The held-out error comes first; each has its own target (median, worst).", ""]
            + table(["kind", "role", "rows", "median abs. error", "worst abs. error", "target", ""],
                    role_rows(results)) + [""])


def nan_safe(x: float) -> float:
    return x if isinstance(x, float) and math.isfinite(x) else float("nan")
