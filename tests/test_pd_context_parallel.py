"""Context parallelism in a disaggregated plan, as each engine takes it: vLLM's NixlConnector runs
prefill context parallelism only as kv_producer (0.29 and later: the launch writes it for a
prefill pool, P629 refuses a decode pool), SGLang's decode server takes decode context parallelism
only over an MLA KV pool (P649). Each rule fires on the release that refuses and keeps quiet on
the plan made valid; the engines' own verdicts are tests/test_startup_judge.py's."""
from __future__ import annotations

from support.serving_specs import pd
from support.specs import assert_fires, assert_quiet

MLA, GQA = "from = deepseek_v2_lite", "from = qwen3_30b_a3b"
VL = 'target vllm {\n  model = "m"\n}'
SG = 'target sglang {\n  model = "m"\n}'


def _vllm(prefill: str, decode: str, version: str = "0.33") -> str:
    return pd(prefill, decode, model=MLA, nodes=2).replace(VL, VL.replace('"m"', f'"m"\n  version = "{version}"'))


def test_p629_fires_on_a_decode_pool_with_prefill_context_parallel(check_spec):
    text = _vllm("tp = 8", "cp = 2; tp = 4")
    d = assert_fires(check_spec, text, "P629", "decode { cp = 2", target="vllm", targets=("vllm",))
    assert "kv_producer only" in d.message and "cp = 1" in d.help
    assert_fires(check_spec, _vllm("tp = 8", "cp = 2; tp = 4", "0.29"), "P629", "decode { cp = 2", target="vllm",
                 targets=("vllm",))


def test_p629_quiet_before_0_29_on_a_prefill_pool_and_without_nixl(check_spec):
    assert_quiet(check_spec, _vllm("tp = 8", "cp = 2; tp = 4", "0.28"), "P629", ("vllm",))
    assert_quiet(check_spec, _vllm("cp = 2; tp = 4", "tp = 8"), "P629", ("vllm",))
    assert_quiet(check_spec, _vllm("tp = 8", "tp = 8"), "P629", ("vllm",))
    mooncake = _vllm("tp = 8", "cp = 2; tp = 4").replace("kv_transfer = nixl", "kv_transfer = mooncake")
    assert_quiet(check_spec, mooncake, "P629", ("vllm",))


def test_prefill_pool_with_context_parallel_is_the_producer(check_spec):
    import json

    from parc.targets.vllm import build

    r = check_spec(_vllm("cp = 2; tp = 4", "tp = 8"), ("vllm",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    files = {f.path: f.text for f in build(r.plan)}

    def role(path):
        text = files[path]
        at = text.index("--kv-transfer-config")
        return json.loads(text[at:].split("'")[1])["kv_role"]

    assert (role("prefill-serve.sh"), role("decode-serve.sh")) == ("kv_producer", "kv_both")
    # without prefill context parallelism both sides keep kv_both, as vLLM's NixlConnector guide runs it
    files = {f.path: f.text for f in build(check_spec(_vllm("tp = 8", "tp = 8"), ("vllm",)).plan)}
    assert (role("prefill-serve.sh"), role("decode-serve.sh")) == ("kv_both", "kv_both")


def _sglang(model: str, decode: str, extra: str = "") -> str:
    return pd("tp = 8", decode, model=model, nodes=2).replace(VL, SG.replace('"m"', f'"m"{extra}'))


def test_p649_fires_on_decode_dcp_without_mla(check_spec):
    d = assert_fires(check_spec, _sglang(GQA, "tp = 8; dcp = 2"), "P649", "decode { tp = 8; dcp = 2",
                     target="sglang", targets=("sglang",))
    assert "MLA or hybrid-MLA" in d.message and "remove `dcp`" in d.help


def test_p649_quiet_with_mla_or_without_dcp(check_spec):
    assert_quiet(check_spec, _sglang(MLA, "tp = 8; dcp = 2"), "P649", ("sglang",))
    assert_quiet(check_spec, _sglang(GQA, "tp = 8"), "P649", ("sglang",))


def test_p649_fires_on_a_decode_side_compiled_alone(check_spec):
    from support.serving_specs import spec

    side = spec(GQA, mesh="tp = 8; dcp = 2", serve="max_model_len = 4096",
                target={"sglang": 'model = "m"; disaggregation = decode'})
    assert_fires(check_spec, side, "P649", "dcp = 2", target="sglang", targets=("sglang",))
    prefill = side.replace("disaggregation = decode", "disaggregation = prefill")
    assert_quiet(check_spec, prefill, "P649", ("sglang",))
