"""The kserve target: how a plan becomes an LLMInferenceService's workloads, the vllm target's
options handed to KServe's presets, and its own rules (P713-P716), each firing on one spec and
quiet on the same spec made valid. (tests/test_kserve_judge.py has the CRD's schema, KServe's
webhook and presets and vLLM judge the services.)"""
from __future__ import annotations

import shlex

import yaml

from support.specs import assert_fires, assert_quiet, spec

VLLM = 'model = "m"'
SERVE = "max_model_len = 4096"
MOE = "from = mixtral_8x7b"


def service(r) -> dict:
    from parc.targets import kserve

    return list(yaml.safe_load_all(next(f.text for f in kserve.build(r.plan) if f.path == "llmisvc.yaml")))[-1]


def additional(pod: dict) -> list[str]:
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    return shlex.split(env["VLLM_ADDITIONAL_ARGS"])


def test_a_single_node_replica_hands_every_option_but_the_port(check_spec):
    from parc.targets import engines

    r = check_spec(spec(mesh="dp = 2; tp = 4", serve=SERVE, target={"vllm": VLLM, "kserve": ""}), ("kserve",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    s = service(r)["spec"]
    assert s["model"] == {"uri": "hf://m", "name": "m"} and s["replicas"] == 2 and "parallelism" not in s
    assert "worker" not in s and s["template"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    [run] = engines.launch(r.plan, "kserve").runs
    words = [str(w) for w in run.leader[0][3:]]
    i = words.index("--port")
    assert additional(s["template"]) == words[:i] + words[i + 2:]


def test_one_engine_over_nodes_is_kserves_data_parallel_preset(check_spec):
    r = check_spec(spec(model=MOE, nodes=2, mesh="dp = 8; tp = 2; ep = 16", serve=SERVE,
                        target={"vllm": VLLM, "kserve": ""}), ("kserve",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    s = service(r)["spec"]
    assert s["parallelism"] == {"tensor": 2, "data": 8, "dataLocal": 4, "dataRPCPort": 13345, "expert": True}
    assert s["replicas"] == 1 and additional(s["template"]) == additional(s["worker"])
    assert not {"--data-parallel-size", "--headless", "--tensor-parallel-size"} & set(additional(s["worker"]))


def test_pools_are_the_service_and_its_prefill(check_spec):
    r = check_spec(spec(mesh="tp = 2", serve=SERVE + "; kv_transfer = nixl; prefill { instances = 2 }; decode { tp = 4 }",
                        target={"vllm": VLLM, "kserve": ""}), ("kserve",))
    s = service(r)["spec"]
    assert (s["replicas"], s["prefill"]["replicas"]) == (1, 2)
    assert "--kv-transfer-config" in additional(s["template"]) and "--kv-transfer-config" in additional(
        s["prefill"]["template"])
    names = [e["name"] for e in s["prefill"]["template"]["containers"][0]["env"]]
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" in names and "PARC_PORT" not in names


def test_output_is_byte_identical(check_spec):
    from parc.targets import kserve

    r = check_spec(spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM, "kserve": ""}), ("kserve",))
    assert [f.text for f in kserve.build(r.plan)] == [f.text for f in kserve.build(r.plan)]


def test_p646_fires_on_training(check_spec):
    d = assert_fires(check_spec, spec(target={"kserve": ""}), "P646", "target kserve", target="kserve",
                     targets=("kserve",))
    assert d.message.startswith("KServe serves a model")
    assert_quiet(check_spec, spec(serve=SERVE, target={"vllm": VLLM, "kserve": ""}), "P646", ("kserve",))


def test_p647_fires_on_a_bad_name(check_spec):
    bad = spec(serve=SERVE, target={"vllm": VLLM, "kserve": 'name = "Llama"'})
    assert_fires(check_spec, bad, "P647", "name", target="kserve", targets=("kserve",))
    assert_quiet(check_spec, bad.replace('"Llama"', '"llama"'), "P647", ("kserve",))


def test_p620_refuses_tensor_parallelism_across_nodes(check_spec):
    bad = spec(nodes=2, mesh="tp = 16", serve=SERVE, target={"vllm": VLLM, "kserve": ""})
    d = assert_fires(check_spec, bad, "P620", "mesh", target="kserve", targets=("kserve",))
    assert d.message.startswith("KServe cannot express each replica over 2 nodes")
    good = spec(nodes=2, mesh="dp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM, "kserve": ""})
    assert not assert_quiet(check_spec, good, "P620", ("kserve",)).errors


def test_p710_fires_on_a_pipeline_over_nodes_on_the_release_that_has_the_defect(check_spec):
    bad = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM, "kserve": ""})
    d = assert_fires(check_spec, bad, "P710", "pp = 2", target="kserve", targets=("kserve",))
    assert "kserve-config-llm-worker-pipeline-parallel" in d.message and "kserve#5047" in d.message
    assert "no release parc knows" in d.message
    assert_quiet(check_spec, bad, "P620", ("kserve",))
    assert_quiet(check_spec, bad.replace("pp = 2", "dp = 2"), "P710", ("kserve",))
