"""Runs inside the LeaderWorkerSet judge's virtual environment (tests/judges/lws_env.sh), never in
parc's own.

Reads JSON lists of manifests (the text of an `lws.yaml`), one list a line, on stdin, and prints
for each what Kubernetes and the LeaderWorkerSet controller make of it:

* the LeaderWorkerSet against the CRD's own OpenAPI schema (tests/data/lws, LWS v0.10.0), with
  unknown fields refused wherever the schema is structural (the API server prunes them, or
  refuses them under `kubectl apply --validate=strict`), and the checks of LWS's validating
  webhook (pkg/webhooks/leaderworkerset_webhook.go, generalValidate: the name a DNS-1035 label,
  0 <= replicas <= 1000000, size >= 1, replicas · size within int32), transcribed from its Go;
* the built-in objects with kubernetes-validate, strict: the Service, the plan's ConfigMap, and
  each pod template as a v1 PodTemplate;
* what each pod of group 0 runs: LWS puts LWS_LEADER_ADDRESS (`<name>-<group>.<name>.<namespace>`),
  LWS_GROUP_SIZE and LWS_WORKER_INDEX first in every container's environment
  (pkg/utils/pod/pod_utils.go, AddLWSVariables), the kubelet substitutes `$(NAME)` in the command
  (`$$` is a literal `$`; an unknown name stays as written), and the command runs with `vllm`,
  `ray` and `python3` (SGLang's `python3 -m sglang.launch_server`) replaced by recorders of their
  argv.

It answers with the sizes it derived (replicas, size, GPUs per pod, the probe, the Service) and
each pod's recorded argv; the test compares them with the plan.

A DisaggregatedSet goes through its CRD's schema (tests/data/lws, LWS v0.10.0; unknown fields
refused), the CEL rule the CRD carries (the roles' replicas all zero or all set), and the checks
of its webhook (pkg/webhooks/disaggregatedset/disaggregatedset_webhook.go: a role's rollout
strategy RollingUpdate without a partition, the generated Service name `<lws>-prv` within 63
characters); then each role becomes the LeaderWorkerSet the controller makes of it
(pkg/controllers/disaggregatedset/lws_manager.go Create: `<name>-<slice>-<revision>-<role>`,
the role's spec with the controller's labels on both pod templates), judged as above, and each
Service is matched against the labels of every pod of every role, as the endpoints controller
would."""
import json
import os
import re
import sys
import tempfile

import jsonschema
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.kubelet import builtin_errors, expand, recorded  # noqa: E402  (shared by the Kubernetes judges)
from support.structural import strict  # noqa: E402  (Kubernetes' pruning, shared with the PyTorchJob test)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "lws")
CRD = os.path.join(DATA, "leaderworkerset.x-k8s.io_leaderworkersets.yaml")
DSET_CRD = os.path.join(DATA, "disaggregatedset.x-k8s.io_disaggregatedsets.yaml")
# the revision the controller hashes from the roles (8 hex characters, utils.go ComputeRevision):
# the judge stands one in
REVISION = "0f1e2d3c"
DSET_LABELS = ("disaggregatedset.x-k8s.io/name", "disaggregatedset.x-k8s.io/role",
               "disaggregatedset.x-k8s.io/slice", "disaggregatedset.x-k8s.io/revision")
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
OBJECT_META = {"name", "namespace", "labels", "annotations"}
INT32_MAX = 2**31 - 1
RECORDERS = ("vllm", "ray", "python3")


def _crd_validator(path=CRD):
    with open(path) as f:
        crd = yaml.safe_load(f)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


VALIDATOR = _crd_validator()
DSET_VALIDATOR = _crd_validator(DSET_CRD)


def name_errors(meta, what):
    """apimachinery ValidateObjectMeta as LWS's webhook and the API server call it: the name a
    DNS-1035 label of at most 63 characters, the namespace a DNS-1123 label."""
    out = []
    name = meta.get("name", "")
    if not (len(name) <= 63 and DNS_1035.fullmatch(name)):
        out.append(f"{what} metadata.name {name!r}: a DNS-1035 label must consist of lower case alphanumeric "
                   "characters or '-', start with an alphabetic character, and end with an alphanumeric character")
    ns = meta.get("namespace")
    if ns is not None and not (len(ns) <= 63 and DNS_1123.fullmatch(ns)):
        out.append(f"{what} metadata.namespace {ns!r}: not a DNS-1123 label")
    out += [f"{what} metadata: unknown field {k}" for k in meta if k not in OBJECT_META]
    return out


def webhook_errors(lws):
    """LWS's generalValidate (pkg/webhooks/leaderworkerset_webhook.go) after its defaulting."""
    spec = lws["spec"]
    replicas = spec.get("replicas", 1)
    size = spec["leaderWorkerTemplate"].get("size", 1)
    out = name_errors(lws["metadata"], "LeaderWorkerSet")
    if replicas < 0:
        out.append("spec.replicas: replicas must be equal or greater than 0")
    if replicas > 1000000:
        out.append("spec.replicas: replicas must be equal or less than 1000000")
    if size < 1:
        out.append("spec.leaderWorkerTemplate.size: size must be equal or greater than 1")
    if replicas * size > INT32_MAX:
        out.append(f"spec.replicas: the product of replicas and worker replicas must not exceed {INT32_MAX}")
    return out


def run_pod(container, lws_env, tmp):
    """Run the container's command as the kubelet would, with vllm, ray and python3 recording their argv."""
    env = dict(lws_env)
    for e in container.get("env") or []:
        env.setdefault(e["name"], expand(e.get("value", ""), env))
    argv = [expand(w, env) for w in container["command"] + (container.get("args") or [])]
    return recorded(argv, env, tmp, RECORDERS)


def pod_facts(template, lws_env, tmp):
    c = template["spec"]["containers"][0]
    res = c.get("resources", {})
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
    vols = {v["name"]: v for v in template["spec"].get("volumes") or []}
    shm = vols.get(mounts.get("/dev/shm"), {}).get("emptyDir")
    probe = (c.get("readinessProbe") or {}).get("httpGet")
    return {"gpus": int(res.get("requests", {}).get("nvidia.com/gpu", 0)),
            "gpus_limit": int(res.get("limits", {}).get("nvidia.com/gpu", 0)),
            "shm": shm, "probe": probe, "ports": [p["containerPort"] for p in c.get("ports") or []],
            **run_pod(c, lws_env, tmp)}


def judge(text):
    """One LeaderWorkerSet: its facts. Several (a disaggregated plan's pools): ``sets``, the facts
    of each with its own Service, and ``proxy``, what the Deployment in front of them ran."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    sets = [d for d in docs if d.get("kind") == "LeaderWorkerSet"]
    svcs = [d for d in docs if d.get("kind") == "Service"]
    dsets = [d for d in docs if d.get("kind") == "DisaggregatedSet"]
    if len(dsets) > 1 or (dsets and sets) or (not sets and not dsets) or (
            (len(sets) > 1 or bool(dsets)) != any(d.get("kind") == "Deployment" for d in docs)):
        return {"ok": False, "errors": [f"{len(sets)} LeaderWorkerSets, {len(dsets)} DisaggregatedSets"]}
    errors = []
    for d in docs:
        if d.get("kind") not in ("LeaderWorkerSet", "DisaggregatedSet"):
            errors += builtin_errors(d, d.get("kind", "?"))
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    if dsets:
        return judge_dset(dsets[0], svcs, docs)
    if len(sets) == 1:
        return judge_set(sets[0], svcs)
    out = [judge_set(lws, [s for s in svcs if s["metadata"]["name"] == lws["metadata"]["name"] + "-leader"])
           for lws in sets]
    bad = [v for v in out if not v["ok"]]
    if bad:
        return bad[0]
    [dep] = [d for d in docs if d.get("kind") == "Deployment"]
    [cm] = [d for d in docs if d.get("kind") == "ConfigMap"]
    return {"ok": True, "sets": out, "proxy": run_deployment(dep, cm)}


def dset_errors(ds):
    """The DisaggregatedSet's schema, its CRD's CEL rule and its webhook's checks."""
    errors = [f"DisaggregatedSet {'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in DSET_VALIDATOR.iter_errors(ds)]
    if ds.get("apiVersion") != "disaggregatedset.x-k8s.io/v1":
        errors.append(f"apiVersion {ds.get('apiVersion')}")
    if errors:
        return "schema", errors
    roles = ds["spec"]["roles"]
    names = [r["name"] for r in roles]
    if len(set(names)) != len(names):   # x-kubernetes-list-type: map, keyed by name
        return "schema", [f"spec.roles: duplicate role names {names}"]
    static = [r for r in roles if (r.get("scaling") or {}).get("mode", "Static") != "External"]
    zero = all(r["spec"].get("replicas", 1) == 0 for r in static)   # replicas defaults to 1
    if not (zero or all(r["spec"].get("replicas", 1) > 0 for r in static)):
        return "schema", ["spec: replicas must be zero for all non-External roles or non-zero for all non-External roles"]
    errors = name_errors(ds["metadata"], "DisaggregatedSet")
    slices = ds["spec"].get("slices", 1)
    for i, r in enumerate(roles):
        rollout = r["spec"].get("rolloutStrategy") or {}
        if rollout.get("type", "RollingUpdate") != "RollingUpdate":
            errors.append(f"spec.roles[{i}].spec.rolloutStrategy.type: Unsupported value")
        if (rollout.get("rollingUpdateConfiguration") or {}).get("partition"):
            errors.append(f"spec.roles[{i}].spec.rolloutStrategy.rollingUpdateConfiguration.partition: Forbidden")
        svc = len(ds["metadata"]["name"]) + 3 + len(str(slices - 1)) + len(REVISION) + len(r["name"]) + len("-prv")
        if svc > 63:
            errors.append(f"spec.roles[{i}].name: the generated service name ({svc} chars) would exceed the "
                          "DNS-1035 limit of 63 characters")
    return "webhook", errors


def role_set(ds, role):
    """The LeaderWorkerSet the controller makes of ``role`` for slice 0 (lws_manager.go Create)."""
    name = ds["metadata"]["name"]
    lws_name = f"{name}-0-{REVISION}-{role['name']}"
    labels = {"app": f"{name}-0-{role['name']}", DSET_LABELS[0]: name, DSET_LABELS[1]: role["name"],
              DSET_LABELS[2]: "0", DSET_LABELS[3]: REVISION}
    spec = json.loads(json.dumps(role["spec"]))
    lwt = spec["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lwt:
            meta = lwt[key].setdefault("metadata", {})
            meta["labels"] = {**meta.get("labels", {}), **labels}
    meta = {"name": lws_name, "labels": labels}
    if "namespace" in ds["metadata"]:
        meta["namespace"] = ds["metadata"]["namespace"]
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta, "spec": spec}


def pod_labels(lws, worker):
    """The labels of worker ``worker`` of group 0: its template's, and LeaderWorkerSet's own."""
    lwt = lws["spec"]["leaderWorkerTemplate"]
    t = lwt.get("leaderTemplate") if worker == 0 and "leaderTemplate" in lwt else lwt["workerTemplate"]
    return {**(t.get("metadata") or {}).get("labels", {}), "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker), "leaderworkerset.sigs.k8s.io/group-index": "0"}


def judge_dset(ds, svcs, docs):
    """A DisaggregatedSet: its own checks, then each role's LeaderWorkerSet as ``judge_set`` judges
    one, and which pods each Service selects (role, worker index)."""
    stage, errors = dset_errors(ds)
    if errors:
        return {"ok": False, "stage": stage, "errors": errors}
    out = []
    pods = []   # (role, worker index, labels) of group 0 of every role
    for role in ds["spec"]["roles"]:
        lws = role_set(ds, role)
        size = lws["spec"]["leaderWorkerTemplate"].get("size", 1)
        pods += [(role["name"], w, pod_labels(lws, w)) for w in range(size)]
        out.append({"role": role["name"], **judge_set(lws, [])})
    bad = [v for v in out if not v["ok"]]
    if bad:
        return bad[0]
    services = [{"name": s["metadata"]["name"], "ports": [(p["port"], p.get("targetPort")) for p in s["spec"]["ports"]],
                 "selects": [[r, w] for r, w, labels in pods
                             if all(labels.get(k) == v for k, v in (s["spec"].get("selector") or {}).items())]}
                for s in svcs]
    [dep] = [d for d in docs if d.get("kind") == "Deployment"]
    [cm] = [d for d in docs if d.get("kind") == "ConfigMap"]
    return {"ok": True, "dset": ds["metadata"]["name"], "sets": out, "services": services,
            "proxy": run_deployment(dep, cm)}


def run_deployment(dep, cm):
    """The Deployment's container run with the ConfigMap's files where it mounts them, the toy
    proxy (VLLM_PROXY) and python3 recorded; its Service's ports."""
    spec = dep["spec"]["template"]["spec"]
    [c] = spec["containers"]
    [mount] = c["volumeMounts"]
    with tempfile.TemporaryDirectory() as tmp:
        files = os.path.join(tmp, "configmap")
        os.makedirs(files)
        for k, v in cm["data"].items():
            with open(os.path.join(files, k), "w") as f:
                f.write(v)
        c = dict(c, command=[w.replace(mount["mountPath"], files) for w in c["command"]])
        facts = run_pod(c, {"VLLM_PROXY": "toy_proxy_server.py"}, tmp)
    return {"name": dep["metadata"]["name"], "ports": [p["containerPort"] for p in c.get("ports") or []],
            "env": {e["name"]: e.get("value") for e in c.get("env") or []}, **facts}


def judge_set(lws, svcs):
    errors = []
    if lws.get("apiVersion") != "leaderworkerset.x-k8s.io/v1":
        errors.append(f"apiVersion {lws.get('apiVersion')}")
    errors += [f"LeaderWorkerSet {'/'.join(map(str, e.absolute_path))}: {e.message}"
               for e in VALIDATOR.iter_errors(lws)]
    if errors:   # the API server refuses it before the webhook sees it
        return {"ok": False, "stage": "schema", "errors": errors}
    errors += webhook_errors(lws)
    if errors:
        return {"ok": False, "stage": "webhook", "errors": errors}
    lwt = lws["spec"]["leaderWorkerTemplate"]
    templates = {"leader": lwt.get("leaderTemplate") or lwt["workerTemplate"], "worker": lwt["workerTemplate"]}
    for role, t in templates.items():
        errors += builtin_errors({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": t},
                                 f"{role} PodTemplate")
    for s in svcs:
        errors += name_errors(s["metadata"], "Service")
    if errors:
        return {"ok": False, "stage": "built-in objects", "errors": errors}
    name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
    size, replicas = lwt.get("size", 1), lws["spec"].get("replicas", 1)
    # the pods of group 0: the leader is <name>-0 in the headless Service <name> (subdomain Shared)
    address = f"{name}-0.{name}.{ns}"
    pods = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in range(size):
            env = {"LWS_LEADER_ADDRESS": address, "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(w)}
            pods.append({"index": w, **pod_facts(templates["leader" if w == 0 else "worker"], env, tmp)})
    service = [{"name": s["metadata"]["name"], "selector": s["spec"].get("selector"),
                "ports": [(p["port"], p.get("targetPort")) for p in s["spec"]["ports"]]} for s in svcs]
    return {"ok": True, "name": name, "replicas": replicas, "size": size,
            "startup": lws["spec"].get("startupPolicy", "LeaderCreated"),
            "restart": lwt.get("restartPolicy", "RecreateGroupOnPodRestart"), "leader_address": address,
            "pods": pods, "services": service}


MARK = "@@lws-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(t) for t in json.loads(line)]), flush=True)
