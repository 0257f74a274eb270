"""The serving rules of issue #15 for vLLM: decode context parallel, EPLB, the all-to-all backend,
the KV connector of a disaggregated plan (P121-P126 for both engines, P666-P673 vLLM's own), each
with a spec that trips it and one that passes, and the flags the vllm target emits for them.
vLLM's own verdict on the same plans is tests/test_vllm_judge.py's."""
from __future__ import annotations

import json

import pytest

from support.specs import spec

VLLM = {"vllm": 'model = "m"'}
DS = "from = deepseek_v3; dtype = fp8"        # MLA, 256 routed experts
L70 = "from = llama3_70b"                     # 64 query heads, 8 KV heads
W48 = "from = llama3_8b; heads = 48; kv_heads = 12; hidden = 6144; ffn_hidden = 12288"


def _pd(prefill: str, decode: str, kv: str = "nixl", model: str = DS, nodes: int = 4) -> str:
    """A disaggregated DeepSeek-V3 spec: two pools inside serve, 8 GPUs a node."""
    base = spec(model, nodes=nodes, gpn=8, mesh="tp = 8", serve="max_model_len = 4096", target=VLLM)
    return base.replace("serve {\n", f"serve {{\n  kv_transfer = {kv}\n  prefill {{ {prefill} }}\n"
                                     f"  decode {{ {decode} }}\n")


CASES = [
    # P121: dcp 3 does not divide tp 8; dcp 2 does
    ("P121", spec(L70, mesh="tp = 8; dcp = 3", serve="max_model_len = 4096"),
     spec(DS, mesh="tp = 8; ep = 8; dcp = 2", serve="max_model_len = 4096")),
    # P122: tp 16 over 8 KV heads holds each head on 16 / 8 = 2 GPUs: dcp 4 > 2 gains nothing
    ("P122", spec(L70, nodes=2, mesh="tp = 16; dcp = 4", placement="tp on inter_node", serve="max_model_len = 4096"),
     spec(L70, nodes=2, mesh="tp = 16; dcp = 2", placement="tp on inter_node", serve="max_model_len = 4096")),
    # P123: EPLB with ep = 1
    ("P123", spec(DS, mesh="tp = 8", serve="max_model_len = 4096; eplb = true"),
     spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb = true")),
    # P124: redundant experts without EPLB
    ("P124", spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; redundant_experts = 8"),
     spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; redundant_experts = 8; eplb = true")),
    # P125 (vllm#52435): 256 experts over ep 3 -> 256 % 3 = 1; 256 + 32 = 288 = 3 x 96 divides
    ("P125", spec(DS, gpn=3, mesh="tp = 3; ep = 3", serve="max_model_len = 4096; eplb = true"),
     spec(DS, gpn=3, mesh="tp = 3; ep = 3", serve="max_model_len = 4096; eplb = true; redundant_experts = 32")),
    # P126: a window without EPLB
    ("P126", spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb_window = 500"),
     spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb_window = 500; eplb = true")),
    # P666: with cp 2 and tp 4, dcp must be 1, 2 or 8: dcp 4 is refused
    ("P666", spec(DS, mesh="cp = 2; tp = 4; ep = 8; dcp = 4", serve="max_model_len = 4096", target=VLLM),
     spec(DS, mesh="cp = 2; tp = 4; ep = 8; dcp = 8", serve="max_model_len = 4096", target=VLLM)),
    # P667: tp 8 does not exceed the 8 KV heads of Llama 3 70B
    ("P667", spec(L70, mesh="tp = 8; dcp = 2", serve="max_model_len = 4096", target=VLLM),
     spec(L70, nodes=2, mesh="tp = 16; dcp = 2", placement="tp on inter_node", serve="max_model_len = 4096",
          target=VLLM)),
    # P668: dp_attention on a dense model
    ("P668", spec(L70, mesh="dp = 2; tp = 4", serve="max_model_len = 4096; dp_attention = true", target=VLLM),
     spec(L70, mesh="dp = 2; tp = 4", serve="max_model_len = 4096", target=VLLM)),
    # P669: moonep before 0.31
    ("P669", spec(DS, mesh="dp = 8; ep = 8", serve="max_model_len = 4096",
                  target={"vllm": 'model = "m"; all2all_backend = moonep; version = "0.30"'}),
     spec(DS, mesh="dp = 8; ep = 8", serve="max_model_len = 4096",
          target={"vllm": 'model = "m"; all2all_backend = moonep; version = "0.31"'})),
    # P670: an all-to-all with dp = 1
    ("P670", spec(DS, mesh="tp = 8; ep = 8", serve="max_model_len = 4096",
                  target={"vllm": 'model = "m"; all2all_backend = deepep_low_latency'}),
     spec(DS, mesh="dp = 8; ep = 8", serve="max_model_len = 4096",
          target={"vllm": 'model = "m"; all2all_backend = deepep_low_latency'})),
    # P671: no P2P NCCL connector in vLLM 0.26 to 0.33
    ("P671", _pd("instances = 2; ep = 8", "ep = 8", kv="p2p_nccl", nodes=3),
     _pd("instances = 2; ep = 8", "ep = 8", kv="mooncake", nodes=3)),
    # P672: NixlConnector with dcp 2 of tp 8: dcp must be 1 or max(tp, cp) = 8
    ("P672", _pd("instances = 2; ep = 8", "ep = 8; dcp = 2", nodes=3),
     _pd("instances = 2; ep = 8", "ep = 8; dcp = 8", nodes=3)),
    # P673: prefill tp 4 and decode tp 6 do not divide one another (6 % 4 = 2); tp 4 and 8 do
    # (a dense model whose 48 heads, 12 KV heads and 12,288-wide MLP divide by 4, 6 and 8)
    ("P673", _pd("instances = 2; tp = 4", "tp = 6", model=W48, nodes=2),
     _pd("instances = 2; tp = 4", "tp = 8", model=W48, nodes=2)),
]


@pytest.mark.parametrize("code,bad,good", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_and_keeps_quiet(check_spec, code, bad, good):
    fired = check_spec(bad, ("vllm",))
    assert code in {d.code for d in fired.diagnostics}, [f"{d.code} {d.message}" for d in fired.diagnostics]
    quiet = check_spec(good, ("vllm",))
    assert code not in {d.code for d in quiet.diagnostics}, [f"{d.code} {d.message}" for d in quiet.diagnostics]


def test_eplb_message_gives_the_next_multiple(check_spec):
    r = check_spec(CASES[4][1], ("vllm",))
    d = next(d for d in r.errors if d.code == "P125")
    # 256 + 0 = 256 over ep 3: the next multiple of 3 is 258 = 3 x 86, so 2 redundant experts
    assert "256 do not divide over ep = 3" in d.message and "redundant_experts = 2 (258 = 3 × 86)" in d.help
    assert "refuses it only when it builds the model" in d.message


def test_dcp_eplb_all2all_flags(check_spec):
    from parc.targets.vllm import serve_lines

    r = check_spec(spec(DS, mesh="dp = 8; ep = 8; dcp = 1", serve="max_model_len = 4096; eplb = true; "
                        "redundant_experts = 8; eplb_interval = 2000",
                        target={"vllm": 'model = "m"; all2all_backend = deepep_high_throughput'}), ("vllm",))
    words = [str(w) for ln in serve_lines(r.plan, None) for w in ln]
    assert "--decode-context-parallel-size" not in words
    i = words.index("--eplb-config")
    # only the keys the spec sets; vLLM's EPLBConfig defaults window_size to 1000
    assert json.loads(words[i + 1]) == {"step_interval": 2000, "num_redundant_experts": 8}
    assert "--enable-eplb" in words and words[words.index("--all2all-backend") + 1] == "deepep_high_throughput"
    r = check_spec(spec(L70, nodes=2, mesh="tp = 16; dcp = 2", placement="tp on inter_node",
                        serve="max_model_len = 4096", target=VLLM), ("vllm",))
    words = [str(w) for ln in serve_lines(r.plan, 0) for w in ln]
    assert words[words.index("--decode-context-parallel-size") + 1] == "2"


def test_pooled_plan_compiles_one_launch_per_pool(check_spec):
    from parc.targets.vllm import build

    r = check_spec(_pd("instances = 4; tp = 4; ep = 4", "tp = 8\n  ep = 8", kv="mooncake", model="from = mixtral_8x7b",
                       nodes=3), ("vllm",))
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    files = {f.path: f.text for f in build(r.plan)}
    assert sorted(files) == ["decode-serve.sh", "plan.json", "prefill-serve.sh", "proxy.sh"]
    # 4 prefill instances of 4 GPUs: two share a node, each its own GPUs and port
    pre = files["prefill-serve.sh"]
    assert "gpus=(0,1,2,3 4,5,6,7)" in pre and "port=$(( 8100 + slot ))" in pre
    assert '\'{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}\'' in pre
    assert '"kv_role":"kv_consumer"' in files["decode-serve.sh"]
    # the proxy's ports: instance i of the prefill pool listens on 8100 + i % 2
    assert "--prefiller-ports 8100 8101 8100 8101" in files["proxy.sh"]
    assert "--decoder-ports 8200" in files["proxy.sh"]
