"""The dynamo target: how a plan becomes Dynamo's frontend and the engine's worker components, the
worker command made of the engine target's own, and its own rules (P646, P647, P710-P712), each
firing on one spec and quiet on the same spec made valid.
(tests/test_dynamo_judge.py has the CRD's schema, the operator and the engines judge the graphs.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.specs import assert_fires, assert_quiet, spec

VLLM = 'model = "m"'
SERVE = "max_model_len = 4096"
MOE = "from = mixtral_8x7b"
POOLS = SERVE + "; kv_transfer = nixl; prefill { instances = 2 }; decode { dp = 1 }"


API = ["v1beta1", "v1alpha1"]     # the versions the target writes (`api_version`), the default first


def graph(r) -> dict:
    from parc.targets import dynamo

    return list(yaml.safe_load_all(next(f.text for f in dynamo.build(r.plan) if f.path == "dgd.yaml")))[-1]


def dynamo(api: str, keys: str = "") -> str:
    """`target dynamo`'s keys writing ``api`` (the default's left unsaid)."""
    return "; ".join(k for k in (keys, "" if api == API[0] else f"api_version = {api}") if k)


def view(g: dict) -> dict:
    """{component: (its fields, its main container, its GPUs per pod)} of either API."""
    if g["apiVersion"] == "nvidia.com/v1alpha1":
        return {k: (v, v["extraPodSpec"]["mainContainer"], int((v.get("resources") or {}).get("limits", {}).get("gpu", 0)))
                for k, v in g["spec"]["services"].items()}
    out = {}
    for c in g["spec"]["components"]:
        main = next(x for x in c["podTemplate"]["spec"]["containers"] if x["name"] == "main")
        out[c["name"]] = (c, main, int((main.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0)))
    return out


def workers(g: dict) -> dict:
    return {k: v for k, v in view(g).items() if k != "Frontend"}


# (spec arguments, vllm settings) -> {component: (replicas, nodes or None, GPUs per pod)}
GRAPHS = [
    # replicas of tp 2 on a node of 8: 4 components' replicas of one pod with 2 GPUs
    (dict(mesh="dp = 4; tp = 2"), "", {"VllmWorker": (4, None, 2)}),
    # tp 8 · pp 2 over two nodes, vLLM over Ray: one multinode worker of 2 pods
    (dict(nodes=2, mesh="pp = 2; tp = 8"), "; executor = ray", {"VllmWorker": (1, 2, 8)}),
    # experts over dp · tp = 8 on one node: one vLLM engine, one pod of 8 GPUs
    (dict(model=MOE, mesh="dp = 4; tp = 2; ep = 8"), "", {"VllmWorker": (1, None, 8)}),
    # prefill and decode pools on one node of 8: two instances of tp 2 and one of tp 4
    (dict(mesh="tp = 2", serve=POOLS.replace("dp = 1", "tp = 4")), "",
     {"VllmPrefillWorker": (2, None, 2), "VllmDecodeWorker": (1, None, 4)}),
]


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("kw, extra, want", GRAPHS)
def test_components_are_the_engines_runs(check_spec, kw, extra, want, api):
    kw = {"serve": SERVE, **kw}
    r = check_spec(spec(target={"vllm": VLLM + extra, "dynamo": dynamo(api)}, **kw), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["apiVersion"] == f"nvidia.com/{api}" and g["spec"]["backendFramework"] == "vllm"
    front, main, _ = view(g)["Frontend"]
    assert front.get("componentType", front.get("type")) == "frontend"
    assert main["command"] == ["python3", "-m", "dynamo.frontend"]
    got = {k: (w["replicas"], (w.get("multinode") or {}).get("nodeCount"), n) for k, (w, _, n) in workers(g).items()}
    assert got == want
    # v1beta1 names a pool's role in the component's type; v1alpha1 has workers alone
    types = {k: w.get("type", w.get("componentType")) for k, (w, _, _) in workers(g).items()}
    assert types == {k: ("prefill" if "Prefill" in k else "decode" if "Decode" in k else "worker")
                     if api == "v1beta1" else "worker" for k in want}


@pytest.mark.parametrize("api", API)
def test_the_worker_runs_the_vllm_targets_options_through_dynamo_vllm(check_spec, api):
    """The worker's args are the vllm target's own options for the run, the model as --model, less
    the server's --port (the frontend serves the API); a pool's worker names its role."""
    from parc.targets import engines

    r = check_spec(spec(mesh="tp = 2", serve=POOLS, target={"vllm": VLLM, "dynamo": dynamo(api)}), ("dynamo",))
    g = graph(r)
    runs = engines.launch(r.plan, "dynamo").runs
    for run, (key, (w, c, _)) in zip(runs, workers(g).items()):
        serve = [str(x) for x in run.leader[0]]
        i = serve.index("--port")
        assert c["command"] == ["python3"]
        assert c["args"] == ["-m", "dynamo.vllm", "--model", "m", *serve[3:i], *serve[i + 2:],
                             "--disaggregation-mode", run.pool]
        assert "PARC_PORT" not in {e["name"] for e in w.get("envs", c.get("env", []))}


@pytest.mark.parametrize("api", API)
def test_a_multinode_vllm_worker_is_one_shell_line_for_the_operators_ray_start(check_spec, api):
    """The operator joins a multinode vLLM worker's args behind `ray start --head ... &&`, so parc
    writes them as one shell line, each word quoted for the shell; the pods' annotation asks the
    operator for that Ray launch (one that knows it starts vLLM's own otherwise)."""
    import shlex

    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"vllm": VLLM + '; executor = ray; extra_args = ["--hf-overrides", "{\\"a\\": 1}"]',
                                "dynamo": dynamo(api)}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    w, c, _ = workers(graph(r))["VllmWorker"]
    assert c["command"] == ["/bin/sh", "-c"]
    [line] = c["args"]
    words = shlex.split(line)
    assert words[:5] == ["python3", "-m", "dynamo.vllm", "--model", "m"]
    assert words[words.index("--hf-overrides") + 1] == '{"a": 1}'
    assert "--distributed-executor-backend" in words and "--port" not in words
    annotations = w["annotations"] if api == "v1alpha1" else w["podTemplate"]["metadata"]["annotations"]
    assert annotations == {"nvidia.com/vllm-distributed-executor-backend": "ray"}


@pytest.mark.parametrize("api", API)
def test_sglang_multinode_flags_are_left_to_the_operator(check_spec, api):
    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"sglang": VLLM, "dynamo": dynamo(api, "engine = sglang")}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["spec"]["backendFramework"] == "sglang"
    [(key, (w, c, _))] = workers(g).items()
    args = c["args"]
    assert key == "SGLangWorker" and w["multinode"] == {"nodeCount": 2}
    assert args[:4] == ["-m", "dynamo.sglang", "--model-path", "m"]
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(args)
    assert args[args.index("--tp-size") + 1] == "8" and args[args.index("--pp-size") + 1] == "2"
    assert "annotations" not in w and "metadata" not in w.get("podTemplate", {})


SETTINGS = ('name = "llm"; namespace = "serving"; secret = "hf-token"; port = 8080; cpu = 32; memory = 256GiB; '
            'shm_size = 32GiB; image = "registry.local/dynamo:1"')


def test_settings_reach_the_graph(check_spec):
    r = check_spec(spec(serve=SERVE, mesh="tp = 8", target={"vllm": VLLM, "dynamo": SETTINGS}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["metadata"] == {"name": "llm", "namespace": "serving"}
    front, main, _ = view(g)["Frontend"]
    assert main["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert main["command"][-2:] == ["--http-port", "8080"]
    w, c, _ = workers(g)["VllmWorker"]
    assert c["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert c["resources"] == {"requests": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"},
                              "limits": {"nvidia.com/gpu": "8"}}
    assert w["sharedMemorySize"] == "32Gi"
    assert c["image"] == main["image"] == "registry.local/dynamo:1"
    # the image's tag is no Dynamo release: each component says the one whose options it runs
    assert front["runtimeVersionOverride"] == w["runtimeVersionOverride"] == "1.6.1"


def test_settings_reach_the_v1alpha1_graph(check_spec):
    r = check_spec(spec(serve=SERVE, mesh="tp = 8", target={"vllm": VLLM, "dynamo": dynamo("v1alpha1", SETTINGS)}),
                   ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["metadata"] == {"name": "llm", "namespace": "serving"}
    front = g["spec"]["services"]["Frontend"]
    assert front["envFromSecret"] == "hf-token"
    assert front["extraPodSpec"]["mainContainer"]["command"][-2:] == ["--http-port", "8080"]
    w = g["spec"]["services"]["VllmWorker"]
    assert w["dynamoNamespace"] == "llm" and w["envFromSecret"] == "hf-token"
    assert w["resources"]["requests"] == {"gpu": "8", "cpu": "32", "memory": "256Gi"}
    assert w["sharedMemory"] == {"size": "32Gi"}
    assert w["extraPodSpec"]["mainContainer"]["image"] == "registry.local/dynamo:1"


def test_the_default_api_version_is_the_one_the_definition_serves_undeprecated():
    """target.toml's default is the version the v1beta1-serving definition serves without
    deprecating it; the one it deprecates (v1alpha1) is the other choice."""
    from parc.model.targets import spec as target_spec

    crd = yaml.safe_load((Path(__file__).parent / "data" / "dynamo" / "nvidia.com_dynamographdeployments.v1beta1.yaml").read_text())
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    [preferred] = [n for n, v in served.items() if not v.get("deprecated")]
    s = target_spec("dynamo")
    assert s["api"]["default"] == preferred == "v1beta1"
    assert set(s["keys"]["api_version"]["choices"]) == set(served)
    assert served["v1alpha1"]["deprecated"] and "v1beta1" in served["v1alpha1"]["deprecationWarning"]


@pytest.mark.parametrize("api", API)
def test_output_is_byte_identical(check_spec, api):
    from parc.targets import dynamo as target

    r = check_spec(spec(mesh="tp = 2", serve=POOLS, target={"vllm": VLLM, "dynamo": dynamo(api)}), ("dynamo",))
    assert [f.text for f in target.build(r.plan)] == [f.text for f in target.build(r.plan)]


# ------------------------------------------------------------------------------------ the rules

def test_p646_fires_on_training(check_spec):
    text = spec(target={"dynamo": ""})
    d = assert_fires(check_spec, text, "P646", "target dynamo", target="dynamo", targets=("dynamo",))
    assert d.message.startswith("Dynamo serves a model")
    assert_quiet(check_spec, spec(serve=SERVE, target={"vllm": VLLM, "dynamo": ""}), "P646", ("dynamo",))


def test_p647_fires_on_a_bad_name(check_spec):
    bad = spec(serve=SERVE, target={"vllm": VLLM, "dynamo": 'name = "Llama"'})
    assert_fires(check_spec, bad, "P647", "name", target="dynamo", targets=("dynamo",))
    assert_quiet(check_spec, bad.replace('"Llama"', '"llama"'), "P647", ("dynamo",))


def test_p620_refuses_vllms_own_multinode_launch(check_spec):
    """vLLM's multiprocessing launch over two nodes has no place in a graph whose operator starts
    multinode vLLM workers over Ray; its help, executor = ray, compiles."""
    bad = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM, "dynamo": ""})
    d = assert_fires(check_spec, bad, "P620", "target vllm", target="dynamo", targets=("dynamo",))
    assert "executor = ray" in d.help and "VllmWorker worker over 2 nodes" in d.message
    good = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM + "; executor = ray", "dynamo": ""})
    r = assert_quiet(check_spec, good, "P620", ("dynamo",))
    assert not r.errors


def test_p620_refuses_a_word_that_needs_the_scheduler(check_spec, monkeypatch):
    """What differs between a multinode worker's pods, or only a scheduler's variable gives
    (SGLang's node rank and first node's address, were the operator not to add them), is refused,
    never dropped: a Dynamo worker's pods all start from one command."""
    from parc.model import targets

    text = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"sglang": VLLM, "dynamo": "engine = sglang"})
    assert_quiet(check_spec, text, "P620", ("dynamo",))
    monkeypatch.setitem(targets.spec("dynamo")["engines"]["sglang"], "operator", {})
    d = assert_fires(check_spec, text, "P620", "target sglang", target="dynamo", targets=("dynamo",))
    assert "its nodes' commands differ beyond the options the operator writes" in d.message


def test_p620_refuses_one_half_of_a_disaggregated_deployment(check_spec):
    target = {"sglang": VLLM + "; disaggregation = decode; transfer_backend = nixl", "dynamo": "engine = sglang"}
    bad = spec(mesh="tp = 8", serve=SERVE, target=target)
    d = assert_fires(check_spec, bad, "P620", "disaggregation", target="dynamo", targets=("dynamo",))
    assert "a decode server alone" in d.message and "no prefill worker" in d.message
    assert_quiet(check_spec, bad.replace("  disaggregation = decode\n", ""), "P620", ("dynamo",))
