"""The serving specs of issue #15's vLLM rules (P121-P126, P666-P673): for each rule a spec that
trips it and its neighbour that passes, shared by tests/test_serve_vllm_rules.py (parc's verdict)
and tests/test_vllm_judge.py (vLLM's own on the same plans)."""
from __future__ import annotations

from support.specs import spec

VLLM = {"vllm": 'model = "m"'}
DS = "from = deepseek_v3; dtype = fp8"        # MLA, 256 routed experts
L70 = "from = llama3_70b"                     # 64 query heads, 8 KV heads
W48 = "from = llama3_8b; heads = 48; kv_heads = 12; hidden = 6144; ffn_hidden = 12288"


def pd(prefill: str, decode: str, kv: str = "nixl", model: str = DS, nodes: int = 4) -> str:
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
    ("P671", pd("instances = 2; ep = 8", "ep = 8", kv="p2p_nccl", nodes=3),
     pd("instances = 2; ep = 8", "ep = 8", kv="mooncake", nodes=3)),
    # P672: NixlConnector with dcp 2 of tp 8: dcp must be 1 or max(tp, cp) = 8
    ("P672", pd("instances = 2; ep = 8", "ep = 8; dcp = 2", nodes=3),
     pd("instances = 2; ep = 8", "ep = 8; dcp = 8", nodes=3)),
    # P673: prefill tp 4 and decode tp 6 do not divide one another (6 % 4 = 2); tp 4 and 8 do
    # (a dense model whose 48 heads, 12 KV heads and 12,288-wide MLP divide by 4, 6 and 8)
    ("P673", pd("instances = 2; tp = 4", "tp = 6", model=W48, nodes=2),
     pd("instances = 2; tp = 4", "tp = 8", model=W48, nodes=2)),
]
