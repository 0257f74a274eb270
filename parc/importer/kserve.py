"""A KServe ``LLMInferenceService`` read back (the inverse of parc/targets/kserve; v1alpha1 and
v1alpha2, KServe 0.20.0). KServe's presets (config/llmisvcconfig) start ``vllm serve /mnt/models
--served-model-name NAME`` themselves, with what they write from ``spec.parallelism`` and then the
words of the main container's ``VLLM_ADDITIONAL_ARGS`` (a shell line the preset ``eval``s):

* a workload without ``worker`` is single-node (config-llm-template): ``replicas`` pods, each one
  engine; the preset writes ``--tensor-parallel-size`` from ``parallelism.tensor``;
* a workload with ``worker`` and ``parallelism.data``/``dataLocal`` is vLLM data parallelism over
  the pods of a LeaderWorkerSet group (config-llm-worker-data-parallel): ``--data-parallel-size``
  ``data``, ``--data-parallel-size-local`` ``dataLocal``, ``--tensor-parallel-size`` ``tensor``,
  ``--enable-expert-parallel`` where ``expert``; with ``parallelism.pipeline`` instead, a
  pipeline of a stage per pod (``--pipeline-parallel-size``);
* ``spec.prefill`` is the prefill pool, the top-level workload then the decode pool.

The engine is read as the model's served name (``spec.model.name``); ``spec.model.uri``, the
pods' image and CPU and memory requests are the target's keys."""
from __future__ import annotations

import shlex

from parc.importer.orchestrated import (
    count,
    pods_facts,
    quantity,
    replicas,
    scheduler,
    setting,
    worker,
)
from parc.importer.yamlfiles import _container_env, _get

# spec.parallelism's field -> the option the presets write from it (the data-parallel preset's
# own: the single-node preset writes only the tensor size)
FIELDS = {"tensor": "--tensor-parallel-size", "data": "--data-parallel-size",
          "dataLocal": "--data-parallel-size-local", "pipeline": "--pipeline-parallel-size"}


def _main(pod) -> dict:
    conts = [c for c in (_get(pod, "containers") or []) if isinstance(c, dict)]
    return next((c for c in conts if c.get("name") == "main"), conts[0] if conts else {})


def _gpus(c: dict) -> int:
    for part in ("limits", "requests"):
        v = _get(c, "resources", part, "nvidia.com/gpu")
        if v is not None and str(v).isdigit():
            return int(v)
    return 0


def preset_words(w: dict) -> list[str]:
    """The options the preset writes for workload ``w`` from its parallelism."""
    p = w.get("parallelism") if isinstance(w.get("parallelism"), dict) else {}
    nums = {k: v for k, v in p.items() if k in FIELDS and isinstance(v, int) and not isinstance(v, bool) and v > 0}
    if w.get("worker") is None:
        return [FIELDS["tensor"], str(nums["tensor"])] if "tensor" in nums else []
    out = ["--enable-expert-parallel"] if p.get("expert") is True else []
    for k in ("tensor", "pipeline", "data", "dataLocal"):
        if k in nums and (k != "pipeline" or not ("data" in nums or "dataLocal" in nums)):
            out += [FIELDS[k], str(nums[k])]
    return out


def _pods(w: dict) -> int:
    """The pods of one replica: ParallelismSpec.GetSize (data / dataLocal, else pipeline), 1 without worker."""
    p = w.get("parallelism") if isinstance(w.get("parallelism"), dict) else {}
    if w.get("worker") is None:
        return 1
    data, local = p.get("data") or 0, p.get("dataLocal") or 0
    if isinstance(data, int) and isinstance(local, int) and (data > 0 or local > 0):
        return max(max(data, 1) // max(local, 1), 1)
    return p["pipeline"] if isinstance(p.get("pipeline"), int) and p["pipeline"] > 0 else 1


def read(src, doc: dict, variables: dict) -> None:
    """The workloads of an LLMInferenceService, added to ``src`` (module doc)."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    keys = scheduler(src, doc, "kserve", "workloads")
    uri, name = _get(spec, "model", "uri"), _get(spec, "model", "name")
    if isinstance(uri, str):
        setting(src, keys, "uri", uri, f"{src.name} spec.model.uri")
    if not isinstance(name, str):
        name = uri.split("://", 1)[-1] if isinstance(uri, str) else "/mnt/models"
    pd = isinstance(spec.get("prefill"), dict)
    pods, launches = [], []
    for w, role in [(spec, "decode" if pd else None)] + ([(spec["prefill"], "prefill")] if pd else []):
        main = _main(w.get("template"))
        env = _container_env(main)
        for k in ("cpu", "memory"):
            raw = _get(main, "resources", "requests", k)
            v = quantity(raw, k)
            if v is not None:
                setting(src, keys, k, v, f"{src.name} {role or 'main'} requests: {k}")
            elif raw is not None:
                src.notes.append(f"{src.name} {role or 'main'} requests {k}: {str(raw)[:40]!r} is no whole number of "
                                 f"{'cores' if k == 'cpu' else 'Ki, Mi, Gi or Ti bytes'}: `{k}` left out")
        if isinstance(main.get("image"), str):
            setting(src, keys, "image", main["image"], f"{src.name} {role or 'main'} image")
        script = shlex.join(["vllm", "serve", name, *preset_words(w)]) + " " + env.get("VLLM_ADDITIONAL_ARGS", "")
        copies = count(w.get("replicas"), f"{role or 'spec'}.replicas", src)
        launches += worker(src, script, variables, env, role, copies, role or "main")
        pods.append((copies, _pods(w), _gpus(main)))
    if launches and not pd:
        replicas(src, pods[0][0], f"{src.name} replicas: {pods[0][0]}")
    pods_facts(src, pods, "requests")
