"""Runs inside the TrainJob judge's virtual environment (tests/judges/trainjob_env.sh), never in
parc's own.

Reads JSON lists of manifests (the text of a `trainjob.yaml`), one list a line, on stdin, and
prints for each what Kubernetes and Kubeflow Trainer (v2.3.0) make of it:

* the TrainJob against the CRD's own OpenAPI schema (tests/data/trainjob), with unknown fields
  refused wherever the schema is structural (the API server prunes them, or refuses them under
  `kubectl apply --validate=strict`), and the CRD's validation rule on metadata.name (an RFC 1035
  label of at most 63 characters), transcribed from its CEL;
* the checks of Trainer's validating webhook for a TrainJob on a torch runtime, transcribed from
  its Go: the runtime must exist (pkg/webhooks/trainjob_webhook.go, ValidateCreate; the runtimes
  known here are the test data's torch-distributed), the trainer's env must not set torchrun's
  reserved PET_ variables (pkg/runtime/framework/plugins/torch/torch.go, Validate), and each
  runtime patch's manager must be a domain-prefixed path and may patch only the runtime's jobs and
  containers, never the env of the `node` container (plugins/jobset/jobset.go, Validate);
* the pods the trainer builds (the runtime's pod template with the trainer's image, command,
  args, env and resources, the torch plugin's PET_ variables and port, the runtime patch's
  volumes, mounts and capabilities; plugins/torch/torch.go, EnforceMLPolicy) with
  kubernetes-validate, strict, as a v1 PodTemplate, and the ConfigMap;
* what each pod runs: the kubelet substitutes `$(NAME)` in the command and args from the
  container's environment (`$$` is a literal `$`; an unknown name stays as written), and the
  command runs with `torchrun` and `deepspeed` (the engines a pod starts) replaced by recorders of
  their argv.

It answers with what it derived (the nodes, processes and GPUs per node, the PET_ variables,
each pod's recorded argv); the test compares them with the plan and parses torchrun's argv with
torchrun's own parser (DeepSpeed's is judged by tests/judges/deepspeed_judge.py)."""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.kubelet import builtin_errors, expand  # noqa: E402  (shared by the Kubernetes judges)
from support.structural import strict  # noqa: E402  (Kubernetes' pruning, shared with the PyTorchJob test)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "trainjob")
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")
OBJECT_META = {"name", "namespace", "labels", "annotations"}
# pkg/constants/constants.go at v2.3.0
RESERVED = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
TRAINER_PORT = 29500
NODE = "node"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _load(name):
    with open(os.path.join(DATA, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _crd_validator():
    [crd] = _load("trainer.kubeflow.org_trainjobs.yaml")
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


VALIDATOR = _crd_validator()
RUNTIMES = {("ClusterTrainingRuntime", d["metadata"]["name"]): d for d in _load("torch_distributed.yaml")}


def name_errors(meta):
    """The CRD's rule on metadata.name (RFC 1035, at most 63) and the API server's on namespaces."""
    out = []
    name = meta.get("name", "")
    if not DNS_1035.fullmatch(name):
        out.append(f"metadata.name {name!r}: metadata.name must match RFC 1035 DNS label format")
    if len(name) > 63:
        out.append(f"metadata.name {name!r}: metadata.name must be no more than 63 characters")
    ns = meta.get("namespace")
    if ns is not None and not (len(ns) <= 63 and DNS_1123.fullmatch(ns)):
        out.append(f"metadata.namespace {ns!r}: not a DNS-1123 label")
    out += [f"metadata: unknown field {k}" for k in meta if k not in OBJECT_META]
    return out


def domain_path_errors(value):
    """apimachinery validation.IsDomainPrefixedPath."""
    host, _, path = value.partition("/")
    if not host or not path:
        return [f"manager {value!r}: must be a domain-prefixed path (such as \"acme.io/foo\")"]
    out = []
    if not (len(host) <= 253 and DNS_1123_SUBDOMAIN.fullmatch(host)):
        out.append(f"manager {value!r}: {host!r} is not a DNS-1123 subdomain")
    if not HTTP_PATH.fullmatch(path):
        out.append(f"manager {value!r}: Invalid path")
    return out


def runtime_jobs(runtime):
    """Replicated job name -> its pod template (trainer.kubeflow.org JobSet template)."""
    return {j["name"]: j["template"]["spec"]["template"] for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}


def webhook_errors(job, runtime):
    """torch.go Validate and jobset.go Validate (runtimePatches) for a TrainJob on ``runtime``."""
    out = []
    trainer = job["spec"].get("trainer") or {}
    reserved = sorted({e["name"] for e in trainer.get("env") or []} & RESERVED)
    if reserved:
        out.append(f"spec.trainer.env: must not have reserved envs, invalid envs configured: {reserved}")
    jobs = runtime_jobs(runtime)
    for patch in job["spec"].get("runtimePatches") or []:
        out += domain_path_errors(patch["manager"])
        for rj in (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get(
                "replicatedJobs") or []:
            if rj["name"] not in jobs:
                out.append("spec.runtimePatches: must not have replicated job that doesn't exist in the runtime job "
                           "template")
                continue
            names = {c["name"] for c in jobs[rj["name"]]["spec"]["containers"]}
            for c in rj["template"]["spec"]["template"]["spec"].get("containers") or []:
                if c["name"] not in names:
                    out.append(f"spec.runtimePatches: must not have container that doesn't exist in the runtime job "
                               f"{rj['name']}")
                elif c.get("env") and c["name"] == NODE:
                    out.append("spec.runtimePatches: must not have envs for the node container")
    return out


def pod_template(job, runtime):
    """The trainer's pod: the runtime's template, the trainer's settings, the torch plugin's
    variables and port (EnforceMLPolicy), then the runtime patches."""
    name, trainer = job["metadata"]["name"], job["spec"].get("trainer") or {}
    t = copy.deepcopy(runtime_jobs(runtime)[NODE])
    c = next(c for c in t["spec"]["containers"] if c["name"] == NODE)
    for key in ("image", "command", "args"):
        if key in trainer:
            c[key] = trainer[key]
    c["resources"] = trainer.get("resourcesPerNode", c.get("resources", {}))
    nodes = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
    gpus = int((c["resources"].get("limits") or {}).get("nvidia.com/gpu", 0))
    nproc = trainer.get("numProcPerNode", "auto")
    if nproc == "auto" and gpus == 0:
        nproc = max(1, int((c["resources"].get("requests") or {}).get("cpu", 0)))
    env = list(trainer.get("env") or [])
    env += [{"name": "PET_NNODES", "value": str(nodes)}, {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
            {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)}]
    c["env"] = env
    c["ports"] = [{"containerPort": TRAINER_PORT}]
    for patch in job["spec"].get("runtimePatches") or []:
        for rj in patch["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs") or []:
            ps = rj["template"]["spec"]["template"]["spec"]
            t["spec"].setdefault("volumes", []).extend(ps.get("volumes") or [])
            for pc in ps.get("containers") or []:
                target = next(x for x in t["spec"]["containers"] if x["name"] == pc["name"])
                target.setdefault("volumeMounts", []).extend(pc.get("volumeMounts") or [])
                if "securityContext" in pc:
                    target["securityContext"] = pc["securityContext"]
    return t, nodes, nproc


LAUNCHERS = ("torchrun", "deepspeed")   # the engines a TrainJob's pods start (parc/targets/engines.py)


def run_pod(container, index, tmp):
    """Run pod ``index``'s command as the kubelet would, with the launchers recording their argv."""
    env = {}
    for e in container.get("env") or []:
        if "valueFrom" in e:   # the Job's completion index: the pod's node rank
            env[e["name"]] = str(index)
        else:
            env.setdefault(e["name"], expand(e.get("value", ""), env))
    argv = [expand(w, env) for w in container["command"] + (container.get("args") or [])]
    binp = os.path.join(tmp, "bin")
    os.makedirs(binp, exist_ok=True)
    for name in LAUNCHERS:
        with open(os.path.join(binp, name), "w") as f:
            f.write(f'#!/bin/sh\nprintf \'%s\\0\' "$@" > "$REC.{name}"\n')
        os.chmod(os.path.join(binp, name), 0o755)
        if os.path.exists(os.path.join(tmp, f"argv.{name}")):
            os.unlink(os.path.join(tmp, f"argv.{name}"))
    rec = os.path.join(tmp, "argv")
    r = subprocess.run(argv, env={**env, "PATH": binp + ":/usr/bin:/bin", "REC": rec}, capture_output=True,
                       text=True, timeout=60)
    ran = {}
    for name in LAUNCHERS:
        if os.path.exists(f"{rec}.{name}"):
            with open(f"{rec}.{name}", "rb") as fh:
                ran[name] = [a.decode() for a in fh.read().split(b"\0")[:-1]]
    pet = {k: v for k, v in env.items() if k.startswith("PET_")}
    return {"index": index, "returncode": r.returncode, "stderr": r.stderr[-2000:], "pet": pet,
            **{name: ran.get(name) for name in LAUNCHERS}}


def judge(text):
    """What the API server, the webhook, the trainer and the kubelet make of one trainjob.yaml."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    jobs = [d for d in docs if d.get("kind") == "TrainJob"]
    if len(jobs) != 1:
        return {"ok": False, "errors": [f"{len(jobs)} TrainJobs"]}
    job = jobs[0]
    errors = [] if job.get("apiVersion") == "trainer.kubeflow.org/v1alpha1" else [f"apiVersion {job.get('apiVersion')}"]
    errors += [f"TrainJob {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(job)]
    errors += name_errors(job["metadata"])
    if errors:   # the API server refuses it before the webhook sees it
        return {"ok": False, "stage": "schema", "errors": errors}
    ref = job["spec"]["runtimeRef"]
    runtime = RUNTIMES.get((ref.get("kind", "ClusterTrainingRuntime"), ref["name"]))
    if runtime is None:
        return {"ok": False, "stage": "webhook", "errors": [f"runtime {ref.get('kind')} {ref['name']} not found"]}
    errors = webhook_errors(job, runtime)
    if errors:
        return {"ok": False, "stage": "webhook", "errors": errors}
    template, nodes, nproc = pod_template(job, runtime)
    errors += builtin_errors({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
                             "node PodTemplate")
    for d in docs:
        if d.get("kind") != "TrainJob":
            errors += builtin_errors(d, d.get("kind", "?"))
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    c = next(c for c in template["spec"]["containers"] if c["name"] == NODE)
    res = c.get("resources", {})
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
    vols = {v["name"]: v for v in template["spec"].get("volumes") or []}
    with tempfile.TemporaryDirectory() as tmp:
        pods = [run_pod(c, i, tmp) for i in sorted({0, 1, nodes - 1} & set(range(nodes)))]
    return {"ok": True, "name": job["metadata"]["name"], "nodes": nodes, "nproc": nproc, "image": c["image"],
            "gpus": int(res.get("requests", {}).get("nvidia.com/gpu", 0)),
            "gpus_limit": int(res.get("limits", {}).get("nvidia.com/gpu", 0)),
            "shm": vols.get(mounts.get("/dev/shm"), {}).get("emptyDir"),
            "plan_volume": vols.get(mounts.get("/etc/parc"), {}).get("configMap"),
            "capabilities": ((c.get("securityContext") or {}).get("capabilities") or {}).get("add", []),
            "pods": pods}


MARK = "@@trainjob-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)]), flush=True)
