"""What the judges of the serving orchestrators' manifests share (tests/test_dynamo_judge.py,
tests/test_kserve_judge.py): the judge's fixture and the manifests parc compiles for the
examples, the test specs and a module's own plans; and, imported by the judges from their own
environment (no pytest there: the test-side functions import it themselves), the CRD's schema as
the API server applies it and the object's name checks."""
from __future__ import annotations

import re
import shlex

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
OBJECT_META = {"name", "namespace", "labels", "annotations"}


def compiled(check_spec, target: str, path: str, plans) -> list[tuple[str, dict, str]]:
    """(name, plan as JSON, the manifest at ``path``) of every example and test spec parc compiles
    for ``target``, then of each (name, spec text) of ``plans``, which must check without errors."""
    import importlib
    import json

    from backends_support import accepted_cases

    build = importlib.import_module(f"parc.targets.{target}").build
    out = []
    for spec, t, files in accepted_cases():
        if t == target:
            by = {f.path: f.text for f in files}
            out.append((spec, json.loads(by["plan.json"]), by[path]))
    for name, text in plans:
        r = check_spec(text, (target,))
        assert not r.errors, (name, [(d.code, d.message) for d in r.errors])
        plan = {**r.plan.to_dict(), "world_size": r.plan.world_size}
        out.append((name, plan, next(f.text for f in build(r.plan) if f.path == path)))
    return out


def judged(target: str, path: str, plans):
    """What a test module of an orchestrator's judge starts from: (the module's fixture
    ``<target>_python``, the judge's process; ``judge(proc, texts)``, its verdict on each manifest;
    ``cases(check_spec)``, what :func:`compiled` gives for ``target``'s ``path`` and ``plans``)."""
    import pytest

    from support import judges

    @pytest.fixture(scope="module", name=f"{target}_python")
    def python(tmp_path_factory):
        proc = judges.start(target, f"PARC_{target.upper()}_PYTHON", tmp_path_factory.mktemp("judge") / "stderr",
                            timeout=600)
        yield proc
        judges.stop(proc)

    def judge(proc, texts: list[str]) -> list[dict]:
        return judges.ask(proc, f"@@{target}-judge ", texts)

    def cases(check_spec) -> list[tuple[str, dict, str]]:
        return compiled(check_spec, target, path, plans)

    return python, judge, cases


def engine_judge(engine: str):
    """The module's fixture ``<engine>_python``: the engine's own judge (tests/judges/<engine>_judge.py)."""
    import pytest

    from support import judges

    @pytest.fixture(scope="module", name=f"{engine}_python")
    def python(tmp_path_factory):
        proc = judges.start(engine, f"PARC_{engine.upper()}_PYTHON", tmp_path_factory.mktemp(f"{engine}-judge") / "stderr")
        yield proc
        judges.stop(proc)

    return python


def crd_validator(path: str, version: str):
    """The validator of the CRD at ``path``'s ``version`` as the API server applies it: unknown
    fields refused wherever the schema is structural (support.structural.strict)."""
    import jsonschema
    import yaml

    from support.structural import strict

    with open(path) as f:
        crd = yaml.safe_load(f)
    schema = strict(next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


def name_errors(meta: dict) -> list[str]:
    """The object's name a DNS-1035 label of at most 63 characters, its namespace a DNS-1123 label."""
    out = []
    name = meta.get("name", "")
    if not (len(name) <= 63 and DNS_1035.fullmatch(name)):
        out.append(f"metadata.name {name!r}: not a DNS-1035 label")
    ns = meta.get("namespace")
    if ns is not None and not (len(ns) <= 63 and DNS_1123.fullmatch(ns)):
        out.append(f"metadata.namespace {ns!r}: not a DNS-1123 label")
    return out + [f"metadata: unknown field {k}" for k in meta if k not in OBJECT_META]


# --- what the Dynamo operator does to a multinode worker's container ----------------------------
# (ai-dynamo/dynamo deploy/cloud/operator/internal/dynamo/backend_vllm.go, updateVLLMMultinodeArgs,
# commit 039eb630ece354bf2208c1cb1c7140f4f1b041f5; backend_sglang.go, UpdateContainer, commit
# 020073063688f0288505ac584654b1802822cdb0), with LeaderWorkerSet as the multinode deployer. The
# operator that serves v1beta1 (deploy/operator/internal/dynamo/backend_vllm.go,
# injectRayDistributedLaunchFlags, at a commit of unknown release) quotes the leader's command and args
# for the shell, appends `--distributed-executor-backend ray` and makes the command `/bin/sh -c`:
# ``quoted``.
VLLM_RAY_PORT, SGLANG_PORT = "6379", "29500"      # backend_vllm.go VLLMPort, backend_sglang.go SglangPort
LEADER, RANK = "$(LWS_LEADER_ADDRESS)", "$(LWS_WORKER_INDEX)"   # the LWS deployer's leader and rank


def dynamo_components(dgd):
    """Each component of a DynamoGraphDeployment of either API as (name, its fields, its pod spec,
    its main container, its pods' annotations, its type): v1alpha1's `spec.services` (the pod
    `extraPodSpec`, its `mainContainer`, the component's `annotations`), v1beta1's
    `spec.components` (the pod `podTemplate.spec`, its container `main`)."""
    spec = dgd["spec"]
    if dgd["apiVersion"] == "nvidia.com/v1alpha1":
        return [(k, s, s.get("extraPodSpec") or {}, (s.get("extraPodSpec") or {}).get("mainContainer") or {},
                 s.get("annotations") or {}, s.get("componentType")) for k, s in (spec.get("services") or {}).items()]
    out = []
    for c in spec.get("components") or []:
        tpl = c.get("podTemplate") or {}
        pod = tpl.get("spec") or {}
        main = next(k for k in pod.get("containers") or [] if k.get("name") == "main")
        out.append((c["name"], c, pod, main, (tpl.get("metadata") or {}).get("annotations") or {}, c.get("type")))
    return out


def operator_container(framework, container, nodes, index, quoted=False):
    """The container of pod ``index`` of a component over ``nodes`` pods, as the operator changes it."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    if nodes <= 1:
        return command, args
    if framework == "vllm":
        head = f"ray start --head --port={VLLM_RAY_PORT} && "
        if index == 0 and quoted:
            return ["/bin/sh", "-c"], [f"{head}{shlex.join(command)} {shlex.join(args)} --distributed-executor-backend ray"]
        if index == 0:
            return command, ([head + " ".join(args)] if args else args)
        return (["/bin/sh", "-c"] if quoted else command), [f"ray start --address={LEADER}:{VLLM_RAY_PORT} --block"]
    if framework == "sglang":
        flags = f"--dist-init-addr {LEADER}:{SGLANG_PORT} --nnodes {nodes} --node-rank {'0' if index == 0 else RANK}"
        if command and re.fullmatch(r"python\d*(\.\d+)*", command[0]):
            return command, args + flags.split()
        return command, args    # the regex injection into a shell line: parc never writes one
    return command, args


# --- KServe v0.20.0's presets (config/llmisvcconfig) and the controller's choice of them ----------
def is_dp(p):
    return bool(p) and (p.get("data", 0) > 0 or p.get("dataLocal", 0) > 0)


def is_pp(p):
    return bool(p) and p.get("pipeline", 0) > 0


def preset(w, pd, role):
    """config_merge.go's choice for the decode (or only) workload, or the prefill's (``role``)."""
    p = w.get("parallelism")
    head = "" if not pd else f"{role}-"
    if w.get("worker") is None:
        return head + "template"
    if is_dp(p):
        return head + "worker-data-parallel"
    if is_pp(p):
        return head + "worker-pipeline-parallel"
    return None


def size(p):
    """ParallelismSpec.GetSize: the pods of a LeaderWorkerSet group."""
    if is_dp(p):
        return max(max(p.get("data", 1), 1) // max(p.get("dataLocal", 1), 1), 1)
    if is_pp(p):
        return p["pipeline"]
    return 1


def env_of(spec):
    [c] = [c for c in spec["containers"] if c["name"] == "main"]
    return {e["name"]: e.get("value") for e in c.get("env") or []}


def vllm_argv(name, ns, w, chosen, index, port):
    """The preset's `vllm serve` words for pod ``index`` of a replica (tests/judges/kserve_judge.py
    says what is transcribed and what is left out), and the pod's environment."""
    p = w.get("parallelism") or {}
    env = env_of(w["template"] if index == 0 else w["worker"])
    argv = ["/mnt/models", "--served-model-name", name, f"publishers/{ns}/models/{name}", "--port", str(port)]
    if chosen.endswith("template"):
        if p.get("tensor"):
            argv += ["--tensor-parallel-size", str(p["tensor"])]
    else:
        leader = index == 0
        if leader:
            argv += ["--api-server-count", "8"]
        # `{{- if .Spec.Parallelism.Expert -}}...{{- end }} \` then `{{- if .Spec.Parallelism.Tensor ...`:
        # Go's trim markers leave the backslash of the line before each, so without `expert` the
        # shell reads "\ \--tensor-parallel-size" as one word with a leading space
        if p.get("expert"):
            argv += ["--enable-expert-parallel"]
        if p.get("tensor"):
            argv += ["--tensor-parallel-size" if p.get("expert") else " --tensor-parallel-size", str(p["tensor"])]
        local = p.get("dataLocal") or 1
        argv += ["--data-parallel-size", str(p.get("data") or 1), "--data-parallel-size-local", str(local),
                 "--data-parallel-address", "LEADER", "--data-parallel-rpc-port", str(p.get("dataRPCPort") or 5555),
                 "--data-parallel-start-rank", str(index * local)] + ([] if leader else ["--headless"])
    return argv + shlex.split(env.get("VLLM_ADDITIONAL_ARGS") or ""), env
