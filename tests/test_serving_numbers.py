"""Serving numbers against hand computation from the papers and the engines' source: MoE expert
sharding (vLLM ``FusedMoEParallelConfig.make``, SGLang ``--ep-size``), the KV cache per token under
MLA (DeepSeek-V2 §2.1) and GQA (the vLLM paper), decode context parallel, fp8 KV, and the latency
and throughput estimates of ``parc explain``."""
from __future__ import annotations

import pytest

import parc.cost.estimate as cm

# DeepSeek-V3 (config.json): 61 layers, the first 3 dense, so 58 MoE layers of 256 routed experts,
# each a SwiGLU MLP of 3 · hidden 7168 · moe_ffn 2048 = 44,040,192 parameters.
EXPERT = 3 * 7168 * 2048
MOE_LAYERS = 61 - 3


def dsv3(mesh: str, serve: str = "", nodes: int = 2, target: str = "", gpu: str = "h200") -> str:
    """DeepSeek-V3 from a bf16 copy of its weights: 2 bytes a parameter, as the sums below count."""
    return (f'model "m" {{ from = deepseek_v3; checkpoint_format = bf16 }}\n'
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


# --- speed at the workload -----------------------------------------------------------------------

def llama8b(serve: str) -> str:
    return ('model "m" { from = llama3_8b }\n'
            'cluster "c" {\n  nodes = 1\n  gpus_per_node = 1\n  gpu = h100_sxm\n}\n'
            'mesh { tp = 1 }\n'
            f'serve {{\n  max_model_len = 4096\n  {serve}\n}}\n')


def test_decode_and_prefill_are_rooflines(check_spec):
    """Llama 3 8B on one H100 (3.35 TB/s at hbm_efficiency 0.6, 989 TFLOP/s at gemm_efficiency 0.803,
    the H100's measured matmul rate, GEMMs of M rows at M / (M + 375) of that), 10 requests of 1000 + 200 tokens: no
    communication, so each step is the GEMMs' roofline (the weights' read or their FLOPs) plus
    attention's (the KV cache's read at FlashMLA's 3000 of 3350 GB/s, or its FLOPs: decode at
    FlashMLA's 580 of 989 TFLOP/s, prompts at FlashAttention-3's forward 62%) plus the
    memory-bound kernels (norms, residual adds, RoPE, SwiGLU: 188,416 bytes a token a layer)."""
    from parc.cost.serve_step import gemm_flops_per_token

    plan, e = _est(check_spec, llama8b("prompt_tokens = 1000\n  output_tokens = 200\n  concurrency = 10"))
    sv, m = e.serving, plan.model
    hbm, peak = 3350e9 * 0.6, 989e12 * 0.803
    kv_read, attn_decode, attn_prefill = 3350e9 * 0.896, 989e12 * 0.586, 989e12 * 0.62
    b = sv.batch
    d = sv.decode[0]
    # every weight once, and the KV of b sequences of 1000 + 200/2 = 1100 tokens at 131,072 B/token
    assert e.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131_072
    assert d.weights == pytest.approx(e.memory.weights / hbm)
    assert d.kv == pytest.approx(b * 1100 * 131_072 / kv_read)
    # per layer: two norms (read 2h, write 2h) and two residual adds (read 4h, write 2h) of h = 4096,
    # RoPE on q and k (4 bytes an element of 4096 + 1024), SwiGLU (read 2·2f, write 2f of f = 14,336)
    per_token = 32 * (2 * 4 * 4096 + 2 * 6 * 4096 + 4 * 5120 + 6 * 14336)
    assert per_token == 32 * 188_416
    assert d.elementwise == pytest.approx(b * per_token / hbm)
    g, _ = gemm_flops_per_token(m, 32, 0, 1, 1)
    head = 2 * m.hidden * m.vocab
    attn = b * 1100 * 2 * 32 * 256 * 32 / attn_decode
    assert d.compute == pytest.approx((b * g + b * head) / (peak * b / (b + 375)) + attn)
    assert d.comm == {}
    gemm = (b * g + b * head) / (peak * b / (b + 375))
    assert d.time == pytest.approx(max(d.weights, gemm) + max(d.kv, attn) + d.elementwise)
    p = sv.prefill[0]
    # 1000 tokens in one step (vLLM's 8,192 on an H100), causal attention over 500 on average
    assert p.tokens == 1000 and sv.prefill_steps == 1
    assert p.compute == pytest.approx(1000 * g / (peak * 1000 / 1375) + 1000 * 500 * 2 * 32 * 256 * 32 / attn_prefill)
    assert p.elementwise == pytest.approx(1000 * per_token / hbm)
    assert p.bound == "compute" and sv.prefill_time == pytest.approx(p.time)
    # TTFT's terms sum to it; TPOT is the mean step, mixed steps and decode steps
    assert sum(sv.ttft_terms.values()) == pytest.approx(sv.ttft)
    assert set(sv.ttft_terms) == {"wait", "queue", "prefill"}
    assert sv.decode_step < sv.tpot < max(ph.time for ph in sv.mixed)
    assert sv.output_tokens_per_s == pytest.approx(sv.tpot and 10 * 200 / (sv.ttft + 199 * sv.tpot), rel=1e-6)


def _preset(name: str):
    import dataclasses

    from parc.model.plan import Model
    from parc.resolve.catalog import presets

    fields = {f.name for f in dataclasses.fields(Model)}
    given = {k: v for k, v in presets("models")[name].items() if k in fields and k != "name"}
    return Model(name=name, **{"head_dim": None, "params": None, **given})


def test_memory_bound_kernels_of_an_fp8_and_a_moe_layer():
    """The serving step's memory-bound bytes per token, by hand. Llama 3 70B in FP8 at tp 2 (h
    8192, q 8192, kv 1024, f 28,672): the fused kernels (20h + 4·(q + kv)/2 + 6·f/2) and each
    GEMM's input cast to FP8 (3 bytes an element of h, q/2, h and f/2). DeepSeek-V3's MoE layer
    on one GPU of ep 8 (h 7168, 128 heads of value width 128, RoPE on 64 of each query head and
    of the shared key, moe f 2048, one shared expert) with 4 routed rows per token reaching it:
    the activation over the shared expert and the 4 rows, the dispatch's permutation (8h a row),
    and in FP8 the casts of QKV's, the shared expert's and each row's input (h each), the output
    projection's (128 × 128) and the down projections' (2048 · 5)."""
    from dataclasses import replace

    from parc.cost.serve_step import elementwise_per_token

    m = _preset("llama3_1_70b")
    fp8 = replace(m, dtype="fp8")
    fused = 20 * 8192 + 4 * (8192 + 1024) / 2 + 6 * 28672 / 2
    assert elementwise_per_token(m, 80, 0, 2, 0.0, 1) == pytest.approx(80 * fused)
    casts = 3 * (8192 + 8192 / 2 + 8192 + 28672 / 2)
    assert elementwise_per_token(fp8, 80, 0, 2, 0.0, 1) == pytest.approx(80 * (fused + casts))
    ds = replace(_preset("deepseek_v3"), dtype="fp8")
    moe = (20 * 7168 + 4 * 129 * 64 + 6 * 2048 * (1 + 4) + 8 * 7168 * 4
           + 3 * (7168 * (1 + 1 + 4) + 128 * 128 + 2048 * 5))
    assert elementwise_per_token(ds, 1, 1, 1, 4.0, 1) == pytest.approx(moe)


def test_default_workload_is_vllm_benchmark(check_spec):
    plan, e = _est(check_spec, llama8b(""))
    w = e.serving.workload
    # vLLM's RandomDataset: 1024 prompt + 128 output tokens; as many requests as vLLM 0.33's default
    # max_num_seqs on an H100 (1,024) and the KV cache allow
    assert (w.prompt_tokens, w.output_tokens, w.stated) == (1024, 128, ())
    assert w.concurrency == min(1024, e.kv_capacity_tokens // 1152)
    plan, e = _est(check_spec, llama8b("").replace("max_model_len = 4096", "max_model_len = 576"))
    assert (e.serving.workload.prompt_tokens, e.serving.workload.output_tokens) == (512, 64)   # × 576/1152


def test_experts_touched_by_a_small_batch():
    from parc.cost.serve_step import experts_touched

    # 8 routed copies over 256 experts reach 256 · (1 − (255/256)^8) ≈ 7.89 of them
    assert 256 * experts_touched(256, 8) == pytest.approx(256 * (1 - (255 / 256) ** 8))
    assert experts_touched(256, 1e6) == pytest.approx(1.0)


def test_disaggregated_ttft_is_prefill_transfer_and_first_step(check_spec):
    # Llama 3 70B on 4 nodes: 2 prefill instances of tp 8, 1 decode instance of dp 2 · tp 8
    text = (llama70b(8).replace("nodes = 1", "nodes = 4")
            .replace("  max_model_len = 8192\n", "  max_model_len = 8192\n  kv_transfer = nixl\n  prompt_tokens = 1024\n"
                     "  output_tokens = 128\n  concurrency = 64\n  prefill {\n    instances = 2\n  }\n"
                     "  decode {\n    dp = 2\n  }\n"))
    plan, e = _est(check_spec, text)
    assert [p.name for p in plan.pools] == ["prefill", "decode"]
    sv = e.serving
    # the whole model's KV per token: 80 layers × 8 heads × 128 × 2 (K, V) × 2 B = 327,680; × 1024 tokens
    assert sv.kv_transfer_bytes == 1024 * 327_680
    # each of the prefill instance's 8 GPUs sends its 40,960 B/token share over its 50 GB/s link
    assert sv.kv_transfer_time == pytest.approx(1024 * 40_960 / 50e9)
    # the prefill pool keeps up with the requests in flight: no queue before it; TTFT is its
    # named terms: the prompt alone, the transfer, the first decode step
    assert list(sv.ttft_terms) == ["queue", "prefill", "kv_transfer", "first_decode"]
    assert sv.ttft_terms["queue"] == pytest.approx(0.0, abs=1e-9)
    assert sv.ttft == pytest.approx(sv.prefill_time + sv.kv_transfer_time + sv.tpot)
    assert sv.tpot == pytest.approx(sv.decode_step)
    assert set(sv.pools) == {"prefill", "decode"} and sv.replicas == 2      # decode: 1 instance of dp 2
    # 64 users over 2 decode ranks, each user's round the prefill, the transfer and 128 steps
    assert sv.batch == pytest.approx(32 * 127 * sv.tpot / (sv.ttft + 127 * sv.tpot), rel=1e-3)


def test_workload_rules(check_spec):
    from support.specs import only

    r = check_spec(llama8b("prompt_tokens = 1000\n  output_tokens = 200\n  concurrency = 400\n  max_num_seqs = 256"))
    d = only(r, "P407")
    assert "max_num_seqs = 256" in d.message
    # left out, max_num_seqs is vLLM's own: 1,024 on an H100, which holds the 400
    assert not [x for x in check_spec(llama8b("prompt_tokens = 1000\n  output_tokens = 200\n"
                                              "  concurrency = 400")).diagnostics if x.code == "P407"]
    r = check_spec(llama8b("prompt_tokens = 3000\n  output_tokens = 1000\n  concurrency = 200"))
    e = cm.estimate(r.plan)
    fit = e.kv_capacity_tokens // 4000
    d = only(r, "P406")
    assert f"`concurrency = {fit}` fits" in d.help
    assert [x.code for x in check_spec(llama8b(f"prompt_tokens = 3000\n  output_tokens = 1000\n"
                                                f"  concurrency = {fit}")).diagnostics] == []
    r = check_spec(llama8b("prompt_tokens = 4000\n  output_tokens = 200"))
    d = only(r, "P408")
    assert "4,200" in d.message and "max_model_len = 4,096" in d.message


def test_dcp_gathers_queries_and_reduces_outputs_in_the_latent_space(check_spec):
    """DeepSeek-V3 at tp 8, dcp 8: per layer and token each GPU sends (dcp − 1) × 16 heads × (query 512 + 64
    + output 512) × 2 bytes over the tp group's link; the TP all-reduce is unchanged."""
    _, e = _est(check_spec, dsv3("tp = 8; dcp = 8", nodes=1))
    assert e.comm_bytes["dcp"] == 7 * 16 * (576 + 512) * 2 * 61 == 14_866_432
    assert e.comm_link["dcp"] == "intra_node" and e.comm_time["dcp"] > 0
    _, e1 = _est(check_spec, dsv3("tp = 8", nodes=1))
    assert e1.comm_bytes["dcp"] == 0 and e.comm_bytes["tp"] == e1.comm_bytes["tp"]
    # a decode step waits for it; a prompt's chunk does not
    from parc.cost.serve_step import StepModel

    step = StepModel(e.plan, e)
    assert step.phases(8, 0.0, 1000.0, 0.0)[0].comm["dcp"] > 0
    assert step.phases(0, 1000.0, 0.0, 500.0)[0].comm["dcp"] == 0


def test_explain_text_shows_each_pool_and_the_speed(check_spec):
    from parc.report.explain import render_text
    from parc.units import seconds

    text = (llama70b(8).replace("nodes = 1", "nodes = 4")
            .replace("  max_model_len = 8192\n", "  max_model_len = 8192\n  kv_transfer = nixl\n"
                     "  prefill {\n    instances = 2\n  }\n  decode {\n    dp = 2\n  }\n"))
    plan, e = _est(check_spec, text)
    out = render_text(plan, e, "pd.par")
    assert "Pool prefill: 2 instances of 8 GPUs, each:" in out and "Pool decode: 1 instance of 16 GPUs, each:" in out
    assert "Pool prefill, one instance:" in out and "Pool decode, one instance:" in out
    assert "KV transfer" in out and "over nixl" in out
    # TTFT named term by term, with the seconds of each
    sv = e.serving
    terms = " + ".join(f"{name} {seconds(sv.ttft_terms[k])}" for k, name in
                       (("queue", "queue"), ("prefill", "prefill"), ("kv_transfer", "KV transfer"),
                        ("first_decode", "first decode step")))
    assert f"TTFT         {seconds(sv.ttft)} = {terms}" in out
    # the decode pool's memory is its own plan's: dp 2 · tp 8
    assert e.serving.pools["decode"]["estimate"].mesh["dp"] == 2


def test_attention_runs_at_its_kernels_published_rates():
    """A prompt's attention at the forward rate of the kernel the engines run on the GPU's
    architecture (FlashAttention-3's 62% of the BF16 peak on Hopper, FlashAttention-2's 70% on
    Ampere); decode attention at FlashMLA's 580 of 989 TFLOP/s and 3000 of 3350 GB/s on H800."""
    from types import SimpleNamespace

    from parc.cost.serve_step import attention_rates

    h100 = SimpleNamespace(arch="hopper", flops=989e12, hbm_bandwidth=3.35e12)
    a100 = SimpleNamespace(arch="ampere", flops=312e12, hbm_bandwidth=2.039e12)
    assert attention_rates(h100) == pytest.approx((0.62 * 989e12, 0.586 * 989e12, 0.896 * 3.35e12))
    assert attention_rates(a100) == pytest.approx((0.70 * 312e12, 0.586 * 312e12, 0.896 * 2.039e12))
    assert 3000 / 3350 == pytest.approx(0.896, abs=5e-4) and 580 / 989 == pytest.approx(0.586, abs=5e-4)
