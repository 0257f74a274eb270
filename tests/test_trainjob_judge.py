"""Kubernetes, Kubeflow Trainer and torchrun judge parc's TrainJobs: every `trainjob.yaml` parc
emits for the examples and test specs goes through the TrainJob CRD's own OpenAPI schema (Trainer
v2.3.0, tests/data/trainjob; unknown fields refused) and its rule on names, the checks of
Trainer's validating webhook, and kubernetes-validate (strict) for the pod the trainer builds from
the torch-distributed runtime and for the ConfigMap; then each pod runs its command as the kubelet
would, with the PET_ variables the torch plugin sets, and torchrun's own parser
(torch.distributed.run) reads the argv it recorded: the nodes, processes per node, node rank and
rendezvous torchrun will use must be the plan's, and the program it starts the one the engine
target's own launch starts (a script of the spec's own, torchtitan, Megatron-LM); a DeepSpeed
pod's launcher gets its node rank and the master pod (tests/test_deepspeed_judge.py has DeepSpeed
read its argv and config). The judge runs in an isolated virtual environment
that tests/judges/trainjob_env.sh creates (never parc's own); the tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it).
PARC_TRAINJOB_PYTHON names an existing environment's python instead."""
from __future__ import annotations

import copy
import json

import pytest

from backends_support import accepted_cases
from support import judges
from support.launched import engine_run, own_program, split

MARK = "@@trainjob-judge "


@pytest.fixture(scope="module")
def trainjob_python(tmp_path_factory):
    """A judge: one trainjob_judge.py process for the module, fed one batch of manifests a call."""
    proc = judges.start("trainjob", "PARC_TRAINJOB_PYTHON", tmp_path_factory.mktemp("judge") / "stderr", timeout=600)
    yield proc
    judges.stop(proc)


def judge(proc, texts: list[str]) -> list[dict]:
    return judges.ask(proc, MARK, texts)


def manifests():
    """(spec, plan as JSON, trainjob.yaml) for every example and test spec parc compiles for trainjob."""
    out = []
    for spec, t, files in accepted_cases():
        if t == "trainjob":
            by = {f.path: f.text for f in files}
            out.append((spec, json.loads(by["plan.json"]), by["trainjob.yaml"]))
    return out


def torchrun(monkeypatch, argv: list[str], pet: dict) -> dict:
    """What torchrun makes of ``argv`` in a pod whose environment holds ``pet`` (torchrun reads
    PET_<OPTION> as each option's default): its own parser and launch config."""
    run = pytest.importorskip("torch.distributed.run", reason="torchrun's own parser needs torch")
    with monkeypatch.context() as m:
        for k, v in pet.items():
            m.setenv(k, v)
        m.setenv("OMP_NUM_THREADS", "1")   # torchrun would set it in this process otherwise
        args = run.parse_args(argv)
        if args.standalone:   # what torchrun's run() does before config_from_args
            args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
        cfg, _, cmd_args = run.config_from_args(args)
    program = cmd_args[1:]   # after python's -u: [-m] the script or module, then its arguments
    return {"min_nodes": cfg.min_nodes, "max_nodes": cfg.max_nodes, "nproc": cfg.nproc_per_node,
            "backend": cfg.rdzv_backend, "endpoint": cfg.rdzv_endpoint, "rank": cfg.rdzv_configs.get("rank"),
            "restarts": cfg.max_restarts, "program": program}


def _normal(program: list[str]) -> list[str]:
    """A program's words with the folder of its config files left out (/etc/parc in a pod)."""
    return [w.rsplit("/", 1)[-1] if w.endswith("/ds_config.json") else w for w in program]


def check_degrees(monkeypatch, tmp_path, spec: str, plan: dict, v: dict) -> None:
    """The sizes the judge derived and what the engine's launcher makes of each pod's argv are the
    plan's: the node count, processes per node, the pod's node rank and the master pod, and the
    program the engine target's own launch starts (a script of the spec's own, torchtitan's
    overrides, Megatron-LM's arguments, DeepSpeed's script and config), word for word."""
    cl = plan["cluster"]
    nodes, gpn = cl["nodes"], cl["gpus_per_node"]
    assert (v["nodes"], v["nproc"], v["gpus"], v["gpus_limit"]) == (nodes, gpn, gpn, gpn), spec
    assert v["nodes"] * v["nproc"] == plan["world_size"], spec
    assert v["shm"]["medium"] == "Memory" and v["plan_volume"] == {"name": v["name"] + "-plan"}, spec
    engine = engine_run(plan, "trainjob")
    s = plan["targets"].get("trainjob", {}).get("settings", {})
    inherited = plan["targets"].get("torchrun", {}).get("settings", {})
    restarts = s.get("max_restarts", inherited.get("max_restarts", 0)) if engine == "torchrun" else \
        plan["targets"].get(engine, {}).get("settings", {}).get("max_restarts", 0)
    if engine == "torchrun":
        want = [s.get("entrypoint", inherited.get("entrypoint"))] + (s.get("args", inherited.get("args")) or [])
    else:
        want = _normal(own_program(plan, engine, tmp_path / f"own-{spec.replace('/', '_')}"))
    master = f"{v['name']}-node-0-0.{v['name']}"
    assert [p["index"] for p in v["pods"]] == sorted({0, 1, nodes - 1} & set(range(nodes))), spec
    for p in v["pods"]:
        assert p["returncode"] == 0, (spec, p["stderr"])
        if engine == "deepspeed":   # every pod its own launcher: its node rank, the master pod
            ds, program = split(p["deepspeed"], "deepspeed")
            assert _normal(program) == want, (spec, program)
            assert (ds["--num_nodes"], ds["--num_gpus"]) == (str(nodes), str(gpn)), (spec, ds)
            if nodes > 1:
                assert ds["--no_ssh"] and ds["--node_rank"] == str(p["index"]), (spec, ds)
                # the block's master_port where it sets one, else the trainer's PET_MASTER_PORT
                port = plan["targets"].get("deepspeed", {}).get("settings", {}).get("master_port", 29500)
                assert (ds["--master_addr"], ds["--master_port"]) == (master, str(port)), (spec, ds)
            continue
        t = torchrun(monkeypatch, p["torchrun"], p["pet"])
        assert (t["min_nodes"], t["max_nodes"], t["nproc"]) == (nodes, nodes, gpn), (spec, t)
        assert ([w for w in t["program"] if w != "-m"], t["restarts"]) == (want, restarts), (spec, t)
        if nodes == 1:
            assert t["endpoint"] == "localhost:0", (spec, t)   # --standalone
            continue
        assert t["endpoint"] == master + ":29500", (spec, t)
        if restarts == 0:   # static: the pod's Job completion index is its node rank
            assert (t["backend"], t["rank"]) == ("static", p["index"]), (spec, t)
        else:               # c10d: every node restarts together
            assert t["backend"] == "c10d", (spec, t)


def test_kubernetes_accepts_what_parc_emits_with_the_plans_degrees(trainjob_python, monkeypatch, tmp_path):
    cases = manifests()
    assert len(cases) >= 6
    # every training engine runs in the pods: a script of the spec's own, torchtitan, Megatron-LM, DeepSpeed
    assert {"torchrun", "torchtitan", "megatron", "deepspeed"} <= {engine_run(plan, "trainjob") for _, plan, _ in cases}
    for (spec, plan, _), v in zip(cases, judge(trainjob_python, [text for _, _, text in cases])):
        assert v["ok"], f"{spec}: {v.get('stage')}: {v.get('errors')}"
        check_degrees(monkeypatch, tmp_path, spec, plan, v)


def test_the_judge_refuses_what_kubernetes_refuses(trainjob_python):
    """The judge itself refuses wrong manifests at each stage, so an accepting verdict means
    something: a misspelt field and a field one level too deep (the CRD's structural schema), a
    name with capitals (the CRD's rule), torchrun's reserved variables in the trainer's env, a
    manager that is no domain-prefixed path, a patched container the runtime lacks and an unknown
    runtime (Trainer's webhook), a ConfigMap value that is not a string (kubernetes-validate)."""
    import yaml

    spec, plan, text = next(c for c in manifests() if "slurm-kubernetes" in c[0])
    docs = {d["kind"]: d for d in yaml.safe_load_all(text)}
    assert list(docs) == ["ConfigMap", "TrainJob"]

    def edited(kind, fn):
        d = copy.deepcopy(docs)
        fn(d[kind])
        return yaml.safe_dump_all(list(d.values()))

    def pod(job):
        return job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]

    bad = [
        edited("TrainJob", lambda j: j["spec"]["trainer"].update(numNode=2)),
        edited("TrainJob", lambda j: pod(j)["volumes"][1]["emptyDir"].update(sizeLimt="1Gi")),
        edited("TrainJob", lambda j: j["metadata"].update(name="Llama3-8B")),
        edited("TrainJob", lambda j: j["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "3"})),
        edited("TrainJob", lambda j: j["spec"]["runtimePatches"][0].update(manager="parc")),
        edited("TrainJob", lambda j: pod(j)["containers"][0].update(name="trainer")),
        edited("TrainJob", lambda j: j["spec"]["runtimeRef"].update(name="torch-elsewhere")),
        edited("ConfigMap", lambda c: c["data"].update({"plan.json": 5})),
    ]
    got = judge(trainjob_python, [yaml.safe_dump_all(list(docs.values()))] + bad)
    assert got[0]["ok"], got[0]
    assert [v.get("stage") for v in got[1:]] == ["schema"] * 3 + ["webhook"] * 4 + ["built-in objects"], got
    assert "numNode" in got[1]["errors"][0] and "sizeLimt" in got[2]["errors"][0]
    assert "reserved envs" in got[4]["errors"][0] and "PET_NNODES" in got[4]["errors"][0]


# ----------------------------------------------------------------------------------------------
# The same verdicts both ways: what parc refuses for a TrainJob, the API server refuses (the
# manifest built from the refused plan); what parc accepts, it accepts.

REFUSED = [("name", "7b-train"), ("name", "train-"), ("namespace", "Training"), ("name", "a" * 41)]


def test_kubernetes_refuses_the_names_parc_refuses(trainjob_python, check_spec):
    """P681: names the CRD's rule (RFC 1035) or the API server (namespaces) refuse. parc keeps
    names to 40 characters where the CRD allows 63: the trainer's Jobs and pods add suffixes, so
    a 41-character name is refused by parc alone, as its message says."""
    from parc.targets import trainjob
    from support.specs import spec

    texts = []
    for key, value in REFUSED:
        r = check_spec(spec(train="zero = 3", target={"trainjob": f'entrypoint = "train.py"; {key} = "{value}"'}), ("trainjob",))
        assert [d.code for d in r.errors] == ["P681"], [(d.code, d.message) for d in r.diagnostics]
        assert ("parc is stricter" in r.errors[0].message) == (len(value) > 40), r.errors[0].message
        texts.append(next(f.text for f in trainjob.build(r.plan) if f.path == "trainjob.yaml"))
    for (key, value), v in zip(REFUSED, judge(trainjob_python, texts)):
        if len(value) > 40 and value.isalpha():
            assert v["ok"], v   # Kubernetes takes it; parc leaves room for the trainer's suffixes
        else:
            assert not v["ok"] and v["stage"] == "schema" and key in " ".join(v["errors"]), (key, value, v)


def test_kubernetes_accepts_the_settings_parc_accepts(trainjob_python, check_spec, monkeypatch, tmp_path):
    from parc.targets import trainjob
    from support.specs import spec

    body = ('entrypoint = "pretrain.py"; args = ["--steps", "$(STEPS)"]; max_restarts = 0; name = "pretrain"; '
            'namespace = "ml"; image = "registry.local/train:1"; cpu = 96; memory = 1TiB; shm_size = 64GiB; '
            'rdma_resource = "rdma/rdma_shared_device_a"; rdma_devices = 2')
    r = check_spec(spec(nodes=4, mesh="dp = 8; tp = 4", train="zero = 3", target={"trainjob": body}), ("trainjob",))
    assert not r.diagnostics, [(d.code, d.message) for d in r.diagnostics]
    [v] = judge(trainjob_python, [next(f.text for f in trainjob.build(r.plan) if f.path == "trainjob.yaml")])
    assert v["ok"], v
    # 4 nodes of 8: 4 pods of 8 processes; the pod the trainer builds keeps parc's image and IPC_LOCK
    assert (v["name"], v["nodes"], v["nproc"], v["image"]) == ("pretrain", 4, 8, "registry.local/train:1")
    assert v["capabilities"] == ["IPC_LOCK"] and v["shm"]["sizeLimit"] == "64Gi"
    assert v["pods"][-1]["torchrun"][-2:] == ["--steps", "$(STEPS)"]   # `$$` reached the script as `$`
    check_degrees(monkeypatch, tmp_path, "settings", {**r.plan.to_dict(), "world_size": r.plan.world_size}, v)
