"""Runs inside the LLMInferenceService judge's virtual environment (tests/judges/kserve_env.sh),
never in parc's own.

Reads JSON lists of manifests (the text of an `llmisvc.yaml`), one list a line, on stdin, and
prints for each what Kubernetes and KServe v0.20.0 (commit 1fb781055dd1567164358233e1125142ca6ef1fe)
make of it:

* the LLMInferenceService against the CRD's OpenAPI schema (tests/data/kserve, v1alpha2), unknown
  fields refused wherever the schema is structural, the CEL rule on what parc writes (replicas and
  scaling mutually exclusive) and the name a DNS-1035 label;
* the checks of KServe's validating webhook on parallelism, transcribed from its Go
  (pkg/apis/serving/v1alpha2/llm_inference_service_validation.go, validateWorkloadParallelism);
* each pod template (template, worker, and the prefill's) with kubernetes-validate, strict;
* the preset the controller merges into each workload (pkg/controller/v1alpha2/llmisvc/
  config_merge.go: the switch on prefill, worker and parallelism), which must be one KServe ships
  (config/llmisvcconfig), and the pods of each replica (LeaderWorkerSet's size
  parallelism.data / dataLocal, or pipeline: ParallelismSpec.GetSize);
* what each pod's vLLM is started with: the preset's `vllm serve` line transcribed (its model
  folder, served names, port, the options it writes from spec.parallelism and the pod's
  LWS_WORKER_INDEX, then the words of VLLM_ADDITIONAL_ARGS as its `eval` splits them, shlex's
  POSIX rules); the lines that set only the server's logging, shutdown timeout and TLS are left
  out. The test hands each argv to vLLM's own parser."""
import json
import os
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.kubelet import builtin_errors  # noqa: E402  (shared by the Kubernetes judges)
from support.orchestrators import crd_validator, is_dp, is_pp, name_errors, preset, size, vllm_argv  # noqa: E402  (shared with the other orchestrator's judge)

CRD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "kserve",
                   "serving.kserve.io_llminferenceservices.yaml")
# config/llmisvcconfig at v0.20.0: the presets KServe ships (the pipeline-parallel ones are not)
SHIPPED = {"template", "decode-template", "prefill-template", "worker-data-parallel",
           "decode-worker-data-parallel", "prefill-worker-data-parallel"}


VALIDATOR = crd_validator(CRD, "v1alpha2")


def webhook_errors(path, w):
    """validateWorkloadParallelism (v0.20.0)."""
    p = w.get("parallelism")
    if w.get("worker") is not None and p is None:
        return [f"{path}.worker: when worker is specified, parallelism must be configured"]
    if p is None:
        return []
    out = []
    if w.get("worker") is not None and not is_dp(p) and not is_pp(p):
        out.append(f"{path}.worker: when worker is specified, parallelism must be data or pipeline parallelism")
    if is_dp(p) and is_pp(p):
        out.append(f"{path}.parallelism: cannot set both pipeline parallelism and data parallelism")
    if ("data" in p) != ("dataLocal" in p):
        out.append(f"{path}.parallelism: data and dataLocal must be set together")
    if "replicas" in w and "scaling" in w:   # the CRD's CEL rule
        out.append(f"{path}: replicas and scaling are mutually exclusive")
    return out


def workload(svc, w, pd, role, errors):
    chosen = preset(w, pd, role)
    if chosen not in SHIPPED:
        errors.append(f"LLMInferenceServiceConfig \"kserve-config-llm-{chosen}\" not found")
        return None
    name, ns = svc["spec"]["model"]["name"], svc["metadata"].get("namespace", "default")
    # a decode pod's vLLM listens on 8001 behind llm-d's routing sidecar on 8000 (the decode presets)
    port = 8001 if pd and role == "decode" else 8000
    n = size(w.get("parallelism")) if w.get("worker") is not None else 1
    pods = []
    for k in range(n):
        argv, env = vllm_argv(name, ns, w, chosen, k, port)
        pods.append({"index": k, "argv": argv, "env": sorted(env)})
    main = [c for c in w["template"]["containers"] if c["name"] == "main"][0]
    res = main.get("resources", {})
    vols = {v["name"]: (v.get("configMap") or {}).get("name") for v in w["template"].get("volumes") or []}
    plan = vols.get({m["mountPath"]: m["name"] for m in main.get("volumeMounts") or []}.get("/etc/parc"))
    return {"role": role, "plan": plan, "preset": chosen, "replicas": w.get("replicas", 1), "size": n,
            "gpus": int(res.get("limits", {}).get("nvidia.com/gpu", 0)),
            "gpus_request": int(res.get("requests", {}).get("nvidia.com/gpu", 0)), "pods": pods}


def judge(text):
    docs = [d for d in yaml.safe_load_all(text) if d]
    if [d.get("kind") for d in docs] != ["ConfigMap", "LLMInferenceService"]:
        return {"ok": False, "stage": "documents", "errors": [str([d.get("kind") for d in docs])]}
    cm, svc = docs
    errors = builtin_errors(cm, "ConfigMap")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    errors = [] if svc.get("apiVersion") == "serving.kserve.io/v1alpha2" else [f"apiVersion {svc.get('apiVersion')}"]
    errors += [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(svc)]
    errors += name_errors(svc.get("metadata") or {})
    if errors:
        return {"ok": False, "stage": "schema", "errors": errors}
    spec = svc["spec"]
    works = [("spec", spec, "decode")] + ([("spec.prefill", spec["prefill"], "prefill")] if "prefill" in spec else [])
    for path, w, _ in works:
        errors += webhook_errors(path, w)
    if errors:
        return {"ok": False, "stage": "webhook", "errors": errors}
    for path, w, _ in works:
        for part in ("template", "worker"):
            if part in w:
                errors += builtin_errors({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                          "template": {"spec": w[part]}}, f"{path}.{part}")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    pd = "prefill" in spec
    out = [workload(svc, w, pd, role if pd else None, errors) for _, w, role in works]
    if errors:
        return {"ok": False, "stage": "config", "errors": errors}
    return {"ok": True, "name": svc["metadata"]["name"], "config_map": cm["metadata"]["name"], "model": spec["model"], "router": spec.get("router"),
            "workloads": out}


MARK = "@@kserve-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)]), flush=True)
