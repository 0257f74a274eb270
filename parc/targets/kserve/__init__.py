"""KServe: ``llmisvc.yaml``, an ``LLMInferenceService`` (serving.kserve.io/v1alpha2) that KServe's
controller turns into vLLM workloads from its presets, the llm-d inference scheduler and an
HTTPRoute on the cluster's Gateway.

KServe's presets (LLMInferenceServiceConfig, config/llmisvcconfig at v0.20.0) write the container's
command themselves: `vllm serve /mnt/models --served-model-name MODEL --port ...` and then the
words of ``VLLM_ADDITIONAL_ARGS``, which the preset's shell line ``eval``s (so the variable holds a
shell line, each word quoted). parc writes the vllm target's own options for each run of its launch
(parc/targets/engines.py) into that variable, less what the preset writes (target.toml
[presets]), and sets what the preset reads those from: ``spec.model`` (``uri`` for the storage
initializer, which fetches the model to /mnt/models; ``name``, the served name) and, for a
multi-node run, ``spec.parallelism``.

* A run of one node is a single-node workload: ``replicas`` pods with the run's GPUs, the
  preset config-llm-template (config-llm-prefill-template and config-llm-decode-template for a
  disaggregated plan's pools). parc leaves ``spec.parallelism`` unset there: the single-node
  presets of v0.20.0 write no pipeline size from it (kserve#6044), so every degree travels in
  the vllm target's own options.
* A run over several nodes is one LeaderWorkerSet group per replica (``spec.worker`` the pods
  after the leader, ``spec.template`` the leader) only as vLLM data parallelism over the nodes
  (the vllm target's expert-parallel engine): KServe's config-llm-worker-data-parallel writes
  ``--data-parallel-size``, ``--data-parallel-size-local``, the leader's address and each pod's
  first rank from ``spec.parallelism`` (``data``, ``dataLocal``, ``tensor``, ``expert``,
  ``dataRPCPort``), whose values parc reads off the vllm target's command. Any other multi-node
  launch is refused (P620, :func:`inexpressible`; a pipeline over nodes is kserve#5047, P710).
* A disaggregated plan's decode pool is the top-level workload and its prefill pool
  ``spec.prefill``; NixlConnector's side channel listens on the pod's IP
  (``VLLM_NIXL_SIDE_CHANNEL_HOST``, as KServe's P/D samples set it). ``spec.router`` asks for the
  llm-d scheduler (prefix- and load-aware, prefill/decode-aware with pools), the route and the
  Gateway. The plan travels in a ConfigMap ``<name>-plan`` that every pod mounts at
  ``/etc/parc`` (``PARC_PLAN`` points at ``plan.json``), as with the kubernetes target.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from parc.model.targets import spec
from parc.targets.base import Cat, Env, File, Var, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.targets.dynamo import without
from parc.targets.engines import Product, Run, launch
from parc.words import count

TARGET = "kserve"
NAME_MAX = 40            # KServe names the workloads <name>-kserve(-prefill), the LWS pods after them
API_VERSION = "serving.kserve.io/v1alpha2"
PROGRAM = ("vllm", "serve")


def presets() -> dict:
    return (spec(TARGET) or {}).get("presets", {})


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


@dataclass(frozen=True)
class Workload:
    """One workload of the service: the run it stands for, the preset that starts it, the
    parallelism it sets, the options it hands the preset, and why it cannot (``why``)."""

    run: Run
    preset: str
    parallelism: dict
    args: tuple[str, ...]
    why: str | None = None


def _value(opts: list, flag: str):
    return opts[opts.index(flag) + 1] if flag in opts else None


def _plain(words: list) -> bool:
    return not any(isinstance(w, (Var, Cat, Product)) for w in words)


def workload(run: Run) -> Workload:
    """The workload of ``run`` (module doc)."""
    steps = [list(s) for s in (run.leader, *([run.worker] if run.worker else []))]
    serves = [s[-1] for s in steps]
    if any(tuple(s[:2]) != PROGRAM for s in serves) or len(run.leader) != 1:
        return Workload(run, "", {}, (), "its launch starts Ray before vLLM")
    opts = [o[3:] for o in serves]
    if run.size == 1:
        args = without(opts[0], presets()["single"]["owns"])
        return Workload(run, "single", {}, tuple(map(str, args)), None if _plain(args) else "a word the scheduler fills in")
    dp = presets()["data_parallel"]
    lead = opts[0]
    if "--data-parallel-size-local" not in lead:
        return Workload(run, "", {}, (), "it is one vLLM engine over several nodes without data parallelism")
    par = {field: True if field == "expert" else int(_value(lead, flag))
           for flag, field in dp["fields"].items() if flag in lead}
    args = [without(o, dp["owns"]) for o in opts]
    why = None if all(a == args[0] for a in args) and _plain(args[0]) else "its nodes' options differ beyond the preset's"
    return Workload(run, "data_parallel", par, tuple(map(str, args[0])), why)


def workloads(plan) -> list[Workload]:
    return [workload(run) for run in launch(plan, TARGET).runs]


def _spec(plan, w: Workload) -> dict:
    from parc.targets.kubernetes import pod_env, quantity

    s = settings(plan, TARGET)
    run = w.run
    from parc.targets.kubernetes import PLAN_DIR

    env = pod_env([Env("VLLM_ADDITIONAL_ARGS", shlex.join(w.args)), Env("PARC_PLAN", f"{PLAN_DIR}/plan.json")]
                  + [e for e in [*run.env, *nccl_env(run.plan or plan)] if e.name != "PARC_PORT"])
    return {"replicas": run.replicas, "parallelism": w.parallelism, "worker": run.size > 1, "gpus": run.gpus,
            "env": env, "image": s.get("image"),
            "cpu": str(s["cpu"]) if "cpu" in s else None, "memory": quantity(s["memory"]) if "memory" in s else None,
            "what": f"{count(run.replicas, 'replica')} of {count(run.size, 'pod')} x {count(run.gpus, 'GPU')} "
                    f"({mesh_text(run.plan or plan)})"}


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    model = settings(plan, "vllm").get("model", "")
    found = workloads(plan)
    if any(w.why for w in found):   # P620 or P710 refuses the plan: never drop a word
        raise ValueError("KServe's presets cannot start this plan's launch (P620, P710)")
    ws = {w.run.pool: _spec(plan, w) for w in found}
    from parc.targets.kubernetes import PLAN_DIR

    name = job_name(plan)
    text_of = {p: render("kserve/workload.yaml.j2", w=w, plan_map=f"{name}-plan", plan_dir=PLAN_DIR)
               for p, w in ws.items()}
    header = [f"LLMInferenceService compiled by parc from {spec_name(plan)}: kubectl apply -f llmisvc.yaml (KServe "
              "with its LLMInferenceService controller, LeaderWorkerSet and a Gateway must be installed)",
              "Workloads: " + "; ".join(f"{p or 'main'}: {w['what']}" for p, w in ws.items())
              + "; the llm-d scheduler routes each request, the HTTPRoute on the Gateway in front."]
    text = render("kserve/llmisvc.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  plan_json=plan_json(plan),
                  api_version=API_VERSION, uri=s.get("uri", f"hf://{model}"), model=model,
                  main=text_of.get("decode", text_of.get(None)), prefill=text_of.get("prefill"))
    return [File("llmisvc.yaml", text), File("plan.json", plan_json(plan))]


def pipeline_over_nodes(w: Workload) -> bool:
    """A run that is vLLM's own multi-node launch of a pipeline with a stage per node: what
    KServe's ``parallelism.pipeline`` with a ``worker`` asks for (LeaderWorkerSet size = pipeline)."""
    lead = [str(x) for x in w.run.leader[-1]]
    pp = int(_value(lead, "--pipeline-parallel-size") or 1)
    return w.run.size > 1 and "--nnodes" in lead and pp == w.run.size


def serving(plan) -> bool:
    """A serving plan whose launch the engine can cut into runs (P101 speaks for the others)."""
    return plan.mode == "serve" and plan.world_size <= plan.cluster.world


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each run KServe's presets cannot start (P620); a pipeline of a stage
    per node is KServe's own defect, P710."""
    if not serving(plan):
        return []
    return [("mesh", f"each replica over {count(w.run.size, 'node')} as vLLM launches it ({w.why}): KServe starts a "
                     "multi-node vLLM only as data parallelism over the pods of a replica (its preset "
                     "config-llm-worker-data-parallel), and a single-node replica's command has no word a scheduler "
                     "fills in",
             "choose tp·pp·cp that fits one node (the replicas then run as dp), or launch the plan with `target lws`")
            for w in workloads(plan) if w.why is not None and not pipeline_over_nodes(w)]
