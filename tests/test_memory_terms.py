"""Each memory term of issue 13 against a hand-computed case from its source (the arithmetic in
the comments): layer patterns, MLA, MTP, FP8, per-module recompute, offload, framework overheads,
and the published configurations that ran."""
from __future__ import annotations

from pathlib import Path

import pytest

from parc.cost import estimate as cm
from parc.cost import memory as mem
from parc.model import params as P
from parc.model.plan import Model

ROOT = Path(__file__).resolve().parent.parent


def preset(name: str) -> Model:
    from parc.resolve.catalog import presets

    d = {k: v for k, v in presets("models")[name].items() if k not in ("source",)}
    return Model(name, d.pop("layers"), d.pop("hidden"), d.pop("ffn_hidden"), d.pop("heads"), d.pop("kv_heads"),
                 None, d.pop("vocab"), 0, **d)


@pytest.fixture(scope="module")
def v3():
    return preset("deepseek_v3")


# --- 1. layer patterns -------------------------------------------------------------------------------

def test_first_k_dense_is_one_predicate(v3):
    # DeepSeek-V3: first_k_dense_replace = 3, moe_layer_freq = 1 -> layers 3..60 are MoE: 58
    assert [P.is_moe_layer(v3, i) for i in range(5)] == [False, False, False, True, True]
    assert v3.moe_layers == 58 == sum(P.is_moe_layer(v3, i) for i in range(61))
    # the closed form agrees with the predicate for every range, pattern and first_k
    for e in (1, 2, 3):
        for k in (0, 1, 3, 4):
            m = Model("m", 12, 64, 128, 4, 4, None, 100, 0, experts=4, top_k=1, moe_ffn_hidden=32,
                      moe_every=e, first_k_dense=k)
            for a in range(13):
                for b in range(a, 13):
                    assert P.moe_layers_between(m, a, b) == sum(P.is_moe_layer(m, i) for i in range(a, b))


def test_stage_layouts_follow_first_k_dense(v3):
    # 61 layers over 16 stages of [4]*13 + [3]*3: stage 0 holds layers 0-3, of which only 3 is MoE
    lay = cm.layouts_of(v3, "1f1b", 16, [4] * 13 + [3] * 3)
    assert [s.moe_layers for s in lay[:2]] == [1, 4]
    assert sum(s.moe_layers for s in lay) == 58


# --- 2. MLA -----------------------------------------------------------------------------------------

def test_mla_parameters_and_deepseek_v3_total(v3):
    # per layer (h 7168, a 128, r_q 1536, r_kv 512, d_r 64, d_n 128, d_v 128):
    # q down 7168·1536 = 11,010,048; q norm 1,536; q up 1536·128·192 = 37,748,736;
    # kv down 7168·576 = 4,128,768; kv norm 512; kv up 512·128·256 = 16,777,216;
    # out 128·128·7168 = 117,440,512 -> 187,107,328
    assert P.mla_params(v3) == 187_107_328
    # dense layer: 187,107,328 + 3·7168·18432 (396,361,728) + 2 norms 14,336 = 583,483,392
    assert P.layer_params(v3) == 583_483_392
    # MoE layer: 257 experts × 3·7168·2048 (44,040,192) + router 7168·256 + MLA + norms = 11,507,286,016
    assert P.layer_params(v3, moe=True) == 11_507_286_016
    # 3 dense + 58 MoE + embedding and head 2·129280·7168 + final norm = 671,026,404,352: the report's 671B
    assert P.param_count(v3, mtp=False) == 3 * 583_483_392 + 58 * 11_507_286_016 + 2 * 926_679_040 + 7168
    assert P.param_count(v3, mtp=False) == pytest.approx(671e9, rel=0.005)


def test_deepseek_v2_lite_total():
    m = preset("deepseek_v2_lite")
    # no q_lora_rank: q 2048·16·192 = 6,291,456; kv down 2048·576 = 1,179,648; kv norm 512;
    # kv up 512·16·256 = 2,097,152; out 16·128·2048 = 4,194,304 -> 13,763,072
    assert P.mla_params(m) == 13_763_072
    assert P.param_count(m) == pytest.approx(15.7e9, rel=0.005)      # the model card's 15.7B


def test_mla_kv_cache_is_latent_and_not_split_by_tp(v3):
    # (kv_lora_rank + qk_rope_head_dim) · layers · bytes = (512 + 64) · 61 · 2 = 70,272 per token,
    # the same on every TP rank (vLLM replicates the MLA cache)
    assert mem.model_kv_bytes_per_token(v3, 61, 2, tp=1) == 70_272
    assert mem.model_kv_bytes_per_token(v3, 61, 2, tp=8) == 70_272


def test_mla_activation_terms():
    # DeepSeek-V3 bf16: latent (2+2)·1536 + (2+2)·512 + 2·64 = 8,320; Q, K, V 2·128·(2·192 + 128)
    # = 131,072; output-projection input 2·128·128 = 32,768
    assert mem.mla_activation_terms(128, 1536, 512, 64, 128, 128) == (8320, 131_072, 32_768)
    # FP8 stores the two up-projections' and the output projection's inputs in 1 byte
    assert mem.mla_activation_terms(128, 1536, 512, 64, 128, 128, lin=1) == (6272, 131_072, 16_384)


def test_mla_attention_flops_hook(v3):
    # QKᵀ over d_n + d_r = 192 and AV over d_v = 128: a mean width of 160, not hidden/heads = 56
    assert P.attention_core_dim(v3) == 160
    assert P.attention_params(v3) == P.mla_params(v3)


# --- 3. MTP -----------------------------------------------------------------------------------------

def test_mtp_module_on_the_last_stage(v3):
    # one MoE layer (index 61 follows is_moe_layer) + projection 2·7168² + three norms 3·7168
    assert P.mtp_params(v3) == 11_507_286_016 + 102_760_448 + 21_504
    # with it 682.6B: the model card's 685B also counts the checkpoint's own copies of the
    # embedding and head in the MTP module (2 · 926,679,040), which Megatron-LM shares
    assert P.param_count(v3) + 2 * 926_679_040 == pytest.approx(685e9, rel=0.005)
    lay = cm.layouts_of(v3, "1f1b", 16, [4] * 13 + [3] * 3)
    last = cm.stage_parts(v3, lay[-1], 128, 1, 1, 64, 1)
    plain = cm.stage_parts(Model(**{**_fields(v3), "mtp_layers": 0}), lay[-1], 128, 1, 1, 64, 1)
    # the MTP layer holds 4 of 256 experts under ep 64 (4 · 44,040,192 routed) and the rest whole
    mtp_local = P.mtp_params(v3) - 252 * 44_040_192
    assert sum(last.values()) - sum(plain.values()) == mtp_local
    assert last["mtp"] == 7168 * 2 * 7168
    assert cm.stage_parts(v3, lay[0], 128, 1, 1, 64, 1)["mtp"] == 0       # only the last stage holds it


def _fields(m: Model) -> dict:
    from dataclasses import fields

    return {f.name: getattr(m, f.name) for f in fields(m)}


def test_mtp_activations_and_flops_on_the_last_stage():
    m = Model("m", 4, 1024, 4096, 8, 8, None, 32000, 0, mlp="gelu", mtp_layers=1)
    act = 1000.0
    tokens, t = 2048, 1
    logits = 4 * tokens * 1024 * (1 + 32000 / 1024)
    # one dense layer's activations + 8·tokens·h (two norm inputs and the 2h projection input) + logits
    assert mem.mtp_activation_bytes(m, act, act, logits, tokens, t) == act + 8 * tokens * 1024 + logits
    from parc.cost.flops import stage_flops_per_microbatch

    base = Model("m", 4, 1024, 4096, 8, 8, None, 32000, 0, mlp="gelu")
    extra = stage_flops_per_microbatch(m, tokens, 1, 0, 1, 1.0, 1.0) - stage_flops_per_microbatch(
        base, tokens, 1, 0, 1, 1.0, 1.0)
    # per token: 6 · (layer matmuls 4h² + 2·h·4h + projection 2h²) + attention 12·s·a·d + logits 6·V·h
    h = 1024
    per_token = 6 * (4 * h * h + 8 * h * h + 2 * h * h) + 12 * 4096 * 8 * 128 + 6 * 32000 * h
    assert extra == pytest.approx(tokens * per_token)


# --- 4. FP8 -----------------------------------------------------------------------------------------

def test_fp8_keeps_bf16_weights_and_adds_weight_copies():
    # Transformer Engine / torchao float8: the module weights stay bf16, gradients and optimizer as
    # for bf16 (18 B/param with fp32 main grads); the GEMMs read FP8 copies of the weight and its
    # transpose: 2 B per linear parameter
    assert cm.state_bytes_per_param("fp8") == cm.state_bytes_per_param("bf16")
    assert mem.fp8_weight_cache_bytes(1e9) == 2e9
    parts = {"embedding": 5, "attention": 10, "mlp": 20, "experts": 40, "router": 1, "norms": 2, "output": 5}
    assert mem.linear_params(parts) == 70                       # embedding, head, router, norms stay 16-bit


def test_fp8_activations():
    # GPT layer, t = 1, flash: bf16 34·sbh; FP8 stores the QKV and MLP inputs (replicated 2+2 -> 1+1),
    # the projection input (2 -> 1) and fc2's input (2·4h -> 1·4h) in 1 byte: 34 - 2 - 1 - 4 = 27
    s, b, h, a = 2048, 1, 4096, 32
    sbh = s * b * h
    f = mem.activation_bytes_per_layer
    assert f(s, b, h, a, flash=True) == 34 * sbh
    assert f(s, b, h, a, flash=True, fp8=True) == 27 * sbh


def test_fp8_moe_act_caches_the_swiglu_inputs_in_fp8():
    # DeepSeek-V3 §3.3.2: with the SwiGLU output recomputed (moe_act), its inputs (gate and up,
    # 2·f elements per routed copy) are cached in FP8: 2 bytes a pair instead of 4. MoE top_k 2,
    # moe_ffn 1024, SwiGLU, FP8: recomputing moe_act removes fc2's 1-byte input (1·1024) and halves
    # the 4·1024 gate/up bytes of each routed copy: 2·(1024 + 2·1024) per token; the shared expert
    # keeps its 16-bit inputs (it is the `shared_experts` module, not moe_act)
    s, b, h, a = 2048, 1, 4096, 32
    f = mem.activation_bytes_per_layer
    kw = dict(flash=True, recompute="selective", mlp="swiglu", moe=(2, 1024, 1, 1), fp8=True)
    assert f(s, b, h, a, **kw) - f(s, b, h, a, **kw, modules=("moe_act",)) == s * b * 2 * (1024 + 2 * 1024)
    # in bf16 the inputs stay 16-bit: only fc2's 2-byte input goes (the test above: 2·2·1024)
    kw["fp8"] = False
    assert f(s, b, h, a, **kw) - f(s, b, h, a, **kw, modules=("moe_act",)) == s * b * 2 * 2 * 1024


def test_fp8_weight_cache_is_a_plan_setting(check_spec):
    # fp8_weight_cache = false (torchtitan's float8, DeepSeek-V3's framework) drops the 2 B per
    # linear parameter of FP8 copies; the planner's memory column follows the same predicate
    text = """
        model "m" { from = llama3_8b }
        cluster "c" {
          nodes = 1
          gpus_per_node = 8
          gpu = h100_sxm
        }
        mesh { dp = 8 }
        train {
          zero = 3
          precision = fp8
          %s
        }
    """
    kept = cm.estimate(check_spec(text % "").plan, cache=False).memory
    dropped = cm.estimate(check_spec(text % "fp8_weight_cache = false").plan, cache=False).memory
    assert dropped.fp8_weights == 0 and kept.fp8_weights > 0
    assert kept.total - dropped.total == pytest.approx(kept.fp8_weights, rel=1e-9)


# --- 5. per-module recompute -------------------------------------------------------------------------

def test_recompute_modules_remove_their_terms():
    s, b, h, a = 2048, 1, 4096, 32
    sbh = s * b * h
    f = mem.activation_bytes_per_layer
    sel = dict(flash=True, recompute="selective")
    assert f(s, b, h, a, **sel) == 34 * sbh                              # core_attn: nothing under flash
    assert f(s, b, h, a, **sel, modules=("layernorm",)) == 30 * sbh       # the attention and MLP inputs 2+2
    assert f(s, b, h, a, **sel, modules=("mlp",)) == 18 * sbh             # GELU input and fc2 input 2·4h + 2·4h
    assert f(s, b, h, a, **sel, modules=("layernorm", "mlp")) == 14 * sbh
    assert f(s, b, h, a, flash=True, modules=("mlp",)) == 34 * sbh        # only with recompute = selective
    # MoE (top_k 2, moe_ffn 1024, etp 1, one shared), SwiGLU: routed 2·(6·1024 + 2h), shared 6·1024
    moe = (2, 1024, 1, 1)
    kw = dict(mlp="swiglu", moe=moe, **sel)
    base = f(s, b, h, a, **kw)
    sb = s * b
    assert base - f(s, b, h, a, **kw, modules=("moe",)) == sb * (2 * (6 * 1024 + 2 * h) + 6 * 1024)
    assert base - f(s, b, h, a, **kw, modules=("moe_act",)) == sb * 2 * 2 * 1024
    assert base - f(s, b, h, a, **kw, modules=("shared_experts",)) == sb * 6 * 1024
    mla = (1536, 512, 64, 128, 128)
    with_mla = f(s, b, 7168, 128, mla=mla, **sel)
    assert with_mla - f(s, b, 7168, 128, mla=mla, **sel, modules=("mla_up_proj",)) == sb * 131_072


def test_unknown_recompute_module_is_an_error_with_did_you_mean(check_spec):
    r = check_spec('''
        model "m" { from = llama3_8b }
        cluster "c" { nodes = 1; gpus_per_node = 8; gpu = h100_sxm }
        mesh { dp = 8 }
        train { recompute = selective; recompute_modules = [layernrom, mlp] }
    ''')
    d = [d for d in r.diagnostics if d.severity == "error"]
    assert [x.code for x in d] == ["P016"]
    assert "layernrom" in d[0].message and "did you mean `layernorm`" in d[0].help


# --- 6. offload ---------------------------------------------------------------------------------------

def test_offload_moves_layers_to_host():
    # 8 dense layers of 100 B, 4 microbatches in flight, 2 layers offloaded: 2·100·4 leave the GPU,
    # less the one layer being copied back (100): 3200 - 800 + 100 = 2500
    assert mem.offloaded_bytes(8, 0, 100.0, 0.0, 4, 2) == 700.0
    m = Model("m", 8, 64, 256, 4, 4, None, 100, 0)
    stage = lambda off: mem.stage_activation_bytes(8, 0, 100.0, 0.0, 4, False, False, 16, 1, m, 1, off)
    assert stage(0) == 3200 and stage(2) == 2500 and stage(0) - stage(99) == 8 * 100 * 4 - 100


# --- 7. framework overheads ----------------------------------------------------------------------------

OVERHEAD_SPEC = '''
model "m" { from = llama3_8b }
cluster "c" {
  nodes = 1
  gpus_per_node = 8
  gpu = h100_sxm
  CLUSTER
}
mesh { dp = 4; tp = 2 }
schedule { micro_batch = 1; global_batch = 32 }
train { zero = 1; recompute = full; sequence_parallel = true }
'''


def test_overheads_default_from_data_and_appear_in_json(check_spec):
    from parc.model.overheads import table

    d = table()
    assert {k: d[k] for k in ("cuda_context", "nccl_buffers", "fragmentation")} == \
        {"cuda_context": 800_000_000, "nccl_buffers": 268_435_456, "fragmentation": 0.05}
    plan = check_spec(OVERHEAD_SPEC.replace("CLUSTER", "")).plan
    e = cm.estimate(plan, cache=False)
    j = e.to_json()["memory_per_gpu"]
    # communicators: world, tp (2), dp (4) = 3 -> 3 × 268,435,456 = 805,306,368
    assert j["cuda_context"] == 800_000_000 and j["nccl_buffers"] == 805_306_368
    assert j["fragmentation"] == int(0.05 * e.memory.activations)
    assert j["total"] == pytest.approx(sum(v for k, v in j.items() if k not in ("total", "capacity")), abs=10)


def test_cluster_block_overrides_overheads(check_spec):
    text = OVERHEAD_SPEC.replace("CLUSTER", "cuda_context = 900MiB\n  nccl_buffers = 100MB\n  fragmentation = 0.1")
    r = check_spec(text)
    e = cm.estimate(r.plan, cache=False)
    assert e.memory.cuda_context == 900 * 2**20
    assert e.memory.nccl_buffers == 3 * 100e6
    assert e.memory.fragmentation == pytest.approx(0.1 * e.memory.activations)


def test_explain_shows_overhead_rows(check_spec):
    from parc.report.explain import render_text

    plan = check_spec(OVERHEAD_SPEC.replace("CLUSTER", "")).plan
    text = render_text(plan, cm.estimate(plan, cache=False), "spec.par")
    for row in ("cuda context", "nccl buffers", "3 communicators", "fragmentation", "5% of the activations"):
        assert row in text


def test_communicators_counted_per_group():
    # dense: world + tp + cp + dp·cp + pp + model-parallel (tp·pp) = 6 when every axis is split
    assert mem.nccl_communicators(2, 2, 2, 2, 1, 1, False) == 6
    assert mem.nccl_communicators(1, 8, 1, 1, 1, 1, False) == 2              # world and dp
    # DeepSeek-V3: world, dp (128), pp, ep (64), expert dp (128/64 = 2) = 5
    assert mem.nccl_communicators(16, 128, 1, 1, 64, 1, True) == 5


def test_planner_memory_matches_the_estimate_with_the_new_terms(check_spec, write_spec, tmp_path):
    """The planner's memory column uses the same kernels: costing a spec's own candidate gives the
    estimate's total, FP8, MLA, recompute modules and the overheads included."""
    from parc.planner.inputs import load_spec
    from parc.planner.space import PIPELINES, SPLITS
    from parc.planner.vector import train_costs

    text = '''
        model "m" {
          from = deepseek_v2_lite
          layers = 4
          mtp_layers = 1
        }
        cluster "c" { nodes = 1; gpus_per_node = 8; gpu = h100_sxm }
        mesh { dp = 4; pp = 2; ep = 4 }
        schedule { micro_batch = 1; global_batch = 16 }
        train { zero = 1; precision = fp8; recompute = selective; recompute_modules = [layernorm, mla_up_proj]
                offload_layers = 1 }
    '''
    plan = check_spec(text).plan
    want = cm.estimate(plan, cache=False).memory.total
    pr = load_spec(str(write_spec(text, "p.par")), root=tmp_path)
    costs = train_costs(pr)
    c = costs.cols
    sel = ((c["pp"] == 2) & (c["dp"] == 4) & (c["tp"] == 1) & (c["ep"] == 4) & (c["mb"] == 1)
           & (c["zero"] == 1) & (c["pipeline"] == PIPELINES.index("1f1b")) & (c["v"] == 1)
           & (c["split"] == SPLITS.index("even")))
    assert sel.any()
    assert c["memory"][sel] == pytest.approx(want, rel=1e-9)


# --- 9. published configurations that ran -------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama3_405b_8k", "deepseek_v3"])
def test_published_configurations_fit(name):
    from parc.api import check_file

    r = check_file(str(ROOT / "examples" / "published" / f"{name}.par"), (), root=ROOT)
    errors = [(d.code, d.message) for d in r.diagnostics if d.severity == "error"]
    assert errors == []
    assert r.plan is not None
    e = cm.estimate(r.plan, cache=False)
    assert e.memory.total <= e.memory.capacity
