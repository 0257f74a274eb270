"""What ``parc plan`` prints: the problem, the ranked table, the best plan in one line and why
the runner-up lost. Reads the search result (``parc.planner.search.SearchResult``) it is given
and imports nothing from the planner."""
from __future__ import annotations

from parc.cost.engine import max_model_len
from parc.printable import printable
from parc.report.term import table
from parc.units import gb_value, number_short, seconds_short


def summary_line(pr, c) -> str:
    """One plan in a line: its mesh, then step time, throughput, MFU and bubble (training) or
    throughput and latency (serving), then memory per GPU."""
    mesh = " ".join(f"{ax}={getattr(c, ax)}" for ax in pr.order) + (f" ep={c.ep}" if c.ep > 1 else "") \
        + (f" etp={c.etp}" if c.etp > 1 else "")
    mem = f"{gb_value(c.memory_total)}/{gb_value(c.memory_capacity)} GB per GPU"
    if pr.mode == "train":
        return (f"{mesh}; step {seconds_short(c.step_time)}, {number_short(c.tokens_per_second)} tokens/s, MFU {c.mfu:.1%}, "
                f"bubble {c.bubble:.1%}, {mem}")
    return (f"{mesh}; {number_short(c.tokens_per_second)} tokens/s at {c.max_num_seqs} sequences per replica, "
            f"{seconds_short(c.latency)} per token, {mem}")


def lost_text(res, i: int) -> str:
    lost = res.lost_on(i)
    if lost is None:
        return ""
    what, by = lost
    if res.mode == "serve":
        return f"{what} ×{by:.2f}"
    if what == "tie":
        return "tie"
    return f"{what} +{seconds_short(by)}"


def render_table(res) -> str:
    """The ranked plans as a table."""
    pr = res.problem
    rows = []
    axes = [ax for ax in ("tp", "cp", "dp", "pp", "ep") if any(c.comm_time.get(ax, 0) for c in res.plans)]
    if pr.mode == "train":
        head = ["#", "tp", "pp", "dp", "cp"] + (["ep"] if pr.model.is_moe else []) + \
            ["schedule", "mb", "zero", "recompute", "sp", "mem GB", "free", "bubble"] + \
            [f"{ax} comm" for ax in axes] + ["step", "tokens/s", "MFU", "loses on"]
        for i, c in enumerate(res.plans):
            sched = "-" if c.pp == 1 else c.pipeline + (f"×{c.virtual_stages}" if c.virtual_stages > 1 else "")
            row = [c.rank, c.tp, c.pp, c.dp, c.cp] + ([c.ep] if pr.model.is_moe else []) + \
                [sched, c.micro_batch, c.zero, c.recompute, "on" if c.sequence_parallel else "off",
                 gb_value(c.memory_total), f"{c.headroom:.0%}", f"{c.bubble:.1%}"] + \
                [seconds_short(c.comm_time.get(ax, 0.0)) for ax in axes] + \
                [seconds_short(c.step_time), number_short(c.tokens_per_second), f"{c.mfu:.1%}", lost_text(res, i) or "-"]
            rows.append(row)
        align = "r" * 5 + ("r" if pr.model.is_moe else "") + "lrrlrrrr" + "r" * len(axes) + "rrrl"
    else:
        head = ["#", "tp", "pp", "dp"] + (["ep"] if pr.model.is_moe else []) + \
            ["seqs", "mem GB", "free", "step", "latency/token", "tokens/s", "loses on"]
        for i, c in enumerate(res.plans):
            rows.append([c.rank, c.tp, c.pp, c.dp] + ([c.ep] if pr.model.is_moe else []) +
                        [c.max_num_seqs, gb_value(c.memory_total), f"{c.headroom:.0%}", seconds_short(c.step_time),
                         seconds_short(c.latency), number_short(c.tokens_per_second), lost_text(res, i) or "-"])
        align = "rrrr" + ("r" if pr.model.is_moe else "") + "rrrrrrl"
    if any(c.warnings for c in res.plans):   # the rule warnings each plan raises (`parc rules CODE`)
        head.append("warnings")
        for row, c in zip(rows, res.plans):
            row.append(" ".join(c.warnings) or "-")
        align += "l"
    return table(head, rows, align)


def render_text(res) -> str:
    """`parc plan`'s text: the problem, the search's counts, the table, the best plan and why
    the runner-up lost."""
    pr = res.problem
    m, cl = pr.model, pr.cluster
    if pr.mode == "train":
        what = (f"training {m.name} (seq_len {m.seq_len}, global_batch {pr.global_batch}"
                if pr.global_batch is not None else f"training {m.name} (seq_len {m.seq_len}, {pr.microbatches} "
                                                     f"microbatches") + ")"
    else:
        what = f"serving {m.name} (max_model_len {max_model_len(pr):,})"
    lines = [printable(f"{what} on {cl.name}: {cl.nodes} × {cl.gpus_per_node} {cl.gpu.name}"),
             f"{res.candidates_evaluated:,} candidates evaluated ({res.costed:,} costed in full), "
             f"{res.valid:,} fit, in {res.seconds:.2f} s"]
    if not res.plans:
        lines.append("no plan fits: " + ("every candidate needs more memory than the GPUs have"
                                         if res.valid == 0 else "the rules refuse every candidate that fits"))
        return "\n".join(lines)
    lines += ["", render_table(res), ""]
    best = res.plans[0]
    lines.append("best: " + summary_line(pr, best))
    if len(res.plans) > 1:
        lines.append(runner_up(res))
    if res.rejected:
        codes = sorted({code for _, cs in res.rejected for code in cs})
        lines.append(f"{len(res.rejected)} higher-ranked candidate(s) skipped: the rules refuse them "
                     f"({', '.join(codes)})")
    return "\n".join(lines)


def runner_up(res) -> str:
    a, b = res.plans[0], res.plans[1]
    what, by = res.lost_on(1)
    if res.mode == "serve":
        gap = 1 - b.tokens_per_second / a.tokens_per_second if a.tokens_per_second else 0.0
        if what == "sequences in flight":
            why = (f"it keeps fewer sequences in flight ({b.dp} × {b.max_num_seqs} over {b.pp} stage(s), "
                   f"against {a.dp} × {a.max_num_seqs} over {a.pp})")
        else:
            why = f"its decode step is slower ({seconds_short(b.step_time)} against {seconds_short(a.step_time)})"
        return f"#2 serves {gap:.1%} fewer tokens/s than #1: {why}"
    if what == "tie":
        return "#2 ties with #1 on step time; #1 ranks first for using less memory or the simpler settings"
    gap = b.step_time / a.step_time - 1 if a.step_time else 0.0
    return f"#2 is {gap:.2%} slower than #1 ({seconds_short(b.step_time)} against {seconds_short(a.step_time)}): its {what} takes " \
           f"{seconds_short(by)} more per step"
