"""Decode throughput and latency of a serving plan at its memory limit.

The memory side (weights per GPU, KV bytes per token, KV capacity, concurrent sequences) is
:func:`parc.cost.estimate.estimate`'s. On top of it, a decode step is the roofline of each
pipeline stage (Williams et al. 2009; for transformer decoding Pope et al. 2022, "Efficiently
Scaling Transformer Inference", §2): a stage streams its weights and the KV cache of the
sequences it serves from HBM, or computes, whichever takes longer, then runs its tensor-parallel
all-reduces and hands the activations to the next stage.

* At the memory limit a replica (one dp rank: pp · tp GPUs) holds ``B`` sequences of
  ``max_model_len`` tokens (``estimate(...).max_concurrent_seqs``, or ``max_num_seqs`` when that
  is lower), and every step reads their whole KV cache.
* With pipeline parallelism the ``B`` sequences are split into ``pp`` microbatches that keep
  every stage busy (vLLM's virtual engines): a step of stage ``s`` serves ``b = B / pp`` sequences
  and takes ``t_s(b)``; the pipeline advances every ``T = max_s t_s(b)``.
* Throughput of the replica is ``B / (pp · T)`` tokens/s; one sequence gets its next token every
  ``pp · T`` seconds (its inter-token latency). So pipeline stages add latency: each stage
  reads only its share of the weights, but a token still passes all of them one after another,
  while tensor parallelism splits every stage's reads over more GPUs. No rule of thumb is
  needed: the formulas give it.
* Compute uses the same sustained fraction of peak FLOP/s (``efficiency``, the profile's
  ``gemm_efficiency``) as training; the memory-bound reads reach the profile's
  ``hbm_efficiency`` of the HBM bandwidth. A GPU without an ``hbm_bandwidth`` is treated as
  compute-bound.
"""
from __future__ import annotations

from dataclasses import dataclass

from parc.cost.comm import allreduce_bytes, axis_time, ep_bytes_per_layer, link_params, serving_calls
from parc.cost.params import attention_params, dtype_bytes, head_dim, mlp_params


@dataclass(slots=True)
class ServePerf:
    batch: int            # sequences per replica at the memory limit
    step_time: float      # seconds per pipeline step (T)
    latency: float        # seconds between two tokens of one sequence (pp · T)
    throughput: float     # output tokens per second of the whole plan (all dp replicas)
    stage_times: list     # t_s per pipeline stage


def stage_step_time(weight_bytes: float, kv_bytes: float, flops: float, comm_time: float,
                    hbm_bandwidth: float, peak_flops: float, efficiency: float,
                    hbm_efficiency: float | None = None) -> float:
    """One decode step of one pipeline stage: max(HBM time, compute time) + communication; the
    HBM reads at ``hbm_efficiency`` of the bandwidth (``efficiency`` when not given)."""
    hbm_eff = efficiency if hbm_efficiency is None else hbm_efficiency
    mem = (weight_bytes + kv_bytes) / (hbm_bandwidth * hbm_eff) if hbm_bandwidth > 0 else 0.0
    return max(mem, flops / (peak_flops * efficiency)) + comm_time


def decode_flops_per_token(m, layers: int, moe_layers: int, tp: int, etp: int, context: int) -> float:
    """FLOPs one GPU spends on one decoded token over ``layers`` layers: 2 per matmul parameter it
    holds that the token passes (attention, dense MLP or top_k routed plus shared experts, split
    over tp or etp), plus attention over ``context`` cached tokens (4 · context · heads/tp · head_dim
    per layer: QKᵀ and AV)."""
    d = head_dim(m)
    dense = layers - moe_layers
    per = dense * mlp_params(m, m.ffn_hidden) / tp
    if moe_layers:
        per += moe_layers * ((m.top_k or 1) * mlp_params(m, m.moe_ffn_hidden) / etp
                             + m.shared_experts * mlp_params(m, m.moe_ffn_hidden) / tp)
    per += layers * attention_params(m) / tp
    attn = 4 * context * (m.heads / tp) * d * layers
    return 2 * per + attn


def decode_comm_bytes(m, layers: int, moe_layers: int, tp: int, ep: int, pp: int, wbytes: int,
                      tokens: float = 1) -> dict:
    """Bytes one GPU sends per decode step for ``tokens`` sequences, by axis: two all-reduces of h
    per layer under TP, the MoE dispatch and combine (forward only: half the training volume)
    and the hidden state handed to the next pipeline stage."""
    return {"tp": 2 * allreduce_bytes(m.hidden * wbytes, tp) * layers * tokens,
            "ep": ep_bytes_per_layer(tokens, m.hidden, m.top_k or 1, ep, wbytes) / 2 * moe_layers,
            "pp": tokens * m.hidden * wbytes / tp * (pp > 1)}


def serve_perf(plan, est, efficiency: float | None = None) -> ServePerf:
    """Throughput and latency of a serving ``plan`` at its memory limit, from its ``estimate``.
    ``efficiency`` (of peak FLOP/s) defaults to the plan's profile's ``gemm_efficiency``; the HBM
    reads always use its ``hbm_efficiency``."""
    if efficiency is None:
        efficiency = plan.profile.gemm_efficiency
    m, mesh, cl = plan.model, plan.mesh, plan.cluster
    ctx = plan.serve.max_model_len
    B = min(est.max_concurrent_seqs, plan.serve.max_num_seqs)
    if B <= 0:
        return ServePerf(0, 0.0, 0.0, 0.0, [])
    p, t = mesh.pp, mesh.tp
    b = B / p
    lp = link_params(plan.profile, est.link_bandwidth, est.link_kind)
    wbytes = dtype_bytes(m.dtype)
    sizes = {"tp": t, "ep": mesh.ep, "pp": p}
    times = []
    for st in est.stages:
        comm, calls = decode_comm_bytes(m, st.layers, st.moe_layers, t, mesh.ep, p, wbytes, b), \
            serving_calls(st.layers, st.moe_layers)
        comm_time = sum(float(axis_time(ax, comm[ax], sizes[ax], calls[ax], est.comm_local[ax], lp["intra_node"],
                                        lp.get("inter_node"), cl.gpu.nvls)[0])
                        for ax in ("tp", "ep", "pp") if est.comm_link.get(ax) is not None)
        flops = b * decode_flops_per_token(m, st.layers, st.moe_layers, t, mesh.etp, ctx)
        kv = b * ctx * st.kv_bytes_per_token
        times.append(stage_step_time(st.memory.weights, kv, flops, comm_time, cl.gpu.hbm_bandwidth,
                                     cl.gpu.flops, efficiency, plan.profile.hbm_efficiency))
    T = max(times)
    return ServePerf(B, T, p * T, mesh.dp * B / (p * T), times)
