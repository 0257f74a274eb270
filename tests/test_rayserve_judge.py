"""Ray Serve judges parc's Ray Serve LLM applications: every `serve.yaml` parc emits for the
examples and test specs goes through Ray Serve's config schema (ServeDeploySchema), its
application's builder from ray.serve.llm, imported and called as `serve run` does (its own
argument models: LLMServingArgs, PDServingArgs, DPOpenAiServingArgs and each LLMConfig), and each
LLMConfig as its server turns it into vLLM's engine configuration (VLLMEngineConfig, which refuses
a keyword argument that is not an EngineArgs field); the judge reports the GPUs of each engine, its
placement and the deployments the builder bound, which must be the plan's. vLLM's own EngineArgs
and ParallelConfig then judge each engine_kwargs (the vLLM judge's environment), with the plan's
degrees. The Ray environment is tests/judges/rayserve_env.sh's (ray 2.60.0 with the vLLM it pins);
the tests run when PARC_JUDGES asks for them (tests/support/judges.py). PARC_RAYSERVE_PYTHON names
an existing environment's python instead."""
from __future__ import annotations

import json

import pytest

from backends_support import accepted_cases
from support import judges

MARK = "@@rayserve-judge "


@pytest.fixture(scope="module")
def ray_python(tmp_path_factory):
    proc = judges.start("rayserve", "PARC_RAYSERVE_PYTHON", tmp_path_factory.mktemp("judge") / "stderr", timeout=1800)
    yield proc
    judges.stop(proc)


@pytest.fixture(scope="module")
def vllm_python(tmp_path_factory):
    proc = judges.start("vllm", "PARC_VLLM_PYTHON", tmp_path_factory.mktemp("vllm-judge") / "stderr")
    yield proc
    judges.stop(proc)


def cases():
    """(spec, plan as JSON, serve.yaml) for every example and test spec parc compiles for rayserve."""
    out = []
    for spec, t, files in accepted_cases():
        if t == "rayserve":
            by = {f.path: f.text for f in files}
            out.append((spec, json.loads(by["plan.json"]), by["serve.yaml"]))
    return out


def engines(plan: dict):
    """(pool or None, its mesh, instances) of each LLMConfig the plan needs."""
    if plan.get("pools"):
        return [(p["name"], p["mesh"], p["instances"]) for p in plan["pools"]]
    return [(None, plan["mesh"], 1)]


def one_engine(plan: dict, m: dict) -> bool:
    """Expert parallelism over the data-parallel ranks: one vLLM engine of dp ranks."""
    return plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1


def test_ray_accepts_what_parc_emits_with_the_plans_degrees(ray_python):
    found = cases()
    names = {spec for spec, *_ in found}
    # the two examples the target is for: a dense one and the prefill/decode one
    assert {"examples/llama3-70b-serve.par", "examples/deepseek-v3-pd.par"} <= names and len(found) >= 8
    for (spec, plan, _), v in zip(found, judges.ask(ray_python, MARK, [text for *_, text in found])):
        assert v["ok"], f"{spec}: {v.get('stage')}: {v.get('error')}"
        [app] = v["applications"]
        deps = {name.split(":")[0]: (replicas, bundles) for name, replicas, bundles, _ in app["deployments"]}
        for pool, m, instances in engines(plan):
            e = app["engines"][pool or ""]
            gpus = m["tp"] * m["pp"] * m["cp"]
            kw = e["engine_kwargs"]
            assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"]) == (m["tp"], m["pp"]), spec
            assert kw.get("prefill_context_parallel_size", 1) == m["cp"], spec
            assert len(e["bundles"]) == gpus and all(b["GPU"] == 1 for b in e["bundles"]), spec
            assert e["strategy"] == ("STRICT_PACK" if gpus <= plan["cluster"]["gpus_per_node"] else "PACK"), spec
            assert e["model_id"] == plan["targets"]["vllm"]["settings"]["model"], spec
            dp = m["dp"] if one_engine(plan, m) else 1
            assert kw.get("data_parallel_size", 1) == dp and kw.get("enable_expert_parallel", False) == (m["ep"] > 1), spec
            # the deployment the builder bound: a Serve replica per engine, or per data-parallel rank
            want = (instances if pool else (1 if one_engine(plan, m) else m["dp"])) * dp
            key = {"prefill": "Prefill", "decode": "Decode", None: next(k for k in deps if k != "OpenAiIngress")}[pool]
            assert deps[key] == (want, gpus), (spec, pool, deps)
            if pool:
                assert kw["kv_transfer_config"]["kv_connector"] == "NixlConnector", spec


def test_the_judge_refuses_what_ray_refuses(ray_python):
    """The judge refuses wrong files at each stage, so an accepting verdict means something: a
    misspelt application field (Serve's schema), an LLMConfig field Ray does not have, P/D without
    a KV connector (the builder's models) and an engine keyword argument that is no EngineArgs
    field of the environment's vLLM (the builder's server options, VLLMEngineConfig)."""
    import copy

    import yaml

    spec, plan, text = next(c for c in cases() if c[0] == "examples/deepseek-v3-pd.par")
    doc = yaml.safe_load(text)

    def edited(fn):
        d = copy.deepcopy(doc)
        fn(d["applications"][0])
        return yaml.safe_dump(d)

    bad = [
        edited(lambda a: a.update(import_pth=a.pop("import_path"))),
        edited(lambda a: a["args"]["prefill_config"].update(tensor_parallel_size=8)),
        edited(lambda a: a["args"]["decode_config"]["engine_kwargs"].pop("kv_transfer_config")),
        edited(lambda a: a["args"]["prefill_config"]["engine_kwargs"].update(tensor_paralel_size=8)),
    ]
    got = judges.ask(ray_python, MARK, [text] + bad)
    assert got[0]["ok"], got[0]
    assert [v.get("stage") for v in got[1:]] == ["schema", "builder", "builder", "builder"], got
    assert "kv_transfer_config is required" in got[3]["error"] and "tensor_paralel_size" in got[4]["error"]


def test_vllm_accepts_the_engine_kwargs_with_the_plans_degrees(vllm_python):
    """Each engine_kwargs as vLLM's own EngineArgs takes them (AsyncEngineArgs(**engine_kwargs), as
    Ray Serve LLM builds the engine) and its ParallelConfig checks, with the plan's degrees."""
    import yaml

    items, want = [], []
    for spec, plan, text in cases():
        args = yaml.safe_load(text)["applications"][0]["args"]
        configs = ({"prefill": args["prefill_config"], "decode": args["decode_config"]} if "prefill_config" in args
                   else {None: args.get("llm_config") or args["llm_configs"][0]})
        for pool, m, _ in engines(plan):
            c = configs[pool]
            items.append({"model": c["model_loading_config"]["model_id"], "kwargs": c["engine_kwargs"]})
            want.append((spec, pool, m, one_engine(plan, m)))
    for (spec, pool, m, one), got in zip(want, judges.ask(vllm_python, "@@vllm-judge ", items)):
        assert got["ok"], f"{spec} {pool}: vLLM refuses the engine_kwargs: {got.get('error')}"
        assert (got["tp"], got["pp"], got["pcp"], got["dp"]) == (m["tp"], m["pp"], m["cp"], m["dp"] if one else 1), spec
        assert got["ep"] == (m["ep"] > 1) and got["dcp"] == m.get("dcp", 1), spec
        assert (got["kv_transfer"] == "NixlConnector") == (pool is not None), spec
