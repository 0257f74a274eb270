"""FLOPs: model FLOPs of a step, the extra that recomputation adds, and the hardware FLOPs one GPU
of a pipeline stage runs per microbatch."""
from __future__ import annotations

from parc.cost.params import Model, attention_params, mlp_params, mtp_params
from parc.cost.params import attention_core_dim as head_dim   # MLA: (d_qk + d_v)/2


def active_matmul_params(m: Model) -> int:
    """Parameters one token passes through in matmuls: every layer's attention and MLP (top_k of
    the routed experts, all shared experts, the router) and the output head (tied or not)."""
    moe_layers = m.moe_layers
    dense = m.layers - moe_layers
    moe_mlp = ((m.top_k or 1) + m.shared_experts) * mlp_params(m, m.moe_ffn_hidden) + m.hidden * m.experts
    return (m.layers * attention_params(m) + dense * mlp_params(m, m.ffn_hidden)
            + moe_layers * moe_mlp + m.vocab * m.hidden)


def model_flops(m: Model, tokens: float) -> float:
    """Model FLOPs of a training step over ``tokens`` tokens: 6·N·tokens for the matmuls (forward
    2, backward 4; N from :func:`active_matmul_params`) plus attention's 12·L·s·a·d per token
    (QKᵀ and AV, no causal halving). For a GPT this is Korthikanti et al. eq. 7,
    72·B·L·s·h²·(1 + s/6h + V/12hL)."""
    return 6 * active_matmul_params(m) * tokens + 12 * m.layers * m.seq_len * m.heads * head_dim(m) * tokens


def recompute_flops(m: Model, tokens: float, recompute: str) -> float:
    """Extra FLOPs recomputation adds: full recompute repeats the layers' forward (2·N_layers +
    4·L·s·a·d per token; Narayanan eq. 3's 96 against 72); selective recompute repeats the
    attention core, counted as Korthikanti et al. eq. 8 does (s/3h in place of s/6h); torchtitan's
    per-op selective checkpointing (``selective_op``) every second matmul's forward, N_layers per
    token (half of the layers' 2·N_layers)."""
    attn = 12 * m.layers * m.seq_len * m.heads * head_dim(m) * tokens
    if recompute == "full":
        layers = active_matmul_params(m) - m.vocab * m.hidden
        return 2 * layers * tokens + attn / 3
    if recompute == "selective":
        return attn
    if recompute == "selective_op":
        return (active_matmul_params(m) - m.vocab * m.hidden) * tokens
    return 0.0



def recompute_factors(recompute: str) -> tuple[float, float, float]:
    """(matmul, attention-core) FLOP multipliers of a recompute setting and whether the layers'
    elementwise kernels run their forward again (1 or 0): full recompute repeats the forward (8/6
    of the matmuls, 4/3 of attention, the elementwise forward); selective recompute of the
    attention core (Megatron-LM's) doubles the core, as Korthikanti et al. count it; torchtitan's
    per-op selective checkpointing (``selective_op``) keeps the outputs of SDPA and of every second
    matmul and runs every other op again: half the matmuls' forward (7/6) and the elementwise forward."""
    if recompute == "full":
        return 8 / 6, 4 / 3, 1.0
    if recompute == "selective_op":
        return 7 / 6, 1.0, 1.0
    return 1.0, (2.0 if recompute == "selective" else 1.0), 0.0


def stage_flops_per_microbatch(m: Model, tokens, dense_layers, moe_layers, head, rec_mult, rec_attn):
    """Hardware FLOPs one GPU of a stage runs per microbatch over its ``tokens`` (the microbatch's
    tokens over tp·cp): forward, backward and recomputation of its dense and MoE layers (top_k
    routed and every shared expert), attention's 12·s·a·d per token, and the output head on the
    last stage. Scalars or numpy arrays."""
    return sum(stage_flops_parts(m, tokens, dense_layers, moe_layers, head, rec_mult, rec_attn))


def stage_flops_parts(m: Model, tokens, dense_layers, moe_layers, head, rec_mult, rec_attn):
    """:func:`stage_flops_per_microbatch` by kind of work: (dense layers' matmuls, MoE layers'
    matmuls, attention core, output head); each runs at its own rate (:func:`stage_compute_time`)."""
    dense_lp = attention_params(m) + mlp_params(m, m.ffn_hidden)
    moe_lp = attention_params(m) + ((m.top_k or 1) + m.shared_experts) * mlp_params(m, m.moe_ffn_hidden) \
        + m.hidden * m.experts
    attn_tok = 12 * m.seq_len * m.heads * head_dim(m)
    layers = dense_layers + moe_layers
    # the last stage also runs the multi-token-prediction modules: their attention core with the
    # layers', their matmuls and logits with the output head's
    mtp_attn = head * m.mtp_layers * attn_tok * rec_attn
    mtp_mm = head * (m.mtp_layers * 6 * m.vocab * m.hidden + 6 * rec_mult * _mtp_matmul(m))
    return (tokens * 6 * rec_mult * dense_layers * dense_lp, tokens * 6 * rec_mult * moe_layers * moe_lp,
            tokens * (layers * attn_tok * rec_attn + mtp_attn), head * (6 * m.vocab * m.hidden * tokens) + tokens * mtp_mm)


def _mtp_matmul(m: Model) -> float:
    """Parameters a token passes through in matmuls in the MTP modules: top_k of the routed
    experts as in :func:`active_matmul_params`, everything else but the five norms of each."""
    if not m.mtp_layers:
        return 0.0
    skipped = (m.experts - (m.top_k or 1)) * mlp_params(m, m.moe_ffn_hidden) if m.is_moe else 0
    from parc.cost.params import is_moe_layer

    moe = sum(is_moe_layer(m, m.layers + k) for k in range(m.mtp_layers))
    from parc.cost.params import norm_params

    return mtp_params(m) - moe * skipped - 5 * m.mtp_layers * norm_params(m)
