"""What ``parc plan --serve --objective ...`` prints: the workload and goal, how many deployments
were evaluated and why the others failed, the ranked table, and the best deployment; when none
meets the goal, the closest one and by how much it misses. Reads the search result
(``parc.planner.serve_search.ServeResult``) it is given and imports nothing from the planner."""
from __future__ import annotations

from parc.cost.engine import max_model_len
from parc.report.term import table
from parc.units import gb_value, number_short, seconds_short

REASONS = {"memory": "do not fit in memory", "cluster": "need more GPUs than the cluster has",
           "ttft": "miss the TTFT target", "tpot": "miss the TPOT target"}


def _pool(ic, n: int) -> str:
    return f"{n} × {ic.shape.label()}"


def workload_line(res) -> str:
    g = res.goal
    conc = f"{g.concurrency:,} requests in flight" if g.concurrency else "as many requests as fit"
    return (f"workload: {g.prompt_tokens:,} prompt + {g.output_tokens:,} output tokens, {conc}; "
            f"{g.targets_text()}; objective {g.objective}")


def failures(res) -> str:
    """How many deployments failed, by reason."""
    if not res.failed:
        return "none failed"
    return ", ".join(f"{n:,} {REASONS.get(k, k)}" for k, n in res.failed.items())


def summary(d) -> str:
    """One deployment in a line."""
    return (f"{d.label()}: {d.gpus} GPUs, TTFT {seconds_short(d.ttft)}, TPOT {seconds_short(d.tpot)}, "
            f"{number_short(d.throughput)} output tokens/s ({number_short(d.tokens_per_gpu)} per GPU), "
            f"{d.batch:.4g} requests per decode step, {gb_value(d.memory)}/{gb_value(d.capacity)} GB per GPU")


def loses_on(res, i: int) -> str:
    """Why plan ``i`` ranks below plan 0 under the objective."""
    if i == 0:
        return "-"
    a, b = res.plans[0], res.plans[i]
    if res.goal.objective == "min-gpus" and b.gpus > a.gpus:
        return f"+{b.gpus - a.gpus} GPUs"
    if b.tokens_per_gpu < a.tokens_per_gpu:
        return f"tokens/GPU ×{b.tokens_per_gpu / a.tokens_per_gpu:.2f}" if a.tokens_per_gpu else "-"
    if b.gpus > a.gpus:
        return f"+{b.gpus - a.gpus} GPUs"
    return "TTFT" if b.ttft > a.ttft else "tie"


def render_table(res) -> str:
    pooled = any(d.disaggregated for d in res.plans)
    head = ["#", "GPUs"] + (["prefill"] if pooled else []) + ["decode" if pooled else "replicas",
                                                               "batch/rank", "TTFT", "TPOT", "tokens/s", "per GPU",
                                                               "mem GB", "loses on"]
    rows = []
    for i, d in enumerate(res.plans):
        rows.append([d.rank, d.gpus] + ([_pool(d.prefill, d.prefill_instances) if d.prefill else "-"] if pooled else [])
                    + [_pool(d.decode, d.instances), f"{d.batch:.4g}", seconds_short(d.ttft), seconds_short(d.tpot),
                       number_short(d.throughput), number_short(d.tokens_per_gpu), gb_value(d.memory),
                       loses_on(res, i)])
    align = "rr" + ("l" if pooled else "") + "lrrrrrrl"
    if any(d.warnings for d in res.plans):
        head.append("warnings")
        for row, d in zip(rows, res.plans):
            row.append(" ".join(d.warnings) or "-")
        align += "l"
    return table(head, rows, align)


def no_plan(res) -> str:
    """Why nothing meets the goal, naming the closest deployment."""
    g = res.goal
    if res.rejected and not res.plans and res.feasible:
        codes = sorted({c for _, cs in res.rejected for c in cs})
        return (f"no plan: the rules refuse every deployment that meets the goal ({', '.join(codes)}); "
                f"the best of them: {summary(res.rejected[0][0])}")
    lines = [f"no deployment meets {g.targets_text()} on {res.problem.cluster.world} GPUs ({failures(res)})"]
    c = res.closest
    if c is None:
        lines.append("none fits in memory: ask for more GPUs, a shorter max_model_len, or fp8 weights")
        return "\n".join(lines)
    misses = []
    if g.ttft is not None and c.ttft > g.ttft:
        misses.append(f"TTFT {seconds_short(c.ttft)}, {c.ttft / g.ttft:.2f}× the target")
    if g.tpot is not None and c.tpot > g.tpot:
        misses.append(f"TPOT {seconds_short(c.tpot)}, {c.tpot / g.tpot:.2f}× the target")
    lines.append(f"closest: {summary(c)}" + (f" — {'; '.join(misses)}" if misses else ""))
    return "\n".join(lines)


def render_text(res) -> str:
    pr = res.problem
    m, cl = pr.model, pr.cluster
    lines = [f"serving {m.name} (max_model_len {max_model_len(pr):,}) on {cl.name}: "
             f"{cl.nodes} × {cl.gpus_per_node} {cl.gpu.name}", workload_line(res),
             f"{res.evaluated:,} deployments evaluated, {res.feasible:,} meet the goal, in {res.seconds:.2f} s; "
             f"the others: {failures(res)}"]
    if not res.plans:
        return "\n".join(lines + [no_plan(res)])
    lines += ["", render_table(res), "", "best: " + summary(res.plans[0])]
    if res.rejected:
        codes = sorted({c for _, cs in res.rejected for c in cs})
        lines.append(f"{len(res.rejected)} higher-ranked deployment(s) skipped: the rules refuse them "
                     f"({', '.join(codes)})")
    return "\n".join(lines)
