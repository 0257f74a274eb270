"""torchtitan: one ``launch.sh`` that every node runs (torchrun's launch, built by the torchrun
target) starting ``python -m torchtitan.train --module M --config C`` with the plan's degrees as
command-line overrides, and ``plan.json`` beside it.

torchtitan (0.3.0 on) is configured by a Python function that returns a ``Trainer.Config``
(``--module``/``--config``, torchtitan/config/manager.py ``ConfigManager._load_config``); the
``--section.option`` overrides that follow it win over the function's values. The model's
architecture, with its float8 converter, comes from that function (for a preset the function
torchtitan ships in the plan's precision, target.toml [configs], else the block's ``module`` and
``config``; P620 refuses a model block that differs from the shipped function's model); the
degrees and batch sizes come from the plan:

* dp and zero become torchtitan's two data-parallel degrees, ``data_parallel_replicate_degree``
  × ``data_parallel_shard_degree`` = dp (``ParallelDims``). zero = 0 replicates the whole dp
  (DDP: replicate = dp, shard = 1); zero ≥ 1 shards over dp / ``replicate`` ranks (FSDP2, or
  HSDP when the block's ``replicate`` is above 1). FSDP2 always shards parameters, gradients and
  optimizer states; zero 1 and 2 keep the gathered parameters from forward to backward
  (``fsdp_reshard_after_forward = never``), zero 3 frees them after each forward
  (``always``). So zero 1 and 2 need no more memory than the plan counts for them;
* cp, tp, pp and ep by their own degrees; ``enable_sequence_parallel`` from the train block,
  and with tp > 1 its ``tp_comm_overlap`` as AsyncTP (``compile.enable_async_tensor_parallel``);
* the pipeline schedule by torchtitan's name for it (target.toml ``[schedules]``); an even layer
  split by ``pipeline_parallel_layers_per_stage`` with neither end stage shortened, so torchtitan
  makes exactly pp × virtual_stages stages; the micro batch is
  ``pipeline_parallel_microbatch_size``, the microbatches of one step the local batch;
* ``training.local_batch_size`` and ``global_batch_size`` give the same gradient accumulation as
  the plan (torchtitan's Trainer: global / (local × dp_replicate × dp_shard) steps);
* ``recompute`` as the ``activation-checkpoint:...`` subcommand, last on the command line: none,
  full, or ``selective_op`` as torchtitan's per-op selective checkpointing.
"""
from __future__ import annotations

from parc.targets.base import Env, File, plan_json, settings, spec_name
from parc.targets.render import c as comment
from parc.targets.torchrun import script

TARGET = "torchtitan"
ENTRY = "torchtitan.train"
PRECISION = {"bf16": "bfloat16", "fp32": "float32"}


def _data():
    from parc.model.targets import spec

    return spec(TARGET)


def shipped(plan) -> dict[str, dict]:
    """The config functions torchtitan ships for the plan's model preset (target.toml [configs])."""
    return {name: c for name, c in _data().get("configs", {}).items() if c["preset"] == plan.model.preset}


def preset_config(plan) -> tuple[str, dict] | None:
    """(name, entry) of the shipped function for the plan's preset in the plan's precision and FP8
    recipe, or None."""
    tr = plan.train
    fp8 = bool(tr and tr.precision == "fp8")
    for name, c in shipped(plan).items():
        if (c.get("precision") == "fp8") == fp8 and (not fp8 or fp8_recipe(plan) == c["fp8_recipe"]):
            return name, c
    return None


def fp8_recipe(plan) -> str:
    """The float8 recipe torchtitan runs an fp8 plan with: the spec's ``fp8_recipe``, else its
    converter's default (target.toml ``fp8_default_recipe``)."""
    return plan.train.fp8_recipe or _data()["fp8_default_recipe"]


def float8_base(plan) -> tuple[str, dict] | None:
    """(name, entry) of the shipped bf16 function that parc's own config function (target.toml
    [float8], :func:`float8_file`) adds the Float8 converter to: for an fp8 plan of a preset that
    torchtitan ships no function of that recipe for, where the spec names no function itself."""
    tr = plan.train
    if tr is None or tr.precision != "fp8" or own_config(plan) or preset_config(plan):
        return None
    if fp8_recipe(plan) not in _data()["float8"]["recipes"]:
        return None
    return next(((n, c) for n, c in shipped(plan).items() if c.get("float8")), None)


def module_config(plan) -> tuple[str | None, str | None]:
    """--module and --config: the block's own, else the shipped function :func:`preset_config`
    picks, else parc's Float8 function over the bf16 one (:func:`float8_base`)."""
    s = settings(plan, TARGET)
    name, pre = preset_config(plan) or (None, {})
    base = float8_base(plan)
    if base and "module" not in s:
        return _data()["float8"]["file"].removesuffix(".py"), f"{base[0]}_float8"
    return s.get("module", pre.get("module")), s.get("config", name)


def float8_file(plan) -> list[File]:
    """parc's config function for :func:`float8_base`: the shipped function with its model rebuilt
    by its module's model_registry with torchtitan's Float8LinearConverter (torch.compile of the
    model as the launch asks for it: AsyncTP's), as torchtitan's own llama3_8b_mxfp8 and
    llama3_405b write it."""
    base = float8_base(plan)
    if base is None:
        return []
    (name, entry), f8 = base, _data()["float8"]
    compiled = bool(plan.train.tp_comm_overlap and plan.mesh.tp > 1)
    module = entry["module"]
    text = "\n".join([   # the spec's file name goes into a comment escaped, as every template's does
        f"# torchtitan config function compiled by parc from {comment(spec_name(plan))}: torchtitan's {name} training",
        f"# in Float8 (recipe {fp8_recipe(plan)}). launch.sh runs it: --module {module_config(plan)[0]} "
        f"--config {name}_float8.",
        "from torchtitan.components.quantization import Float8LinearConverter",
        f"from torchtitan.models.{module} import model_registry",
        f"from torchtitan.models.{module}.config_registry import {name}",
        "", "",
        f"def {name}_float8():",
        f"    config = {name}()",
        "    config.model_spec = model_registry(",
        "        config.model_spec.flavor,",
        "        converters=[",
        "            Float8LinearConverter.Config(",
        f"                recipe_name={fp8_recipe(plan)!r},",
        f"                filter_fqns={list(f8['filter_fqns'])!r},",
        f"                model_compile_enabled={compiled!r},",
        "            ),",
        "        ],",
        "    )",
        "    return config",
        ""])
    return [File(f8["file"], text)]


def own_config(plan) -> bool:
    """Whether the spec names its own config function (parc cannot see the model it builds)."""
    return "config" in settings(plan, TARGET)


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each field of the plan torchtitan's launch cannot carry (P620): the
    training setup its command line has no value for, and, with a shipped config function, the
    precision no function has and each model field that differs from the function's model
    (torchtitan takes the model from the function: Trainer.Config.model_spec is not on its command
    line)."""
    tr = plan.train
    if tr is None:
        return []
    out = _train_faults(tr)
    if own_config(plan) or not shipped(plan):
        return out
    picked = preset_config(plan) or float8_base(plan)
    if picked is None:
        have = ", ".join(f"{n} ({c.get('precision', 'bf16')}{', ' + c['fp8_recipe'] if 'fp8_recipe' in c else ''})"
                         for n, c in shipped(plan).items())
        what = f"precision = {tr.precision}" + (f" with fp8_recipe = {tr.fp8_recipe}" if tr.fp8_recipe else "")
        out.append(("train.fp8_recipe" if tr.fp8_recipe and tr.precision == "fp8" else "train.precision",
                    f"`{what}` for {plan.model.preset}: its precision and float8 recipe come from the config "
                    f"function (the model converters), and torchtitan ships {have}",
                    "choose the precision of a function it ships, or name your own with `module` and `config` "
                    "in `target torchtitan`"))
        return out
    return out + _model_faults(plan, *picked)


def _train_faults(tr) -> list[tuple[str, str, str]]:
    out = []
    if tr.recompute == "selective" or tr.recompute_modules:
        out.append(("train.recompute_modules" if tr.recompute_modules else "train.recompute",
                    "Megatron-LM's module-level selective recompute (`recompute = selective`"
                    + (f", recompute_modules {', '.join(tr.recompute_modules)}" if tr.recompute_modules else "")
                    + "): torchtitan checkpoints selectively per op (activation_checkpoint selective: the outputs of "
                    "matmuls, attention and collectives kept)", "use `recompute = selective_op` (or none or full)"
                    + (" and remove `recompute_modules`" if tr.recompute_modules else "")))
    if tr.fp8_param_gather:
        out.append(("train.fp8_param_gather", "`fp8_param_gather = true`: torchtitan's float8 converter keeps "
                    "bfloat16 weights and casts them per use (Float8LinearConverter.Config has no FP8 weights)",
                    "remove `fp8_param_gather`"))
    return out


def _model_faults(plan, name: str, entry: dict) -> list[tuple[str, str, str]]:
    """Each model field that differs from what config function ``name`` builds: the preset's
    values with the function's own ``differs``."""
    from parc.resolve.catalog import preset_changes

    m, own = plan.model, entry.get("differs", {})
    want = {f: v for f, (v, _) in preset_changes(m).items()}
    want.update({f: v for f, v in own.items() if getattr(m, f) != v})
    for f in own:
        if getattr(m, f) == own[f]:
            want.pop(f, None)
    return [(f"model.{f}", f"`{f} = {getattr(m, f)}`: torchtitan's {name} builds {f} = {v}, and its model comes "
             "from the config function, not the command line", f"set `{f} = {v}`, or name your own config function "
             "with `module` and `config` in `target torchtitan`") for f, v in want.items()]


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml)."""
    from parc.model.targets import flag, pinned

    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def recompute_word(plan) -> list[list]:
    """train.recompute as torchtitan's activation_checkpoint subcommand (flags.toml), which must
    come last on its command line (tyro reads no option of the trainer after it)."""
    from parc.model.targets import flag_table

    member = flag_table(TARGET)["activation_checkpoint"]["values"].get(plan.train.recompute)
    return [[f"{options(plan)('activation_checkpoint')}:{member}"]] if member else []


def schedule_name(plan) -> str:
    return _data()["schedules"][plan.schedule.pipeline]


def degrees(plan) -> dict:
    """torchtitan's degrees for the plan: replicate × shard = dp (see the module doc)."""
    m, tr = plan.mesh, plan.train
    if tr.zero == 0:
        rep = m.dp
    else:
        rep = settings(plan, TARGET).get("replicate", 1)
    shard = m.dp // rep if rep and m.dp % rep == 0 else -1
    return {"dp_replicate": rep, "dp_shard": shard, "cp": m.cp, "tp": m.tp, "pp": m.pp, "ep": m.ep}


def even_stage_layers(plan) -> int | None:
    """Layers per (virtual) stage when the plan splits them evenly, else None."""
    stages = plan.mesh.pp * plan.schedule.virtual_stages
    layers = plan.placement.layers
    if layers and len(layers) == stages:
        return layers[0] if len(set(layers)) == 1 else None
    return plan.model.layers // stages if plan.model.layers % stages == 0 else None


def split_overrides(plan) -> list[list] | None:
    """The options that make torchtitan run the plan's layer split, or None where its command line
    cannot say it (an uneven split of the spec's own, P636):

    * an even split: ``pipeline_parallel_layers_per_stage`` with neither end stage shortened, so
      torchtitan makes exactly pp × virtual_stages stages of that many layers;
    * an uneven count left to torchtitan (``placement.layers`` then holds torchtitan's own split,
      :func:`parc.model.params.engine_split`): nothing where torchtitan's default number of stages
      is the plan's (one per rank for a single-stage schedule, two for a multi-stage one:
      ``_get_pipeline_metadata``), else the ``layers_per_stage`` whose ceil((layers + 2) /
      layers_per_stage) stages are the plan's."""
    me, v = plan.mesh, plan.schedule.virtual_stages
    F = options(plan)
    per_stage = even_stage_layers(plan)
    if per_stage:
        return [[F("pipeline_parallel_first_stage_less_layers"), 0],
                [F("pipeline_parallel_last_stage_less_layers"), 0],
                [F("pipeline_parallel_layers_per_stage"), per_stage]]
    if plan.placement.layers_mode != "even":
        return None
    if v <= 2:
        return []
    stages, effective = me.pp * v, plan.model.layers + 2
    lps = -(-effective // stages)
    return [[F("pipeline_parallel_layers_per_stage"), lps]] if -(-effective // lps) == stages else None


def overrides(plan) -> list[list]:
    """torchtitan's command line after ``-m torchtitan.train``, one option a line."""
    me, sc, tr = plan.mesh, plan.schedule, plan.train
    F = options(plan)
    module, config = module_config(plan)
    d = degrees(plan)
    out: list[list] = [[F("module"), module], [F("config"), config],
                       [F("data_parallel_replicate_degree"), d["dp_replicate"]],
                       [F("data_parallel_shard_degree"), d["dp_shard"]]]
    if tr.zero > 0:
        out.append([F("fsdp_reshard_after_forward"), "always" if tr.zero == 3 else "never"])
    out += [[F("tensor_parallel_degree"), me.tp], [F("context_parallel_degree"), me.cp],
            [F("pipeline_parallel_degree"), me.pp], [F("expert_parallel_degree"), me.ep]]
    if me.tp > 1:
        out.append([F("enable_sequence_parallel" if tr.sequence_parallel else "no_enable_sequence_parallel")])
        out += async_tp(plan)
    local = sc.micro_batch
    if me.pp > 1:
        out += [[F("pipeline_parallel_schedule"), schedule_name(plan)],
                [F("pipeline_parallel_microbatch_size"), sc.micro_batch]]
        out += split_overrides(plan) or []
        local = sc.micro_batch * (sc.microbatches or 1)
    # torchtitan's Trainer.Config refuses CUDA graphs with a pipeline, and with expert parallelism
    # through a token dispatcher that synchronizes with the CPU (the all-to-all its MoE models use)
    if me.pp > 1 or (plan.model.is_moe and me.ep > 1):
        out.append([F("disable_cuda_graphs")])
    out += [[F("local_batch_size"), local], [F("global_batch_size"), sc.global_batch],
            [F("seq_len"), plan.model.seq_len]]
    if tr.precision in PRECISION:
        out.append([F("mixed_precision_param"), PRECISION[tr.precision]])
    return out


def async_tp(plan) -> list[list]:
    """``tp_comm_overlap`` as torchtitan's AsyncTP, ``compile.enable_async_tensor_parallel``
    (torchtitan/config/configs.py CompileConfig, 0.3.0): Inductor's micro-pipeline TP pass, so it
    needs ``--compile.enable`` with the model among ``compile.components`` (the default). Both
    ways are written out, since torchtitan's own llama3_405b config turns it on (config_registry.py)."""
    F = options(plan)
    if plan.train.tp_comm_overlap:
        return [[F("compile_enable")], [F("enable_async_tensor_parallel")]]
    return [[F("no_enable_async_tensor_parallel")]]


def _lines(plan) -> list[list]:
    """torchtitan's command line: the plan's overrides, the block's own, the recompute subcommand."""
    return overrides(plan) + [[a] for a in settings(plan, TARGET).get("args") or []] + recompute_word(plan)


ENV = (Env("PYTORCH_ALLOC_CONF", "expandable_segments:True", "as torchtitan's run_train.sh sets it"),)


def build(plan) -> list[File]:
    s = settings(plan, TARGET)
    own = float8_file(plan)
    text = script(plan, entrypoint=ENTRY, python_module=True, arg_lines=_lines(plan),
                  endpoint=s.get("rdzv_endpoint"), max_restarts=s.get("max_restarts", 0), env=list(ENV),
                  path_here=bool(own))
    return [File("launch.sh", text, True), *own, File("plan.json", plan_json(plan))]


def node_launch(plan, s: dict):
    """torchtitan under a scheduler: the same launch.sh and command, the rendezvous at the
    scheduler's node 0 (parc/targets/engines.py)."""
    from parc.targets.torchrun import scheduled

    own = float8_file(plan)
    return scheduled(plan, TARGET, entrypoint=ENTRY, python_module=True, arg_lines=_lines(plan),
                     max_restarts=s.get("max_restarts", 0), env=list(ENV), files=own, path_here=bool(own))
