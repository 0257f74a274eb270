"""How fast a GEMM runs on one GPU: the rate of the matrix shapes a layer multiplies after tensor
and expert sharding, the attention core's kernel, and the compute time of a pipeline stage per
microbatch from them.

One GEMM of shape M×N×K (2·M·N·K FLOPs, reading and writing M·K + K·N + M·N elements) runs at

    rate = 2MNK / max( 2MNK / (peak · e · d/(d + d½)),  bytes / (hbm · hbm_efficiency) )

* ``e`` is the profile's ``gemm_efficiency``, by default the GPU's measured maximum achievable
  matmul rate over its peak (``parc/model/data/gpus.toml``, a matmul benchmark's): what the
  largest GEMMs sustain.
* ``d`` is the GEMM's smallest dimension and ``d½`` the profile's ``gemm_half_size``: a GEMM whose
  smallest side is ``d½`` runs at half of ``e``. Tiles that do not fill the GPU's SMs, a K loop
  too short to hide its prologue and wave quantization all grow as a dimension shrinks; one
  saturation in the smallest side is the simplest form that captures them. ``d½`` is fitted on
  the fit rows of the accuracy table alone (``bench/accuracy_fit.py``).
* The second term is the roofline (Williams et al. 2009): a GEMM with few rows (decoding, a
  small expert's share of tokens) is bound by HBM, not by the tensor cores.

Under ``precision = fp8`` the linear layers' GEMMs run on the FP8 peak at the GPU's
``fp8_matmul_efficiency`` (or the recipe's own kernel rate: DeepGEMM's for block-wise scaling),
scaled as the profile scales BF16's; the recipe's casts are memory traffic
(:mod:`parc.cost.kernels`, ``parc/model/data/kernels.toml``). The output head stays 16-bit.

Attention's core (QKᵀ and AV) with flash attention runs at the rate of the framework's kernel on
the GPU's architecture (FlashAttention-2 or -3, cuDNN; :func:`parc.model.frameworks.attention_efficiency`),
its backward 2.5 forward passes of FLOPs, over the blocks the causal mask keeps
(:func:`causal_share`). Without flash attention (``train.flash_attention = false``: Megatron-LM
before 2023, the runs of Narayanan et al. 2021 and Korthikanti et al. 2022) the core's batched
GEMMs run at ``peak · e`` and materialise the a·s²·b scores of every layer, whose softmax and
dropout are separate memory-bound kernels that read and write them; :data:`SCORE_BYTES` counts
their traffic per score element, at ``hbm · hbm_efficiency``. Every function takes scalars or
numpy arrays for the sizes.
"""
from __future__ import annotations

from parc.cost import xp as np

from parc.cost.flops import stage_flops_parts
from parc.cost.kernels import (elementwise_bytes, fp8_cast_elements, fp8_weight_elements,
                               moe_elementwise_bytes)
from parc.cost.params import head_dim


# HBM bytes per attention-score element that the unfused core's elementwise kernels move
# (Megatron-LM's fused scale-mask-softmax and attention dropout, 16-bit scores, a 1-byte mask):
#   forward:  softmax reads 2, writes 2; dropout reads 2, writes 2 and its mask 1      =  9
#   backward: dropout reads the gradient 2 and the mask 1, writes 2; softmax reads the
#             gradient 2 and its output 2, writes 2                                   = 11
# Recomputation (selective or full) runs the forward once more: + 9. The QKᵀ and AV GEMMs' own
# reads and writes of the scores are left to their FLOP time.
SCORE_BYTES_FORWARD, SCORE_BYTES_BACKWARD = 9.0, 11.0

# HBM bytes per logit (token × vocabulary entry on this tp rank) of the loss after the output head,
# as Megatron-LM's vocab-parallel cross entropy runs it on ``output.float()`` (torchtitan's loss
# also upcasts its logits to fp32):
#   forward:  cast to fp32 reads 2, writes 4; max reads 4; subtract it reads and writes 4 each;
#             exp the same; its sum reads 4; normalising to the softmax kept for backward 4 + 4 = 38
#   backward: scaling the softmax by the loss gradient reads and writes 4 each; the cast back to
#             16 bits for the head's backward GEMM reads 4, writes 2                        = 14
LOGIT_BYTES = 52.0

# Query (and key) rows of one tile of a flash attention kernel: FlashAttention-2's block of 128
# for head dim 128 (Dao 2023, §3.3); the causal mask's diagonal tiles are computed whole.
ATTENTION_BLOCK = 128


def gemm_rate(M, N, K, peak: float, efficiency: float, half: float, hbm: float, hbm_efficiency: float,
              nbytes: float):
    """Sustained FLOP/s of one M×N×K GEMM (the module's formula). Example: M = 2048, N = 3200,
    K = 25600 on an A100 (312 TFLOP/s) at e = 0.8, d½ = 256: 0.8 · 2048/2304 = 0.711 of peak."""
    d = np.minimum(np.minimum(M, N), K)
    flops = 2.0 * M * N * K
    compute = flops / (peak * efficiency * d / (d + half))
    if hbm <= 0:
        return flops / compute
    memory = nbytes * (M * K + K * N + M * N) / (hbm * hbm_efficiency)
    return flops / np.maximum(compute, memory)


def layer_gemms(m, tokens, tp, etp=1, ep=1, moe: bool = False) -> list:
    """The (M, N, K) of each GEMM one GPU runs in a layer's forward for a microbatch of ``tokens``
    tokens (on this context-parallel rank), with how many it runs: Q/K/V (fused) and the output
    projection split over tp; the MLP's up (and gate, fused) and down projections over tp; in a
    MoE layer the router, the shared experts over tp and each of the GPU's experts/ep experts
    over etp, with tokens·top_k·ep·etp/(tp·experts) rows each: an even expert load, parc's one
    assumption about routing (the expert all-to-all's bytes assume it too), which Megatron-LM's
    ``--moe-router-force-load-balancing`` (target megatron's ``force_load_balancing``) makes
    exact. The backward runs the same shapes transposed (its data and weight gradients have the
    same three sides)."""
    d, h = head_dim(m), m.hidden
    up = 2 if m.mlp == "swiglu" else 1
    out = [(tokens, (m.heads + 2 * m.kv_heads) * d / tp, h, 1), (tokens, h, m.heads * d / tp, 1)]
    if not moe:
        return out + [(tokens, up * m.ffn_hidden / tp, h, 1), (tokens, h, m.ffn_hidden / tp, 1)]
    out.append((tokens, m.experts, h, 1))
    if m.shared_experts:
        w = m.shared_experts * m.moe_ffn_hidden / tp
        out += [(tokens, up * w, h, 1), (tokens, h, w, 1)]
    rows = np.maximum(1.0, tokens * (m.top_k or 1) * ep * etp / (tp * m.experts))
    local = m.experts / ep
    return out + [(rows, up * m.moe_ffn_hidden / etp, h, local), (rows, h, m.moe_ffn_hidden / etp, local)]


def layer_rate(gemms: list, peak: float, efficiency: float, half: float, hbm: float, hbm_efficiency: float,
               nbytes: float):
    """The FLOP/s of a layer's GEMMs together: their FLOPs over the sum of their times."""
    flops = time = 0.0
    for M, N, K, count in gemms:
        f = 2.0 * M * N * K * count
        flops = flops + f
        time = time + f / gemm_rate(M, N, K, peak, efficiency, half, hbm, hbm_efficiency, nbytes)
    return flops / time


def gemm_ceilings(gpu, train, profile, efficiency: float | None = None) -> dict[str, tuple[float, float]]:
    """The (peak FLOP/s, efficiency) that a training plan's GEMMs run at by the precision they run
    in (their product: the rate the largest shapes approach): ``"bf16"`` always (a 16-bit plan's
    GEMMs; under FP8 the output head's, and the weight gradients' where the recipe keeps them in
    16 bits), and ``"fp8"`` for an FP8 plan on a GPU with FP8 tensor cores: the recipe's kernel
    rate, else the GPU's FP8 matmul benchmark, of the FP8 peak, scaled as the profile scales
    BF16's (:meth:`parc.model.plan.GPU.fp8_peak_on_bf16_scale`). ``efficiency`` overrides the
    profile's ``gemm_efficiency`` (None there: the GPU's)."""
    from parc.model.frameworks import fp8_recipe

    e = efficiency if efficiency is not None else (profile.gemm_efficiency or gpu.gemm_efficiency)
    out = {"bf16": (gpu.flops, e)}
    if train.precision == "fp8" and gpu.fp8_flops > 0:
        out["fp8"] = (gpu.fp8_peak_on_bf16_scale(fp8_recipe(train).get("gemm_efficiency")), e)
    return out


def stage_rates(m, tokens, tp, etp, ep, gpu, train, profile, efficiency: float | None = None, sp=False) -> dict:
    """What one GPU of a stage sustains for a microbatch of ``tokens`` tokens on its
    context-parallel rank, as a dict of scalars or numpy arrays (``tp``, ``sp`` and ``tokens`` may
    be arrays; ``train`` is the plan's train block, with its framework filled in):

    * ``dense``, ``moe``, ``head``: FLOP/s of the dense layers', the MoE layers' and the output
      head's GEMMs (the head stays 16-bit under FP8: no recipe casts the output layer);
    * ``attn_fwd``, ``attn_bwd``: seconds per FLOP of the attention core's forward (4·s·a·d per
      token and layer) for one forward pass and for the backward pass, from the framework's kernel
      on this GPU's architecture (:func:`parc.model.frameworks.attention_efficiency`; a flash kernel
      skips the blocks the causal mask hides, :func:`causal_share`, and its backward is 2.5 forward
      passes of FLOPs) or, unfused, the core's batched GEMMs at ``gemm_efficiency`` (backward 2
      passes);
    * ``per_score_byte`` (0 with flash attention), ``per_hbm_byte``: seconds per byte of the unfused
      core's score passes and of any memory-bound kernel;
    * ``elem_dense``, ``elem_dense_fwd``, ``elem_moe``, ``elem_moe_fwd``: bytes per token and layer of
      the elementwise kernels and FP8 casts (:mod:`parc.cost.kernels`), all passes and the forward's;
    * ``weights_dense``, ``weights_moe``: bytes per layer an FP8 recipe's weight casts move.

    ``efficiency`` overrides the profile's ``gemm_efficiency`` (None there: the GPU's)."""
    from parc.model.frameworks import attention_efficiency, fp8_recipe, framework

    ceilings = gemm_ceilings(gpu, train, profile, efficiency)
    e = ceilings["bf16"][1]
    fw = framework(train.framework)
    fp8 = "fp8" in ceilings
    recipe = fp8_recipe(train) if fp8 else {}
    half, hbm, hbm_e = float(profile.gemm_half_size), gpu.hbm_bandwidth, profile.hbm_efficiency
    bf16 = (*ceilings["bf16"], half, hbm, hbm_e, 2)
    knobs = (*ceilings["fp8"], half, hbm, hbm_e, 1) if fp8 else bf16
    dense = _recipe_rate(recipe, layer_gemms(m, tokens, tp), knobs, bf16)
    moe = _recipe_rate(recipe, layer_gemms(m, tokens, tp, etp, ep, moe=True), knobs, bf16) if m.is_moe else dense
    head = layer_rate([(tokens, m.vocab / tp, m.hidden, 1)], *bf16)
    per_hbm_byte = 1.0 / (hbm * hbm_e) if hbm > 0 else 0.0
    if train.flash_attention:
        fwd, bwd, _ = attention_efficiency(train.framework, gpu.arch)
        c = causal_share(m.seq_len)
        attn_fwd, attn_bwd = c / (gpu.flops * fwd), c * 2.5 / (gpu.flops * bwd)
    else:
        attn_fwd, attn_bwd = 1.0 / (gpu.flops * e), 2.0 / (gpu.flops * e)
    fused = fw["elementwise"] == "fused" or train.compile
    cast = float(recipe.get("bytes", 0.0))
    out = {"dense": dense, "moe": moe, "head": head, "attn_fwd": attn_fwd, "attn_bwd": attn_bwd,
           "per_score_byte": 0.0 if train.flash_attention else per_hbm_byte, "per_hbm_byte": per_hbm_byte}
    for kind, is_moe in (("dense", False), ("moe", True)):
        f_, b_ = (moe_elementwise_bytes if is_moe else elementwise_bytes)(m, tp, sp, fused)
        casts = cast * fp8_cast_elements(m, tp, sp, moe=is_moe)
        out[f"elem_{kind}"], out[f"elem_{kind}_fwd"] = f_ + b_ + casts, f_
        out[f"weights_{kind}"] = cast * fp8_weight_elements(m, tp, ep, etp, moe=is_moe)
    return out


def _recipe_rate(recipe: dict, gemms: list, knobs: tuple, bf16: tuple):
    """A layer's GEMM rate under ``knobs``; a recipe that keeps the weight-gradient GEMM in 16 bits
    (``high_precision_wgrad``: torchao's rowwise_with_gw_hp) runs that third of the FLOPs (forward,
    input gradient and weight gradient are as many) at the BF16 rate."""
    rate = layer_rate(gemms, *knobs)
    if not recipe.get("high_precision_wgrad"):
        return rate
    return 3.0 / (2.0 / rate + 1.0 / layer_rate(gemms, *bf16))


def causal_share(s):
    """The share of a causal attention's score blocks a flash kernel computes: the blocks below the
    diagonal and the diagonal's own, (n + 1) / 2n of n × n blocks of :data:`ATTENTION_BLOCK` rows
    (FlashAttention-2's causal kernels skip the rest, Dao 2023 §3.1)."""
    n = np.maximum(s / ATTENTION_BLOCK, 1.0)
    return (n + 1) / (2 * n)


def stage_compute_time(m, tokens, tp, rates: dict, dense_layers, moe_layers, head, rec_mult, rec_attn,
                       rec_elem=0.0, weight_casts=1.0, extra_bytes=0.0):
    """(GEMM seconds, attention-core seconds, memory-bound seconds) one GPU of a stage computes per
    microbatch of ``tokens`` tokens on its context-parallel rank, at the :func:`stage_rates`
    ``rates``:

    * the GEMMs: the FLOPs of :func:`parc.cost.flops.stage_flops_parts` (the microbatch's tokens
      over tp) at their shapes' rates;
    * the attention core: its forward once (twice where recomputed, ``rec_attn`` > 1) and its
      backward; without flash attention also the score passes, (heads/tp)·s scores per token and
      layer, :data:`SCORE_BYTES_FORWARD` + :data:`SCORE_BYTES_BACKWARD` bytes each (the forward's
      once more when recomputed);
    * memory-bound kernels: the elementwise kernels and FP8 casts (their forward once more where
      ``rec_elem`` is 1: full recompute, torchtitan's per-op selective recompute), the FP8 weight
      casts (``weight_casts``: the share of them this microbatch pays, 1 without cached copies) and
      the loss over the vocabulary on the last stage (:data:`LOGIT_BYTES` a logit), and
      ``extra_bytes`` a microbatch moves besides (a framework's gradient accumulation).

    Scalars or numpy arrays for the sizes."""
    dense, moe, attn, out = stage_flops_parts(m, tokens / tp, dense_layers, moe_layers, head, rec_mult, rec_attn)
    r = rates
    scores = (dense_layers + moe_layers) * tokens / tp * m.seq_len * m.heads
    nbytes = SCORE_BYTES_FORWARD * (1 + (rec_attn > 1)) + SCORE_BYTES_BACKWARD
    units = attn / (3 * rec_attn)      # the core's forward FLOPs (12·s·a·d·rec_attn a token and layer counted)
    attention = units * ((1 + (rec_attn > 1)) * r["attn_fwd"] + r["attn_bwd"]) + scores * nbytes * r["per_score_byte"]
    per_token = (dense_layers * (r["elem_dense"] + rec_elem * r["elem_dense_fwd"])
                 + moe_layers * (r["elem_moe"] + rec_elem * r["elem_moe_fwd"]))
    casts = weight_casts * (dense_layers * r["weights_dense"] + moe_layers * r["weights_moe"])
    loss = head * tokens * m.vocab / tp * LOGIT_BYTES
    memory = (per_token * tokens + casts + loss + extra_bytes) * r["per_hbm_byte"]
    return dense / r["dense"] + moe / r["moe"] + out / r["head"], attention, memory
