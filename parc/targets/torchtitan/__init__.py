"""torchtitan: one ``launch.sh`` that every node runs (torchrun's launch, built by the torchrun
target) starting ``python -m torchtitan.train --module M --config C`` with the plan's degrees as
command-line overrides, and ``plan.json`` beside it.

torchtitan (0.3.0 on) is configured by a Python function that returns a ``Trainer.Config``
(``--module``/``--config``, torchtitan/config/manager.py ``ConfigManager._load_config``); the
``--section.option`` overrides that follow it win over the function's values. The model's
architecture comes from that function (for parc's llama3 presets the function torchtitan ships,
else the block's ``module`` and ``config``); the degrees and batch sizes come from the plan:

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
  the plan (torchtitan's Trainer: global / (local × dp_replicate × dp_shard) steps).
"""
from __future__ import annotations

from parc.targets.base import Env, File, plan_json, settings
from parc.targets.torchrun import script

TARGET = "torchtitan"
ENTRY = "torchtitan.train"
PRECISION = {"bf16": "bfloat16", "fp32": "float32"}


def _data():
    from parc.model.targets import spec

    return spec(TARGET)


def preset_config(plan) -> dict | None:
    """The {module, config} torchtitan ships for the plan's model preset, if any."""
    return _data().get("presets", {}).get(plan.model.preset or "")


def module_config(plan) -> tuple[str | None, str | None]:
    s = settings(plan, TARGET)
    pre = preset_config(plan) or {}
    return s.get("module", pre.get("module")), s.get("config", pre.get("config"))


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
    par = "--parallelism."
    per_stage = even_stage_layers(plan)
    if per_stage:
        return [[par + "pipeline_parallel_first_stage_less_layers", 0],
                [par + "pipeline_parallel_last_stage_less_layers", 0],
                [par + "pipeline_parallel_layers_per_stage", per_stage]]
    if plan.placement.layers_mode != "even":
        return None
    if v <= 2:
        return []
    stages, effective = me.pp * v, plan.model.layers + 2
    lps = -(-effective // stages)
    return [[par + "pipeline_parallel_layers_per_stage", lps]] if -(-effective // lps) == stages else None


def overrides(plan) -> list[list]:
    """torchtitan's command line after ``-m torchtitan.train``, one option a line."""
    me, sc, tr = plan.mesh, plan.schedule, plan.train
    module, config = module_config(plan)
    d = degrees(plan)
    par = "--parallelism."
    out: list[list] = [["--module", module], ["--config", config],
                       [par + "data_parallel_replicate_degree", d["dp_replicate"]],
                       [par + "data_parallel_shard_degree", d["dp_shard"]]]
    if tr.zero > 0:
        out.append([par + "fsdp_reshard_after_forward", "always" if tr.zero == 3 else "never"])
    out += [[par + "tensor_parallel_degree", me.tp], [par + "context_parallel_degree", me.cp],
            [par + "pipeline_parallel_degree", me.pp], [par + "expert_parallel_degree", me.ep]]
    if me.tp > 1:
        out.append([par + ("enable_sequence_parallel" if tr.sequence_parallel else "no_enable_sequence_parallel")])
        out += async_tp(plan)
    local = sc.micro_batch
    if me.pp > 1:
        out += [[par + "pipeline_parallel_schedule", schedule_name(plan)],
                [par + "pipeline_parallel_microbatch_size", sc.micro_batch]]
        out += split_overrides(plan) or []
        # torchtitan's Trainer.Config refuses CUDA graphs with a pipeline
        out.append(["--training.disable_cuda_graphs"])
        local = sc.micro_batch * (sc.microbatches or 1)
    out += [["--training.local_batch_size", local], ["--training.global_batch_size", sc.global_batch],
            ["--training.seq_len", plan.model.seq_len]]
    if tr.precision in PRECISION:
        out.append(["--training.mixed_precision_param", PRECISION[tr.precision]])
    return out


def async_tp(plan) -> list[list]:
    """``tp_comm_overlap`` as torchtitan's AsyncTP, ``compile.enable_async_tensor_parallel``
    (torchtitan/config/configs.py CompileConfig, 0.3.0): Inductor's micro-pipeline TP pass, so it
    needs ``--compile.enable`` with the model among ``compile.components`` (the default). Both
    ways are written out, since torchtitan's own llama3_405b config turns it on (config_registry.py)."""
    if plan.train.tp_comm_overlap:
        return [["--compile.enable"], ["--compile.enable_async_tensor_parallel"]]
    return [["--compile.no_enable_async_tensor_parallel"]]


def _lines(plan) -> list[list]:
    return overrides(plan) + [[a] for a in settings(plan, TARGET).get("args") or []]


ENV = (Env("PYTORCH_ALLOC_CONF", "expandable_segments:True", "as torchtitan's run_train.sh sets it"),)


def build(plan) -> list[File]:
    s = settings(plan, TARGET)
    text = script(plan, entrypoint=ENTRY, python_module=True, arg_lines=_lines(plan),
                  endpoint=s.get("rdzv_endpoint"), max_restarts=s.get("max_restarts", 0), env=list(ENV))
    return [File("launch.sh", text, True), File("plan.json", plan_json(plan))]


def node_launch(plan, s: dict):
    """torchtitan under a scheduler: the same launch.sh and command, the rendezvous at the
    scheduler's node 0 (parc/targets/engines.py)."""
    from parc.targets.torchrun import scheduled

    return scheduled(plan, TARGET, entrypoint=ENTRY, python_module=True, arg_lines=_lines(plan),
                     max_restarts=s.get("max_restarts", 0), env=list(ENV))
