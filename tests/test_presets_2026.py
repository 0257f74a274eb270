"""The model presets of 2026 against their published parameter counts, the attention fields they
brought (q/k/v biases, q/k norms, sinks, local attention) and the KV cache local attention keeps.
The arithmetic is in the comments; each published figure names its source (the preset's
``source`` says where its shapes were read)."""
from __future__ import annotations

import pytest

from parc.cost import estimate as cm
from parc.cost import memory as mem
from parc.model import params as P
from parc.model.plan import Model
from parc.resolve.catalog import presets


def preset(name: str) -> Model:
    d = {k: v for k, v in presets("models")[name].items() if k != "source"}
    d.setdefault("kv_heads", d["heads"])
    d.setdefault("head_dim", d["hidden"] // d["heads"])
    return Model(name=name, params=0, **d)


# (preset, published total, published active or None, tolerance, whether the active figure counts
# the token embedding)
PUBLISHED = [
    # DeepSeek-V3 report (arXiv:2412.19437) and the R1 model card: 671B, 37B activated
    ("deepseek_v3", 671e9, 37e9, 0.02, True),
    ("deepseek_r1", 671e9, 37e9, 0.02, True),
    # Kimi K2 report (arXiv:2507.20534): 1.04T total, 32.6B activated
    ("kimi_k2", 1.04e12, 32.6e9, 0.02, True),
    # Qwen3 report (arXiv:2505.09388) Table 1-2: 235B/22B, 30.5B/3.3B, 8.2B, 32.8B
    ("qwen3_235b_a22b", 235e9, 22e9, 0.01, True),
    ("qwen3_30b_a3b", 30.5e9, 3.3e9, 0.02, True),
    ("qwen3_8b", 8.2e9, None, 0.01, True),
    # Qwen/Qwen3-0.6B model card: 0.6B parameters, 0.44B of them outside the (tied) embedding
    ("qwen3_0_6b", 0.6e9, None, 0.01, True),
    ("qwen3_32b", 32.8e9, None, 0.01, True),
    # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B / 5.13B, 20.91B / 3.61B; the active
    # figures leave the embedding out
    ("gpt_oss_120b", 116.83e9, 5.13e9, 0.001, False),
    ("gpt_oss_20b", 20.91e9, 3.61e9, 0.001, False),
    # Llama 4 model cards: Scout 109B total (with the vision encoder), Maverick 400B; 17B active
    ("llama4_scout", 109e9, 17e9, 0.02, True),
    ("llama4_maverick", 400e9, 17e9, 0.02, True),
    # Qwen2.5 report (arXiv:2412.15115) and model cards: 7.61B, 32.5B, 72.7B
    ("qwen2_5_7b", 7.61e9, None, 0.01, True),
    ("qwen2_5_32b", 32.5e9, None, 0.01, True),
    ("qwen2_5_72b", 72.7e9, None, 0.01, True),
    # Llama 3 herd (arXiv:2407.21783): 8B (8.03B on the model card), 70B (70.6B), 405B
    ("llama3_8b", 8.03e9, None, 0.01, True),
    ("llama3_1_8b", 8.03e9, None, 0.01, True),
    ("llama3_70b", 70.6e9, None, 0.01, True),
    ("llama3_1_70b", 70.6e9, None, 0.01, True),
    ("llama3_3_70b", 70.6e9, None, 0.01, True),
    ("llama3_405b", 405e9, None, 0.01, True),
    ("llama3_1_405b", 405e9, None, 0.01, True),
]


@pytest.mark.parametrize("name,total,active,tol,embedding", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_presets_match_published_counts(name, total, active, tol, embedding):
    m = preset(name)
    assert P.param_count(m, mtp=False) == pytest.approx(total, rel=tol)
    if active is not None:
        assert P.active_params(m, embedding=embedding) == pytest.approx(active, rel=tol)


def test_gpt_oss_120b_to_the_parameter():
    m = preset("gpt_oss_120b")
    # attention (h 2880, 64 heads and 8 KV heads of 64): q 2880·4096 = 11,796,480, k and v
    # 2·2880·512 = 2,949,120, o 4096·2880 = 11,796,480; biases 4096 + 2·512 + 2880 = 8,000;
    # sinks 64 -> 26,550,144
    assert P.attention_params(m) == 26_550_144
    # an expert: SwiGLU 3·2880·2880 = 24,883,200 + biases 2·2880 + 2880 = 24,891,840
    assert P.mlp_params(m, m.moe_ffn_hidden) == 24_891_840
    # a layer: 26,550,144 + 128·24,891,840 + router 2880·128 + norms 2·2880 = 3,213,080,064
    assert P.layer_params(m, moe=True) == 3_213_080_064
    # 36 layers + embedding and head 2·201088·2880 + final norm 2880 = 116,829,152,064
    # (the card's 116.83B; the card counts the routers' 128 biases a layer too: 4,608 more)
    assert P.param_count(m) == 116_829_152_064
    # active, embedding left out: 36·(26,550,144 + 4·24,891,840 + 368,640 + 5,760)
    # + head 579,133,440 + 2,880 = 5,132,844,864 (the card's 5.13B)
    assert P.active_params(m, embedding=False) == 5_132_844_864


def test_qwen3_30b_a3b_matches_its_checkpoint():
    m = preset("qwen3_30b_a3b")
    # q 2048·4096 + k, v 2·2048·512 + o 4096·2048 = 18,874,368; q_norm and k_norm 2·128
    assert P.attention_params(m) == 18_874_368 + 256
    # layer: 18,874,624 + 128 experts · 3·2048·768 (603,979,776) + router 262,144 + norms 4,096
    # = 623,120,640; · 48 + embedding and head 2·151936·2048 + 2,048 = 30,532,122,624, the
    # number of parameters in the published checkpoint (Keras Hub's qwen3_moe_30b_a3b_en: 30532122624)
    assert P.param_count(m) == 30_532_122_624


def test_qwen2_5_counts_its_qkv_biases():
    m = preset("qwen2_5_7b")
    # q 3584², k and v 2·3584·512, o 3584² = 29,360,128, plus the q, k, v biases 3584 + 2·512
    assert P.attention_params(m) == 29_360_128 + 4_608
    # 28 layers of 29,364,736 + SwiGLU 3·3584·18944 (203,685,888) + norms 7,168 = 6,525,618,176,
    # + embedding and head 2·152064·3584 + 3,584 = 7,615,616,512 (the card's 7.61B)
    assert P.param_count(m) == 7_615_616_512


def test_llama4_maverick_interleaves_moe_and_dense():
    m = preset("llama4_maverick")
    # interleave_moe_layer_step 2: layers 1, 3, ..., 47 are MoE
    assert m.moe_layers == 24 and P.is_moe_layer(m, 1) and not P.is_moe_layer(m, 0)
    # dense: attention 2·5120·5120 + 2·5120·1024 = 62,914,560, MLP 3·5120·16384 = 251,658,240,
    # norms 10,240 -> 314,583,040; MoE: 62,914,560 + (128 + 1 shared)·3·5120·8192 (16,231,956,480)
    # + router 655,360 + 10,240 = 16,295,536,640; 24 of each + 2·202048·5120 + 5,120
    assert P.param_count(m) == 24 * 314_583_040 + 24 * 16_295_536_640 + 2 * 202048 * 5120 + 5120


def test_local_layers_follow_the_configs():
    oss, scout = preset("gpt_oss_120b"), preset("llama4_scout")
    # gpt-oss layer_types: sliding, full, sliding, full, ...
    assert [P.is_local_layer(oss, i) for i in range(4)] == [True, False, True, False]
    assert oss.global_layers == 18
    # Llama 4 no_rope_layers [1, 1, 1, 0, ...]: layers 3, 7, ... attend globally
    assert [P.is_local_layer(scout, i) for i in range(8)] == [True] * 3 + [False] + [True] * 3 + [False]
    assert scout.global_layers == 12
    # the closed form agrees with the predicate on every range
    for e in (0, 1, 2, 3, 4):
        m = Model("m", 12, 64, 128, 4, 4, None, 100, 0, attention_window=16, global_every=e)
        for a in range(13):
            for b in range(a, 13):
                assert P.local_layers_between(m, a, b) == sum(P.is_local_layer(m, i) for i in range(a, b))


def test_local_attention_bounds_the_kv_cache():
    m = preset("gpt_oss_120b")
    # per layer and token: 2 · 8 KV heads · 64 · 2 bytes = 2,048 B; 36 layers: 73,728 B a token
    assert mem.model_kv_bytes_per_token(m, 36, 2) == 73_728
    # an 8,192-token sequence: 18 global layers keep 8,192 tokens, 18 local ones 128:
    # 18·8,192 + 18·128 = 149,760 layer-tokens; 2,048 · 149,760 / 8,192 = 37,440 B a token
    assert mem.kv_layer_tokens(m, 36, 8192) == 149_760
    assert mem.model_kv_bytes_per_token(m, 36, 2, 1, 8192) == 37_440
    # shorter than the window: every layer keeps everything
    assert mem.model_kv_bytes_per_token(m, 36, 2, 1, 100) == 73_728
    # numpy arrays of contexts give the same, element by element
    import numpy as np

    got = mem.model_kv_bytes_per_token(m, 36, 2, 1, np.array([100, 8192]))
    assert got.tolist() == [73_728, 37_440]


def test_serving_estimate_sizes_gpt_oss_kv_by_its_window(check_spec):
    r = check_spec("""
        model "oss" { from = gpt_oss_120b }
        cluster "c" { nodes = 1; gpus_per_node = 4; gpu = h200 }
        mesh { tp = 4; ep = 4 }
        serve { max_model_len = 8192 }
        """)
    assert not r.errors, r.errors
    est = cm.estimate(r.plan, cache=False)
    # tp 4 keeps 2 of the 8 KV heads: 9,360 B a token averaged over an 8,192-token sequence
    # (2 · 2 · 64 · 2 = 512 B a layer-token · 149,760 / 8,192)
    assert est.kv_bytes_per_token == 9_360
    assert est.max_concurrent_seqs == est.kv_capacity_tokens // 8192


def test_each_stage_counts_its_own_local_layers():
    m = preset("gpt_oss_120b")
    # 36 layers over pp 4 in chunks of 9: stage 0 holds layers 0-8 (local 0, 2, 4, 6, 8: five),
    # stage 1 layers 9-17 (local 10, 12, 14, 16: four), and so on: 5, 4, 5, 4
    lay = cm.layouts_of(m, "1f1b", 4, [9, 9, 9, 9])
    assert [s.local_layers for s in lay] == [5, 4, 5, 4]
    # at 8,192 tokens stage 0 keeps 4 · 8,192 + 5 · 128 = 33,408 layer-tokens a sequence,
    # stage 1 5 · 8,192 + 4 · 128 = 41,472
    assert mem.kv_layer_tokens(m, 9, 8192, 5) == 33_408
    assert mem.kv_layer_tokens(m, 9, 8192, 4) == 41_472
