"""Kubernetes, the Dynamo operator and the engines judge parc's DynamoGraphDeployments: every
`dgd.yaml` parc emits for the examples, the test specs and the plans below goes through the CRD's
OpenAPI schema of its apiVersion (tests/data/dynamo: v1beta1, parc's default, with the CEL rules
its definition carries; v1alpha1 of an older operator for `api_version = v1alpha1`; unknown fields
refused) and kubernetes-validate for the pod templates, then each pod runs its command as the
operator changes it and the kubelet runs it (tests/judges/dynamo_judge.py); the sizes and argv the
judge found must be the plan's, and each worker's argv goes through the engine's own parser with
the plan's degrees: vLLM's engine arguments as `python3 -m dynamo.vllm` parses them
(tests/judges/vllm_judge.py, engine_args), SGLang's ServerArgs as `python3 -m dynamo.sglang` does
(tests/judges/sglang_judge.py). The tests run when PARC_JUDGES asks for them
(tests/support/judges.py; .ci/run sets it); PARC_DYNAMO_PYTHON names an existing environment's
python instead."""
from __future__ import annotations

from pathlib import Path

import pytest

from support import judges
from support import sglang as sglang_judge
from support.orchestrators import engine_judge, judged

ROOT = Path(__file__).resolve().parent.parent
DS = (ROOT / "examples" / "deepseek-v3-pd.par").read_text()
DENSE = (ROOT / "examples" / "llama3-405b-serve-2node.par").read_text()
DENSE_ONE_NODE = (ROOT / "examples" / "llama3-70b-serve.par").read_text()
# the options each worker module owns, not the engine (parc/targets/dynamo/target.toml)
DISAGG = "--disaggregation-mode"
RAY = "nvidia.com/vllm-distributed-executor-backend"

# (name, spec text): the DeepSeek-V3 prefill/decode example and dense examples, for each engine,
# in the default API (v1beta1)
V1BETA1 = [
    ("deepseek-v3-pd sglang", DS.replace("target sglang { }", 'target sglang { model = "deepseek-ai/DeepSeek-V3" }\n'
                                          "target dynamo { engine = sglang }")),
    ("deepseek-v3-pd vllm", DS.replace("target sglang { }", "target dynamo { engine = vllm }").replace(
        'model = "deepseek-ai/DeepSeek-V3"\n', 'model = "deepseek-ai/DeepSeek-V3"\n  executor = ray\n')),
    ("llama3-405b vllm", DENSE + "\ntarget dynamo { }\n"),
    ("llama3-405b sglang", DENSE.replace("target vllm {", "target sglang {").replace("  executor = ray\n", "")
     + "\ntarget dynamo { engine = sglang }\n"),
    ("llama3-70b vllm", DENSE_ONE_NODE + '\ntarget dynamo { name = "llama"; namespace = "serving"; secret = "hf-token"; '
     'shm_size = 16GiB; cpu = 16; memory = 64GiB; image = "registry.local/dynamo-vllm:latest" }\n'),
]
# and each in v1alpha1, for the operators that serve no v1beta1
PLANS = V1BETA1 + [(f"{n} v1alpha1", t.replace("target dynamo {", "target dynamo { api_version = v1alpha1;", 1))
                   for n, t in V1BETA1]
PUBLISHED = sorted((ROOT / "tests" / "data" / "dynamo" / "published").glob("1.6.1-*.yaml"))

dynamo_python, judge, cases = judged("dynamo", "dgd.yaml", PLANS)
vllm_python = engine_judge("vllm")


def engine(plan: dict) -> str:
    from support.launched import engine_run

    return engine_run(plan, "dynamo")


def meshes(plan: dict) -> list[tuple[str | None, dict, int]]:
    """(pool, its mesh, its instances) of each worker component, in the order parc writes them."""
    if plan.get("pools"):
        return [(p["name"], p["mesh"], p["instances"]) for p in plan["pools"]]
    return [(None, plan["mesh"], 1)]


def worker_argv(pod: dict, module: str) -> list[str]:
    """The argv of the worker module a pod ran, after `python3 -m MODULE`."""
    [argv] = pod["runs"]["python3"]
    assert argv[:2] == ["-m", module], argv
    return argv[2:]


def option(argv, flag, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def without(argv: list[str], flag: str) -> list[str]:
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


def check_graph(name: str, plan: dict, v: dict) -> list[tuple]:
    """The graph is the frontend and one worker component per run, with the plan's GPUs; returns
    each worker pod's (pool, mesh, component, pod, argv) for the engine's parser."""
    assert v["ok"], f"{name}: {v.get('stage')}: {v.get('errors')}"
    eng = engine(plan)
    version = plan["targets"].get("dynamo", {}).get("settings", {}).get("api_version", "v1beta1")
    assert v["api"] == f"nvidia.com/{version}", name
    assert v["framework"] == eng and v["config_map"] == v["name"] + "-plan", name
    front, *workers = v["components"]
    assert (front["name"], front["type"], front["replicas"]) == ("Frontend", "frontend", 1), name
    assert front["pods"][0]["runs"] == {"python3": [["-m", "dynamo.frontend"]]}, name
    gpn = plan["cluster"]["gpus_per_node"]
    out = []
    pools = meshes(plan)
    assert len(workers) == len(pools), name
    total = 0
    for (pool, m, instances), w in zip(pools, workers):
        # v1beta1: a pool's worker is of its role's type, the graph's Dynamo namespace the operator's
        # (from the graph's name); v1alpha1: every worker `worker`, in the namespace parc names
        assert w["type"] == (pool or "worker" if version == "v1beta1" else "worker"), name
        assert w["namespace"] == (None if version == "v1beta1" else v["name"]) and w["plan"] == v["config_map"], name
        assert w["env"]["PARC_PLAN"] == "/etc/parc/plan.json", name
        assert w["name"].endswith(f"{(pool or '').capitalize()}Worker"), name
        assert w["gpus"] == w["gpus_request"] and (w["nodes"] == 1 or w["gpus"] == gpn), name
        # a multinode vLLM worker asks for the Ray launch its command is written for
        assert w["annotations"] == ({RAY: "ray"} if eng == "vllm" and w["nodes"] > 1 else {}), name
        total += w["replicas"] * w["nodes"] * w["gpus"]
        for p in w["pods"]:
            assert p["returncode"] == 0, (name, p["stderr"])
        leader, others = w["pods"][0], w["pods"][1:]
        module = "dynamo.vllm" if eng == "vllm" else "dynamo.sglang"
        if eng == "vllm" and w["nodes"] > 1:
            # the operator's Ray cluster: the leader starts the head and the worker, the others join it
            assert leader["runs"]["ray"] == [["start", "--head", "--port=6379"]], name
            for p in others:
                assert p["runs"] == {"ray": [["start", f"--address={w['leader_address']}:6379", "--block"]]}, name
            out.append((pool, m, instances, w, 0, worker_argv(leader, module)))
        else:
            for p in w["pods"]:
                out.append((pool, m, instances, w, p["index"], worker_argv(p, module)))
    # every GPU of the plan is a worker's: the data-parallel replicas or instances times their GPUs
    assert total == sum(i * m["tp"] * m["pp"] * m["cp"] * m["dp"] for _, m, i in pools), name
    return out


def test_kubernetes_and_the_operator_accept_what_parc_emits(dynamo_python, check_spec):
    found = cases(check_spec)
    names = {n for n, *_ in found}
    assert {n for n, _ in PLANS} <= names
    assert len(found) >= len(PLANS) + 3
    for (name, plan, _), v in zip(found, judge(dynamo_python, [t for *_, t in found])):
        for pool, m, instances, w, k, argv in check_graph(name, plan, v):
            # a pool's workers name their role; a worker without pools has the engine block's own
            # (SGLang's `disaggregation` key, which P712 warns of), else the module's default
            own = plan["targets"].get(engine(plan), {}).get("settings", {}).get("disaggregation")
            assert option(argv, DISAGG) == (pool or own), name


def test_dynamo_161s_own_graphs_pass_the_v1beta1_judge(dynamo_python):
    """Dynamo 1.6.1's own v1beta1 graphs (the templates of the ai-dynamo 1.6.1 wheel, as published)
    pass the judge of the v1beta1 definition parc's graphs are judged by: the excerpt is not
    stricter than the release's objects."""
    from support.wild import original_text

    assert len(PUBLISHED) == 4
    got = judge(dynamo_python, [original_text(p) for p in PUBLISHED])
    for p, v in zip(PUBLISHED, got):
        assert v["ok"] and v["api"] == "nvidia.com/v1beta1", (p.name, v)
        assert {c["type"] for c in v["components"]} >= {"frontend"}, p.name


V1BETA1_BAD = [   # (what, edit of the v1beta1 graph, the stage that refuses it)
    ("a misspelt field", lambda d, w: w.update(replica=2), "schema"),
    ("a v1alpha1 field", lambda d, w: w.update(dynamoNamespace="x"), "schema"),
    ("nodeCount 1", lambda d, w: w["multinode"].update(nodeCount=1), "schema"),
    ("an unknown type", lambda d, w: w.update(type="router"), "schema"),
    ("a name the pattern refuses", lambda d, w: w.update(name="-worker"), "schema"),
    ("two names that differ in case", lambda d, w: d["spec"]["components"].append({**w, "name": w["name"].lower()}),
     "schema"),
    ("a launch annotation other than mp or ray", lambda d, w: w["podTemplate"]["metadata"]["annotations"].update(
        {RAY: "slurm"}), "schema"),
    ("no main container", lambda d, w: w["podTemplate"]["spec"]["containers"][0].update(name="engine"), "schema"),
    ("a restart on create", lambda d, w: d["spec"].update(restart={"id": "1"}), "schema"),
    ("an image without a version tag and no runtimeVersionOverride",
     lambda d, w: w["podTemplate"]["spec"]["containers"][0].update(image="registry.local/dynamo:latest"), "schema"),
    ("a container field kubernetes-validate does not know",
     lambda d, w: w["podTemplate"]["spec"]["containers"][0].update(commands=["x"]), "built-in objects"),
]


def test_the_judge_refuses_what_the_v1beta1_api_refuses(dynamo_python, check_spec):
    """Each wrong v1beta1 graph is refused at its stage (V1BETA1_BAD), so an accepting verdict
    means something."""
    import copy

    import yaml

    [(_, _, text)] = [c for c in cases(check_spec) if c[0] == "llama3-405b vllm"]
    cm, dgd = yaml.safe_load_all(text)
    assert dgd["apiVersion"] == "nvidia.com/v1beta1"

    def edited(fn):
        d = copy.deepcopy(dgd)
        fn(d, next(c for c in d["spec"]["components"] if c["name"] != "Frontend"))
        return yaml.safe_dump_all([cm, d])

    got = judge(dynamo_python, [text] + [edited(fn) for _, fn, _ in V1BETA1_BAD])
    assert got[0]["ok"], got[0]
    for (what, _, stage), g in zip(V1BETA1_BAD, got[1:]):
        assert not g["ok"] and g["stage"] == stage, (what, g)


def test_the_judge_refuses_what_kubernetes_refuses(dynamo_python, check_spec):
    """The judge refuses wrong v1alpha1 graphs at each stage, so an accepting verdict means
    something: a misspelt field and a field one level too deep (the CRD's structural schema), a
    nodeCount of 1 (the CRD's minimum), an unknown backendFramework (its enum), a container field
    kubernetes-validate does not know, and a name with capitals."""
    import copy

    import yaml

    [(_, _, text)] = [c for c in cases(check_spec) if c[0] == "llama3-405b vllm v1alpha1"]
    cm, dgd = yaml.safe_load_all(text)
    worker = next(k for k in dgd["spec"]["services"] if k != "Frontend")

    def edited(fn):
        d = copy.deepcopy(dgd)
        fn(d, d["spec"]["services"][worker])
        return yaml.safe_dump_all([cm, d])

    bad = [
        edited(lambda d, w: w.update(replica=2)),
        edited(lambda d, w: w["resources"]["limits"].update(nvidia=1)),
        edited(lambda d, w: w["multinode"].update(nodeCount=1)),
        edited(lambda d, w: d["spec"].update(backendFramework="tensorrt")),
        edited(lambda d, w: w["extraPodSpec"]["mainContainer"].update(commands=["x"])),
        edited(lambda d, w: d["metadata"].update(name="Llama")),
    ]
    got = judge(dynamo_python, [text, *bad])
    assert got[0]["ok"], got[0]
    stages = [g.get("stage") for g in got[1:]]
    assert not any(g["ok"] for g in got[1:]), got
    assert stages == ["schema"] * 4 + ["built-in objects", "schema"], stages


# ----------------------------------------------------------------------------------------------
# The engines' own parsers judge what the workers run, with the plan's degrees.

@pytest.mark.vllm
def test_vllm_accepts_what_the_workers_run(dynamo_python, vllm_python, check_spec):
    """Each vLLM worker's argv, less Dynamo's own --disaggregation-mode, through vLLM's engine
    arguments exactly as dynamo.vllm parses them (no `vllm serve` server options), and the sizes
    vLLM derives are the worker's mesh: tp, pp, pcp, dp inside one engine where expert
    parallelism spans it, expert parallelism, NIXL for a pool's KV transfer."""
    found = [c for c in cases(check_spec) if engine(c[1]) == "vllm"]
    items, where = [], []
    for (name, plan, _), v in zip(found, judge(dynamo_python, [t for *_, t in found])):
        for pool, m, instances, w, k, argv in check_graph(name, plan, v):
            items.append({"engine_args": without(argv, DISAGG) if pool else argv})
            where.append((name, plan, pool, m))
    assert {n for n, t in PLANS if "engine = sglang" not in t} <= {n for n, *_ in where}
    for (name, plan, pool, m), got in zip(where, judges.ask(vllm_python, "@@vllm-judge ", items)):
        assert got["ok"], f"{name} {pool}: vLLM refuses it: {got.get('error')}"
        one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
        assert (got["tp"], got["pp"], got["pcp"]) == (m["tp"], m["pp"], m["cp"]), name
        assert got["dp"] == (m["dp"] if one_engine else 1), name
        assert got["ep"] == (m["ep"] > 1), name
        assert (got["kv_transfer"] == "NixlConnector") == bool(pool), name


@pytest.fixture(scope="module")
def sglang_python(tmp_path_factory):
    proc = sglang_judge.start(tmp_path_factory)
    yield proc
    judges.stop(proc)


@pytest.mark.sglang
def test_sglang_accepts_what_the_workers_run(dynamo_python, sglang_python, check_spec, tmp_path):
    """Each SGLang worker's argv on every pod, with the options the operator appends to a multinode
    worker (--dist-init-addr LEADER:29500, --nnodes, --node-rank), through SGLang's own parser and
    ServerArgs checks as dynamo.sglang parses them; the sizes SGLang resolves are the worker's mesh:
    tp (dp · tp under attention data parallelism), pp, attention dp, ep, the pod's node rank and
    the component's nodes, the prefill or decode mode of its pool."""
    found = [c for c in cases(check_spec) if engine(c[1]) == "sglang"]
    items, where = [], []
    for (name, plan, _), v in zip(found, judge(dynamo_python, [t for *_, t in found])):
        folder = sglang_judge.model_folder(plan["model"], tmp_path / name.replace("/", "_").replace(" ", "_"))
        for pool, m, instances, w, k, argv in check_graph(name, plan, v):
            items.append({"server": sglang_judge.with_model(argv, folder)})
            where.append((name, plan, pool, m, w, k))
    assert {n for n, t in PLANS if "engine = sglang" in t} <= {n for n, *_ in where}
    for (name, plan, pool, m, w, k), s in zip(where, sglang_judge.ask(sglang_python, items)):
        assert s["ok"], f"{name} {pool} pod {k}: SGLang refuses it: {s.get('error')}"
        attn = bool(plan["serve"].get("dp_attention")) and m["dp"] > 1
        assert (s["tp"], s["pp"]) == (m["dp"] * m["tp"] if attn else m["tp"], m["pp"]), name
        assert s["attn_dp"] == (m["dp"] if attn else 1), name
        assert s["ep"] == (m["ep"] if plan["model"]["experts"] else 1), name
        assert (s["nnodes"], s["node_rank"]) == (w["nodes"], k), name
        assert w["nodes"] == 1 or s["dist_init_addr"] == w["leader_address"] + ":29500", name
        own = plan["targets"]["sglang"]["settings"].get("disaggregation")
        assert s["disaggregation_mode"] == (pool or own or "null"), name
