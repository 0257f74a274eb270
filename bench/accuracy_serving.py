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


# --- vLLM's "Available KV cache memory" ---------------------------------------------------------

KV_CASES = "kv_memory_cases.toml"


def kv_memory_rows(root) -> tuple[dict, list[dict]]:
    """(the data of bench/kv_memory_cases.toml, one result a row): parc's "Available KV cache
    memory" at the row's release (parc/cost/startup.py) against the log's, with the terms."""
    import tempfile
    import tomllib
    from pathlib import Path

    from parc.api import check_file
    from parc.cost.estimate import estimate

    data = tomllib.loads((Path(root) / "bench" / KV_CASES).read_text(encoding="utf-8"))
    out = []
    with tempfile.TemporaryDirectory() as d:
        for row in data["row"]:
            path = Path(d) / f"{row['id']}.par"
            path.write_text(row["spec"].lstrip("\n"), encoding="utf-8")
            su = estimate(check_file(path).plan).stages[0].startup
            got = su.logged_kv(row["release"]) / 2**30
            out.append({"row": row, "startup": su, "parc": got, "error": got / row["measured"] - 1})
    return data, out


def kv_memory_lines(root, table) -> list[str]:
    """The serving-memory section of docs/accuracy.md."""
    data, results = kv_memory_rows(root)
    tol = data["tolerance"]
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    rows = []
    for r in results:
        row, su = r["row"], r["startup"]
        graphs = gib(su.graphs) + ("" if su.logged_kv(row["release"]) == su.kv else " (not subtracted)")
        rows.append([row["id"], row["model"], f"vLLM {row['release']}", row["role"].replace("_", "-"),
                     gib(su.budget), gib(su.weights), gib(su.activations + su.sampler), graphs,
                     f"{r['parc']:.2f}", f"{row['measured']:.2f}", f"{r['error']:+.1%}",
                     "met" if abs(r["error"]) <= tol else "**not met**"])
    out = ["## Serving memory at start-up", "",
           "vLLM's own \"Available KV cache memory\" (v1/worker/gpu_worker.py determine_available_memory) "
           "from published start-up logs, against parc's at the release that printed it "
           "(`parc/cost/startup.py`: the budget ceil(gpu_memory_utilization × memory) less the weights, the "
           f"profiling pass's peak and the CUDA graph estimate, which vLLM subtracts since 0.21). Target: within "
           f"{tol:.0%} of each. GiB; the rows and their sources are `bench/{KV_CASES}`, each a test "
           "(`tests/test_kv_memory_accuracy.py`). All are held out: the CUDA graph model's two constants are "
           "fitted on other lines (`parc/cost/startup.toml` says which: one is the Llama log's graph line, "
           "which its row does not compare, since vLLM 0.19 left the graphs in the KV cache).", ""]
    out += table(["row", "model", "log", "role", "budget", "weights", "profile peak", "CUDA graphs", "parc",
                  "vLLM", "error", f"≤ {tol:.0%}"], rows)
    out += ["", "Sources and assumptions:", ""]
    out += [f"- `{r['row']['id']}`: {r['row']['source']}. Assumed: {r['row']['assumed']}." for r in results]
    return out + [""]
