"""Step time: GEMM rates by shape, per-precision peaks, collectives per algorithm, overlap settings
and serving's HBM efficiency, each against a value worked by hand from its formula."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from parc.cost import comm as C
from parc.cost import estimate as cm
from parc.cost.gemm import gemm_rate, layer_gemms
from parc.model.plan import Profile
from parc.resolve import load

A100, H100 = 312e12, 989e12


def plan_of(text: str):
    res = load("t.par", text=text, partial=True)
    assert res.plan is not None, [d.message for d in res.diagnostics]
    return res.plan


def gpt_spec(gpu="a100_sxm_80gb", train="", profile="", nodes=1, mesh="tp = 8",
             schedule="micro_batch = 1\n global_batch = 8", model="from = gpt3_175b\n layers = 8"):
    """GPT-3 175B's layer shape (8 of its layers) on one or more 8-GPU nodes."""
    return f'''
model "m" {{
 {model}
}}
cluster "c" {{
 nodes = {nodes}
 gpus_per_node = 8
 gpu = {gpu}
 inter_node = infiniband(200Gb/s)
}}
mesh {{
 {mesh}
}}
schedule {{
 {schedule}
}}
train {{
 sequence_parallel = true
 recompute = selective
 {train}
}}
{profile}
'''


# --- GEMM rate by shape ----------------------------------------------------------------------------

def test_gemm_rate_saturates_in_the_smallest_side():
    # M = 2048 tokens, N = 3200, K = 25600 on an A100 at e = 0.8, d½ = 256: the smallest side is
    # 2048, so 0.8 · 2048 / (2048 + 256) = 0.71111 of 312 TFLOP/s. Intensity 2MNK / 2(MK+KN+MN)
    # = 1,097 FLOP/B, far above the A100's ridge (312e12 / (2039e9 · 0.6) = 255): compute-bound.
    r = gemm_rate(2048, 3200, 25600, A100, 0.8, 256, 2039e9, 0.6, 2)
    assert r == pytest.approx(A100 * 0.8 * 2048 / 2304, rel=1e-12)
    # no saturation (d½ = 0): the profile's efficiency itself
    assert gemm_rate(2048, 3200, 25600, A100, 0.8, 0, 2039e9, 0.6, 2) == pytest.approx(0.8 * A100)


def test_gemm_rate_is_hbm_bound_for_one_row():
    # decoding one token through an 8192 × 8192 weight on an H100: 2·8192² = 134.2 MFLOP over
    # 2 B · (8192 + 8192² + 8192) = 134.25 MB. HBM at 3.35 TB/s · 0.6 takes 66.79 µs; the tensor
    # cores, saturated to 1/(1 + 192) of 989 T · 0.7, take 2·8192²/(989e12·0.7/193) = 37.4 µs:
    # HBM binds.
    flops = 2 * 8192 * 8192
    mem_t = 2 * (8192 + 8192 * 8192 + 8192) / (3.35e12 * 0.6)
    assert mem_t == pytest.approx(66.79e-6, rel=1e-3)
    assert gemm_rate(1, 8192, 8192, H100, 0.7, 192, 3.35e12, 0.6, 2) == pytest.approx(flops / mem_t, rel=1e-12)


def test_gemm_rate_takes_arrays():
    M = np.array([1.0, 2048.0])
    r = gemm_rate(M, 3200, 25600, A100, 0.8, 256, 2039e9, 0.6, 2)
    assert r.shape == (2,) and r[1] == pytest.approx(A100 * 0.8 * 2048 / 2304) and r[0] < r[1] / 100


def test_layer_gemms_cover_the_layer_flops():
    # the GEMM list of a dense layer multiplies exactly the layer's matmul weights (no biases):
    # QKV + output + up/gate + down = attention_params + mlp_params (biases aside) over tp
    p = plan_of(gpt_spec(gpu="h100_sxm", model="from = llama3_70b\n layers = 2"))
    m, T, tp = p.model, 4096, 8
    flops = sum(2 * M * N * K * n for M, N, K, n in layer_gemms(m, T, tp))
    assert flops == pytest.approx(2 * T * (cm.attention_params(m) + cm.mlp_params(m, m.ffn_hidden)) / tp, rel=1e-12)


def test_smaller_tp_shards_run_at_a_lower_rate():
    # the same 175B layer at tp 8 and tp 16: the output projection's K drops from 1536 to 768
    p = plan_of(gpt_spec())
    prof = p.profile
    assert prof.gemm_efficiency == p.cluster.gpu.matmul_efficiency == 0.869   # the A100's measured matmul rate
    r8 = cm.stage_rates(p.model, 2048, 8, 1, 1, p.cluster.gpu, p.train, prof)["dense"]
    r16 = cm.stage_rates(p.model, 2048, 16, 1, 1, p.cluster.gpu, p.train, prof)["dense"]
    assert r16 < r8 < A100 * prof.gemm_efficiency


# --- per-precision peaks ---------------------------------------------------------------------------

def test_gpu_presets_carry_fp8_peaks_and_nvls():
    p = plan_of(gpt_spec(gpu="h800"))
    g = p.cluster.gpu
    assert (g.flops, g.fp8_flops, g.nvlink_bandwidth, g.nvls) == (989e12, 1979e12, 200e9, True)
    assert g.peak("fp8") == 1979e12 and g.peak("bf16") == 989e12
    a = plan_of(gpt_spec()).cluster.gpu
    assert a.fp8_flops == 0 and a.peak("fp8") == 312e12 and not a.nvls   # no FP8 tensor cores on A100
    for name in ("gb200", "b200", "mi300x"):
        assert plan_of(gpt_spec(gpu=name)).cluster.gpu.fp8_flops > 0


def test_fp8_tensorwise_linear_against_torchaos_microbenchmark():
    # torchao/float8/README.md: on H100 a linear of M, K, N = 4096, 8192, 16384 (forward, input
    # gradient and weight gradient GEMMs) runs 1.39x faster in float8 with tensorwise dynamic
    # scaling than in BF16. parc's: each GEMM at its FP8 rate (the FP8 matmul benchmark's 70.9% of
    # 1979 TFLOP/s, shape-scaled as BF16's) plus 6 bytes of casts per element of the input (M·K),
    # the weight (K·N) and the output gradient (M·N) at 0.6 of 3.35 TB/s.
    from parc.model.frameworks import fp8_recipes

    g = plan_of(gpt_spec(gpu="h100_sxm")).cluster.gpu
    prof = Profile(gemm_efficiency=g.gemm_efficiency)
    M, K, N = 4096, 8192, 16384
    shapes = [(M, N, K), (M, K, N), (K, N, M)]          # forward, input gradient, weight gradient
    bf = sum(2 * a * b * c / gemm_rate(a, b, c, H100, g.gemm_efficiency, prof.gemm_half_size, 3.35e12, 0.6, 2)
             for a, b, c in shapes)
    fp8_peak = 1979e12 * g.fp8_gemm_efficiency / g.gemm_efficiency
    f8 = sum(2 * a * b * c / gemm_rate(a, b, c, fp8_peak, g.gemm_efficiency, prof.gemm_half_size, 3.35e12, 0.6, 1)
             for a, b, c in shapes)
    casts = fp8_recipes()["tensorwise"]["bytes"] * (M * K + K * N + M * N) / (3.35e12 * 0.6)
    assert bf / (f8 + casts) == pytest.approx(1.39, rel=0.08)


def test_fp8_recipes_set_the_gemm_rate_and_the_casts():
    bf = cm.estimate(plan_of(gpt_spec(gpu="h100_sxm")), cache=False)
    f8 = cm.estimate(plan_of(gpt_spec(gpu="h100_sxm", train="precision = fp8")), cache=False)
    from parc.model.frameworks import fp8_recipe, fp8_recipes

    # unset, the recipe is the framework's default (Megatron-LM's: delayed scaling), left to it
    assert f8.plan.train.fp8_recipe is None and fp8_recipe(f8.plan.train) == fp8_recipes()["delayed"]
    assert (bf.gemm_peak, f8.gemm_peak) == (989e12, 1979e12)
    sb, s8 = bf.compute_split(), f8.compute_split()
    assert s8["attention"] == pytest.approx(sb["attention"])          # attention's core stays BF16
    # the layers' GEMMs at 70.9% of 1979 against 80.3% of 989: 1/1.767 of their BF16 time; the
    # output head stays BF16 in every recipe, so the stage's GEMMs gain a little less
    assert 1 / 1.767 < s8["gemm"] / sb["gemm"] < 0.6
    assert s8["memory_bound"] > sb["memory_bound"]                    # the casts
    # block-wise scaling runs DeepGEMM's kernel (78.3% of the FP8 peak) and casts in one pass a layout
    blk = cm.estimate(plan_of(gpt_spec(gpu="h100_sxm", train="precision = fp8\n fp8_recipe = blockwise")),
                      cache=False)
    assert blk.compute_split()["gemm"] < s8["gemm"]
    rows = cm.estimate(plan_of(gpt_spec(gpu="h100_sxm", train="precision = fp8\n fp8_recipe = rowwise")),
                       cache=False)
    assert rows.compute_split()["memory_bound"] > s8["memory_bound"]  # two scaled copies of each tensor
    # MFU = model FLOPs / (step · GPUs · 989 TFLOP/s), the BF16 basis, whatever the precision
    assert f8.mfu == pytest.approx(f8.model_flops_per_step / (f8.step_time * 8 * 989e12), rel=1e-12)
    assert f8.mfu > bf.mfu


def test_gemm_half_size_zero_gives_the_flat_model():
    # with d½ = 0 and no HBM limit reached, the GEMMs take their FLOPs / (peak · e)
    p = plan_of(gpt_spec(profile='profile "flat" {\n gemm_efficiency = 0.5\n gemm_half_size = 0\n}'))
    assert p.profile.gemm_half_size == 0 and p.profile.gemm_efficiency == 0.5
    est = cm.estimate(p, cache=False)
    st = est.stages[0]
    assert est.compute_split()["gemm"] == pytest.approx(
        st.gemm_flops_per_microbatch / (A100 * 0.5) * est.microbatches, rel=1e-9)
    # the loss's passes over the logits are memory-bound: 2048 tokens · 51200/8 vocabulary · 52
    # bytes at 0.6 · 2039 GB/s = 681,574,400 B / 1.2234e12 B/s = 0.5571 ms per microbatch
    loss = 2048 * 51200 / 8 * 52 / (2039e9 * 0.6)
    assert loss == pytest.approx(0.5571e-3, rel=1e-3)
    assert est.compute_split()["memory_bound"] > loss * est.microbatches


def test_unfused_attention_pays_its_score_passes_at_hbm_speed():
    fused = cm.estimate(plan_of(gpt_spec()), cache=False)
    p = plan_of(gpt_spec(train="flash_attention = false"))
    assert p.train.flash_attention is False and fused.microbatches == 8
    unfused = cm.estimate(p, cache=False)
    # per microbatch: 96/8 heads · 2048 · 2048 scores · 8 layers = 402,653,184 elements, each
    # 9 (forward) + 9 (selective recompute) + 11 (backward) = 29 bytes = 11.677 GB at
    # 0.6 · 2039 GB/s = 9.545 ms; 8 microbatches: 76.36 ms more attention, GEMMs unchanged
    per_mb = 96 / 8 * 2048 * 2048 * 8 * 29 / (0.6 * 2039e9)
    assert per_mb == pytest.approx(9.545e-3, rel=1e-3)
    # the core's forward: 4·s·a·d FLOPs a token and layer, 2048/8 tokens a GPU, 8 layers; unfused
    # its batched GEMMs run at the A100's 86.9% both ways (a forward, once more recomputed, and a
    # backward of two forwards); the flash kernel (FlashAttention-2 on Ampere, 70% forward and 60%
    # backward of 2.5 forwards) computes (16 + 1)/32 of the 16 × 16 blocks of 128 rows
    units = 2048 / 8 * 8 * 4 * 2048 * 96 * 128
    core_unfused = units * (2 + 2) / (A100 * 0.869)
    core_flash = units * 17 / 32 * (2 / (A100 * 0.70) + 2.5 / (A100 * 0.60))
    a, b = fused.compute_split(), unfused.compute_split()
    assert a["attention"] == pytest.approx(8 * core_flash, rel=1e-9)
    assert b["attention"] == pytest.approx(8 * (core_unfused + per_mb), rel=1e-9)
    assert b["gemm"] == pytest.approx(a["gemm"], rel=1e-12)
    # without recompute the forward's 9 bytes are paid once: 20 bytes per score, one forward
    none = cm.estimate(replace(p, train=replace(p.train, recompute="none")), cache=False)
    assert none.compute_split()["attention"] == pytest.approx(
        8 * (units * 3 / (A100 * 0.869) + per_mb * 20 / 29), rel=1e-9)


# --- collectives per algorithm ---------------------------------------------------------------------

def test_allreduce_algorithms_by_hand():
    # 8 GPUs in one node, 1 GB of data per all-reduce (ring bytes 2·7/8 GB), 10 calls, 450 GB/s, α = 2 µs
    S, n, calls, bw, a = 1e9, 8, 10, 450e9, 2e-6
    ring, tree, nvls = C.allreduce_times(2 * 7 / 8 * S, n, calls, n, (bw, a), None, True)
    assert ring == pytest.approx(1.75e9 / bw + 10 * 14 * a)          # 3.8889 ms + 0.28 ms
    assert tree == pytest.approx(2e9 / bw + 10 * 2 * 3 * a)          # 2S, 2·log2(8) steps
    assert nvls == pytest.approx(1e9 / bw + 10 * 2 * a)              # the data once through the switch
    t, algo = C.axis_time("tp", 2 * 7 / 8 * S, n, calls, n, (bw, a), None, True)
    assert C.ALGORITHMS[int(algo)] == "nvls" and t == pytest.approx(nvls)
    # without NVLS, small messages pick the tree (fewer steps), large ones the ring (fewer bytes)
    small = C.axis_time("tp", 2 * 7 / 8 * 1e3, n, 1000, n, (bw, a), None, False)
    large = C.axis_time("tp", 2 * 7 / 8 * S, n, 1, n, (bw, a), None, False)
    assert (C.ALGORITHMS[int(small[1])], C.ALGORITHMS[int(large[1])]) == ("tree", "ring")


def test_hierarchical_allreduce_across_nodes():
    # 32 GPUs, 8 per node (4 nodes): reduce-scatter/all-gather inside the node over NVLink, and a
    # ring over the 4 nodes of S/8 per GPU on 25 GB/s:
    # intra 2·7/8·S/300e9 + 14α_i, inter 2·3/4·S/8/25e9 + 6α_x (one call)
    S, n = 8e9, 32
    ring_bytes = 2 * (n - 1) / n * S
    ring, tree, nvls = C.allreduce_times(ring_bytes, n, 1, 8, (300e9, 2e-6), (25e9, 4e-6), False)
    intra = 2 * 7 / 8 * S / 300e9 + 14 * 2e-6
    assert ring == pytest.approx(intra + 2 * 3 / 4 * S / 8 / 25e9 + 6 * 4e-6)
    assert tree == pytest.approx(intra + 2 * S / 8 / 25e9 + 2 * 2 * 4e-6)
    assert nvls == math.inf
    # one GPU per node (dp across nodes): all of it over the inter-node link
    ring1, _, _ = C.allreduce_times(ring_bytes, n, 1, 1, (300e9, 2e-6), (25e9, 4e-6), False)
    assert ring1 == pytest.approx(ring_bytes / 25e9 + 2 * 31 * 4e-6)


def test_alltoall_splits_between_links():
    # 16 GPUs, 8 per node: 7/15 of the bytes stay on NVLink, 8/15 cross at the same time
    t = C.alltoall_time(15e9, 16, 1, 8, (450e9, 2e-6), (50e9, 4e-6))
    assert t == pytest.approx(max(7e9 / 450e9, 8e9 / 50e9) + 15 * 4e-6)


def test_explain_json_names_the_algorithm_per_axis():
    no_sp = gpt_spec(gpu="h100_sxm", nodes=2, mesh="dp = 2\n tp = 8").replace("sequence_parallel = true", "")
    h = cm.estimate(plan_of(no_sp), cache=False)
    a = cm.estimate(plan_of(gpt_spec(nodes=2, mesh="dp = 2\n tp = 8")), cache=False)
    assert h.to_json()["comm_algorithm"]["tp"] == "nvls"       # NVLink SHARP reduces an all-reduce in the switch
    # sequence parallelism's reduce-scatter + all-gather pairs gain nothing from it (2S through the switch)
    hs = cm.estimate(plan_of(gpt_spec(gpu="h100_sxm", nodes=2, mesh="dp = 2\n tp = 8")), cache=False)
    assert hs.to_json()["comm_algorithm"]["tp"] in ("ring", "tree")
    assert a.to_json()["comm_algorithm"]["tp"] in ("ring", "tree")
    assert a.comm_link["dp"] == "inter_node" and a.comm_local["dp"] == 1


def test_link_efficiency_scales_bandwidth_time():
    slow = plan_of(gpt_spec(profile='profile "p" {\n intra_node_efficiency = 0.5\n}'))
    base = cm.estimate(plan_of(gpt_spec()), cache=False)
    half = cm.estimate(slow, cache=False)
    # the ring's tp time is α·steps + bytes/bw: halving bw doubles only the bytes part
    assert base.comm_algorithm["tp"] == "ring"
    lat = base.comm_time["tp"] - base.comm_bytes["tp"] / 300e9
    assert half.comm_time["tp"] == pytest.approx(lat + base.comm_bytes["tp"] / 150e9, rel=1e-9)


# --- overlap settings ------------------------------------------------------------------------------

def test_overlap_keys_parse_and_default():
    t = plan_of(gpt_spec()).train
    assert (t.overlap_grad_reduce, t.overlap_param_gather, t.tp_comm_overlap, t.ep_comm_overlap) == \
        (True, False, False, False)
    t = plan_of(gpt_spec(train="tp_comm_overlap = true\n overlap_param_gather = true")).train
    assert t.tp_comm_overlap and t.overlap_param_gather


def test_tp_comm_overlap_hides_under_the_gemms():
    off = cm.estimate(plan_of(gpt_spec()), cache=False)
    on = cm.estimate(plan_of(gpt_spec(train="tp_comm_overlap = true")), cache=False)
    assert off.comm_exposed["tp"] == off.comm_time["tp"]
    gemm, overlap = on.compute_split()["gemm"], on.plan.profile.overlap
    assert on.comm_exposed["tp"] == pytest.approx(on.comm_time["tp"] - overlap * min(on.comm_time["tp"], gemm))
    # the step loses exactly the hidden seconds, stretched by the (absent) bubble
    assert off.step_time - on.step_time == pytest.approx(off.comm_exposed["tp"] - on.comm_exposed["tp"])


def test_profile_overlap_scales_what_is_hidden():
    text = gpt_spec(train="tp_comm_overlap = true", profile='profile "p" {\n overlap = 0.25\n}')
    est = cm.estimate(plan_of(text), cache=False)
    gemm = est.compute_split()["gemm"]
    assert est.comm_exposed["tp"] == pytest.approx(est.comm_time["tp"] - 0.25 * min(est.comm_time["tp"], gemm))


def test_dp_reduce_and_gather_overlap_separately():
    # dp = 8 across 8 nodes, zero 1: gradients reduce-scatter (hidden under 2/3 of a microbatch's
    # compute) and parameters all-gather (exposed unless overlap_param_gather)
    base = gpt_spec(nodes=8, mesh="dp = 8\n tp = 8", schedule="micro_batch = 1\n global_batch = 64",
                    train="zero = 1")
    est = cm.estimate(plan_of(base), cache=False)
    comm = est.comm_bytes
    gather = est.comm_time["dp"] * comm["dp_gather"] / comm["dp"]
    reduce = est.comm_time["dp"] - gather
    per, o = est.compute_time / est.microbatches, est.plan.profile.overlap
    assert est.comm_exposed["dp"] == pytest.approx(reduce - o * min(reduce, 2 / 3 * per) + gather)
    est2 = cm.estimate(plan_of(base.replace("zero = 1", "zero = 1\n overlap_param_gather = true")), cache=False)
    assert est2.comm_exposed["dp"] == pytest.approx(reduce - o * min(reduce, 2 / 3 * per)
                                                    + gather - o * min(gather, per / 3))


# --- serving ---------------------------------------------------------------------------------------

def test_serving_reads_hbm_at_hbm_efficiency():
    from parc.cost.serve_step import StepModel

    text = '''
model "m" { from = llama3_8b }
cluster "c" { nodes = 1
 gpus_per_node = 1
 gpu = h100_sxm }
mesh { tp = 1 }
serve { max_model_len = 4096 }
'''
    p = plan_of(text)
    est = cm.estimate(p, cache=False)
    a = float(StepModel(p, est).step(1.0, 0.0, 1000.0))
    # one sequence: the weights' read (16.06 GB at 3.35 TB/s × 0.6) and its memory-bound kernels'
    # (32 layers of 188,416 bytes), and its KV's at the decode attention kernel's measured 0.896
    hbm = (est.memory.weights + 32 * 188_416) / (3350e9 * 0.6)
    kv = 1000 * est.kv_bytes_per_token / (3350e9 * 0.896)
    assert a == pytest.approx(hbm + kv, rel=1e-6)
    p.profile = replace(p.profile, hbm_efficiency=0.3)
    assert float(StepModel(p, est).step(1.0, 0.0, 1000.0)) == pytest.approx(2 * hbm + kv, rel=1e-9)   # half the bandwidth
    # the GEMMs of one row run far below their peak (1 / (1 + 375)) yet under the weights' read:
    # 7.4 ms against 8.0 ms, so a lower efficiency that keeps them under (0.76: 7.8 ms) does not show
    assert (p.profile.gemm_efficiency, p.profile.gemm_half_size) == (0.803, 375)
    p.profile = replace(p.profile, hbm_efficiency=0.6, gemm_efficiency=0.76)
    assert float(StepModel(p, est).step(1.0, 0.0, 1000.0)) == pytest.approx(a, rel=1e-9)
