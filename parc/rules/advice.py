"""P5xx: advice — plans that work but that an expert would not write (warnings).

P550-P559 are style checks reported by `parc lint` (rules/style.py, parc/lint.py).
"""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import divisors, fixed_order, given, join, rank_map, tp_ok
from parc.words import count

QUIET = {"dp": "reduce gradients once per step", "pp": "pass one activation per microbatch between stages"}


# ------------------------------------------------------------------------------------ P501

@rule("P501", "pipeline-for-online-serving", severity=WARNING)
def pp_serving(plan, c):
    m, cl = plan.mesh, plan.cluster
    if plan.mode != "serve" or m.pp <= 1:
        return
    g = cl.domain
    # the widest tp that absorbs (part of) the pipeline and still fits one NVLink domain
    best = None
    for k in divisors(m.pp):
        t = m.tp * k
        if k > 1 and t <= g and g % t == 0 and tp_ok(plan, t):
            best = (k, t)
    if best is None:
        return
    k, t = best
    rest = m.pp // k
    alt = f"tp = {t}" + (f", pp = {rest}" if rest > 1 else " without pp")
    c.report(c.at("mesh.pp"),
             f"pp = {m.pp} for online serving: every token passes through {m.pp} pipeline stages one after "
             f"another, so per-token latency does not drop and each stage idles while the others work; the same "
             f"{count(m.tp * m.pp, 'GPU')} as {alt} would sit inside one node of {g}",
             help=f"use {alt} (vLLM recommends pipeline parallelism only across nodes, when tensor "
                  f"parallelism inside a node is not enough)",
             related=[(c.at("mesh.tp"), f"tp = {m.tp}")])


# ------------------------------------------------------------------------------------ P502

@rule("P502", "sequence-parallel-without-tp", severity=WARNING)
def sp_without_tp(plan, c):
    if plan.mode != "train" or not plan.train or not plan.train.sequence_parallel or plan.mesh.tp > 1:
        return
    c.report(c.at("train.sequence_parallel"),
             "sequence_parallel = true has no effect with tp = 1: sequence parallelism shards norms and dropout "
             "over the tensor-parallel group (Megatron-LM silently turns it off; its core raises \"Cannot use "
             "sequence parallelism without tensor parallelism\")",
             help="remove `sequence_parallel`, or use tp > 1; to split long sequences over GPUs use `cp`",
             related=[(c.at("mesh.tp"), "tp = 1")])


# ------------------------------------------------------------------------------------ P503

@rule("P503", "tp-above-nvlink-domain", severity=WARNING)
def tp_above_nvlink(plan, c):
    m, cl = plan.mesh, plan.cluster
    if m.tp <= 1 or plan.placement.links.get("tp") != "inter_node":
        return
    fixed = fixed_order(plan, c)
    rm = rank_map(plan, fixed and fixed[1])
    if rm is None or not rm.crosses_domain("tp"):
        return  # P304 reports a tp placed across nodes that stays inside one
    intra, inter = cl.intra_node, cl.inter_node
    speed = ""
    if intra and inter and inter.bandwidth > 0:
        speed = (f": {inter.kind} at {inter.bandwidth / 1e9:.0f} GB/s per GPU instead of {intra.kind} at "
                 f"{intra.bandwidth / 1e9:.0f} GB/s, {intra.bandwidth / inter.bandwidth:.0f}× slower")
    g = cl.domain
    ok = [d for d in divisors(g) if 1 < d < m.tp and m.tp % d == 0 and tp_ok(plan, d)]
    c.report(c.at("placement.tp"),
             f"tp = {m.tp} is larger than the NVLink domain of {count(g, 'GPU')}, so its per-layer all-reduces cross "
             f"nodes{speed}",
             help=(f"use tp = {max(ok)} inside a node and put the remaining factor {m.tp // max(ok)} on pp or dp"
                   if ok else f"keep tp within a node of {count(g, 'GPU')}"),
             related=[(c.at("mesh.tp"), f"tp = {m.tp}")])


# ------------------------------------------------------------------------------------ P504

@rule("P504", "setting-has-no-effect", severity=WARNING)
def no_effect(plan, c):
    m, s = plan.mesh, plan.schedule
    if plan.mode == "serve":
        keys = ["pipeline", "virtual_stages", "micro_batch", "global_batch", "microbatches"]
        if "vllm" in plan.targets:
            keys.remove("virtual_stages")  # P604 refuses it for vLLM
        written = [k for k in keys if given(plan, f"schedule.{k}")]
        if written:
            c.report(c.at(f"schedule.{written[0]}"),
                     f"a serving plan has no training schedule: {join([f'`{k}`' for k in written], 'and')} "
                     f"{'is' if len(written) == 1 else 'are'} ignored (the engine batches requests itself, up to "
                     f"max_num_seqs)",
                     help="remove the `schedule` block from the serving spec")
        return
    t = plan.train
    if t and t.zero > 0 and m.dp * m.cp == 1 and given(plan, "train.zero"):
        c.report(c.at("train.zero"),
                 f"zero = {t.zero} shards optimizer state{', gradients' if t.zero >= 2 else ''}"
                 f"{' and weights' if t.zero >= 3 else ''} over the data-parallel ranks, but dp = 1: there is "
                 f"nothing to shard over",
                 help="remove `zero`, or use dp > 1")
    if m.pp == 1 and s.virtual_stages <= 1 and given(plan, "schedule.pipeline") and s.pipeline != "1f1b":
        c.report(c.at("schedule.pipeline"),
                 f"pipeline = {s.pipeline} has no effect with pp = 1: there is no pipeline to schedule",
                 help="remove `pipeline`, or set pp > 1 in the mesh")


# ------------------------------------------------------------------------------------ P505

@rule("P505", "module-placement-ignored", severity=WARNING, targets=("megatron", "vllm"))
def module_placement_ignored(plan, c):
    mods = plan.placement.modules
    if not mods:
        return
    who = "Megatron-LM" if c.target == "megatron" else "vLLM"
    first = mods[0]
    c.report(c.at(f"placement.module.{first.pattern}"),
             f"{who} shards its own modules (its tensor-parallel layers are built in) and ignores module "
             f"placements such as `\"{first.pattern}\" = {first.style}({first.axis or ''})`"
             + (f" and {len(mods) - 1} more" if len(mods) > 1 else ""),
             help="module placements apply to the torch runtime (torchrun, slurm, kubernetes targets); "
                  "remove them or keep them for that target")


# ------------------------------------------------------------------------------------ P506

LONG_CONTEXT = 32768


@rule("P506", "context-parallel-for-serving", severity=WARNING)
def cp_serving(plan, c):
    m = plan.mesh
    if plan.mode != "serve" or m.cp <= 1 or plan.serve is None:
        return
    from parc.cost.engine import max_model_len

    n = max_model_len(plan)
    if n >= LONG_CONTEXT:
        return
    c.report(c.at("mesh.cp"),
             f"cp = {m.cp} for serving splits each prompt's prefill over {count(m.cp, 'GPU')} (vLLM's prefill context "
             f"parallel), which pays off only for very long prompts; with max_model_len = {n} the GPUs would do "
             f"more as tp or dp",
             help=f"fold cp into tp (tp = {m.tp * m.cp}) or dp, or keep cp for prompts of {LONG_CONTEXT:,}+ tokens",
             related=[(c.at("serve.max_model_len", "serve"), f"max_model_len = {n}")])


# ------------------------------------------------------------------------------------ P507

@rule("P507", "chatty-axis-crosses-node", severity=WARNING)
def chatty_axis(plan, c):
    m = plan.mesh
    if m.cp <= 1 or "cp" in plan.placement.links or fixed_order(plan, c):
        return  # (a target that fixes its rank order cannot take a swapped mesh)
    rm = rank_map(plan)
    if rm is None or not rm.crosses_domain("cp") or rm.crosses_domain("tp"):
        return
    from parc.model.rankmap import RankMap

    sizes = {ax: m.size(ax) for ax in ("pp", "dp", "cp", "tp")}
    for quiet in ("dp", "pp"):
        if m.size(quiet) <= 1 or rm.crosses_domain(quiet) or quiet in plan.placement.links:
            continue
        order = list(m.order)
        i, j = order.index("cp"), order.index(quiet)
        if i > j:
            continue  # the quiet axis is already outside cp
        order[i], order[j] = order[j], order[i]
        alt = RankMap(order=order, sizes=sizes, gpus_per_node=plan.cluster.gpus_per_node, domain=plan.cluster.domain)
        if alt.crosses_domain("cp") or alt.crosses_domain("tp"):
            continue
        shown = ", ".join(ax for ax in order if sizes[ax] > 1)
        c.report(c.at("mesh.cp"),
                 f"the CP ring, which passes key/value blocks in every layer, crosses nodes while the "
                 f"{quiet.upper()} groups, which {QUIET[quiet]}, stay inside one",
                 help=f"list the mesh axes as {shown} (outermost first) so that cp stays inside a node",
                 related=[(c.at(f"mesh.{quiet}"), f"{quiet} = {m.size(quiet)}")])
        return


# ------------------------------------------------------------------------------------ P518

@rule("P518", "profile-fitted-on-other-runs", severity=WARNING, reads=())
def profile_from_other_runs(plan, c):
    """A calibrated profile names the framework and GPU of the runs it was fitted on; its factors
    carry how that framework ran on that GPU (its attention kernel, its fused or eager kernels,
    its collectives), which another framework or GPU does not share."""
    prof, tr = plan.profile, plan.train
    if not (prof.framework or prof.gpu):
        return
    differ = []
    if prof.framework and tr is not None and tr.framework and tr.framework != prof.framework:
        differ.append((f"the {prof.framework} runs", f"this plan runs {tr.framework}", "train.framework"))
    if prof.gpu and plan.cluster.gpu.name != prof.gpu:
        differ.append((f"{prof.gpu} GPUs", f"this plan's GPU is {plan.cluster.gpu.name}", "cluster.gpu"))
    if not differ:
        return
    fitted, here, paths = zip(*differ)
    name = f"`{prof.name}`" if prof.name else "the profile"
    c.report(c.at("profile"),
             f"profile {name} was fitted on {' on '.join(fitted)} but {' and '.join(here)}: its factors carry "
             "how those runs computed and communicated (attention kernel, fused or eager kernels, collectives), "
             "so the estimate may be off by what differs",
             help="calibrate a profile on runs of this framework and GPU (`parc calibrate`), or drop the "
                  "`profile` block to use parc's defaults",
             related=[(c.at(p), h) for p, h in zip(paths, here)])
