"""torchtitan's own rules: the plans torchtitan 0.3.0 refuses (its config classes, ParallelDims and
Trainer), or runs otherwise than the spec says."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import join, offer
from parc.targets.base import settings, target_span
from parc.targets.torchtitan import (TARGET, degrees, module_config, own_config, preset_config, shipped,
                                     split_overrides)


@rule("P630", "torchtitan-trains-only", targets=(TARGET,))
def trains_only(plan, c):
    if plan.mode == "serve":
        c.report(target_span(plan, c, TARGET, "serve"),
                 "torchtitan is a training platform: it cannot serve this plan (the spec has a `serve` block)",
                 help="compile serving for `target vllm` (or another serving target), or replace `serve` with "
                      "`train` to train the model", related=[(c.at("serve"), "serving declared here")])


@rule("P631", "torchtitan-config-missing", targets=(TARGET,))
def config_missing(plan, c):
    module, config = module_config(plan)
    if plan.mode != "train" or (module and config):
        return
    if not (settings(plan, TARGET).get("module") or settings(plan, TARGET).get("config")) and shipped(plan):
        return    # a shipped function in another precision: P620 names it
    missing = " and ".join(f"`{k}`" for k, v in (("module", module), ("config", config)) if not v)
    have = "" if preset_config(plan) else (
        f" (torchtitan ships none for model `{plan.model.name}`" + (f", preset {plan.model.preset}" if plan.model.preset else "")
        + ")")
    c.report(target_span(plan, c, TARGET, "model"),
             f"target torchtitan needs {missing}: the config function torchtitan's --module/--config load, which "
             f"defines the model{have}",
             help='add `module = "llama3"` and `config = "llama3_8b"` (or your own module and function returning '
                  "a Trainer.Config for this model) to `target torchtitan { ... }`")


@rule("P632", "torchtitan-expert-tensor-parallel", targets=(TARGET,))
def expert_tensor_parallel(plan, c):
    """torchtitan removed expert tensor parallelism (PR #3167, 2026-04-30): from 0.3.0 on its
    ParallelismConfig has no expert_tensor_parallel_degree, so the experts of an EP group are
    whole on each rank."""
    if plan.mode == "train" and plan.model.is_moe and plan.mesh.etp > 1:
        c.report(c.at("mesh.etp", "mesh"),
                 f"torchtitan has no expert tensor parallelism since 0.3.0: etp = {plan.mesh.etp} cannot be set "
                 "(its parallelism config no longer has expert_tensor_parallel_degree, and the command line "
                 "refuses the flag)",
                 help="use etp = 1: each expert whole on its expert-parallel rank")


@rule("P611", "torch-etp-one-or-tp", targets=(TARGET,))
def etp_one_or_tp(plan, c):
    """torchtitan before 0.3.0 (rules.toml ``until``): etp is 1 or tp; 0.3.0 has none (P632)."""
    m = plan.mesh
    if plan.mode != "train" or not plan.model.is_moe or m.etp in (1, m.tp):
        return
    c.report(c.at("mesh.etp"),
             f"torchtitan splits experts either over the whole TP group or not at all: etp must be 1 or "
             f"tp = {m.tp}, not {m.etp} (ParallelDims: \"Currently we only support ETP=TP or ETP=1\")",
             help=_etps(plan, c), fixes=offer(plan, c, [{"mesh.etp": e} for e in sorted({1, m.tp})])[1])


def _etps(plan, c) -> str:
    """The etp degrees torchtitan takes (1 or tp) that the whole rule set accepts, in words."""
    ok = [o["mesh.etp"] for o in offer(plan, c, [{"mesh.etp": e} for e in sorted({1, plan.mesh.tp})])[0]]
    return f"set etp = {join(ok)}" if ok else f"make etp 1 or tp = {plan.mesh.tp}"


@rule("P633", "torchtitan-replicate-degree", targets=(TARGET,))
def replicate_degree(plan, c):
    s = settings(plan, TARGET)
    rep = s.get("replicate")
    if rep is None or plan.mode != "train":
        return
    dp, zero = plan.mesh.dp, plan.train.zero
    at = c.at("target.torchtitan.replicate", "target.torchtitan")
    if zero == 0 and rep != dp:
        c.report(at, f"with zero = 0 torchtitan replicates the whole dp = {dp} (data_parallel_replicate_degree = {dp}, "
                     f"shard degree 1): replicate = {rep} would shard the rest, which zero = 0 does not",
                 help="remove `replicate`" + (f", or set `zero = 3` to shard over dp / replicate = {dp // rep}"
                                              if dp % rep == 0 and offer(plan, c, [{"train.zero": 3}])[0] else ""))
    elif dp % rep:
        c.report(at, f"replicate = {rep} does not divide dp = {dp}: torchtitan needs "
                     "data_parallel_replicate_degree × data_parallel_shard_degree = dp "
                     "(ParallelDims: dp_replicate × dp_shard × cp × tp × pp = WORLD_SIZE)",
                 help="choose a replicate degree that divides dp: " + ", ".join(
                     str(k) for k in range(1, dp + 1) if dp % k == 0))


@rule("P634", "torchtitan-expert-parallel-over-shard", targets=(TARGET,))
def expert_over_shard(plan, c):
    """ep borrows its ranks from dp_shard · cp · tp (torchtitan's efsdp = dp_shard·cp·tp / ep):
    with replicas (HSDP) the dp of P112 is larger than dp_shard."""
    if plan.mode != "train":
        return
    d = degrees(plan)
    if d["ep"] <= 1 or d["dp_shard"] < 1:
        return
    region = d["dp_shard"] * d["cp"] * d["tp"]
    if region % d["ep"] == 0 or (plan.mesh.dp * d["cp"] * d["tp"]) % d["ep"]:
        return    # P112 refuses the second
    c.report(c.at("mesh.ep", "mesh"),
             f"ep = {d['ep']} does not divide torchtitan's dp_shard · cp · tp = {d['dp_shard']} · {d['cp']} · {d['tp']} = "
             f"{region}: expert parallelism takes its ranks inside one replica "
             f"(data_parallel_replicate_degree = {d['dp_replicate']})",
             help="lower `replicate` in `target torchtitan`, or choose an ep that divides " + str(region))


@rule("P635", "torchtitan-precision", targets=(TARGET,))
def precision(plan, c):
    if plan.mode != "train" or plan.train.precision != "fp16":
        return
    c.report(c.at("train.precision", "train"),
             "torchtitan trains in bfloat16 or float32 (training.mixed_precision_param): fp16 cannot be chosen",
             help="use `precision = bf16`")


@rule("P636", "torchtitan-layer-split", severity=WARNING, targets=(TARGET,))
def layer_split(plan, c):
    """torchtitan's command line takes an even split (layers per stage) or leaves an uneven count to
    torchtitan's own split; an uneven split of the spec's own cannot be said."""
    if plan.mode != "train" or plan.mesh.pp <= 1 or split_overrides(plan) is not None:
        return
    if plan.placement.layers_mode == "even":
        stages = plan.mesh.pp * plan.schedule.virtual_stages
        c.report(c.at("schedule.virtual_stages", "mesh.pp"),
                 f"torchtitan cannot be told to cut {plan.model.layers} layers into {stages} stages: no "
                 f"pipeline_parallel_layers_per_stage gives ceil(({plan.model.layers} + 2) / layers_per_stage) = {stages} "
                 f"(_get_pipeline_metadata), and without one it makes two stages per rank",
                 help="use virtual_stages = 2, or layers that divide evenly into pp × virtual_stages stages")
        return
    c.report(c.at("placement.layers", "mesh.pp"),
             f"torchtitan splits the {plan.model.layers} layers over its pipeline stages by its own rule (the first and "
             "the last stage one layer short, for the embedding and the output): the plan's uneven split "
             f"{list(plan.placement.layers or [])} is not what it will run",
             help="give torchtitan the plan's split with parallelism.module_fqns_per_model_part in your config "
                  "function, or choose layers that divide evenly into pp × virtual_stages stages")


@rule("P637", "torchtitan-fp8-needs-converter", severity=WARNING, targets=(TARGET,))
def fp8(plan, c):
    """With the spec's own config function parc cannot see whether it sets the float8 converter
    (a shipped one is picked by its precision: P620 where none has the plan's)."""
    if plan.mode == "train" and plan.train.precision == "fp8" and own_config(plan):
        c.report(c.at("train.precision", "train"),
                 "torchtitan trains in fp8 only through a model converter (Float8 linear) that its config function "
                 "sets: the command line parc emits cannot turn it on, so the run is bfloat16 unless the config "
                 "function does",
                 help="use a config function with the float8 converter (such as llama3_debugmodel_float8's), "
                      "or `precision = bf16`")


def seq_len_divisor(plan) -> int:
    """torchtitan's Trainer: (tp with sequence parallel, else 1) × (2·cp with cp > 1, else 1)."""
    me = plan.mesh
    return (me.tp if plan.train.sequence_parallel else 1) * (2 * me.cp if me.cp > 1 else 1)


@rule("P638", "torchtitan-seq-len-divisor", targets=(TARGET,))
def seq_len(plan, c):
    """Stricter than P114 and P115 together: torchtitan wants the product of the two factors."""
    if plan.mode != "train":
        return
    k = seq_len_divisor(plan)
    n = plan.model.seq_len
    if n % k:
        kept, fixes = offer(plan, c, [{"model.seq_len": s} for s in ((n // k) * k, (n // k + 1) * k) if s > 0])
        ok = [o["model.seq_len"] for o in kept]
        c.report(c.at("model.seq_len", "model"),
                 f"torchtitan needs seq_len = {n} divisible by {k} (tp = {plan.mesh.tp} with sequence parallel × "
                 f"2 · cp = {2 * plan.mesh.cp}): its Trainer refuses the sequence length when it starts",
                 help=f"use a seq_len that is a multiple of {k}" + (f", such as {join(ok)}" if ok else ""),
                 fixes=fixes)


@rule("P674", "torchtitan-mxfp8-below-sm100", targets=(TARGET,))
def mxfp8_below_sm100(plan, c):
    """torchtitan's MXFP8 converter refuses GPUs below compute capability 10.0 (mx.py); a GPU
    without a preset (whose architecture parc does not know) is not judged."""
    from parc.resolve.catalog import gpu_capability
    from parc.targets.torchtitan import fp8_recipe

    tr = plan.train
    if plan.mode != "train" or tr is None or tr.precision != "fp8" or fp8_recipe(plan) != "mxfp8":
        return
    gpu = plan.cluster.gpu
    cc = gpu_capability(gpu)
    if cc is None or cc >= (10, 0):
        return
    c.report(c.at("train.fp8_recipe", "train.precision", "train"),
             f"torchtitan's MXFP8 converter runs only on SM100 or later GPUs: {gpu.name} is compute capability "
             f"{cc[0]}.{cc[1]}, and torchtitan refuses it at the model build (\"MXFP8 is only supported on SM100 or "
             f"later architectures\")",
             help="use `fp8_recipe = rowwise` (torchtitan's Float8 converter, which runs on Hopper) through a config "
                  "function of your own (`module` and `config` in `target torchtitan`), or a Blackwell GPU "
                  "(b200, gb200)",
             related=[(c.at("cluster.gpu"), f"gpu = {gpu.name}")])
