"""The dynamo target: how a plan becomes Dynamo's frontend and the engine's worker components, the
worker command made of the engine target's own, and its own rules (P646, P647, P710-P712), each
firing on one spec and quiet on the same spec made valid.
(tests/test_dynamo_judge.py has the CRD's schema, the operator and the engines judge the graphs.)"""
from __future__ import annotations

import pytest
import yaml

from support.specs import assert_fires, assert_quiet, spec

VLLM = 'model = "m"'
SERVE = "max_model_len = 4096"
MOE = "from = mixtral_8x7b"
POOLS = SERVE + "; kv_transfer = nixl; prefill { instances = 2 }; decode { dp = 1 }"


def graph(r) -> dict:
    from parc.targets import dynamo

    return list(yaml.safe_load_all(next(f.text for f in dynamo.build(r.plan) if f.path == "dgd.yaml")))[-1]


def workers(g: dict) -> dict:
    return {k: v for k, v in g["spec"]["services"].items() if k != "Frontend"}


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


@pytest.mark.parametrize("kw, extra, want", GRAPHS)
def test_components_are_the_engines_runs(check_spec, kw, extra, want):
    kw = {"serve": SERVE, **kw}
    r = check_spec(spec(target={"vllm": VLLM + extra, "dynamo": ""}, **kw), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["apiVersion"] == "nvidia.com/v1alpha1" and g["spec"]["backendFramework"] == "vllm"
    front = g["spec"]["services"]["Frontend"]
    assert front["componentType"] == "frontend" and front["extraPodSpec"]["mainContainer"]["command"] == [
        "python3", "-m", "dynamo.frontend"]
    got = {k: (w["replicas"], (w.get("multinode") or {}).get("nodeCount"), int(w["resources"]["limits"]["gpu"]))
           for k, w in workers(g).items()}
    assert got == want


def test_the_worker_runs_the_vllm_targets_options_through_dynamo_vllm(check_spec):
    """The worker's args are the vllm target's own options for the run, the model as --model, less
    the server's --port (the frontend serves the API); a pool's worker names its role."""
    from parc.targets import engines

    r = check_spec(spec(mesh="tp = 2", serve=POOLS, target={"vllm": VLLM, "dynamo": ""}), ("dynamo",))
    g = graph(r)
    runs = engines.launch(r.plan, "dynamo").runs
    for run, (key, w) in zip(runs, workers(g).items()):
        c = w["extraPodSpec"]["mainContainer"]
        serve = [str(x) for x in run.leader[0]]
        i = serve.index("--port")
        assert c["command"] == ["python3"]
        assert c["args"] == ["-m", "dynamo.vllm", "--model", "m", *serve[3:i], *serve[i + 2:],
                             "--disaggregation-mode", run.pool]
        assert "PARC_PORT" not in {e["name"] for e in w.get("envs", [])}


def test_a_multinode_vllm_worker_is_one_shell_line_for_the_operators_ray_start(check_spec):
    """The operator joins a multinode vLLM worker's args behind `ray start --head ... &&`, so parc
    writes them as one shell line, each word quoted for the shell."""
    import shlex

    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"vllm": VLLM + '; executor = ray; extra_args = ["--hf-overrides", "{\\"a\\": 1}"]',
                                "dynamo": ""}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    c = workers(graph(r))["VllmWorker"]["extraPodSpec"]["mainContainer"]
    assert c["command"] == ["/bin/sh", "-c"]
    [line] = c["args"]
    words = shlex.split(line)
    assert words[:5] == ["python3", "-m", "dynamo.vllm", "--model", "m"]
    assert words[words.index("--hf-overrides") + 1] == '{"a": 1}'
    assert "--distributed-executor-backend" in words and "--port" not in words


def test_sglang_multinode_flags_are_left_to_the_operator(check_spec):
    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"sglang": VLLM, "dynamo": "engine = sglang"}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["spec"]["backendFramework"] == "sglang"
    [(key, w)] = workers(g).items()
    args = w["extraPodSpec"]["mainContainer"]["args"]
    assert key == "SGLangWorker" and w["multinode"] == {"nodeCount": 2}
    assert args[:4] == ["-m", "dynamo.sglang", "--model-path", "m"]
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(args)
    assert args[args.index("--tp-size") + 1] == "8" and args[args.index("--pp-size") + 1] == "2"


def test_settings_reach_the_graph(check_spec):
    r = check_spec(spec(serve=SERVE, mesh="tp = 8", target={
        "vllm": VLLM, "dynamo": 'name = "llm"; namespace = "serving"; secret = "hf-token"; port = 8080; cpu = 32; '
                                'memory = 256GiB; shm_size = 32GiB; image = "registry.local/dynamo:1"'}), ("dynamo",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = graph(r)
    assert g["metadata"] == {"name": "llm", "namespace": "serving"}
    front = g["spec"]["services"]["Frontend"]
    assert front["envFromSecret"] == "hf-token"
    assert front["extraPodSpec"]["mainContainer"]["command"][-2:] == ["--http-port", "8080"]
    w = workers(g)["VllmWorker"]
    assert w["dynamoNamespace"] == "llm" and w["envFromSecret"] == "hf-token"
    assert w["resources"]["requests"] == {"gpu": "8", "cpu": "32", "memory": "256Gi"}
    assert w["sharedMemory"] == {"size": "32Gi"}
    assert w["extraPodSpec"]["mainContainer"]["image"] == "registry.local/dynamo:1"


def test_output_is_byte_identical(check_spec):
    from parc.targets import dynamo

    r = check_spec(spec(mesh="tp = 2", serve=POOLS, target={"vllm": VLLM, "dynamo": ""}), ("dynamo",))
    assert [f.text for f in dynamo.build(r.plan)] == [f.text for f in dynamo.build(r.plan)]


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
