"""Runs inside the DynamoGraphDeployment judge's virtual environment (tests/judges/dynamo_env.sh),
never in parc's own.

Reads JSON lists of manifests (the text of a `dgd.yaml`), one list a line, on stdin, and prints for
each what Kubernetes and the Dynamo operator make of it:

* the DynamoGraphDeployment against the CRD's OpenAPI schema (tests/data/dynamo, v1alpha1), with
  unknown fields refused wherever the schema is structural, the object's name a DNS-1035 label;
* each component's pod template as the operator builds it from `extraPodSpec` (its `mainContainer`
  the pod's one container) with kubernetes-validate, strict, as a v1 PodTemplate (the core types
  the CRD embeds: tests/data/dynamo's header);
* what each pod runs: the operator's changes to a multinode worker's container, transcribed from
  its Go with LeaderWorkerSet as the multinode deployer (the leader's address
  `$(LWS_LEADER_ADDRESS)`, a worker's rank `$(LWS_WORKER_INDEX)`): for vLLM
  (deploy/cloud/operator/internal/dynamo/backend_vllm.go, updateVLLMMultinodeArgs) the leader's
  args become `ray start --head --port=6379 && ARGS` and the others' `ray start
  --address=LEADER:6379 --block`; for SGLang (backend_sglang.go, UpdateContainer) `--dist-init-addr
  LEADER:29500 --nnodes N --node-rank R` appended to a python command's args. Then the kubelet
  substitutes `$(NAME)` and the command runs with `python3` and `ray` replaced by recorders of
  their argv.

It answers with the components it found (type, replicas, nodes, GPUs per pod) and each pod's
recorded argv; the test compares them with the plan and hands the workers' argv to the engine's
own parser (tests/judges/vllm_judge.py, sglang_judge.py)."""
import json
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.kubelet import builtin_errors, expand  # noqa: E402  (shared by the Kubernetes judges)
from support.orchestrators import crd_validator, name_errors, operator_container  # noqa: E402  (shared with the other orchestrator's judge)

CRD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "dynamo",
                   "nvidia.com_dynamographdeployments.yaml")
RECORDERS = ("ray", "python3")


VALIDATOR = crd_validator(CRD, "v1alpha1")


def pod_template(svc):
    """The pod template the operator makes of a component: extraPodSpec, mainContainer its container."""
    extra = dict(svc.get("extraPodSpec") or {})
    main = dict(extra.pop("mainContainer", {}), name="main")
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in svc:
            main[probe] = svc[probe]
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
            "template": {"spec": {**extra, "containers": [main]}}}


def run(command, env, tmp):
    """The command as the kubelet runs it, python3 and ray recording their argv."""
    argv = [expand(w, env) for w in command]
    rec, binp = os.path.join(tmp, "rec"), os.path.join(tmp, "bin")
    os.makedirs(rec, exist_ok=True)
    os.makedirs(binp, exist_ok=True)
    for f in os.listdir(rec):
        os.unlink(os.path.join(rec, f))
    for name in RECORDERS:
        p = os.path.join(binp, name)
        with open(p, "w") as f:
            f.write(f'#!/bin/sh\nn=$(ls "$REC" | grep -c "^{name}\\.")\nprintf \'%s\\0\' "$@" > "$REC/{name}.$n"\n')
        os.chmod(p, 0o755)
    r = subprocess.run(argv, env={**env, "PATH": binp + ":/usr/bin:/bin", "REC": rec}, capture_output=True,
                       text=True, timeout=60)
    runs = {}
    for f in sorted(os.listdir(rec), key=lambda f: (f.split(".")[0], int(f.split(".")[1]))):
        with open(os.path.join(rec, f), "rb") as fh:
            runs.setdefault(f.split(".")[0], []).append([a.decode() for a in fh.read().split(b"\0")[:-1]])
    return {"returncode": r.returncode, "stderr": r.stderr[-2000:], "runs": runs}


def plan_map(pod, container):
    """The ConfigMap the pod mounts at /etc/parc (None: none), and PARC_PLAN in its container's env."""
    vols = {v["name"]: (v.get("configMap") or {}).get("name") for v in pod.get("volumes") or []}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
    return vols.get(mounts.get("/etc/parc"))


def component(dgd, key, svc, tmp):
    framework = dgd["spec"].get("backendFramework")
    nodes = (svc.get("multinode") or {}).get("nodeCount", 1)
    container = (svc.get("extraPodSpec") or {}).get("mainContainer") or {}
    name = f"{dgd['metadata']['name']}-{key.lower()}"
    env = {e["name"]: e.get("value", "") for e in svc.get("envs") or []}
    pods = []
    for k in range(nodes):
        command, args = operator_container(framework, container, nodes, k)
        lws = {"LWS_LEADER_ADDRESS": f"{name}-0.{name}", "LWS_WORKER_INDEX": str(k), "LWS_GROUP_SIZE": str(nodes)}
        pods.append({"index": k, **run(command + args, {**lws, **env}, tmp)})
    res = svc.get("resources") or {}
    return {"name": key, "plan": plan_map(svc.get("extraPodSpec") or {}, container), "type": svc.get("componentType"), "replicas": svc.get("replicas", 1), "nodes": nodes,
            "gpus": int((res.get("limits") or {}).get("gpu", 0)), "gpus_request": int((res.get("requests") or {}).get("gpu", 0)),
            "namespace": svc.get("dynamoNamespace"), "leader_address": f"{name}-0.{name}", "env": env, "pods": pods}


def judge(text):
    docs = [d for d in yaml.safe_load_all(text) if d]
    if [d.get("kind") for d in docs] != ["ConfigMap", "DynamoGraphDeployment"]:
        return {"ok": False, "stage": "documents", "errors": [str([d.get("kind") for d in docs])]}
    cm, dgd = docs
    errors = builtin_errors(cm, "ConfigMap")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    errors = [] if dgd.get("apiVersion") == "nvidia.com/v1alpha1" else [f"apiVersion {dgd.get('apiVersion')}"]
    errors += [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(dgd)]
    errors += name_errors(dgd.get("metadata") or {})
    if errors:
        return {"ok": False, "stage": "schema", "errors": errors}
    services = dgd["spec"].get("services") or {}
    for key, svc in services.items():
        errors += builtin_errors(pod_template(svc), f"{key} PodTemplate")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    with tempfile.TemporaryDirectory() as tmp:
        comps = [component(dgd, k, s, tmp) for k, s in services.items()]
    return {"ok": True, "name": dgd["metadata"]["name"], "config_map": cm["metadata"]["name"], "framework": dgd["spec"].get("backendFramework"),
            "components": comps}


MARK = "@@dynamo-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)]), flush=True)
