"""Kubernetes, KServe and vLLM judge parc's LLMInferenceServices: every `llmisvc.yaml` parc emits
for the examples, the test specs and the plans below goes through the CRD's OpenAPI schema
(tests/data/kserve, v1alpha2; unknown fields refused), KServe's webhook checks on parallelism,
kubernetes-validate for the pod templates and the choice of KServe's preset for each workload
(tests/judges/kserve_judge.py); each pod's `vllm serve` argv, as the preset writes it with the
service's fields and VLLM_ADDITIONAL_ARGS, goes through vLLM's own parser
(tests/judges/vllm_judge.py) with the plan's degrees. The tests run when PARC_JUDGES asks for
them (tests/support/judges.py; .ci/run sets it); PARC_KSERVE_PYTHON names an existing
environment's python instead."""
from __future__ import annotations

from pathlib import Path

import pytest

from support import judges
from support.orchestrators import engine_judge, judged

ROOT = Path(__file__).resolve().parent.parent
DS = (ROOT / "examples" / "deepseek-v3-pd.par").read_text()
DENSE = (ROOT / "examples" / "llama3-70b-serve.par").read_text()

# (name, spec text): the DeepSeek-V3 prefill/decode example and a dense example
PLANS = [
    ("deepseek-v3-pd", DS.replace("target sglang { }", "target kserve { }")),
    ("llama3-70b", DENSE + '\ntarget kserve { name = "llama"; namespace = "serving"; uri = "pvc://models/llama" }\n'),
]


kserve_python, judge, cases = judged("kserve", "llmisvc.yaml", PLANS)
vllm_python = engine_judge("vllm")


def meshes(plan: dict) -> list[tuple[str | None, dict, int]]:
    """(pool, its mesh, its instances) of each workload, the decode (or only) one first."""
    if plan.get("pools"):
        by = {p["name"]: p for p in plan["pools"]}
        return [(n, by[n]["mesh"], by[n]["instances"]) for n in ("decode", "prefill")]
    return [(None, plan["mesh"], 1)]


def check_service(name: str, plan: dict, v: dict) -> list[tuple]:
    """The service's workloads carry the plan's GPUs, replicas and model; returns each pod's
    (pool, mesh, workload, pod) for vLLM's parser."""
    assert v["ok"], f"{name}: {v.get('stage')}: {v.get('errors')}"
    model = plan["targets"]["vllm"]["settings"]["model"]
    assert v["model"]["name"] == model and v["router"] == {"scheduler": {}, "route": {}, "gateway": {}}, name
    kserve = plan["targets"].get("kserve", {}).get("settings", {})
    assert v["model"]["uri"] == kserve.get("uri", f"hf://{model}"), name
    gpn, out, total = plan["cluster"]["gpus_per_node"], [], 0
    pools = meshes(plan)
    assert [w["role"] for w in v["workloads"]] == [p if plan.get("pools") else None for p, _, _ in pools], name
    for (pool, m, instances), w in zip(pools, v["workloads"]):
        assert w["gpus"] == w["gpus_request"] and (w["size"] == 1 or w["gpus"] == gpn), name
        assert w["plan"] == v["config_map"] == v["name"] + "-plan", name
        total += w["replicas"] * w["size"] * w["gpus"]
        for p in w["pods"]:
            assert p["argv"][:4] == ["/mnt/models", "--served-model-name", model, p["argv"][3]], name
            assert ("VLLM_NIXL_SIDE_CHANNEL_HOST" in p["env"]) == bool(pool), name
            out.append((pool, m, w, p))
    assert total == sum(i * m["tp"] * m["pp"] * m["cp"] * m["dp"] for _, m, i in pools), name
    return out


def test_kubernetes_and_kserve_accept_what_parc_emits(kserve_python, check_spec):
    found = cases(check_spec)
    assert {"deepseek-v3-pd", "llama3-70b"} <= {n for n, *_ in found} and len(found) >= 6
    for (name, plan, _), v in zip(found, judge(kserve_python, [t for *_, t in found])):
        check_service(name, plan, v)


def test_the_judge_refuses_what_kserve_refuses(kserve_python, check_spec):
    """A misspelt field (the CRD's structural schema), a worker without parallelism and data
    without dataLocal (KServe's webhook), a pipeline over a worker (the preset KServe does not
    ship, kserve#5047), an unknown container field (kubernetes-validate)."""
    import copy

    import yaml

    [(_, _, text)] = [c for c in cases(check_spec) if c[0] == "deepseek-v3-pd"]
    cm, svc = yaml.safe_load_all(text)

    def edited(fn):
        d = copy.deepcopy(svc)
        fn(d["spec"])
        return yaml.safe_dump_all([cm, d])

    bad = [
        edited(lambda s: s.update(replica=1)),
        edited(lambda s: s.pop("parallelism")),
        edited(lambda s: s["parallelism"].pop("dataLocal")),
        edited(lambda s: s.update(parallelism={"pipeline": 2, "tensor": 8})),
        edited(lambda s: s["template"]["containers"][0].update(commands=["x"])),
    ]
    got = judge(kserve_python, [text, *bad])
    assert got[0]["ok"], got[0]
    assert [g.get("stage") for g in got[1:]] == ["schema", "webhook", "webhook", "config", "built-in objects"], got
    assert "kserve-config-llm-decode-worker-pipeline-parallel" in got[4]["errors"][0]


@pytest.mark.vllm
def test_vllm_accepts_what_the_presets_run(kserve_python, vllm_python, check_spec):
    """Each pod's `vllm serve` argv (the preset's words, then VLLM_ADDITIONAL_ARGS) through vLLM's
    own parser and ParallelConfig: tp, pp, pcp, the data parallelism of one engine over its pods
    (the size, a pod's local replicas, its first rank, headless after the leader), expert
    parallelism, NIXL between the pools."""
    found = cases(check_spec)
    items, where = [], []
    for (name, plan, _), v in zip(found, judge(kserve_python, [t for *_, t in found])):
        for pool, m, w, p in check_service(name, plan, v):
            items.append(p["argv"])
            where.append((name, plan, pool, m, w, p))
    for (name, plan, pool, m, w, p), got in zip(where, judges.ask(vllm_python, "@@vllm-judge ", items)):
        assert got["ok"], f"{name} {pool} pod {p['index']}: vLLM refuses {p['argv']}: {got.get('error')}"
        one_engine = plan["model"]["experts"] > 0 and m["ep"] > 1 and m["dp"] > 1
        assert (got["tp"], got["pp"], got["pcp"]) == (m["tp"], m["pp"], m["cp"]), name
        assert got["dp"] == (m["dp"] if one_engine else 1), name
        assert got["dp_local"] * w["size"] == got["dp"] or w["size"] == 1, name
        assert got["headless"] == (p["index"] > 0), name
        assert got["ep"] == (m["ep"] > 1), name
        assert (got["kv_transfer"] == "NixlConnector") == bool(pool), name
