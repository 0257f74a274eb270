"""Kubernetes and the LeaderWorkerSet controller judge parc's LeaderWorkerSets: every `lws.yaml`
parc emits for the examples and test specs goes through the LWS CRD's own OpenAPI schema (LWS
v0.10.0, tests/data/lws; unknown fields refused), the checks of LWS's validating webhook, and
kubernetes-validate (strict) for the Service and the pod templates; then each pod of a group runs
its command as the kubelet would, with LWS's environment, and the judge reports the sizes and the
`vllm serve` argv it found, which must be the plan's. All in an isolated virtual environment that
tests/judges/lws_env.sh creates (never parc's own). Without a reachable package registry the
tests skip with the reason; PARC_JUDGES=required makes that a failure. PARC_LWS_PYTHON names an
existing environment's python instead."""
from __future__ import annotations

import json

import pytest

from backends_support import accepted_cases
from support import judges

MARK = "@@lws-judge "


@pytest.fixture(scope="module")
def lws_python(tmp_path_factory):
    """A judge: one lws_judge.py process for the module, fed one batch of manifests a call."""
    proc = judges.start("lws", "PARC_LWS_PYTHON", tmp_path_factory.mktemp("judge") / "stderr", timeout=600)
    yield proc
    judges.stop(proc)


def judge(proc, texts: list[str]) -> list[dict]:
    return judges.ask(proc, MARK, texts)


def option(argv: list[str], flag: str, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def manifests():
    """(spec, plan as JSON, lws.yaml) for every example and test spec parc compiles for lws."""
    out = []
    for spec, t, files in accepted_cases():
        if t == "lws":
            by = {f.path: f.text for f in files}
            out.append((spec, json.loads(by["plan.json"]), by["lws.yaml"]))
    return out


def check_degrees(spec: str, plan: dict, v: dict) -> None:
    """The sizes the judge derived from the manifest and the argv the pods ran are the plan's.

    A group is one engine: tp·pp·cp GPUs (times dp when expert parallelism spans dp, which makes
    the whole plan one engine); the groups are the data-parallel replicas."""
    m, cl = plan["mesh"], plan["cluster"]
    one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
    engine_dp = m["dp"] if one_engine else 1
    assert v["replicas"] * engine_dp == m["dp"], spec
    pods = v["pods"]
    assert len(pods) == v["size"] and all(p["gpus"] == p["gpus_limit"] == pods[0]["gpus"] for p in pods), spec
    # the GPUs of one group are one engine's (a replica that fills whole nodes, or one pod)
    replica = m["tp"] * m["pp"] * m["cp"] * engine_dp
    assert v["size"] * pods[0]["gpus"] == replica, (spec, v["size"], pods[0]["gpus"], replica)
    assert v["size"] == 1 or pods[0]["gpus"] == cl["gpus_per_node"], spec
    assert v["replicas"] * replica == plan["world_size"], spec
    settings = plan["targets"].get("vllm", {}).get("settings", {})
    port = settings.get("port", 8000)
    leader = pods[0]
    assert leader["probe"] == {"path": "/health", "port": port} and leader["ports"] == [port], spec
    [svc] = v["services"]
    assert svc["selector"] == {"leaderworkerset.sigs.k8s.io/name": v["name"],
                               "leaderworkerset.sigs.k8s.io/worker-index": "0"} and svc["ports"] == [[port, port]], spec
    assert v["startup"] == "LeaderCreated" and v["restart"] == "RecreateGroupOnPodRestart", spec
    for p in pods:
        assert p["returncode"] == 0, (spec, p["stderr"])
        assert p["shm"]["medium"] == "Memory", spec
    ray = "ray" in leader["runs"]
    if ray:   # the leader starts the Ray head, every worker joins it at the leader's address
        assert leader["runs"]["ray"] == [["start", "--head", "--port", "6379"]], spec
        for p in pods[1:]:
            assert p["runs"] == {"ray": [["start", "--address", v["leader_address"] + ":6379", "--block"]]}, spec
    serving = [p for p in pods if "vllm" in p["runs"]]
    assert serving and serving[0] is leader and (ray or len(serving) == len(pods)), spec
    for p in serving:
        [argv] = p["runs"]["vllm"]
        assert argv[:2] == ["serve", settings["model"]], spec
        assert int(option(argv, "--tensor-parallel-size")) == m["tp"], spec
        assert int(option(argv, "--pipeline-parallel-size")) == m["pp"], spec
        assert int(option(argv, "--prefill-context-parallel-size", 1)) == m["cp"], spec
        assert int(option(argv, "--data-parallel-size", 1)) == engine_dp, spec
        assert ("--enable-expert-parallel" in argv) == (m["ep"] > 1), spec
        assert ("--headless" in argv) == (p["index"] > 0), spec
        if v["size"] > 1 and not ray and "--nnodes" in argv:
            # vLLM's own multi-node launch: the group is its nodes, the worker index its node rank
            assert int(option(argv, "--nnodes")) == v["size"], spec
            assert int(option(argv, "--node-rank")) == p["index"], spec
            assert option(argv, "--master-addr") == v["leader_address"], spec
        elif v["size"] > 1 and not ray:
            # vLLM's data parallelism over the group's nodes: each pod holds dp_local replicas,
            # numbered from its worker index times dp_local
            local = int(option(argv, "--data-parallel-size-local"))
            assert local * v["size"] == engine_dp and local * m["tp"] * m["pp"] * m["cp"] == p["gpus"], spec
            assert int(option(argv, "--data-parallel-start-rank", 0)) == p["index"] * local, spec
            assert option(argv, "--data-parallel-address") == v["leader_address"], spec
        else:
            assert "--nnodes" not in argv, spec


def test_kubernetes_accepts_what_parc_emits_with_the_plans_degrees(lws_python):
    cases = manifests()
    assert len(cases) >= 8
    for (spec, plan, _), v in zip(cases, judge(lws_python, [text for _, _, text in cases])):
        assert v["ok"], f"{spec}: {v.get('stage')}: {v.get('errors')}"
        check_degrees(spec, plan, v)


def test_the_judge_refuses_what_kubernetes_refuses(lws_python):
    """The judge itself refuses wrong manifests at each stage, so an accepting verdict means
    something: a misspelt field (the CRD's structural schema), a field one level too deep, a size
    of 0 and a name with capitals (LWS's webhook), a Service port that is not a number
    (kubernetes-validate)."""
    import yaml

    spec, plan, text = next(c for c in manifests() if "vllm-nnodes" in c[0])
    docs = {d["kind"]: d for d in yaml.safe_load_all(text)}
    assert list(docs) == ["ConfigMap", "LeaderWorkerSet", "Service"]

    def dump(lws=None, svc=None):
        return yaml.safe_dump_all([docs["ConfigMap"], lws or docs["LeaderWorkerSet"], svc or docs["Service"]])

    def edited(path, fn):
        import copy

        d = copy.deepcopy(docs["LeaderWorkerSet"] if path == "lws" else docs["Service"])
        fn(d)
        return dump(**{path: d})

    bad = [
        edited("lws", lambda d: d["spec"]["leaderWorkerTemplate"].update(sizee=2)),
        edited("lws", lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"][1]["emptyDir"]
               .update(sizeLimt="1Gi")),
        edited("lws", lambda d: d["spec"]["leaderWorkerTemplate"].update(size=0)),
        edited("lws", lambda d: d["metadata"].update(name="Llama3-70B")),
        edited("svc", lambda d: d["spec"]["ports"][0].update(port="eighty")),
    ]
    got = judge(lws_python, [dump()] + bad)
    assert got[0]["ok"], got[0]
    assert [v.get("stage") for v in got[1:]] == ["schema", "schema", "webhook", "webhook", "built-in objects"], got
    assert "sizee" in got[1]["errors"][0] and "sizeLimt" in got[2]["errors"][0]


# ----------------------------------------------------------------------------------------------
# The same verdicts both ways: what parc refuses for a LeaderWorkerSet, the API server refuses
# (the manifest built from the refused plan); what parc accepts, it accepts.

REFUSED = [("name", "7b-serve"), ("name", "serve-"), ("namespace", "Serving"), ("name", "a" * 41)]


def test_kubernetes_refuses_the_names_parc_refuses(lws_python, check_spec):
    """P677: names the webhook (LWS's NameIsDNS1035Label) or the API server (namespaces) refuse.
    parc keeps names to 40 characters where Kubernetes allows 63: the pods and StatefulSets add
    suffixes, so a 41-character name is refused by parc alone, as its message says."""
    from parc.targets import lws
    from support.specs import spec

    texts = []
    for key, value in REFUSED:
        r = check_spec(spec(mesh="tp = 8", serve="max_model_len = 4096",
                            target={"vllm": 'model = "m"', "lws": f'{key} = "{value}"'}), ("lws",))
        assert [d.code for d in r.errors] == ["P677"], [(d.code, d.message) for d in r.diagnostics]
        assert ("parc is stricter" in r.errors[0].message) == (len(value) > 40), r.errors[0].message
        texts.append(next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml"))
    got = judge(lws_python, texts)
    for (key, value), v in zip(REFUSED, got):
        if len(value) > 40 and value.isalpha():
            assert v["ok"], v   # Kubernetes takes it; parc leaves room for the controller's suffixes
        else:
            assert not v["ok"] and v["stage"] == "webhook" and key in " ".join(v["errors"]), (key, value, v)


def test_kubernetes_accepts_the_settings_parc_accepts(lws_python, check_spec):
    from parc.targets import lws
    from support.specs import spec

    r = check_spec(spec(nodes=4, gpn=8, mesh="dp = 2; tp = 8; pp = 2", serve="max_model_len = 4096",
                        target={"vllm": 'model = "meta-llama/Meta-Llama-3-8B-Instruct"; port = 8080',
                                "lws": 'name = "llm-serve"; namespace = "serving"; cpu = 96; memory = 1TiB; '
                                       'shm_size = 64GiB; rdma_resource = "rdma/rdma_shared_device_a"; '
                                       'image = "registry.local/vllm:v0.33.0"'}), ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    text = next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml")
    [v] = judge(lws_python, [text])
    assert v["ok"], v
    # 4 nodes of 8: two replicas of tp 8 · pp 2 = 16 GPUs, each a group of 2 whole nodes
    assert (v["replicas"], v["size"], v["name"]) == (2, 2, "llm-serve")
    assert v["leader_address"] == "llm-serve-0.llm-serve.serving"
    check_degrees("settings", {**r.plan.to_dict(), "world_size": r.plan.world_size}, v)


MOE_NODES = """model "mixtral" { from = mixtral_8x7b }
cluster "two" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = ethernet(200Gb/s)
}
mesh {
  dp = 8
  tp = 2
  ep = 16
}
serve { max_model_len = 8192 }
target vllm { model = "mistralai/Mixtral-8x7B-Instruct-v0.1" }
"""


def test_one_engine_over_two_nodes_is_one_group(lws_python, check_spec):
    """Expert parallelism over dp makes the plan one vLLM engine: one group of both nodes, vLLM's
    data parallelism inside it, the worker's first rank computed by its shell from LWS_WORKER_INDEX
    (dp 8 over 2 pods: 4 replicas of tp 2 each, ranks 0-3 on the leader and 4-7 on the worker)."""
    from parc.targets import lws

    r = check_spec(MOE_NODES, ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    [v] = judge(lws_python, [next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml")])
    assert v["ok"], v
    assert (v["replicas"], v["size"], [p["gpus"] for p in v["pods"]]) == (1, 2, [8, 8])
    assert option(v["pods"][1]["runs"]["vllm"][0], "--data-parallel-start-rank") == "4"
    check_degrees("moe", {**r.plan.to_dict(), "world_size": r.plan.world_size}, v)


# ----------------------------------------------------------------------------------------------
# vLLM's own parser and ParallelConfig judge what the pods run (the vLLM judge's environment,
# tests/judges/vllm_env.sh): the argv each pod of group 0 recorded, with the degrees of one engine.

@pytest.fixture(scope="module")
def vllm_python(tmp_path_factory):
    proc = judges.start("vllm", "PARC_VLLM_PYTHON", tmp_path_factory.mktemp("vllm-judge") / "stderr")
    yield proc
    judges.stop(proc)


def vllm_judge(proc, argvs: list) -> list[dict]:
    return judges.ask(proc, "@@vllm-judge ", argvs)


@pytest.mark.vllm
def test_vllm_accepts_what_the_pods_run(lws_python, vllm_python):
    cases = manifests()
    found = []
    for (spec, plan, _), v in zip(cases, judge(lws_python, [text for _, _, text in cases])):
        for p in v["pods"]:
            for argv in p["runs"].get("vllm", []):
                found.append((spec, plan, p["index"], argv[1:]))
    assert len({spec for spec, *_ in found}) == len(cases)
    for (spec, plan, k, argv), got in zip(found, vllm_judge(vllm_python, [a for *_, a in found])):
        assert got["ok"], f"{spec} pod {k}: vLLM refuses {argv}: {got.get('error')}"
        m = plan["mesh"]
        one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
        assert (got["tp"], got["pp"], got["pcp"]) == (m["tp"], m["pp"], m["cp"]), spec
        assert got["dp"] == (m["dp"] if one_engine else 1), spec
        assert got["headless"] == (k > 0), spec
