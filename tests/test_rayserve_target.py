"""The rayserve target: how a plan becomes a Ray Serve LLM application (an LLMConfig per kind of
instance, the builder the plan needs, the engine's options as engine_kwargs, its placement), and
the serving orchestrators' P646 and its own rules (P723, P724), each firing on one spec and quiet on the same spec made valid.
(tests/test_rayserve_judge.py has Ray's own config models and vLLM's EngineArgs judge the files.)"""
from __future__ import annotations

from pathlib import Path

import yaml

from support.specs import assert_fires, assert_quiet, spec

ROOT = Path(__file__).resolve().parent.parent
VLLM = 'model = "org/m"'
SERVE = "max_model_len = 4096"


def app(r) -> dict:
    from parc.targets import rayserve

    [a] = yaml.safe_load(next(f.text for f in rayserve.build(r.plan) if f.path == "serve.yaml"))["applications"]
    return a


def example(check_spec, name: str):
    r = check_spec((ROOT / "examples" / name).read_text(), ("rayserve",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    return r


def test_a_dense_plan_is_one_llm_config_of_its_replicas(check_spec):
    """llama3-70b-serve: one engine of tp 4 on a node of 4 GPUs, one replica."""
    a = app(example(check_spec, "llama3-70b-serve.par"))
    assert a["import_path"] == "ray.serve.llm:build_openai_app"
    [c] = a["args"]["llm_configs"]
    assert c["model_loading_config"] == {"model_id": "meta-llama/Meta-Llama-3-70B-Instruct"}
    assert c["accelerator_type"] == "A100-80G"
    kw = c["engine_kwargs"]
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"]) == (4, 1) and "data_parallel_size" not in kw
    assert kw["max_model_len"] == 8192 and kw["gpu_memory_utilization"] == 0.9 and kw["max_num_seqs"] == 48
    assert c["placement_group_config"] == {"bundles": [{"GPU": 1}] * 4, "strategy": "STRICT_PACK"}
    assert c["deployment_config"] == {"num_replicas": 1}


def test_data_parallel_replicas_are_serve_replicas(check_spec):
    """dp 2 replicas of tp 4 without experts: independent engines, num_replicas 2."""
    r = check_spec(spec(mesh="dp = 2; tp = 4", serve=SERVE, target={"vllm": VLLM}), ("rayserve",))
    [c] = app(r)["args"]["llm_configs"]
    assert c["deployment_config"] == {"num_replicas": 2}
    assert "data_parallel_size" not in c["engine_kwargs"] and c["engine_kwargs"]["tensor_parallel_size"] == 4


def test_the_disaggregated_example_is_the_pd_builder(check_spec):
    """deepseek-v3-pd: prefill 2 instances of tp 8 (experts over 8), decode one engine of dp 2 ·
    tp 8 with experts over 16: the decode engine is data parallel (its server a replica per rank)."""
    a = app(example(check_spec, "deepseek-v3-pd.par"))
    assert a["import_path"] == "ray.serve.llm:build_pd_openai_app"
    p, d = a["args"]["prefill_config"], a["args"]["decode_config"]
    assert p["deployment_config"] == {"num_replicas": 2} and d["deployment_config"] == {"num_replicas": 1}
    assert p["engine_kwargs"]["tensor_parallel_size"] == 8 and "data_parallel_size" not in p["engine_kwargs"]
    assert d["engine_kwargs"]["data_parallel_size"] == 2 and d["engine_kwargs"]["enable_expert_parallel"] is True
    for c in (p, d):
        assert c["engine_kwargs"]["kv_transfer_config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert len(c["placement_group_config"]["bundles"]) == 8 and c["accelerator_type"] == "H200"


def test_one_engine_over_its_data_parallel_ranks_is_the_dp_builder(check_spec):
    a = app(example(check_spec, "deepseek-v3-wide-ep.par"))
    assert a["import_path"] == "ray.serve.llm:build_dp_openai_app"
    kw = a["args"]["llm_config"]["engine_kwargs"]
    assert kw["data_parallel_size"] > 1 and kw["enable_expert_parallel"] is True


def test_prefill_context_parallel_gpus_are_in_the_placement_group(check_spec):
    """Ray's own bundles count tp · pp GPUs; the engine has tp · pp · cp: parc writes them all."""
    r = check_spec((ROOT / "tests" / "data" / "specs" / "vllm-pcp.par").read_text(), ("rayserve",))
    [c] = app(r)["args"]["llm_configs"]
    m = r.plan.mesh
    assert m.cp > 1 and c["engine_kwargs"]["prefill_context_parallel_size"] == m.cp
    assert len(c["placement_group_config"]["bundles"]) == m.tp * m.pp * m.cp


def test_the_engine_port_is_the_serve_port_and_output_is_stable(check_spec):
    from parc.targets import rayserve

    r = check_spec(spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM + "; port = 9000"}), ("rayserve",))
    files = rayserve.build(r.plan)
    assert yaml.safe_load(files[0].text)["http_options"] == {"port": 9000}
    assert files == rayserve.build(r.plan)


# ------------------------------------------------------------------------------------ rules

def test_p646_rayserve_serves_only(check_spec):
    assert_fires(check_spec, spec(target={"rayserve": 'name = "x"'}), "P646", "target rayserve", target="rayserve")
    assert_quiet(check_spec, spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM, "rayserve": 'name = "x"'}),
                 "P646")


def test_p723_extra_args_have_no_place_in_engine_kwargs(check_spec):
    bad = spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM + '; extra_args = ["--enforce-eager"]'})
    d = assert_fires(check_spec, bad, "P723", "extra_args", target="rayserve", targets=("rayserve",))
    assert "engine_kwargs" in d.message
    assert_quiet(check_spec, spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM}), "P723", ("rayserve",))
    # the vllm target itself passes them: quiet there
    assert_quiet(check_spec, bad, "P723", ("vllm",))


def test_p724_ray_serve_runs_vllm_on_ray(check_spec):
    bad = spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM + '; executor = mp'})
    assert_fires(check_spec, bad, "P724", "executor", target="rayserve", targets=("rayserve",))
    assert_quiet(check_spec, bad.replace('= mp', '= ray'), "P724", ("rayserve",))
