"""DeepSpeed's own rules: the plans DeepSpeed refuses, or that its config cannot express."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import join, offer
from parc.targets.base import settings, target_span
from parc.targets.deepspeed import TARGET
from parc.targets.rules import pipeline_missing
from parc.words import count



# ------------------------------------------------------------------------------------ P615

@rule("P615", "deepspeed-zero-with-pipeline", targets=(TARGET,))
def deepspeed_zero_pp(plan, c):
    t, m = plan.train, plan.mesh
    if plan.mode != "train" or t is None or t.zero < 2 or m.pp <= 1:
        return
    c.report(c.at("train.zero"),
             f"DeepSpeed's pipeline engine refuses zero = {t.zero} with pp = {m.pp}: ZeRO-2 and ZeRO-3 partition "
             f"gradients, which the pipeline accumulates over microbatches (\"ZeRO-2 and ZeRO-3 are incompatible "
             f"with pipeline parallelism\")",
             help="use zero = 1 with the pipeline, or pp = 1 with zero = 3",
             related=[(c.at("mesh.pp"), f"pp = {m.pp}")])


# ------------------------------------------------------------------------------------ P685

@rule("P685", "deepspeed-trains-only", targets=(TARGET,))
def deepspeed_training_only(plan, c):
    if plan.mode == "serve":
        c.report(target_span(plan, c, TARGET),
                 "the deepspeed target emits a DeepSpeed training config and launch; it cannot serve this plan "
                 "(the spec has a `serve` block)",
                 help="serve with `target vllm`, or replace `serve` with `train`",
                 related=[(c.at("serve"), "serving declared here")])


# ------------------------------------------------------------------------------------ P686

@rule("P686", "deepspeed-context-parallel", targets=(TARGET,))
def deepspeed_cp(plan, c):
    m = plan.mesh
    if plan.mode != "train" or m.cp <= 1:
        return
    kept, fixes = offer(plan, c, [{"mesh.cp": 1, "mesh.dp": m.dp * m.cp} if m.auto != "dp" else {"mesh.cp": 1},
                                  {"mesh.cp": 1, "mesh.tp": m.tp * m.cp}])
    to = join([f"{ax} ({ax} = {getattr(m, ax) * m.cp})" for ax in ("dp", "tp") if any(f"mesh.{ax}" in o for o in kept)]
              or (["dp"] if kept else []))
    c.report(c.at("mesh.cp"),
             f"DeepSpeed has no context parallelism to give cp = {m.cp}: its config splits a sequence only with "
             f"Ulysses sequence parallelism (sequence_parallel_size), which exchanges heads by all-to-all instead "
             f"of passing key/value blocks around a ring, so the plan's cost and memory would not hold",
             help=(f"use cp = 1 and give the {m.cp}-fold to {to}, or c" if kept else "C")
                  + "ompile for `target megatron` or `target torchrun`, which have context parallelism",
             fixes=fixes)


# ------------------------------------------------------------------------------------ P687

@rule("P687", "deepspeed-fp8-as-bf16", severity=WARNING, targets=(TARGET,))
def deepspeed_fp8(plan, c):
    t = plan.train
    if plan.mode != "train" or t is None or t.precision != "fp8":
        return
    c.report(c.at("train.precision", "train"),
             "DeepSpeed's config has no fp8 training: ds_config.json enables bf16, and fp8 matrix multiplies come "
             "only from the model's own layers (Transformer Engine), so step time and memory differ from the plan's",
             help="use `precision = bf16` for the plan DeepSpeed runs, or keep fp8 if the script uses Transformer "
                  "Engine layers")


# ------------------------------------------------------------------------------------ P688

@rule("P688", "deepspeed-pipeline-schedule", targets=(TARGET,))
def deepspeed_schedule(plan, c):
    s, m = plan.schedule, plan.mesh
    if not pipeline_missing(plan, TARGET):      # target.toml [schedules]
        return
    what = ("no interleaved pipeline (each stage holds one contiguous block of layers)"
            if s.pipeline == "interleaved_1f1b" else f"no {s.pipeline} schedule")
    c.report(c.at("schedule.pipeline"),
             f"DeepSpeed has {what}: its pipeline engine runs 1F1B (TrainSchedule) or DualPipeV, so pipeline = "
             f"{s.pipeline} cannot be expressed",
             help="use `pipeline = 1f1b` (or dualpipe_v), or compile for `target torchrun`",
             related=[(c.at("mesh.pp"), f"pp = {m.pp}")])


# ------------------------------------------------------------------------------------ P689

@rule("P689", "deepspeed-gpipe-as-1f1b", severity=WARNING, targets=(TARGET,))
def deepspeed_gpipe(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or m.pp <= 1 or s.pipeline != "gpipe":
        return
    c.report(c.at("schedule.pipeline"),
             "DeepSpeed's pipeline engine has no GPipe schedule: it runs the plan with its 1F1B TrainSchedule, "
             "which holds fewer microbatches' activations at once than the plan's GPipe estimate",
             help="use `pipeline = 1f1b` so the estimate describes what DeepSpeed runs")


# ------------------------------------------------------------------------------------ P684

@rule("P684", "deepspeed-hosts", targets=(TARGET,))
def deepspeed_hosts(plan, c):
    """The hostfile's lines must parse (runner.py _parse_hostfile: ``^(\\S+)\\s+slots=(\\d+)``, a
    line starting with # is a comment, a repeated host is refused) and name every node once."""
    hosts = settings(plan, TARGET).get("hosts")
    n = plan.cluster.nodes
    if plan.mode != "train" or not hosts:
        return
    bad = [h for h in hosts if not h or h.startswith("#") or any(ch.isspace() for ch in h)]
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if bad:
        what = (f"has {bad[0]!r}, which is no host name: the launcher refuses a hostfile line with a space in "
                f"the name (\"Hostfile contains a bad entry\") and skips one that starts with #")
    elif twice:
        what = (f"names {', '.join(twice)} twice: the launcher refuses the hostfile (\"Hostfile contains multiple "
                f"entries for {twice[0]}\")")
    elif len(hosts) != n:
        runs = (f"starts only the {count(len(hosts), 'node')} named" if len(hosts) < n
                else f"starts only the first {n} (apply_num_nodes_and_gpus)")
        what = f"names {count(len(hosts), 'host')} for {count(n, 'node')}: the launcher {runs}, another world than the plan's"
    else:
        return
    c.report(c.at(f"target.{TARGET}.hosts", f"target.{TARGET}"), f"`hosts` {what}",
             help=f"list the host names of the {count(n, 'node')} once each, node 0 first",
             related=[(c.at("cluster.nodes", "cluster"), f"nodes = {n}")])
