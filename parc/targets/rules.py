"""The rules that span several targets: a key a target cannot do without (P602), the engine a
wrapper runs (P617: one that cannot run the spec, or a wrapper key it would drop; P618: a spec
whose engine blocks leave it open), values no command line can carry (P662) or that a launcher
would read as options (P690), and the rules
of the families without a folder of their own: parc's torch runtime (P610, P616), which comes
with torchrun, slurm and kubernetes. The runtime builds Megatron-LM's expert grid for any etp that
P112 and P113 accept, so it has no etp rule of its own (P611 is torchtitan's, before 0.3.0)."""
from __future__ import annotations

import json

from parc.model.targets import (default_engine, display, engine_blocks, engine_key, engine_of, engines, example,
                                inherits, keys, launch_targets, pipeline_runtime, pipelines, required,
                                requiring_targets, runs_pipeline, spec, stands_in, wrappers)
from parc.rules import ERROR, WARNING, rule
from parc.rules.util import join, offer, target_name
from parc.targets.base import dash_keys, option_lists, settings, target_span
from parc.words import count


def hub_id(plan) -> str | None:
    """The Hugging Face id the model's preset was read from (``parc.resolve.catalog.hub_id``)."""
    from parc.resolve.catalog import hub_id as model_hub_id

    return model_hub_id(plan.model)


def _example(plan, target: str, key: str) -> str:
    """A value for ``key`` that fits this spec: the spec's own model where the key's example is
    "hub_id" (vLLM's `model`)."""
    ex = example(target, key)
    if ex == "hub_id":
        hub = hub_id(plan)
        return f'"{hub}"' if hub else f'"/path/to/{plan.model.name}"'
    return ex


# ------------------------------------------------------------------------------------ P602

def _family_only(plan, c, t: str) -> bool:
    """Whether ``t``'s rules run only as a family another active target lists in its target.toml
    (Megatron-DeepSpeed brings DeepSpeed's): what the launch needs is that target's to ask for."""
    from parc.model.targets import spec

    return t not in plan.targets and any(
        isinstance(fam := (spec(x) or {}).get("families"), list) and t in fam for x in c.active if x != t)


@rule("P602", "target-field-missing", targets=requiring_targets())
def target_field_missing(plan, c):
    t = c.target
    # a wrapper asks for the keys of the engine it stands in for (slurm's entrypoint is
    # torchrun's) only when it runs that engine; another engine's own P602 asks for its keys
    settings = plan.target_settings(t)
    missing = [(k, what) for k, what in required(t, plan.mode, engine_of(plan, t)) if k not in settings]
    if not missing or _family_only(plan, c, t):
        return
    fields = join([f"`{k}` ({what})" for k, what in missing], "and")
    example = "; ".join(f"{k} = {_example(plan, t, k)}" for k, _ in missing)
    source = inherits(t)
    also = (f" (or a `target {source[0]}` block it can take them from)"
            if source and any(k in source[1] for k, _ in missing) else "")
    if not hub_id(plan) and any(k == "model" for k, _ in missing):
        also += f" with the Hugging Face id or local path of model \"{plan.model.name}\""
    if t in plan.targets:
        c.report(target_span(plan, c, t), f"target {t} needs {fields}",
                 help=f"add it to the block: `target {t} {{ {example} }}`{also}")
    else:
        # no block to point at: the model vLLM must load, or the workload the script runs
        where = "model" if missing[0][0] == "model" else plan.mode
        c.report(target_span(plan, c, t, where),
                 f"--target {t} needs {fields}, and the spec has no `target {t}` block",
                 help=f"add `target {t} {{ {example} }}` to the spec{also}")


# ------------------------------------------------------------------------------------ P617

@rule("P617", "wrapper-engine-mismatch", targets=wrappers())
def wrapper_engine_mismatch(plan, c):
    """The engine a wrapper's block names must run the plan's mode, and the block's own keys of
    another engine (slurm's entrypoint, args and max_restarts are torchrun's) would be dropped
    by the launch of the one it runs."""
    w = c.target
    own = plan.targets[w].settings if w in plan.targets else {}
    key = engine_key(w)["key"]
    named = own.get(key)
    if named is not None and named not in engines(w, plan.mode):
        fits = engines(w, plan.mode)
        c.report(c.at(f"target.{w}.{key}", f"target.{w}"),
                 f"target {w} runs the {display(named)} launch on every node (`{key} = {named}`), and "
                 f"{display(named)} {_modes_text(named)}: this spec {'serves' if plan.mode == 'serve' else 'trains'}",
                 help=(f"use {join([f'`{key} = {e}`' for e in fits], 'or')}" if fits
                       else f"target {w} does not {plan.mode}: compile the spec for another target"))
        return
    runs = engine_of(plan, w)
    inh = inherits(w)
    if runs is None or not inh or stands_in(w, runs):
        return
    for k in inh[1]:
        if k in own:
            c.report(c.at(f"target.{w}.{k}", f"target.{w}"),
                     f"`{k}` of target {w} is for {display(inh[0])} (a script of your own), and target {w} runs "
                     f"the {display(runs)} launch here, which has no place for it: it would be dropped",
                     help=f"remove `{k}` (the {display(runs)} launch is `target {runs} {{ ... }}`'s), or run your own "
                          f"script with `{key} = {inh[0]}`")


def _modes_text(engine_name: str) -> str:
    modes = (spec(engine_name) or {}).get("modes", [])
    return "trains and serves" if len(modes) > 1 else ("serves" if modes == ["serve"] else "trains")


# ------------------------------------------------------------------------------------ P618

@rule("P618", "wrapper-engine-ambiguous", severity=WARNING, targets=wrappers())
def wrapper_engine_ambiguous(plan, c):
    """Without its engine key, a wrapper runs the spec's one engine block of the plan's mode; with
    several it runs its default engine where that is among them (a warning: the other blocks are
    not launched), and cannot choose otherwise (an error)."""
    w = c.target
    key = engine_key(w)["key"]
    if key in plan.target_settings(w):
        return
    found = engine_blocks(w, plan.mode, plan.target_settings(w), plan.targets)
    if len(found) < 2:
        return
    runs, default = engine_of(plan, w), default_engine(w, plan.mode)
    blocks = join([f"`target {e}`" for e in found], "and")
    where = target_span(plan, c, w, f"target.{runs if runs in found else found[0]}")
    related = [(c.at(f"target.{e}"), f"target {e}") for e in found
               if f"target.{e}" in plan.spans and c.at(f"target.{e}") != where]
    which = f"say which in `target {w} {{ ... }}`: " + join([f"`{key} = {e}`" for e in found], "or")
    if runs == default:
        c.report(where, f"target {w} runs one engine's launch on every node, and the spec has {blocks}: it runs "
                        f"{display(runs)}'s (its default), not the others'", help=which, related=related)
    else:
        c.report(where, f"target {w} runs one engine's launch on every node, and the spec has {blocks}: it cannot "
                        "tell which to run", help=which, severity=ERROR, related=related)


# ------------------------------------------------------------------------------------ P610

@rule("P610", "torch-tied-embeddings-pipeline", targets=("torch",))
def torch_tied_pp(plan, c):
    if plan.mesh.pp <= 1 or not plan.model.tied_embeddings:
        return
    c.report(c.at("mesh.pp"),
             f"{target_name(c.target)} cannot pipeline a model with tied embeddings: the first stage's embedding and "
             f"the last stage's output layer would share one weight across pp = {count(plan.mesh.pp, 'rank')} (torchtitan: "
             f"\"Weight tying is not supported with Pipeline Parallel\")",
             help="use pp = 1 (with dp, tp or zero = 3 for memory), or untie the embeddings "
                  "(`tied_embeddings = false`), or use the megatron target, which keeps the tied copies in sync",
             related=[(c.at("model.tied_embeddings"), "tied_embeddings = true")])


# ------------------------------------------------------------------------------------ P616

def pipeline_missing(plan, target: str) -> bool:
    """Whether a pipelined training plan names a schedule ``target``'s runtime does not have
    (its ``[schedules]`` table): P607, P616 and P688 ask this one question."""
    return plan.mode == "train" and plan.mesh.pp > 1 and not runs_pipeline(target, plan.schedule.pipeline)


def schedules_text(target: str) -> str:
    """The schedules ``target``'s runtime has, parc's name with the runtime's own."""
    return ", ".join(f"{p} ({name})" for p, name in pipelines(target).items())


@rule("P616", "torch-no-dualpipe", targets=("torch", "torchtitan"))
def torch_no_dualpipe(plan, c):
    """A pipeline absent from the runtime's table (families.toml for the torch runtime,
    torchtitan's target.toml): today that is dualpipe alone, for both."""
    s = plan.schedule
    if not pipeline_missing(plan, c.target):
        return
    why = (": DualPipe runs only with deepseek-ai/DualPipe's DualPipe module, which no parc target launches"
           if s.pipeline == "dualpipe" else "")
    c.report(c.at("schedule.pipeline"),
             f"{target_name(c.target)} builds its pipeline with {pipeline_runtime(c.target)}, which has no "
             f"pipeline = {s.pipeline}{why}; it has {schedules_text(c.target)}",
             help=(f"use `pipeline = dualpipe_v` with `virtual_stages = 2` (DualPipe cut in half, pp = {plan.mesh.pp} "
                   f"ranks holding one copy of the model), or another of those" if s.pipeline == "dualpipe"
                   and offer(plan, c, [{"schedule.pipeline": "dualpipe_v", "schedule.virtual_stages": 2}])[0]
                   else "choose one of those"))


# ------------------------------------------------------------------------------------ P662
def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def setting_span(plan, c, target: str, key: str):
    """The span of ``key`` as ``target`` sees it: its own block's, else the block it inherits
    the key from (slurm and kubernetes take torchrun's entry point and arguments)."""
    own = plan.targets.get(target)
    source = inherits(target)
    if (own is None or key not in own.settings) and source and key in source[1]:
        other = plan.targets.get(source[0])
        if other is not None and key in other.settings:
            return c.at(f"target.{source[0]}.{key}", f"target.{source[0]}")
    return c.at(f"target.{target}.{key}", f"target.{target}")


@rule("P662", "target-value-nul", targets=launch_targets())
def nul_in_value(plan, c):
    """A NUL character cannot be part of a command-line argument (argv is C strings), and bash
    drops it from a script without a word: the launch would run another value than the spec's."""
    for key, value in settings(plan, c.target).items():
        for text in _strings(value):
            if "\0" in text:
                shown = text.replace("\0", "\\0")
                c.report(setting_span(plan, c, c.target, key),
                         f"`{key}` holds a NUL character (`{shown}`), which no command line, shell script "
                         "or Kubernetes field can carry",
                         help="remove the NUL character from the string")
                break


# ------------------------------------------------------------------------------------ P690
@rule("P690", "value-read-as-option")
def value_read_as_option(plan, c):
    """One rule over every target block the spec holds (a value inherited from `target
    torchrun` is reported once, at torchrun's block)."""
    checked = dash_keys()
    for t, tgt in plan.targets.items():
        for key, v in tgt.settings.items():
            if (t, key) not in checked:
                continue
            items = list(enumerate(v)) if isinstance(v, list) else [(None, v)]
            for i, x in items:
                if not (isinstance(x, str) and x.startswith("-")):
                    continue
                where = f"target.{t}.{key}.value" + (f".{i}" if i is not None else "")
                doc = keys(t)[key].get("doc", "").split(" (")[0]
                shown = json.dumps(x, ensure_ascii=False)
                shown = shown if len(shown) <= 60 else shown[:56] + '..."'
                opts = option_lists(t)
                c.report(c.at(where, f"target.{t}.{key}"),
                         f"`{key}` of target {t} begins with `-` ({shown}): it goes where the command line "
                         f"expects {doc}, and a word beginning with `-` there is read as an option",
                         help=f"a file or folder whose name begins with `-` can be written \"./{x}\""
                              + (f"; options for the program belong in `{opts[0]}`" if opts else ""))


# ------------------------------------------------------------------------------------ P620
# The targets whose builder says which fields of a plan it cannot express: each defines
# ``inexpressible(plan) -> [(path, what, help)]`` beside its ``build``.
FIELD_TARGETS = ("megatron", "torchtitan", "vllm", "sglang", "dynamo", "kserve", "megatron_deepspeed", "trtllm")


@rule("P620", "field-inexpressible", targets=FIELD_TARGETS)
def field_inexpressible(plan, c):
    """A field of the model or the training setup that the target's launch cannot carry: the
    engine would build or train something else than the plan parc checked."""
    import importlib

    builder = importlib.import_module(f"parc.targets.{c.target}")
    name = target_name(c.target)
    for path, what, fix in builder.inexpressible(plan):
        c.report(c.at(path, path.split(".")[0]), f"{name} cannot express {what}", help=fix)


# ------------------------------------------------------------------------------------ P619
def _given_quantization(plan, target: str) -> str | None:
    """The --quantization (vLLM's -q) the target block's extra_args pass, if any."""
    args = [str(a) for a in settings(plan, target).get("extra_args") or []]
    for i, a in enumerate(args):
        if a in ("--quantization", "-q") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--quantization="):
            return a.split("=", 1)[1]
    return None


@rule("P619", "quantization-conflicts-with-checkpoint", targets=("vllm", "sglang"))
def quantization_conflict(plan, c):
    """vLLM and SGLang read a quantized checkpoint's method from its quantization_config and
    refuse a --quantization that is another (ModelConfig._verify_quantization); parc writes one
    only for a 16-bit checkpoint served in FP8 (:func:`parc.model.checkpoints.load_quantization`)."""
    from parc.model.checkpoints import engine_accepts, engine_method, gemm_dtype, is_quantized

    if plan.mode != "serve":
        return
    m, t = plan.model, c.target
    fmt, name = m.checkpoint_format, target_name(t)
    if not is_quantized(fmt):
        return
    method = engine_method(fmt, t)
    at = c.at("model.checkpoint_format", "model")
    if not method:
        c.report(at, f"{name} has no loader for a {fmt} checkpoint (its quantization methods do not include it), "
                     "so it cannot load the model", help="serve the checkpoint with `target vllm`, or use a "
                     "checkpoint in another format")
        return
    given = _given_quantization(plan, t)
    if m.dtype == "fp8" and gemm_dtype(fmt) != "fp8" and given is None and not engine_accepts(fmt, t, "fp8"):
        c.report(c.at("model.dtype", "model"),
                 f"dtype = fp8 on a {fmt} checkpoint: {name} would need --quantization fp8 to run it in FP8, and it "
                 f"refuses any method but the checkpoint's own ({method}: \"Quantization method specified in the "
                 "model config does not match\")", help=f"remove `dtype = fp8` (the {fmt} checkpoint runs as it "
                 "is stored), or serve a 16-bit checkpoint with `checkpoint_format = bf16`",
                 related=[(at, f"checkpoint_format = {fmt}")])
    elif given is not None and not engine_accepts(fmt, t, given):
        c.report(c.at(f"target.{t}.extra_args", f"target.{t}"),
                 f"extra_args pass --quantization {given} for a {fmt} checkpoint, whose quantization_config {name} "
                 f"reads as {method}: it refuses the two together (\"Quantization method specified in the model "
                 "config does not match the quantization method specified in the `quantization` argument\")",
                 help=f"remove --quantization from extra_args: {name} takes the method from the checkpoint",
                 related=[(at, f"checkpoint_format = {fmt}")])


# ------------------------------------------------------------------------------------ P622
@rule("P622", "fp8-checkpoint-served-in-16-bit", targets=("vllm", "sglang"))
def fp8_checkpoint_in_16_bit(plan, c):
    """An FP8 checkpoint's GEMMs run in FP8: neither engine dequantizes it to the model's dtype."""
    from parc.model.checkpoints import gemm_dtype

    m = plan.model
    if plan.mode != "serve" or gemm_dtype(m.checkpoint_format) != "fp8" or m.dtype == "fp8":
        return
    c.report(c.at("model.dtype", "model"),
             f"dtype = {m.dtype} on a {m.checkpoint_format} checkpoint: {target_name(c.target)} loads its FP8 weights "
             f"as they are stored and runs their GEMMs in FP8 (it does not dequantize them), so the plan's "
             f"{m.dtype} weights and GEMMs are not what runs",
             help="remove `dtype` (an FP8 checkpoint serves in fp8), or serve a 16-bit copy of the weights with "
                  "`checkpoint_format = bf16`",
             related=[(c.at("model.checkpoint_format", "model"), f"checkpoint_format = {m.checkpoint_format}")])


# ------------------------------------------------------------------------------------ P646, P647
# The serving orchestrators whose objects run an engine's workers behind their own front
# (Dynamo's frontend, KServe's llm-d scheduler): serving only, under a Kubernetes name.
ORCHESTRATORS = ("dynamo", "kserve")
# those and Ray Serve LLM, whose replicas build a serving engine from an LLMConfig: serving only
SERVING_ORCHESTRATORS = (*ORCHESTRATORS, "rayserve")


@rule("P646", "orchestrator-serves-only", targets=SERVING_ORCHESTRATORS)
def orchestrator_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, c.target, "train"),
                 f"{target_name(c.target)} serves a model: its workers run a serving engine behind its own front, and "
                 "this spec trains (it has a `train` block)",
                 help="compile training for Kubernetes with `target trainjob` or `target kubernetes`, or replace "
                      "`train` with `serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


@rule("P647", "orchestrator-name", targets=ORCHESTRATORS)
def orchestrator_names(plan, c):
    from importlib import import_module

    from parc.targets.kubernetes.rules import check_names

    check_names(plan, c, c.target, import_module(f"parc.targets.{c.target}").NAME_MAX)
