"""Memory: bytes per parameter of model state (weights, gradients, optimizer) and their ZeRO
sharding, activation bytes per layer and per stage, and the serving KV cache."""
from __future__ import annotations

from dataclasses import dataclass

from parc.cost.params import Model, dtype_bytes, head_dim, kv_heads_per_gpu


# --- model state bytes (weights, grads, optimizer) ------------------------------------------------

@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each piece of model state, before any sharding."""
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def state_bytes_per_param(precision: str = "bf16", main_grads: str = "fp32", optimizer_state: str = "fp32",
                          optimizer: str = "adam") -> StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state.

    * ``main_grads = fp32`` is Megatron-LM's convention (``theoretical_memory_usage.py``: 18
      bytes/param without the distributed optimizer): 2 (bf16 weights) + 4 (fp32 main grads) +
      12 (fp32 master weights, Adam momentum and variance).
    * ``main_grads = bf16`` is the ZeRO paper's (Rajbhandari et al. 2020, §3): 2 + 2 + 12 = 16.
    * ``optimizer_state = bf16`` keeps Adam's moments in bf16 with fp32 master weights
      (DeepSeek-V3 §3.3.3): 4 + 2 + 2 = 8 optimizer bytes.
    * ``precision = fp32`` needs no master copy; SGD keeps one moment instead of two.
    """
    w = dtype_bytes(precision)
    g = 4 if main_grads == "fp32" else w
    moment = 4 if optimizer_state == "fp32" else 2
    moments = 1 if optimizer == "sgd" else 2
    master = 0 if w >= 4 else 4
    return StateBytes(w, g, master + moments * moment)


def zero_state_bytes(params: float, zero: int, n: int, per: StateBytes | None = None) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per GPU for ``params`` parameters data-parallel over ``n``
    GPUs under ZeRO stage ``zero`` (Rajbhandari et al. 2020, Figure 1):

    * 0: nothing sharded; 1 (P_os): optimizer / n; 2 (P_os+g): optimizer and grads / n;
      3 (P_os+g+p): everything / n.

    With the ZeRO paper's 16 bytes/param, Ψ = 7.5B and n = 64 this gives 120, 31.4, 16.6 and
    1.9 GB.
    """
    per = per or state_bytes_per_param()
    w, g, o = params * per.weights, params * per.grads, params * per.optimizer
    if zero >= 1:
        o /= n
    if zero >= 2:
        g /= n
    if zero >= 3:
        w /= n
    return w, g, o


def _train_state(plan) -> StateBytes:
    t = plan.train
    return state_bytes_per_param(t.precision, t.main_grads, t.optimizer_state, t.optimizer)


# --- activations -----------------------------------------------------------------------------------

def activation_bytes_per_layer(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
                               recompute: str = "none", cp: int = 1, ffn: int | None = None,
                               mlp: str = "gelu", kv_heads: int | None = None, head_dim: int | None = None,
                               moe: tuple[int, int, int, int] | None = None, flash: bool = False) -> float:
    """Activation bytes one transformer layer stores for one microbatch on one GPU, in 16-bit
    precision (Korthikanti et al. 2022, arXiv:2205.05198, §4 and Table 2):

    ================================= ===========================
    no parallelism                    sbh(34 + 5as/h)
    tensor parallel t                 sbh(10 + 24/t + 5as/(ht))
    TP + sequence parallel            sbh/t · (34 + 5as/h)
    TP + selective recompute          sbh(10 + 24/t)
    TP + SP + selective               34·sbh/t
    full recompute                    2sbh (2sbh/t with SP: the sharded layer input)
    ================================= ===========================

    The 34 splits into 10 that TP leaves replicated (norm inputs 4, QKV and MLP inputs 2+2,
    dropout masks 1+1) and 24 that TP splits: Q, K, V and the output projection's input (2 each)
    and the MLP's inner activations, 4·ffn/h for GELU (Megatron-LM's ``sbh(18 + 4·ffn/h)``
    generalisation). Beyond the paper: GQA shrinks K and V to kv_heads·head_dim, SwiGLU stores
    6·ffn/h (gate, up and their product), context parallelism divides s by cp, and a MoE layer
    (``moe = (top_k, moe_ffn, etp, shared)``) stores each token's routed copy (2h per top-k) and
    its experts' inner activations. ``flash = True`` drops the stored s×s scores (5as²b) as flash
    attention does, which never materialises them; selective recompute then saves nothing more.
    """
    s = s / cp
    d = head_dim or h // a
    kv = kv_heads or a
    ffn = ffn if ffn is not None else 4 * h
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    inner = 4 if mlp == "gelu" else 6
    replicated = 10 * s * b * h
    attn = 2 * s * b * (2 * a * d + 2 * kv * d)
    if moe:
        top_k, f_moe, etp, shared = moe
        mlp_part = (top_k * (inner * s * b * f_moe + 2 * s * b * h) * t / max(1, etp)
                    + shared * inner * s * b * f_moe)
    else:
        mlp_part = inner * s * b * ffn
    parallel = attn + mlp_part
    scores = 0.0 if (recompute == "selective" or flash) else 5 * a * s * s * b
    if sp:
        return (replicated + parallel + scores) / t
    return replicated + (parallel + scores) / t


def layer_activation_bytes(plan, moe: bool = False) -> float:
    """:func:`activation_bytes_per_layer` for the plan's model, micro_batch and train settings,
    with flash attention: every runtime parc targets (Megatron-LM with Transformer Engine,
    torch's scaled_dot_product_attention) uses it, and Megatron-LM's own estimator
    (``theoretical_memory_usage.py``) leaves the s² term out likewise."""
    m, mesh, tr = plan.model, plan.mesh, plan.train
    return activation_bytes_per_layer(
        m.seq_len, plan.schedule.micro_batch, m.hidden, m.heads, t=mesh.tp,
        sp=bool(tr and tr.sequence_parallel and mesh.tp > 1), recompute=tr.recompute if tr else "none",
        cp=mesh.cp, ffn=m.ffn_hidden, mlp=m.mlp, kv_heads=m.kv_heads, head_dim=head_dim(m),
        moe=(m.top_k or 1, m.moe_ffn_hidden, mesh.etp, m.shared_experts) if moe else None, flash=True)


def model_state_bytes(dense, expert, dense_z3, expert_z3, zero: int, n_dense, n_exp, per: StateBytes):
    """(weights, grads, optimizer) bytes on one GPU holding ``dense`` and ``expert`` parameters
    (``dense_z3`` and ``expert_z3``: its ZeRO-3 shard of them, torch.chunk's first and largest),
    data-parallel over ``n_dense`` and ``n_exp`` GPUs. Scalars or numpy arrays; ``zero`` a stage."""
    if zero >= 3:
        wd, we = dense_z3 * per.weights, expert_z3 * per.weights
        gd, od = wd / per.weights * per.grads, wd / per.weights * per.optimizer
        ge, oe = we / per.weights * per.grads, we / per.weights * per.optimizer
    else:
        wd, gd, od = zero_state_bytes(dense, zero, n_dense, per)
        we, ge, oe = zero_state_bytes(expert, zero, n_exp, per)
    return wd + we, gd + ge, od + oe


def stage_activation_bytes(dense_layers, moe_layers, act_dense, act_moe, inflight, embedding, head,
                           s_local, micro_batch, m: Model, tp):
    """Activation bytes one GPU of a pipeline stage holds at its peak: its layers' activations for
    ``inflight`` microbatches, the embedding output (sbh/t, Korthikanti §4.3) for each of them on
    the first stage, and on the last the final norm, the output layer's input and the fp32 logits
    of one microbatch. Scalars or numpy arrays (``embedding`` and ``head`` booleans)."""
    act = (dense_layers * act_dense + moe_layers * act_moe) * inflight
    act = act + embedding * (s_local * micro_batch * m.hidden * inflight / tp)
    return act + head * (4 * s_local * micro_batch * m.hidden * (1 + m.vocab / m.hidden) / tp)


# --- serving -----------------------------------------------------------------------------------------

def kv_bytes_per_token(layers: int, kv_heads: int, head_dim_: int, nbytes: int, tp: int = 1) -> int:
    """KV cache bytes per token on one GPU: 2 (K and V) · layers · kv_heads' · head_dim · bytes,
    with kv_heads' = max(1, kv_heads // tp): TP splits the KV heads and replicates them once
    tp > kv_heads (Kwon et al. 2023, the vLLM paper; vLLM ``get_num_kv_heads``). A 70B with 80
    layers and 8 KV heads of 128 in fp16 stores 327,680 B per token."""
    return 2 * layers * kv_heads_per_gpu(kv_heads, tp) * head_dim_ * nbytes


def kv_capacity_tokens(capacity: float, utilization: float, weights: float, per_token: float) -> int:
    """Tokens of KV cache that fit: (utilization · memory − weights) / bytes per token, as vLLM
    sizes its block pool (activation workspace and CUDA graphs are not counted)."""
    if per_token <= 0:
        return 0
    return max(0, int((utilization * capacity - weights) // per_token))
