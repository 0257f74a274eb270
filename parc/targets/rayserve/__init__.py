"""Ray Serve LLM: ``serve.yaml``, a Ray Serve config (``serve run serve.yaml``, or ``serve deploy``
on a running Ray cluster) of one application built by ``ray.serve.llm``.

Ray Serve LLM builds the engine itself from an ``LLMConfig`` (ray.llm's
core/configs/llm_config.py): ``model_loading_config.model_id`` the model (the vllm target's
``model``), ``engine_kwargs`` the keyword arguments of vLLM's EngineArgs, ``placement_group_config``
the GPUs of one engine (or of one data-parallel rank), ``accelerator_type`` the GPU, and
``deployment_config.num_replicas`` how many. The engine's options are the vllm target's, as
keyword arguments (:func:`parc.targets.engines.engine_config`): its degrees, MoE, scheduler, KV
cache, model options and KV connector, read from the same place as its command line, so every
rule of the engine holds here too. What a launch adds to that command (ranks, addresses, ports,
the executor) is Ray's: Ray Serve runs vLLM's workers as Ray actors in the placement group.

The engine target cuts the plan into runs (parc/targets/vllm/scheduled.py), each an LLMConfig:

* a plan of independent replicas (dp replicas of tp·pp·cp GPUs): one LLMConfig of one replica's
  engine, ``num_replicas`` dp, through ``build_openai_app`` (args ``llm_configs``);
* one engine over its data-parallel ranks (experts over dp·cp·tp): ``data_parallel_size`` dp in
  ``engine_kwargs``, through ``build_dp_openai_app`` (args ``llm_config``), whose server makes a
  Serve replica of each rank (gang-scheduled) with its placement group of tp·pp·cp GPUs;
* a prefill/decode-disaggregated plan: an LLMConfig per pool, each with the pool's degrees and KV
  connector, ``num_replicas`` its instances, through ``build_pd_openai_app`` (args
  ``prefill_config`` and ``decode_config``); a pool with data parallelism is served by the data
  parallel servers, as the builder chooses by ``data_parallel_size``.

Each engine's placement group is written out, a bundle of one GPU per GPU of the engine (or rank):
Ray's own default counts tensor · pipeline GPUs only, which would leave the GPUs of prefill context
parallelism out. Its strategy is STRICT_PACK when the engine fits on a node (the plan's tensor
parallelism stays on the node's fast links), PACK (Ray's default: across nodes) when it spans
several. A GPU with a Ray accelerator type (target.toml's [accelerators]) is asked for by it.
The engine target's environment (VLLM_PP_LAYER_PARTITION for an uneven pipeline) goes in the
config's ``runtime_env``; the engine target's ``port`` becomes the Serve HTTP port.
"""
from __future__ import annotations

from parc.model.targets import spec
from parc.targets.base import File, dns_label, mesh_text, plan_json, settings, spec_name
from parc.targets.engines import engine_config, engine_settings, launch
from parc.targets.render import yaml_lines
from parc.words import count

TARGET = "rayserve"
NAME_MAX = 40


def accelerator_type(plan) -> str | None:
    """Ray's accelerator type of the cluster's GPU: the block's, else target.toml's [accelerators]."""
    return settings(plan, TARGET).get("accelerator_type") or spec(TARGET)["accelerators"].get(plan.cluster.gpu.name)


def builder(plan, runs) -> str:
    """Which of ray.serve.llm's builders serves the plan (target.toml's [builders])."""
    kind = "pools" if plan.pools else ("data_parallel" if runs[0].plan.mesh.dp > 1 else "replicas")
    return spec(TARGET)["builders"][kind]


def llm_config(plan, run) -> dict:
    """The LLMConfig of one run: an engine (its plan ``run.plan``) and how many."""
    from parc.model.pools import replica_gpus

    sub = run.plan
    kwargs, env = engine_config(sub, TARGET, run.pool)
    gpus = replica_gpus(sub.mesh)
    model = engine_settings(plan, TARGET, "vllm").get("model", "")
    out: dict = {"model_loading_config": {"model_id": model}}
    if accelerator_type(plan):
        out["accelerator_type"] = accelerator_type(plan)
    out["engine_kwargs"] = kwargs
    out["placement_group_config"] = {"bundles": [{"GPU": 1}] * gpus,
                                     "strategy": "STRICT_PACK" if gpus <= plan.cluster.gpus_per_node else "PACK"}
    out["deployment_config"] = {"num_replicas": run.replicas}
    if env:
        out["runtime_env"] = {"env_vars": {e.name: e.value for e in env}}
    return out


def application(plan) -> dict:
    """The Serve config: one application, its builder's import path and arguments."""
    node = launch(plan, TARGET)
    configs = {run.pool: llm_config(plan, run) for run in node.runs}
    path = builder(plan, node.runs)
    if plan.pools:
        args = {"prefill_config": configs["prefill"], "decode_config": configs["decode"]}
    elif path.endswith("build_dp_openai_app"):
        args = {"llm_config": configs[None]}
    else:
        args = {"llm_configs": [configs[None]]}
    name = settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)
    out: dict = {}
    port = engine_settings(plan, TARGET, "vllm").get("port")
    if port is not None:
        out["http_options"] = {"port": port}
    out["applications"] = [{"name": name, "route_prefix": "/", "import_path": path, "args": args}]
    return out


def header(plan, app: dict) -> list[str]:
    args = app["applications"][0]["args"]
    configs = ([("prefill", args["prefill_config"]), ("decode", args["decode_config"])] if plan.pools
               else [(None, args.get("llm_config") or args["llm_configs"][0])])
    lines = [f"Ray Serve LLM application compiled by parc from {spec_name(plan)}: serve run serve.yaml "
             "(Ray with ray[serve,llm] on every node; serve deploy serve.yaml on a running cluster)."]
    if not plan.pools:
        lines.append(f"Mesh: {mesh_text(plan)}.")
    for pool, c in configs:
        n, gpus = c["deployment_config"]["num_replicas"], len(c["placement_group_config"]["bundles"])
        dp = c["engine_kwargs"].get("data_parallel_size", 1)
        what = (f"{count(n, 'engine')} of {count(dp, 'data-parallel rank')} x {count(gpus, 'GPU')}" if dp > 1
                else f"{count(n, 'replica')} x {count(gpus, 'GPU')}")
        lines.append(f"{pool.capitalize() + ': ' if pool else ''}{what}.")
    if not accelerator_type(plan):
        lines.append(f"No accelerator_type: Ray has no accelerator type for {plan.cluster.gpu.name}, so the "
                     "replicas take any GPU (set `accelerator_type` in `target rayserve` to name one).")
    if "http_options" not in app:
        lines.append("The HTTP port is Ray Serve's own (8000 unless the cluster's Serve options say otherwise).")
    return lines


def build(plan) -> list[File]:
    from parc.targets.render import c

    app = application(plan)
    text = "".join(f"# {c(line)}\n" for line in header(plan, app)) + "\n".join(yaml_lines(app)) + "\n"
    return [File("serve.yaml", text), File("plan.json", plan_json(plan))]
