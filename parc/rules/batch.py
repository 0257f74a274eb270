"""P2xx: batch sizes and pipeline schedules (training plans only; serving has no schedule).

The microbatch count is always the one the batch sizes give, global_batch / (micro_batch · dp):
a `microbatches` that disagrees is its own error (P210), and the schedule rules judge the
count the plan would really run.
"""
from __future__ import annotations

from dataclasses import replace

from parc.rules import TARGET_FAMILIES, WARNING, rule
from parc.model import schedules
from parc.rules.util import (at_given, batch_span, dims, divisors, dp_terms, given, global_batches_for, join,
                             microbatch_terms, microbatches, nearest, plural, refusers, target_name, value_fixes)
from parc.words import count

BUBBLE_WARN = 0.25   # idle share of a step above which the bubble is worth a warning


MEGATRON_PIPELINES = ("1f1b", "interleaved_1f1b")


def _train_pipeline(plan) -> bool:
    """A training plan with a pipeline whose schedule the named targets can run at all (a
    schedule Megatron-LM lacks is P607's, whatever else is wrong with it)."""
    if plan.mode != "train" or plan.mesh.pp <= 1:
        return False
    return not ("megatron" in plan.targets and plan.schedule.pipeline not in MEGATRON_PIPELINES)


def _gb_help(plan, ok, what: str) -> str:
    s, per = plan.schedule, dims(plan).per_microbatch
    gbs = global_batches_for(plan, ok)
    if not gbs:
        return ""
    out = f"use global_batch = {join(gbs)} ({join([g // per for g in gbs])} microbatches{what})"
    if s.micro_batch > 1:
        d = dims(plan)
        m1 = [k for k in range(1, s.micro_batch) if s.micro_batch % k == 0
              and (n := replace(d, micro_batch=k).microbatches) is not None and ok(n)]
        if m1:
            out += f", or keep global_batch = {s.global_batch} with micro_batch = {m1[-1]}"
    return out


# ------------------------------------------------------------------------------------ P201

def _none_offered(plan, c, alternatives, per: int) -> str:
    """P201's help when no batch that divides passes the other rules: which fail, and where."""
    from parc.rules.suggest import changed, refusals

    alts = list(alternatives)
    why = refusals(plan, changed(plan, {"schedule.global_batch": alts[0]}), c.rule.code, c.active) if alts else []
    return (f"global_batch must be a multiple of micro_batch · dp = {per}" +
            (f"; the nearest that are, {join(alts)}, leave the plan failing {join(why, 'and')}, which "
             "needs a change of its own (`parc rules CODE`)" if why else ""))


@rule("P201", "global-batch-divisible")
def global_batch(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or m.dp <= 0:
        return
    fact = next((f for f in dims(plan).violations(plan.model, plan.mode) if f.code == "batch"), None)
    if fact is None:
        return
    from parc.rules.suggest import offered

    per = dims(plan).per_microbatch
    near = [o["schedule.global_batch"] for o in offered(plan, c, [{"schedule.global_batch": n}
                                                                  for n in fact.alternatives])]
    mbs = [k for k in divisors(s.global_batch // m.dp) if k != s.micro_batch] if s.global_batch % m.dp == 0 else []
    mbs = [o["schedule.micro_batch"] for o in offered(plan, c, [{"schedule.micro_batch": k}
                                                                for k in nearest(mbs, s.micro_batch, 3)])]
    helps = [f"the nearest global batches that work are {join(near)} "
             f"({join([n // per for n in near])} microbatches of {s.micro_batch} per data-parallel rank)"] if near else \
        [_none_offered(plan, c, fact.alternatives, per)]
    if mbs:
        helps.append(f"{'or ' if helps else ''}keep global_batch = {s.global_batch} with micro_batch = {join(mbs)}")
    elif s.global_batch % m.dp:
        helps.append(f"global_batch must be a multiple of dp = {m.dp} whatever the micro_batch")
    c.report(batch_span(plan),
             f"global_batch = {s.global_batch} is not divisible by micro_batch · dp = {s.micro_batch} · {m.dp} = {per}, "
             f"so the microbatch count {s.global_batch} / {per} = {s.global_batch / per:.2f} is not whole "
             f"(where {dp_terms(plan)})",
             help="; ".join(helps),
             related=[(c.at("schedule.micro_batch"), f"micro_batch = {s.micro_batch}"),
                      (c.at("mesh.dp"), dp_terms(plan))],
             fixes=value_fixes(plan, [{"schedule.global_batch": n} for n in near]
                               + [{"schedule.micro_batch": k} for k in mbs]))


# ------------------------------------------------------------------------------------ P202

# Targets whose 1F1B schedule refuses fewer microbatches than stages, and where they say so.
# torch.distributed.pipelining's Schedule1F1B raises in its constructor; ScheduleGPipe runs any
# count (fill and drain). Megatron-LM's 1F1B (forward_backward_pipelining_without_interleaving)
# shortens each stage's warm-up to min(pp − rank − 1, microbatches), and DeepSpeed's TrainSchedule
# runs 2·(microbatches + stages − 1) steps for any count: both run it with a larger bubble.
REFUSES_FEW_MICROBATCHES = {
    "torch": "torch.distributed.pipelining's Schedule1F1B (torchrun, slurm and kubernetes launch parc's torch "
             "runtime, which builds it)",
}


@rule("P202", "microbatches-below-pp")
def microbatches_below_pp(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline not in ("1f1b", "gpipe"):
        return
    n = microbatches(plan)
    if n is None or n >= m.pp:
        return
    p = m.pp
    f = schedules.bubble(s.pipeline, p, n)
    bubble = (f"the pipeline idles {f:.0%} of every step ({schedules.bubble_formula(s.pipeline, p, n)}, where "
              f"{microbatch_terms(plan)})")
    runs = [target_name(t) for t in ("megatron", "deepspeed") if t in c.active]
    helps = _gb_help(plan, lambda k: k >= p, "")
    related = [(c.at("mesh.pp"), f"pp = {p}")]
    # a plan without a target runs on parc's torch runtime (`parc run`)
    named = c.active & set(TARGET_FAMILIES)
    refusing = [t for t in REFUSES_FEW_MICROBATCHES if t in c.active or not named]
    if s.pipeline == "1f1b" and refusing:
        who = REFUSES_FEW_MICROBATCHES[refusing[0]]
        also = f"; {join(runs, 'and')} would run it, but " + bubble if runs else f"; {bubble}"
        c.report(batch_span(plan),
                 f"1f1b over pp = {count(p, 'stage')} with {plural(n, 'microbatch', 'microbatches')}: {who} refuses fewer "
                 f"microbatches than stages when the schedule is built (\"Number of microbatches ({n}) must be "
                 f"greater than or equal to the number of stages ({p})\"){also}",
                 help=helps, related=related)
        return
    if s.pipeline == "1f1b":
        how = (f"{join(runs, 'and')} runs it, each stage's warm-up shortened to min(pp − rank − 1, {n}) "
               f"forward passes, but ") if runs else "the schedule runs, but "
    else:
        how = "GPipe runs it (all forwards, then all backwards), but "
    c.report(batch_span(plan),
             f"{s.pipeline} over pp = {count(p, 'stage')} with only {plural(n, 'microbatch', 'microbatches')}: {how}{bubble}",
             help=helps, related=related, severity=WARNING)


# ------------------------------------------------------------------------------------ P203

@rule("P203", "interleaved-microbatches", targets=("megatron",))
def interleaved_megatron(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline != "interleaved_1f1b" or s.virtual_stages <= 1:
        return
    n, p = microbatches(plan), m.pp
    if n is None or (n >= p and n % p == 0):
        return
    if n < p:
        why = f"at least pp = {p}"
    else:
        why = f"a multiple of pp = {p} (the remainder {n} % {p} = {n % p} would be a partial group)"
    c.report(batch_span(plan),
             f"Megatron-LM's interleaved schedule runs microbatches in groups of pp = {p} on each virtual stage, "
             f"so the microbatch count must be {why}, but {microbatch_terms(plan)}",
             help=_gb_help(plan, lambda k: k >= p and k % p == 0, f", a multiple of pp = {p}"),
             related=[(c.at("mesh.pp"), f"pp = {p}"), (c.at("schedule.micro_batch"), f"micro_batch = {s.micro_batch}")])


# ------------------------------------------------------------------------------------ P204

@rule("P204", "virtual-stages-need-pp")
def virtual_without_pp(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or s.virtual_stages <= 1 or m.pp != 1:
        return
    # torchtitan builds no pipeline with pp = 1 and runs the plan without one: a warning there
    runs = refusers(plan, c, "P204") == []
    c.report(c.at("schedule.virtual_stages"),
             f"virtual_stages = {s.virtual_stages} interleaves model chunks over pipeline ranks, but pp = 1: "
             f"there is no pipeline to interleave" + ("; it has no effect" if runs else ""),
             help="set `pp` > 1 in the mesh, or remove `virtual_stages` (and the interleaved `pipeline`)",
             related=[(c.at("mesh.pp"), "pp = 1")], severity=WARNING if runs else None)


# ------------------------------------------------------------------------------------ P205

@rule("P205", "interleaved-rounds", targets=("torch",))
def interleaved_torch(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline != "interleaved_1f1b" or s.virtual_stages <= 1:
        return
    n, p = microbatches(plan), m.pp
    if n is None:
        return
    rounds = max(1, n // p)
    if n % rounds == 0:
        return
    c.report(batch_span(plan),
             f"{target_name(c.target)} runs Interleaved1F1B in rounds of pp = {p} microbatches: {n} microbatches "
             f"make {rounds} rounds, and {n} is not a multiple of {rounds} ({microbatch_terms(plan)})",
             help=_gb_help(plan, lambda k: k % max(1, k // p) == 0, ""),
             related=[(c.at("mesh.pp"), f"pp = {p}")])


# ------------------------------------------------------------------------------------ P206

@rule("P206", "schedule-stages-per-rank")
def stages_per_rank(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan):
        return
    v = s.virtual_stages
    if s.pipeline in ("gpipe", "1f1b") and v > 1:
        c.report(at_given(plan, "schedule.pipeline", "schedule.virtual_stages"),
                 f"{s.pipeline} holds one stage per pipeline rank, but virtual_stages = {v} gives each rank {v} "
                 f"(torch: \"Single stage schedule requires exactly 1 stage per rank\")",
                 help="use `pipeline = interleaved_1f1b` (or zero_bubble) with virtual stages, "
                      "or remove `virtual_stages`",
                 related=[(c.at("schedule.virtual_stages"), f"virtual_stages = {v}")])
    elif s.pipeline == "interleaved_1f1b" and v == 1:
        c.report(c.at("schedule.pipeline"),
                 "interleaved_1f1b needs at least 2 virtual stages per pipeline rank, but virtual_stages = 1 "
                 "(torch: \"Multi-stage schedule requires at least 2 stages per rank\"; Megatron-LM "
                 "falls back to plain 1F1B)",
                 help="add `virtual_stages = 2` to the schedule (the layers per stage must divide), or use "
                      "`pipeline = 1f1b`")


# ------------------------------------------------------------------------------------ P207

@rule("P207", "dualpipe-v-requirements")
def dualpipe_v(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline != "dualpipe_v":
        return
    if s.virtual_stages != 2:
        c.report(at_given(plan, "schedule.virtual_stages", "schedule.pipeline"),
                 f"dualpipe_v places exactly 2 stages on each pipeline rank (rank r holds stages r and "
                 f"2·pp−1−r), but virtual_stages = {s.virtual_stages}",
                 help="set `virtual_stages = 2` (the layers are split over 2·pp stages)")
        return
    n = microbatches(plan)
    if n is None or n >= 2 * m.pp:
        return
    c.report(batch_span(plan),
             f"dualpipe_v feeds microbatches from both ends of the pipeline and needs at least 2·pp = {2 * m.pp} "
             f"of them, but {microbatch_terms(plan)} (torch: \"DualPipeV requires at least as many microbatches "
             f"as stages\")",
             help=_gb_help(plan, lambda k: k >= 2 * m.pp, ""),
             related=[(c.at("mesh.pp"), f"pp = {m.pp}")])


# ------------------------------------------------------------------------------------ P211

def _even_pp_help(plan) -> str:
    """The even pipeline degrees next to an odd pp that split the layers, with the dp each leaves."""
    m, md = plan.mesh, plan.model
    world = plan.world_size
    opts = []
    for p in sorted({m.pp - 1, m.pp + 1, m.pp - 3, m.pp + 3}, key=lambda p: (abs(p - m.pp), p)):
        rest = m.cp * m.tp * p
        if p >= 2 and md.layers % p == 0 and world % rest == 0:
            opts.append(f"pp = {p} (dp = {world // rest})")
    return (f"use {join(opts[:2], 'or')}" if opts else "use an even pp that divides the layers") + \
        ", or `pipeline = 1f1b`, which runs any pp"


@rule("P211", "dualpipe-requirements")
def dualpipe(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline != "dualpipe":
        return
    if s.virtual_stages != 1:
        c.report(at_given(plan, "schedule.virtual_stages", "schedule.pipeline"),
                 f"dualpipe cuts the model into pp stages and gives each rank two of them, one per direction (rank r "
                 f"holds stages r and pp−1−r), but virtual_stages = {s.virtual_stages} asks for {s.virtual_stages} "
                 f"chunks per rank",
                 help="remove `virtual_stages` (dualpipe takes 1), or use `pipeline = dualpipe_v` with "
                      "`virtual_stages = 2` for the V-shaped variant")
        return
    if m.pp % 2:
        c.report(c.at("mesh.pp"),
                 f"dualpipe pairs pipeline rank r with rank pp−1−r and needs an even number of them, but pp = {m.pp} "
                 f"(DualPipe.step: \"assert num_ranks % 2 == 0\")",
                 help=_even_pp_help(plan))
        return
    n = microbatches(plan)
    if n is None or schedules.dualpipe_check(m.pp, n) is None:
        return
    c.report(batch_span(plan),
             f"dualpipe feeds half the microbatches in at each end of the pipeline and needs an even number of them, "
             f"at least 2·pp = {2 * m.pp}, but {microbatch_terms(plan)} (DualPipe.step: \"num_chunks % 2 == 0 and "
             f"num_chunks >= num_ranks * 2\")",
             help=_gb_help(plan, lambda k: k >= 2 * m.pp and k % 2 == 0, f", even and at least {2 * m.pp}"),
             related=[(c.at("mesh.pp"), f"pp = {m.pp}")])


# ------------------------------------------------------------------------------------ P208

@rule("P208", "zero-bubble-requirements")
def zero_bubble(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or s.pipeline != "zero_bubble":
        return
    v = s.virtual_stages
    if v < 2:
        c.report(at_given(plan, "schedule.virtual_stages", "schedule.pipeline"),
                 "zero_bubble splits each backward into its input and weight parts over several stages per rank: "
                 "it needs virtual_stages ≥ 2 (2 gives torch's ZBVZeroBubble V schedule, more gives "
                 "InterleavedZeroBubble)",
                 help="set `virtual_stages = 2`")
        return
    if v == 2:
        return
    n = microbatches(plan)
    if n is None:
        return
    rounds = max(1, n // m.pp)
    if n % rounds:
        c.report(batch_span(plan),
                 f"zero_bubble with {v} virtual stages (torch's InterleavedZeroBubble) runs microbatches in rounds "
                 f"of pp = {m.pp}: {n} microbatches make {rounds} rounds and {n} is not a multiple of {rounds} "
                 f"({microbatch_terms(plan)})",
                 help=_gb_help(plan, lambda k: k % max(1, k // m.pp) == 0, ""))


# ------------------------------------------------------------------------------------ P209

def _schedule_ok(plan) -> bool:
    s, m = plan.schedule, plan.mesh
    n = microbatches(plan)
    if n is None:
        return False
    v = s.virtual_stages
    if s.pipeline in ("gpipe", "1f1b"):
        return n >= m.pp and v == 1
    if s.pipeline == "interleaved_1f1b":
        return v > 1
    if s.pipeline == "dualpipe_v":
        return v == 2 and n >= 2 * m.pp
    if s.pipeline == "dualpipe":
        return v == 1 and schedules.dualpipe_check(m.pp, n) is None
    return v >= 2


def _microbatches_for(plan, share: float) -> int:
    """The fewest microbatches (at least the plan's) the schedule runs with an idle share of at
    most ``share``; Megatron-LM's interleaved schedule needs a multiple of pp."""
    s, p = plan.schedule, plan.mesh.pp
    k = n = microbatches(plan)
    step = p if (s.pipeline == "interleaved_1f1b" and "megatron" in plan.targets) else 1
    k = -(-k // step) * step
    while k < 64 * n + 64 * p and (schedules.bubble(s.pipeline, p, k, s.virtual_stages) > share
                                   or schedules.check(s.pipeline, p, k, s.virtual_stages)):
        k += step
    return k


@rule("P209", "pipeline-bubble", severity=WARNING)
def bubble(plan, c):
    s, m = plan.schedule, plan.mesh
    if not _train_pipeline(plan) or not _schedule_ok(plan):
        return
    n, p = microbatches(plan), m.pp
    v = s.virtual_stages
    f = schedules.bubble(s.pipeline, p, n, v)
    if f <= BUBBLE_WARN:
        return
    formula = schedules.bubble_formula(s.pipeline, p, n, v)
    need = _microbatches_for(plan, 0.1)
    helps = []
    if need > n:
        helps.append(f"{need} microbatches bring it to {schedules.bubble(s.pipeline, p, need, v):.0%}: "
                      f"global_batch = {dims(plan).global_batch_for(need)}")
        if s.micro_batch > 1:
            helps.append("or a smaller micro_batch for more microbatches in the same global batch")
    if s.pipeline in ("gpipe", "1f1b") and m.pp > 1:
        helps.append("or an interleaved schedule (`pipeline = interleaved_1f1b`, `virtual_stages = 2`)")
    c.report(batch_span(plan),
             f"the pipeline idles {f:.0%} of every step: {plural(n, 'microbatch', 'microbatches')} over pp = {p} "
             f"stages with {s.pipeline}, {formula}, where {microbatch_terms(plan)}",
             help="; ".join(helps) or None,
             related=[(c.at("mesh.pp"), f"pp = {p}")])


# ------------------------------------------------------------------------------------ P210

@rule("P210", "microbatches-mismatch")
def microbatches_mismatch(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or s.microbatches is None or not given(plan, "schedule.microbatches"):
        return
    n = microbatches(plan)
    if n is None or n == s.microbatches:
        return
    if plan.spans.get("schedule.global_batch") == plan.spans.get("schedule.microbatches"):
        return  # global_batch was derived from microbatches
    want = dims(plan).global_batch_for(s.microbatches)
    c.report(c.at("schedule.microbatches"),
             f"microbatches = {s.microbatches} disagrees with the batch sizes: {microbatch_terms(plan)}",
             help=(f"remove `microbatches` (parc derives it), or set global_batch = {want} "
                   f"for {s.microbatches} microbatches of {s.micro_batch} on each of dp = {count(m.dp, 'rank')}"),
             related=[(c.at("schedule.global_batch"), f"global_batch = {s.global_batch}"),
                      (c.at("mesh.dp"), dp_terms(plan))])
