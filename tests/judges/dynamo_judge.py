"""Runs inside the DynamoGraphDeployment judge's virtual environment (tests/judges/dynamo_env.sh),
never in parc's own.

Reads JSON lists of manifests (the text of a `dgd.yaml`), one list a line, on stdin, and prints for
each what Kubernetes and the Dynamo operator make of it:

* the DynamoGraphDeployment against the CRD's OpenAPI schema of its apiVersion (tests/data/dynamo:
  v1beta1 from the definition that serves it, v1alpha1 from an older operator's), with unknown
  fields refused wherever the schema is structural, the object's name a DNS-1035 label; for
  v1beta1 also the CEL rules the definition carries (x-kubernetes-validations, transcribed below:
  component names unique case-insensitively, at most one `epp`, `eppConfig` only on one, the
  vLLM launch annotation `mp` or `ray`, no `restart` on create) and the rules its descriptions
  state for the admission of a new component: a container named `main` with an image, and
  `runtimeVersionOverride` where that image's tag is no semantic version;
* each component's pod template as the operator builds it (v1alpha1: `extraPodSpec`, its
  `mainContainer` the pod's one container; v1beta1: `podTemplate` as it is) with
  kubernetes-validate, strict, as a v1 PodTemplate (the core types the CRD embeds:
  tests/data/dynamo's headers);
* what each pod runs: the operator's changes to a multinode worker's container, transcribed from
  its Go with LeaderWorkerSet as the multinode deployer (the leader's address
  `$(LWS_LEADER_ADDRESS)`, a worker's rank `$(LWS_WORKER_INDEX)`): for vLLM
  (deploy/cloud/operator/internal/dynamo/backend_vllm.go, updateVLLMMultinodeArgs) the leader's
  args become `ray start --head --port=6379 && ARGS` and the others' `ray start
  --address=LEADER:6379 --block`; for SGLang (backend_sglang.go, UpdateContainer) `--dist-init-addr
  LEADER:29500 --nnodes N --node-rank R` appended to a python command's args. Then the kubelet
  substitutes `$(NAME)` and the command runs with `python3` and `ray` replaced by recorders of
  their argv.

It answers with the components it found (type, replicas, nodes, GPUs per pod, annotations) and each
pod's recorded argv; the test compares them with the plan and hands the workers' argv to the
engine's own parser (tests/judges/vllm_judge.py, sglang_judge.py)."""
import json
import os
import re
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.kubelet import builtin_errors, expand, recorded  # noqa: E402  (shared by the Kubernetes judges)
from support.orchestrators import crd_validator, dynamo_components, name_errors, operator_container  # noqa: E402  (shared with the other orchestrator's judge)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "dynamo")
VALIDATORS = {"nvidia.com/v1alpha1": crd_validator(os.path.join(DATA, "nvidia.com_dynamographdeployments.yaml"), "v1alpha1"),
              "nvidia.com/v1beta1": crd_validator(os.path.join(DATA, "nvidia.com_dynamographdeployments.v1beta1.yaml"),
                                                  "v1beta1")}
RECORDERS = ("ray", "python3")
VLLM_BACKEND = "nvidia.com/vllm-distributed-executor-backend"
# the admission's "parseable semantic-version tag" of a main image (runtimeVersionOverride's
# description): its parser is not in the definition, so this is the plain MAJOR.MINOR.PATCH tag
SEMVER_TAG = re.compile(r":v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$")


def pod_template(svc):
    """The pod template the operator makes of a v1alpha1 component: extraPodSpec, mainContainer its container."""
    extra = dict(svc.get("extraPodSpec") or {})
    main = dict(extra.pop("mainContainer", {}), name="main")
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in svc:
            main[probe] = svc[probe]
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
            "template": {"spec": {**extra, "containers": [main]}}}


def cel_errors(dgd):
    """The v1beta1 definition's CEL rules (x-kubernetes-validations, as the API server evaluates
    them on create) and its webhook's rule for a new component's podTemplate."""
    comps = dgd["spec"].get("components") or []
    names = [str(c.get("name", "")).lower() for c in comps]
    out = []
    if sum(1 for c in comps if c.get("type") == "epp") > 1:
        out.append("spec.components: at most one component may have type epp")
    if len(set(names)) != len(names):
        out.append("spec.components: component names must be unique case-insensitively")
    if "restart" in dgd["spec"]:
        out.append("spec: spec.restart must be unset on create; set spec.restart.id after creation to request a restart")
    for c in comps:
        where = f"spec.components[{c.get('name')}]"
        if "eppConfig" in c and c.get("type") != "epp":
            out.append(f"{where}: eppConfig may only be set when type is epp")
        if "minAvailable" in c and c.get("replicas", 1) != 0 and c["minAvailable"] > c.get("replicas", 1):
            out.append(f"{where}: minAvailable must be less than or equal to replicas unless replicas is 0")
        tpl = c.get("podTemplate") or {}
        backend = ((tpl.get("metadata") or {}).get("annotations") or {}).get(VLLM_BACKEND)
        if backend is not None and backend.lower() not in ("mp", "ray"):
            out.append(f"{where}.podTemplate: podTemplate backend annotation must be mp or ray, case-insensitively")
        main = [k for k in (tpl.get("spec") or {}).get("containers") or [] if k.get("name") == "main" and k.get("image")]
        if not main:
            out.append(f"{where}.podTemplate: a new component needs a container named \"main\" with a non-empty image")
        elif "runtimeVersionOverride" not in c and not SEMVER_TAG.search(main[0]["image"]):
            out.append(f"{where}: the main image has no semantic-version tag: runtimeVersionOverride is required")
    return out


def run(command, env, tmp):
    """The command as the kubelet runs it, python3 and ray recording their argv."""
    return recorded([expand(w, env) for w in command], env, tmp, RECORDERS)


def plan_map(pod, container):
    """The ConfigMap the pod mounts at /etc/parc (None: none)."""
    vols = {v["name"]: (v.get("configMap") or {}).get("name") for v in pod.get("volumes") or []}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
    return vols.get(mounts.get("/etc/parc"))


def gpus(svc, container, which):
    """A pod's GPUs: v1alpha1's component `resources` (gpu), v1beta1's main container's (nvidia.com/gpu)."""
    if "podTemplate" in svc:
        return int(((container.get("resources") or {}).get(which) or {}).get("nvidia.com/gpu", 0))
    return int(((svc.get("resources") or {}).get(which) or {}).get("gpu", 0))


def component(dgd, key, svc, pod, container, annotations, kind, tmp):
    framework = dgd["spec"].get("backendFramework")
    nodes = (svc.get("multinode") or {}).get("nodeCount", 1)
    name = f"{dgd['metadata']['name']}-{key.lower()}"
    env = {e["name"]: e.get("value", "") for e in (svc.get("envs") or container.get("env") or [])}
    pods = []
    quoted = dgd["apiVersion"] == "nvidia.com/v1beta1"
    for k in range(nodes):
        command, args = operator_container(framework, container, nodes, k, quoted=quoted)
        lws = {"LWS_LEADER_ADDRESS": f"{name}-0.{name}", "LWS_WORKER_INDEX": str(k), "LWS_GROUP_SIZE": str(nodes)}
        pods.append({"index": k, **run(command + args, {**lws, **env}, tmp)})
    return {"name": key, "plan": plan_map(pod, container), "type": kind,
            "replicas": svc.get("replicas", 1), "nodes": nodes, "gpus": gpus(svc, container, "limits"),
            "gpus_request": gpus(svc, container, "requests"), "namespace": svc.get("dynamoNamespace"),
            "annotations": annotations, "leader_address": f"{name}-0.{name}", "env": env, "pods": pods}


def judge(text):
    docs = [d for d in yaml.safe_load_all(text) if d]
    if [d.get("kind") for d in docs] not in (["ConfigMap", "DynamoGraphDeployment"], ["DynamoGraphDeployment"]):
        return {"ok": False, "stage": "documents", "errors": [str([d.get("kind") for d in docs])]}
    *cms, dgd = docs     # parc's graph comes with its plan's ConfigMap; a published one alone
    errors = [e for cm in cms for e in builtin_errors(cm, "ConfigMap")]
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    validator = VALIDATORS.get(dgd.get("apiVersion"))
    if validator is None:
        return {"ok": False, "stage": "schema", "errors": [f"apiVersion {dgd.get('apiVersion')}"]}
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(dgd)]
    errors += name_errors(dgd.get("metadata") or {})
    if not errors and dgd["apiVersion"] == "nvidia.com/v1beta1":
        errors += cel_errors(dgd)
    if errors:
        return {"ok": False, "stage": "schema", "errors": errors}
    comps = dynamo_components(dgd)
    for key, svc, *_ in comps:
        t = pod_template(svc) if "podTemplate" not in svc else {
            "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": svc["podTemplate"]}
        errors += builtin_errors(t, f"{key} PodTemplate")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    with tempfile.TemporaryDirectory() as tmp:
        found = [component(dgd, *c, tmp) for c in comps]
    return {"ok": True, "api": dgd["apiVersion"], "name": dgd["metadata"]["name"], "config_map": cms[0]["metadata"]["name"] if cms else None,
            "framework": dgd["spec"].get("backendFramework"), "components": found}


MARK = "@@dynamo-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)]), flush=True)
