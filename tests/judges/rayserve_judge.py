"""Runs inside the Ray Serve judge's virtual environment (tests/judges/rayserve_env.sh), never in
parc's own.

Reads JSON lists of Serve config texts (a `serve.yaml`), one list a line, on stdin, and prints for
each what Ray makes of it, with Ray's own models and builders:

* the file against Ray Serve's config schema (ray.serve.schema.ServeDeploySchema, what
  `serve deploy` and `serve run` validate);
* each application's import_path imported as Serve imports it, and called with its args: the
  builders of ray.serve.llm validate them with their own models (LLMServingArgs, PDServingArgs,
  DPOpenAiServingArgs, each LLMConfig within) and bind the deployments, as `serve run` does before
  it deploys;
* each LLMConfig as its server turns it into vLLM's engine configuration
  (VLLMEngineConfig.from_llm_config, which refuses a keyword argument that is not an EngineArgs
  field of the vLLM in this environment), with the GPUs of one engine, its placement bundles and
  strategy;
* the deployments the builder bound, walked from the ingress: their names, replicas and
  placement group bundles.

It answers with those facts; the test compares them with the plan, and vLLM's own EngineArgs (the
vLLM judge's environment) judges each engine_kwargs."""
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")   # no GPU here: vLLM's CPU platform

import yaml  # noqa: E402
from ray._common.utils import import_attr  # noqa: E402
from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig  # noqa: E402
from ray.serve.deployment import Application  # noqa: E402
from ray.serve.llm import LLMConfig  # noqa: E402
from ray.serve.schema import ServeDeploySchema  # noqa: E402


def engine(config):
    """One LLMConfig as vLLM's engine configuration."""
    c = LLMConfig.model_validate(config)
    e = VLLMEngineConfig.from_llm_config(c)
    return {"model_id": c.model_id, "accelerator_type": c.accelerator_type, "num_devices": e.num_devices,
            "bundles": e.placement_bundles, "strategy": e.placement_strategy, "engine_kwargs": e.engine_kwargs,
            "env_vars": (c.runtime_env or {}).get("env_vars", {})}


def deployments(app, seen=None):
    """The deployments bound under ``app`` (its own first), each once."""
    seen = [] if seen is None else seen
    d = app._bound_deployment
    if any(name == d.name for name, *_ in seen):
        return seen
    rc = d._replica_config
    seen.append((d.name, d._deployment_config.num_replicas, len(rc.placement_group_bundles or []),
                 rc.placement_group_strategy))
    for a in list(d.init_args) + list(d.init_kwargs.values()):
        for x in (a.values() if isinstance(a, dict) else a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, Application):
                deployments(x, seen)
    return seen


def judge(text):
    d = yaml.safe_load(text)
    try:
        ServeDeploySchema.parse_obj(d)
    except Exception as x:
        return {"ok": False, "stage": "schema", "error": str(x)}
    out = []
    for app in d["applications"]:
        try:
            built = import_attr(app["import_path"])(app.get("args") or {})
        except Exception as x:
            return {"ok": False, "stage": "builder", "error": f"{type(x).__name__}: {x}"}
        args = app["args"]
        configs = ({"prefill": args["prefill_config"], "decode": args["decode_config"]} if "prefill_config" in args
                   else {"": args["llm_config"]} if "llm_config" in args else {"": args["llm_configs"][0]})
        try:
            engines = {k: engine(v) for k, v in configs.items()}
        except Exception as x:
            return {"ok": False, "stage": "engine config", "error": f"{type(x).__name__}: {x}"}
        out.append({"name": app["name"], "import_path": app["import_path"], "engines": engines,
                    "deployments": deployments(built)})
    return {"ok": True, "applications": out, "http_port": (d.get("http_options") or {}).get("port")}


MARK = "@@rayserve-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)], default=str), flush=True)
