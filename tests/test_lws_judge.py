"""Kubernetes and the LeaderWorkerSet controller judge parc's LeaderWorkerSets: every `lws.yaml`
parc emits for the examples and test specs goes through the LWS CRD's own OpenAPI schema (LWS
v0.10.0, tests/data/lws; unknown fields refused), the checks of LWS's validating webhook, and
kubernetes-validate (strict) for the Service and the pod templates; then each pod of a group runs
its command as the kubelet would, with LWS's environment, and the judge reports the sizes and the
`vllm serve` or `python3 -m sglang.launch_server` argv it found, which must be the plan's; vLLM's
and SGLang's own parsers and checks then judge those argv, each in its own judge's environment.
All in an isolated virtual environment that tests/judges/lws_env.sh creates (never parc's own). The tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it). PARC_LWS_PYTHON names an
existing environment's python instead."""
from __future__ import annotations

import json

import pytest

from backends_support import accepted_cases
from support import judges
from support import sglang as sglang_judge
from support.launched import engine_run

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


# the port each engine serves on when its target block names none (vllm/__init__.py, sglang PORT)
PORTS = {"vllm": 8000, "sglang": 30000}


def engine(plan: dict) -> str:
    """The engine the pods run: the block's `engine`, else the spec's one serving engine block."""
    return engine_run(plan, "lws")


def engine_settings(plan: dict) -> dict:
    """The engine target's block, with the model a `target vllm` block gives SGLang (inherits)."""
    own = dict(plan["targets"].get(engine(plan), {}).get("settings", {}))
    own.setdefault("model", plan["targets"].get("vllm", {}).get("settings", {}).get("model"))
    return own


def check_degrees(spec: str, plan: dict, v: dict) -> None:
    """The sizes the judge derived from the manifest and the argv the pods ran are the plan's:
    the groups' GPUs are the world, a multi-node group's pods take whole nodes, the leader alone
    is probed on the engine's port, and each engine's command carries the plan's degrees."""
    cl = plan["cluster"]
    pods = v["pods"]
    assert len(pods) == v["size"] and all(p["gpus"] == p["gpus_limit"] == pods[0]["gpus"] for p in pods), spec
    assert v["replicas"] * v["size"] * pods[0]["gpus"] == plan["world_size"], spec
    assert v["size"] == 1 or pods[0]["gpus"] == cl["gpus_per_node"], spec
    settings = engine_settings(plan)
    port = settings.get("port", PORTS[engine(plan)])
    leader = pods[0]
    assert leader["probe"] == {"path": "/health", "port": port} and leader["ports"] == [port], spec
    [svc] = v["services"]
    assert svc["selector"] == {"leaderworkerset.sigs.k8s.io/name": v["name"],
                               "leaderworkerset.sigs.k8s.io/worker-index": "0"} and svc["ports"] == [[port, port]], spec
    assert v["startup"] == "LeaderCreated" and v["restart"] == "RecreateGroupOnPodRestart", spec
    for p in pods:
        assert p["returncode"] == 0, (spec, p["stderr"])
        assert p["shm"]["medium"] == "Memory", spec
    (check_sglang if engine(plan) == "sglang" else check_vllm)(spec, plan, v, settings)


def check_vllm(spec: str, plan: dict, v: dict, settings: dict) -> None:
    """A group is one vLLM engine: tp·pp·cp GPUs (times dp when expert parallelism spans dp,
    which makes the whole plan one engine); the groups are the data-parallel replicas."""
    m, pods, leader = plan["mesh"], v["pods"], v["pods"][0]
    one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
    engine_dp = m["dp"] if one_engine else 1
    assert v["replicas"] * engine_dp == m["dp"], spec
    assert v["size"] * pods[0]["gpus"] == m["tp"] * m["pp"] * m["cp"] * engine_dp, spec
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


def sglang_argv(pod: dict) -> list[str]:
    """The arguments of `python3 -m sglang.launch_server` the pod ran."""
    [argv] = pod["runs"]["python3"]
    assert argv[:2] == ["-m", "sglang.launch_server"], argv
    return argv[2:]


def check_sglang(spec: str, plan: dict, v: dict, settings: dict) -> None:
    """A group is one SGLang server over its pods: every pod runs it with --nnodes the group's
    size, --node-rank its worker index and --dist-init-addr the leader's address; a server's
    tp_size · pp_size · dp_size is the group's GPUs, tp_size dp · tp under attention data
    parallelism (--attn-dp-size dp), and the servers' replicas add up to the plan's dp."""
    m = plan["mesh"]
    # attention data parallelism: the serve block's key, or the sglang block's older spelling
    attn = bool(plan["serve"]["dp_attention"] or settings.get("dp_attention")) and m["dp"] > 1
    for p in v["pods"]:
        argv = sglang_argv(p)
        assert option(argv, "--model-path") == settings["model"], spec
        tp, pp, dp = (int(option(argv, f"--{k}-size", 1)) for k in ("tp", "pp", "dp"))
        assert tp * pp * dp == v["size"] * p["gpus"], spec
        assert (tp, pp) == (m["dp"] * m["tp"] if attn else m["tp"], m["pp"]), spec
        assert int(option(argv, "--attn-dp-size", 1)) == (m["dp"] if attn else 1), spec
        assert dp * v["replicas"] == (1 if attn else m["dp"]), spec
        if v["size"] > 1:
            assert int(option(argv, "--nnodes")) == v["size"] and int(option(argv, "--node-rank")) == p["index"], spec
            assert option(argv, "--dist-init-addr") == v["leader_address"] + ":5000", spec
        else:
            assert "--nnodes" not in argv and "--dist-init-addr" not in argv, spec


# the ports a vLLM pool's instances serve on, and the proxy's (vllm/__init__.py POOL_PORTS, PROXY_PORT)
POOL_PORTS = {"prefill": 8100, "decode": 8200}


def pool_sets(plan: dict, v: dict):
    """(pool, its LeaderWorkerSet's verdict, the pool's mesh) of a disaggregated plan, in order."""
    return [(pool["name"], s, pool["mesh"]) for pool, s in zip(plan["pools"], v["sets"])]


def check_pooled(spec: str, plan: dict, v: dict) -> None:
    """A LeaderWorkerSet per pool, each group running its pool's degrees with the pool's KV
    transfer role, and the proxy or router pointed at every group's leader."""
    gpn, name = plan["cluster"]["gpus_per_node"], v["sets"][0]["name"].rsplit("-", 1)[0]
    sglang = engine(plan) == "sglang"
    leaders = {}
    for pool, s, m in pool_sets(plan, v):
        assert s["ok"] and s["name"] == f"{name}-{pool}", spec
        g = m["tp"] * m["pp"] * m["cp"] * m["dp"]
        # a group per instance (vLLM): its nodes the pods, each with its GPUs on a node
        if not sglang:
            want = [p for p in plan["pools"] if p["name"] == pool][0]["instances"]
            assert s["replicas"] == want and s["size"] == max(1, g // gpn), spec
        assert s["replicas"] * s["size"] * s["pods"][0]["gpus"] == g * [
            p for p in plan["pools"] if p["name"] == pool][0]["instances"], spec
        port = PORTS["sglang"] if sglang else POOL_PORTS[pool]
        assert s["pods"][0]["probe"] == {"path": "/health", "port": port}, spec
        [svc] = s["services"]
        assert svc["ports"] == [[port, port]], spec
        for p in s["pods"]:
            assert p["returncode"] == 0, (spec, p["stderr"])
            argv = sglang_argv(p) if sglang else p["runs"]["vllm"][0]
            if sglang:
                assert option(argv, "--disaggregation-mode") == pool, spec
                continue
            assert (option(argv, "--tensor-parallel-size"), option(argv, "--pipeline-parallel-size"),
                    option(argv, "--data-parallel-size", "1")) == (str(m["tp"]), str(m["pp"]), str(m["dp"])), spec
            assert "NixlConnector" in option(argv, "--kv-transfer-config"), spec
            assert ("--headless" in argv) == (p["index"] > 0), spec
            if p["index"] == 0:
                assert option(argv, "--port") == str(port), spec
        leaders[pool] = [f"{s['name']}-{k}.{s['name']}" for k in range(s["replicas"])]
    proxy = v["proxy"]
    assert proxy["returncode"] == 0, (spec, proxy["stderr"])
    [argv] = proxy["runs"]["python3"]
    if sglang:
        urls = [argv[i + 1] for i, w in enumerate(argv) if w in ("--prefill", "--decode")]
        assert urls == [f"http://{h}:{PORTS['sglang']}" for h in leaders["prefill"] + leaders["decode"]], spec
        return
    ends = [i for i, w in enumerate(argv) if w.startswith("--")] + [len(argv)]
    args = {argv[i]: argv[i + 1:j] for i, j in zip(ends, ends[1:])}
    assert args["--prefiller-hosts"] == leaders["prefill"] and args["--decoder-hosts"] == leaders["decode"], spec
    assert args["--prefiller-ports"] == [str(POOL_PORTS["prefill"])] * len(leaders["prefill"]), spec
    assert args["--port"] == [str(proxy["ports"][0])], spec


def test_kubernetes_accepts_what_parc_emits_with_the_plans_degrees(lws_python):
    cases = manifests()
    assert len(cases) >= 8
    for (spec, plan, _), v in zip(cases, judge(lws_python, [text for _, _, text in cases])):
        assert v["ok"], f"{spec}: {v.get('stage')}: {v.get('errors')}"
        if plan.get("pools"):
            check_pooled(spec, plan, v)
        else:
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
    cases = [c for c in manifests() if engine(c[1]) == "vllm"]
    found = []
    for (spec, plan, _), v in zip(cases, judge(lws_python, [text for _, _, text in cases])):
        # a disaggregated plan: each pool's set, with the pool's mesh
        sets = [(s, m) for _, s, m in pool_sets(plan, v)] if plan.get("pools") else [(v, plan["mesh"])]
        for s, m in sets:
            for p in s["pods"]:
                for argv in p["runs"].get("vllm", []):
                    found.append((spec, plan, m, p["index"], argv[1:]))
    assert len({spec for spec, *_ in found}) == len(cases)
    for (spec, plan, m, k, argv), got in zip(found, vllm_judge(vllm_python, [a for *_, a in found])):
        assert got["ok"], f"{spec} pod {k}: vLLM refuses {argv}: {got.get('error')}"
        one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
        assert (got["tp"], got["pp"], got["pcp"]) == (m["tp"], m["pp"], m["cp"]), spec
        assert got["dp"] == (m["dp"] if one_engine else 1), spec
        assert got["headless"] == (k > 0), spec


# ----------------------------------------------------------------------------------------------
# SGLang's own parser and ServerArgs checks judge what the pods run under `engine = sglang` (the
# SGLang judge's environment, tests/judges/sglang_env.sh): the leader's and every worker's argv
# of group 0, on a local model folder made from the spec's model.

@pytest.fixture(scope="module")
def sglang_python(tmp_path_factory):
    proc = sglang_judge.start(tmp_path_factory)
    yield proc
    judges.stop(proc)


SGLANG_BLOCK = 'model = "org/model"'
# (spec arguments, sglang settings): plans parc accepts for lws with SGLang beside the test spec
# tests/data/specs/lws-sglang.par (one server of pp 2 · tp 8 over two nodes)
SGLANG_PLANS = [
    # 4 nodes: 2 servers (groups) of pp 2 · tp 8 over 2 nodes each
    (dict(nodes=4, mesh="dp = 2; pp = 2; tp = 8"), ""),
    # replicas of tp 4 on 2 nodes of 8: a server per node, --dp-size 2 inside it
    (dict(nodes=2, mesh="dp = 4; tp = 4"), ""),
    # attention data parallelism over both nodes, experts over all 16 GPUs with DeepEP
    (dict(model="from = mixtral_8x7b; experts = 16", nodes=2, mesh="dp = 8; tp = 2; ep = 16",
          placement="tp on intra_node; dp on inter_node"), "; dp_attention = true; moe_a2a_backend = deepep"),
]


def sglang_specs() -> list[str]:
    from support.specs import spec

    return [spec(serve="max_model_len = 4096", target={"sglang": SGLANG_BLOCK + extra, "lws": "engine = sglang"}, **kw)
            for kw, extra in SGLANG_PLANS]


def sglang_cases(check_spec) -> list[tuple[str, dict, str]]:
    """(name, plan as JSON, lws.yaml) of every LeaderWorkerSet parc emits with SGLang as the engine."""
    from parc.targets import lws

    out = [c for c in manifests() if engine(c[1]) == "sglang"]
    for i, text in enumerate(sglang_specs()):
        r = check_spec(text, ("lws",))
        assert not r.errors, [(d.code, d.message) for d in r.errors]
        plan = {**r.plan.to_dict(), "world_size": r.plan.world_size}
        out.append((f"SGLANG_PLANS[{i}]", plan, next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml")))
    return out


@pytest.mark.sglang
def test_sglang_accepts_what_the_pods_run(lws_python, sglang_python, check_spec, tmp_path):
    """Kubernetes accepts each manifest; each pod's argv, with LWS's environment substituted, goes
    through SGLang's own parser and checks, and the sizes SGLang resolves are the plan's: tp,
    pp, dp (replicas behind one server), attention dp, nnodes the group's size and node rank the
    pod's worker index, the leader's address for --dist-init-addr."""
    cases = sglang_cases(check_spec)
    assert len(cases) >= 4 and any("lws-sglang" in name for name, *_ in cases)
    items, where = [], []
    for (name, plan, _), v in zip(cases, judge(lws_python, [text for *_, text in cases])):
        assert v["ok"], f"{name}: {v.get('stage')}: {v.get('errors')}"
        (check_pooled if plan.get("pools") else check_degrees)(name, plan, v)
        folder = sglang_judge.model_folder(plan["model"], tmp_path / name.replace("/", "_"))
        # a disaggregated plan: every pool's set, with the pool's mesh
        # (its groups are the servers of all its instances: those of one instance count here)
        sets = ([(s, m, n["instances"]) for (_, s, m), n in zip(pool_sets(plan, v), plan["pools"])]
                if plan.get("pools") else [(v, plan["mesh"], 1)])
        for lw, m, n in sets:
            for p in lw["pods"]:
                items.append({"server": sglang_judge.with_model(sglang_argv(p), folder)})
                where.append((name, plan, {**lw, "replicas": lw["replicas"] // n}, m, p["index"]))
    got = sglang_judge.ask(sglang_python, items)
    for (name, plan, lw, m, k), s in zip(where, got):
        assert s["ok"], f"{name} pod {k}: SGLang refuses it: {s.get('error')}"
        asked = engine_settings(plan).get("dp_attention") or (plan.get("serve") or {}).get("dp_attention")
        attn = bool(asked) and m["dp"] > 1
        assert (s["tp"], s["pp"]) == (m["dp"] * m["tp"] if attn else m["tp"], m["pp"]), name
        assert s["attn_dp"] == (m["dp"] if attn else 1) and s["dp"] * lw["replicas"] == (1 if attn else m["dp"]), name
        assert s["ep"] == (m["ep"] if plan["model"]["experts"] else 1), name
        assert (s["nnodes"], s["node_rank"]) == (lw["size"], k), name
        assert lw["size"] == 1 or s["dist_init_addr"] == lw["leader_address"] + ":5000", name
    # the 405B test spec: one server of tp 8 · pp 2 over the group's two pods
    lead = next(s for (name, *_), s in zip(where, got) if name.endswith("lws-sglang.par"))
    assert (lead["tp"], lead["pp"], lead["dp"], lead["nnodes"], lead["node_rank"], lead["port"]) == (8, 2, 1, 2, 0, 30000)


@pytest.mark.sglang
def test_sglang_refuses_what_parc_refuses_for_lws(lws_python, sglang_python, check_spec, tmp_path):
    """Under `engine = sglang` parc refuses what SGLang refuses, with SGLang's rule: a context
    longer than the model's positions (P683), and an fp16 KV cache SGLang's parser has no choice
    for (P695; parc would emit `auto`, so the judge gets what the spec asks, float16). Kubernetes
    accepts the manifest; SGLang refuses the pods' argv."""
    from parc.rules import audit
    from parc.targets import lws
    from support.specs import spec

    target = {"sglang": SGLANG_BLOCK, "lws": "engine = sglang"}
    cases = {"P683": spec(nodes=2, mesh="pp = 2; tp = 8", serve="max_model_len = 16384", target=target),
             "P695": spec(nodes=2, mesh="pp = 2; tp = 8", serve="max_model_len = 4096; kv_cache_dtype = fp16",
                          target=target)}
    texts, plans = [], []
    for code, text in cases.items():
        r = check_spec(text, ("lws",))
        assert [d.code for d in r.errors] == [code], [(d.code, d.message) for d in r.diagnostics]
        assert r.errors[0].target == "sglang" and audit(code, "sglang")["fails"] == "argument check"
        texts.append(next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml"))
        plans.append(r.plan.to_dict())
    items = []
    for (code, plan), v in zip(zip(cases, plans), judge(lws_python, texts)):
        assert v["ok"], v
        argv = sglang_judge.with_model(sglang_argv(v["pods"][1]), sglang_judge.model_folder(plan["model"], tmp_path / code))
        if code == "P695":
            argv[argv.index("--kv-cache-dtype") + 1] = "float16"
        items.append({"server": argv})
    p683, p695 = sglang_judge.ask(sglang_python, items)
    # the same reasons: SGLang's context-length check, and its parser's --kv-cache-dtype choices
    assert not p683["ok"] and "context_length (16384) is greater than the derived" in p683["error"], p683
    assert not p695["ok"] and p695["stage"] == "parser", p695
