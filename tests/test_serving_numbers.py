"""Serving numbers against hand computation from the papers and the engines' source: MoE expert
sharding (vLLM ``FusedMoEParallelConfig.make``, SGLang ``--ep-size``), the KV cache per token under
MLA (DeepSeek-V2 §2.1) and GQA (the vLLM paper), decode context parallel, fp8 KV, and the latency
and throughput estimates of ``parc explain``."""
from __future__ import annotations

import parc.cost.estimate as cm

# DeepSeek-V3 (config.json): 61 layers, the first 3 dense, so 58 MoE layers of 256 routed experts,
# each a SwiGLU MLP of 3 · hidden 7168 · moe_ffn 2048 = 44,040,192 parameters.
EXPERT = 3 * 7168 * 2048
MOE_LAYERS = 61 - 3


def dsv3(mesh: str, serve: str = "", nodes: int = 2, target: str = "", gpu: str = "h200") -> str:
    return (f'model "m" {{ from = deepseek_v3 }}\n'
            f'cluster "c" {{\n  nodes = {nodes}\n  gpus_per_node = 8\n  gpu = {gpu}\n'
            f'  intra_node = nvlink(450GB/s)\n  inter_node = infiniband(400Gb/s)\n}}\n'
            f'mesh {{ {mesh} }}\n'
            f'serve {{\n  max_model_len = 8192\n  {serve}\n}}\n{target}')


def llama70b(tp: int, dcp: int = 1, gpus: int = 8, kv: str = "") -> str:
    return (f'model "m" {{ from = llama3_70b }}\n'
            f'cluster "c" {{\n  nodes = 1\n  gpus_per_node = {gpus}\n  gpu = h100_sxm\n'
            f'  intra_node = nvlink(450GB/s)\n  inter_node = infiniband(400Gb/s)\n}}\n'
            f'mesh {{ tp = {tp}' + (f'; dcp = {dcp}' if dcp > 1 else '') + ' }\n'
            f'serve {{\n  max_model_len = 8192\n' + (f'  kv_cache_dtype = {kv}\n' if kv else '') + '}\n')


def _est(check_spec, text):
    plan = check_spec(text).plan
    return plan, cm.estimate(plan, cache=False)


def test_vllm_tp8_splits_every_expert_over_tp(check_spec):
    """Without expert parallelism vLLM shards each expert's width over dp·tp: 2048 / 8 = 256."""
    plan, e = _est(check_spec, dsv3("tp = 8", nodes=1, target='target vllm {\n  model = "x"\n}\n'))
    assert cm.serving_expert_split(plan) == (1, 8, 0)
    # 58 layers × 256 experts × 3 · 7168 · 256 = 81,738,596,352 (1/8 of the 658B routed parameters)
    assert e.stages[0].parts["experts"] == MOE_LAYERS * 256 * 3 * 7168 * 256 == 81_738_596_352
    assert e.memory.weights == 2 * e.stages[0].params
    assert "mtp" not in e.stages[0].parts       # the engine does not load the MTP module


def test_dp_attention_ep8_holds_32_whole_experts(check_spec):
    plan, e = _est(check_spec, dsv3("dp = 8; tp = 1; ep = 8", "dp_attention = true", nodes=1))
    assert cm.serving_expert_split(plan) == (8, 1, 0)
    # 256 / 8 = 32 whole experts per GPU per MoE layer: 58 × 32 × 44,040,192
    assert e.stages[0].parts["experts"] == MOE_LAYERS * 32 * EXPERT == 81_738_596_352
    # attention is data parallel: every GPU holds all of it (tp = 1), eight times tp 8's share
    _, e8 = _est(check_spec, dsv3("tp = 8", nodes=1))
    assert e.stages[0].parts["attention"] > 4 * e8.stages[0].parts["attention"]


def test_redundant_experts_add_weights(check_spec):
    plan, e = _est(check_spec, dsv3("dp = 2; tp = 8; ep = 16",
                                    "dp_attention = true\n  eplb = true\n  redundant_experts = 32"))
    assert cm.serving_expert_split(plan) == (16, 1, 32)
    # (256 + 32) / 16 = 18 experts per GPU: 58 × 18 × 44,040,192 = 45,977,960,448
    assert e.stages[0].parts["experts"] == MOE_LAYERS * 18 * EXPERT == 45_977_960_448
    _, plain = _est(check_spec, dsv3("dp = 2; tp = 8; ep = 16", "dp_attention = true"))
    assert e.memory.weights - plain.memory.weights == 2 * MOE_LAYERS * 2 * EXPERT   # 2 more experts, bf16


def test_sglang_without_dp_attention_keeps_experts_in_each_server(check_spec):
    """SGLang's dp without dp-attention is independent servers: experts split over tp only."""
    plan, _ = _est(check_spec, dsv3("dp = 2; tp = 8", target='target sglang {\n  model = "x"\n}\n'))
    assert cm.serving_expert_split(plan) == (1, 8, 0)
    plan, _ = _est(check_spec, dsv3("dp = 2; tp = 8", target='target vllm {\n  model = "x"\n}\n'))
    assert cm.serving_expert_split(plan) == (1, 16, 0)   # vLLM: flatten_tp_across_dp, 2 · 8


def test_mla_kv_per_token_is_the_latent_on_every_tp_rank(check_spec):
    # 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes = 70,272 B per token, not split by tp
    _, e = _est(check_spec, dsv3("tp = 8", nodes=1))
    assert e.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    _, e = _est(check_spec, dsv3("tp = 8; dcp = 8", nodes=1))
    assert e.kv_bytes_per_token == 70_272 // 8 == 8_784          # dcp spreads the tokens over 8 ranks
    _, e = _est(check_spec, dsv3("tp = 8", "kv_cache_dtype = fp8", nodes=1))
    assert e.kv_bytes_per_token == 61 * 576 == 35_136
    # a 8192-token sequence: 8192 × 70,272 = 575,668,224 B
    assert cm.model_kv_bytes_per_token(_est(check_spec, dsv3("tp = 8", nodes=1))[0].model, 61, 2) * 8192 \
        == 575_668_224


def test_gqa_kv_per_token_under_tp_and_dcp(check_spec):
    # Llama 3 70B: 80 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes = 327,680 B per token in all
    plan, e = _est(check_spec, llama70b(8))
    assert cm.model_kv_bytes_per_token(plan.model, 80, 2) == 80 * 8 * 128 * 2 * 2 == 327_680
    assert e.kv_bytes_per_token == 327_680 // 8 == 40_960       # tp 8: one KV head per GPU
    _, e = _est(check_spec, llama70b(4))
    assert e.kv_bytes_per_token == 81_920                        # two heads per GPU
    # tp 16 (a 16-GPU NVLink domain): max(1, 8 // 16) = 1 head, replicated on 2 GPUs; dcp 2 keeps half the tokens each
    _, e16 = _est(check_spec, llama70b(16, gpus=16))
    _, e = _est(check_spec, llama70b(16, dcp=2, gpus=16))
    assert e16.kv_bytes_per_token == 40_960 and e.kv_bytes_per_token == 20_480
    assert e.kv_capacity_tokens >= 2 * e16.kv_capacity_tokens - 2
    _, e = _est(check_spec, llama70b(8, kv="fp8"))
    assert e.kv_bytes_per_token == 20_480                       # fp8: one byte an element
