"""Memory: bytes per parameter of model state (weights, gradients, optimizer) and their ZeRO
sharding, activation bytes per layer and per stage, and the serving KV cache."""
from __future__ import annotations

from dataclasses import dataclass

from parc.cost.params import Model, dtype_bytes, head_dim, is_moe_layer, kv_heads_per_gpu, local_layers_between
from parc.model.dims import expert_dp_of
from parc.model.overheads import table as overheads_table


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
    * ``precision = fp8`` keeps the module weights in bf16, as Megatron-LM with Transformer Engine
      and torchtitan with torchao's float8 do, and runs the GEMMs on FP8 copies
      (:func:`fp8_weight_cache_bytes`); gradients and optimizer state are as for bf16.
    """
    w = 2 if precision == "fp8" else dtype_bytes(precision)
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


# --- one GPU's memory by part --------------------------------------------------------------------

@dataclass(slots=True)
class Memory:
    """One GPU's memory by part. Training also pays the FP8 weight copies (``precision = fp8``),
    Megatron-FSDP's double buffers (:func:`fsdp_double_buffer_bytes`) and the framework overheads
    (:func:`overhead_bytes`)."""
    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0
    capacity: float = 0.0
    fp8_weights: float = 0.0     # FP8 copies of the linear weights and their transposes
    fsdp_buffers: float = 0.0    # Megatron-FSDP's persistent double buffers (fsdp_double_buffer_bytes)
    cuda_context: float = 0.0
    nccl_buffers: float = 0.0
    fragmentation: float = 0.0
    cuda_graphs: float = 0.0     # serving: the CUDA graphs the engine captures (parc.cost.startup)
    sampler: float = 0.0         # serving: what the sampler adds to the profiling pass's peak

    @property
    def overheads(self) -> float:
        return self.cuda_context + self.nccl_buffers + self.fragmentation + self.cuda_graphs + self.sampler

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.activations + self.kv_cache + self.fp8_weights
                + self.fsdp_buffers + self.overheads)

    def to_json(self) -> dict:
        return {"weights": int(self.weights), "grads": int(self.grads), "optimizer": int(self.optimizer),
                "activations": int(self.activations), "kv_cache": int(self.kv_cache),
                "fp8_weights": int(self.fp8_weights), "fsdp_buffers": int(self.fsdp_buffers),
                "cuda_context": int(self.cuda_context),
                "nccl_buffers": int(self.nccl_buffers), "fragmentation": int(self.fragmentation),
                "cuda_graphs": int(self.cuda_graphs), "sampler": int(self.sampler),
                "total": int(self.total), "capacity": int(self.capacity)}


# --- Megatron-FSDP's double buffers -----------------------------------------------------------------

def fsdp_double_buffered(plan) -> bool:
    """Whether the plan's Megatron-FSDP keeps its communication buffers for the whole step: ZeRO-3
    (``--use-megatron-fsdp``) with ``target megatron``'s ``fsdp_double_buffer`` (``--fsdp-double-buffer``)
    or ``nccl_ub`` (``--use-nccl-ub``, which Megatron-LM 0.19.2 turns the double buffer on for:
    megatron/training/arguments.py validate_args, and megatron_fsdp/param_and_grad_buffer.py "NCCL UB
    is only supported with FSDP double buffer"). The one place the estimate and the rules ask."""
    tr = plan.train
    return plan.mode == "train" and tr is not None and tr.zero >= 3 and double_buffer_asked(plan)


def double_buffer_asked(plan) -> bool:
    """Whether ``target megatron`` asks for Megatron-FSDP's double buffer, whatever the ZeRO stage
    (the planner tries several): ``fsdp_double_buffer`` or ``nccl_ub``. ``plan``: anything with
    ``target_settings`` (a Plan, the planner's Problem)."""
    s = plan.target_settings("megatron")
    return bool(s.get("fsdp_double_buffer") or s.get("nccl_ub"))


def fsdp_double_buffer_bytes(unit_params, per: StateBytes):
    """Bytes Megatron-FSDP's double buffer holds on one GPU for the whole step, for FSDP units of
    ``unit_params`` parameters (:func:`parc.cost.params.fsdp_unit_params`): two gathered copies
    of a unit's weights and two of its unsharded gradients (megatron_fsdp/param_and_grad_buffer.py,
    UB_BUFFER_NUM = 2 FixedPoolAllocator buffers each for ``fsdp_params`` and ``fsdp_grads``),
    the weights in their bytes (``per.weights``: bf16, or FP8 data and transpose at one byte each)
    and the gradients in the main gradients' (``per.grads``: Megatron-FSDP reduces in
    ``--megatron-fsdp-main-grads-dtype`` when no communication dtype is given). Without the double
    buffer Megatron-FSDP allocates the same buckets on use and frees them after, which parc does
    not count. Scalars or numpy arrays."""
    return 2 * unit_params * (per.weights + per.grads)


# --- activations -----------------------------------------------------------------------------------

def activation_bytes_per_layer(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
                               recompute: str = "none", cp: int = 1, ffn: int | None = None,
                               mlp: str = "gelu", kv_heads: int | None = None, head_dim: int | None = None,
                               moe: tuple[int, int, int, int] | None = None, flash: bool = False,
                               mla: tuple[int, int, int, int, int] | None = None, fp8: bool = False,
                               modules=()) -> float:
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

    ``mla = (q_lora_rank, kv_lora_rank, rope, nope, v)``: multi-head latent attention
    (:func:`mla_activation_terms`). ``fp8``: every linear layer keeps its input for the weight
    gradient as an FP8 copy, 1 byte an element (Transformer Engine's ``Linear``, torchao's
    ``Float8Linear``): the QKV, output-projection, MLP and expert inputs; norms, attention and
    the activation function stay 16-bit. ``modules``: what ``recompute = selective`` recomputes
    (Megatron-LM ``--recompute-modules``; :data:`RECOMPUTE_MODULE_TERMS`), ``core_attn`` alone
    when empty, as Megatron-LM's default. ``recompute = selective_op`` is torchtitan's per-op
    selective checkpointing (:func:`op_sac_terms`).
    """
    s = s / cp
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    if recompute == "selective_op":
        rep, par = op_sac_terms(h, a, ffn if ffn is not None else 4 * h, mlp, kv_heads or a, head_dim or h // a,
                                moe, mla, t)
        return s * b * ((rep + par) / t if sp else rep + par / t)
    sb, lin = s * b, (1 if fp8 else 2)
    mods = set(modules or ("core_attn",)) if recompute == "selective" else set()
    d, kv = head_dim or h // a, kv_heads or a
    ffn = ffn if ffn is not None else 4 * h
    # replicated over TP (split only by SP): norm inputs 4h, dropout masks 2h, the QKV and MLP inputs
    replicated = sb * (6 * h + (0 if "layernorm" in mods else 2 * lin * h))
    if mla:
        latent, qkv, proj = mla_activation_terms(a, *mla, lin=lin)
    else:
        latent, qkv, proj = 0, 2 * (a * d + 2 * kv * d), lin * a * d
    replicated += sb * latent
    attn = sb * ((0 if "mla_up_proj" in mods else qkv) + proj)
    scores = 0.0 if ("core_attn" in mods or flash) else 5 * a * s * s * b
    parallel = attn + sb * _mlp_terms(h, ffn, mlp, lin, moe, t, mods)
    if sp:
        return (replicated + parallel + scores) / t
    return replicated + (parallel + scores) / t


def op_sac_terms(h: int, a: int, ffn: int, mlp: str, kv: int, d: int, moe, mla, t: int) -> tuple[float, float]:
    """Bytes per token one layer keeps under torchtitan's per-op selective activation checkpointing
    (``SelectiveAC``, torchtitan 0.3.0 ``torchtitan/distributed/activation_checkpoint.py``), as
    (replicated over TP, split over TP). Its policy keeps the outputs of the ops on its save list
    (``_get_default_save_ops``: torch's compute-intensive ops, mm and linear among them, scaled
    dot-product and flex attention, ``max``, ``topk``, the reduce-scatter and all-to-all
    collectives) except every second matmul of the block, and recomputes everything else from the
    block's input, which the checkpoint keeps. In a layer, 16-bit:

    * the block's input, 2h (replicated; split by sequence parallelism);
    * the outputs of the 1st, 3rd, 5th, ... of the layer's matmuls in forward order
      (:func:`layer_matmuls`); column-parallel outputs split over TP, a row-parallel one (w2: h
      wide) replicated;
    * the attention core's output, 2·a·d, and its log-sum-exp, 4·a (fp32);
    * in a MoE layer (``moe = (top_k, moe_ffn, etp, shared)``) the all-to-all's dispatched and
      combined tokens, 2·2·top_k·h, taken as expert-parallel (the routed experts' grouped GEMMs are
      not on the save list: they are recomputed).

    Llama 3 8B (h 4,096, 32 heads of 128, 8 KV heads, SwiGLU 14,336): its input, q·k·v (6,144),
    w1 (14,336), w2 (4,096) and the attention output (4,096), 2·32,768 + 4·32 = 65,664 B per token,
    against 147,456 without recompute."""
    rep, par = 2.0 * h, 2.0 * a * d + 4.0 * a
    for k, (width, row) in enumerate(layer_matmuls(h, a, ffn, mlp, kv, d, moe, mla)):
        if k % 2 == 0 and row:
            rep += 2.0 * width
        elif k % 2 == 0:
            par += 2.0 * width
    if moe:
        par += 4.0 * (moe[0] or 1) * h * t        # the all-to-all's buffers are not split over TP
    return rep, par


def layer_matmuls(h: int, a: int, ffn: int, mlp: str, kv: int, d: int, moe, mla) -> list[tuple[int, bool]]:
    """(output width, row-parallel) of each matmul of a layer's forward in order, as torchtitan
    0.3.0's modules run them (``FusedQKVLinear``, ``FeedForward``: ``w2(silu(w1(x)) * w3(x))``):
    attention's fused q·k·v projection (MLA: wq_a and wq_b, or wq, then wkv_a and wkv_b), the output
    projection, then a dense MLP's w1, w3, w2 (GELU: fc1, fc2) or a MoE layer's shared experts' (the
    router gate is forced to recompute and not counted; the routed experts run grouped GEMMs)."""
    if mla:
        q_lora, kv_lora, rope, nope, v = mla
        q = [(q_lora, False), (a * (nope + rope), False)] if q_lora else [(a * (nope + rope), False)]
        out = q + [(kv_lora + rope, False), (a * (nope + v), False), (h, True)]
    else:       # one fused projection, wqkv (FusedQKVLinear, the default of torchtitan's llama3, qwen3, gpt_oss)
        out = [(a * d + 2 * kv * d, False), (h, True)]

    def mlp_of(f: int) -> list[tuple[int, bool]]:
        return [(f, False), (f, False), (h, True)] if mlp == "swiglu" else [(f, False), (h, True)]

    return out + (mlp_of(moe[1]) * moe[3] if moe else mlp_of(ffn))


def mla_activation_terms(a: int, q_lora: int, kv_lora: int, rope: int, nope: int, v: int, lin: int = 2
                         ) -> tuple[float, float, float]:
    """Bytes per token multi-head latent attention stores, as Megatron-LM's ``MLASelfAttention``
    runs it (DeepSeek-V2 arXiv:2405.04434 §2.1 for the shapes): (latent, q·k·v, projection input).

    * latent, replicated over TP like the layer input: the query latent's norm input and the
      up-projection's input (2 + lin bytes · q_lora_rank), the same for the key/value latent
      (kv_lora_rank), and the shared rotary key (2·rope);
    * Q, K and V after the up-projections and RoPE, split over TP by head: 2·a·(2·(nope + rope) +
      v) — what ``mla_up_proj`` recompute discards;
    * the attention output, the output projection's input: lin·a·v.

    Assumed, not read from Megatron's code: the latents are stored once per TP rank (split by
    sequence parallelism like the layer's other replicated tensors). DeepSeek-V3 in bf16: latent
    4·1536 + 4·512 + 2·64 = 8,320 B per token; Q, K, V 2·128·(2·192 + 128) = 131,072; output
    2·128·128 = 32,768."""
    latent = (2 + lin) * q_lora + (2 + lin) * kv_lora + 2 * rope
    return latent, 2 * a * (2 * (nope + rope) + v), lin * a * v


def _mlp_terms(h, ffn, mlp, lin, moe, t, mods) -> float:
    """Bytes per token the MLP of a layer stores before the TP split: a dense MLP's inner
    activations (GELU: its input 2f and fc2's input; SwiGLU: gate and up 4f and fc2's input), or a
    MoE layer's routed copies and experts (scaled by t/etp: the experts split over etp, not tp) and
    its shared experts. ``mlp``, ``moe``, ``shared_experts`` and ``moe_act`` recompute drop theirs.
    Under FP8 (``lin`` 1) with ``moe_act`` recomputed, the routed experts' activation-function inputs are
    cached in FP8 too, 1 byte an element (DeepSeek-V3 report §3.3.2: "we cache the inputs of the
    SwiGLU operator and recompute its output ... also stored in FP8")."""
    act_in = 2 if mlp == "gelu" else 4
    if not moe:
        return 0.0 if "mlp" in mods else (act_in + lin) * ffn
    if "moe" in mods:
        return 0.0
    top_k, f_moe, etp, shared = moe
    fc2_in = 0 if "moe_act" in mods else lin
    routed_in = act_in // 2 if ("moe_act" in mods and lin == 1) else act_in
    routed = top_k * ((routed_in + fc2_in) * f_moe + lin * h) * t / max(1, etp)
    return routed + (0 if "shared_experts" in mods else shared * (act_in + lin) * f_moe)


# Each --recompute-modules name and what it removes (Megatron-LM transformer_config.py documents
# the names); the FLOPs each adds are the forward of what it removes.
RECOMPUTE_MODULE_TERMS = {
    "core_attn": "the attention scores (nothing more under flash attention)",
    "mlp": "a dense layer's MLP activations (its input stays)",
    "layernorm": "the two norms' outputs, the attention and MLP inputs",
    "moe": "a MoE layer's routed copies, experts and shared experts",
    "moe_act": "the experts' activation-function outputs (fc2 inputs)",
    "shared_experts": "the shared experts' activations",
    "mla_up_proj": "MLA's Q, K and V after the up-projections and RoPE",
}


def layer_activation_bytes(plan, moe: bool = False) -> float:
    """:func:`activation_bytes_per_layer` for the plan's model, micro_batch and train settings.
    With ``train.flash_attention`` (the default: Megatron-LM with Transformer Engine, torch's
    scaled_dot_product_attention) the s² scores are never stored, as Megatron-LM's own estimator
    (``theoretical_memory_usage.py``) leaves them out; without it they are."""
    m, mesh, tr = plan.model, plan.mesh, plan.train
    return activation_bytes_per_layer(
        m.seq_len, plan.schedule.micro_batch, m.hidden, m.heads, t=mesh.tp,
        sp=bool(tr and tr.sequence_parallel and mesh.tp > 1), recompute=tr.recompute if tr else "none",
        cp=mesh.cp, ffn=m.ffn_hidden, mlp=m.mlp, kv_heads=m.kv_heads, head_dim=head_dim(m),
        moe=(m.top_k or 1, m.moe_ffn_hidden, mesh.etp, m.shared_experts) if moe else None,
        **model_activation_options(m, tr))


def model_activation_options(m: Model, tr) -> dict:
    """The keyword arguments of :func:`activation_bytes_per_layer` that come from the model (MLA)
    and the train block (FP8, recompute modules, flash attention), shared by the estimate and the planner."""
    return {"flash": bool(tr.flash_attention) if tr else True,
            "mla": ((m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim)
                    if m.is_mla else None),
            "fp8": bool(tr and tr.precision == "fp8"),
            "modules": tuple(tr.recompute_modules) if tr else ()}


def model_state_bytes(dense, expert, dense_z3, expert_z3, zero: int, n_dense, n_exp, per: StateBytes,
                      gathered=False):
    """(weights, grads, optimizer) bytes on one GPU holding ``dense`` and ``expert`` parameters
    (``dense_z3`` and ``expert_z3``: its ZeRO-3 shard of them, torch.chunk's first and largest),
    data-parallel over ``n_dense`` and ``n_exp`` GPUs. With ``gathered`` (a framework whose FSDP
    keeps a pipeline stage's parameters gathered and their gradients unsharded for the whole step,
    :func:`pipeline_gathered`) ZeRO-3 adds the gathered copy of every parameter sharded over more
    than one GPU and its gradient, ``per.weights`` + ``per.grads`` bytes. Scalars or numpy arrays;
    ``zero`` a stage."""
    if zero >= 3:
        wd, we = dense_z3 * per.weights, expert_z3 * per.weights
        gd, od = wd / per.weights * per.grads, wd / per.weights * per.optimizer
        ge, oe = we / per.weights * per.grads, we / per.weights * per.optimizer
        kept = gathered * ((n_dense > 1) * dense + (n_exp > 1) * expert)
        wd, gd = wd + kept * per.weights, gd + kept * per.grads
    else:
        wd, gd, od = zero_state_bytes(dense, zero, n_dense, per)
        we, ge, oe = zero_state_bytes(expert, zero, n_exp, per)
    return wd + we, gd + ge, od + oe


def pipeline_gathered(fw: dict, pp):
    """Whether the framework ``fw`` (:func:`parc.model.frameworks.framework`) keeps a pipeline
    stage's FSDP parameters gathered and their gradients unsharded from its first forward to its
    last backward (``pipeline_gathered_state``, torchtitan's): only with ``pp`` > 1. Scalars or
    numpy arrays for ``pp``."""
    return bool(fw.get("pipeline_gathered_state", False)) * (pp > 1)


def stage_activation_bytes(dense_layers, moe_layers, act_dense, act_moe, inflight, embedding, head,
                           s_local, micro_batch, m: Model, tp, offload=0):
    """Activation bytes one GPU of a pipeline stage holds at its peak: its layers' activations for
    ``inflight`` microbatches, the embedding output (sbh/t, Korthikanti §4.3) for each of them on
    the first stage, and on the last the final norm, the output layer's input and the fp32 logits
    of one microbatch, and the multi-token-prediction modules' (:func:`mtp_activation_bytes`).
    ``offload`` layers keep their activations in host memory (Megatron-LM
    ``--cpu-offloading-num-layers``): :func:`offloaded_bytes`. Scalars or numpy arrays
    (``embedding`` and ``head`` booleans)."""
    act = (dense_layers * act_dense + moe_layers * act_moe) * inflight
    if offload:
        act = act - offloaded_bytes(dense_layers, moe_layers, act_dense, act_moe, inflight, offload)
    act = act + embedding * (s_local * micro_batch * m.hidden * inflight / tp)
    logits = 4 * s_local * micro_batch * m.hidden * (1 + m.vocab / m.hidden) / tp
    if m.mtp_layers:
        logits = logits + mtp_activation_bytes(m, act_dense, act_moe, logits, s_local * micro_batch, tp)
    return act + head * logits


def mtp_activation_bytes(m: Model, act_dense, act_moe, logits, tokens, tp):
    """What the multi-token-prediction modules on the last stage store for one microbatch
    (DeepSeek-V3 §2.2; Megatron-LM runs them after the main layers, so one microbatch's worth at
    the peak): per module its transformer layer (dense or MoE by :func:`is_moe_layer`), the two
    norms' inputs and the 2h projection's input (2h + 2h + 4h bytes per token, split over TP), and
    its own logits, as large as the main head's."""
    if not m.mtp_layers:
        return 0.0
    moe = sum(is_moe_layer(m, m.layers + k) for k in range(m.mtp_layers))
    per = 8 * tokens * m.hidden / tp + logits
    return moe * act_moe + (m.mtp_layers - moe) * act_dense + m.mtp_layers * per


def offloaded_bytes(dense_layers, moe_layers, act_dense, act_moe, inflight, offload):
    """Activation bytes ``offload`` layers of a stage move to host memory: their share of the
    stage's layers (an average layer) for every microbatch in flight, less the one layer's
    activations being copied back at a time (Megatron-LM's offload context reloads a layer ahead
    of its backward). Nothing when ``offload`` is 0. Scalars or numpy arrays."""
    if isinstance(offload, int) and offload == 0:
        return 0.0
    layers = dense_layers + moe_layers
    n = offload + (layers < offload) * (layers - offload)               # min(offload, layers)
    avg = (dense_layers * act_dense + moe_layers * act_moe) / (layers + (layers == 0))
    moved = n * avg * inflight - (n > 0) * avg
    return moved * (moved > 0)


# --- framework overheads ------------------------------------------------------------------------------

def overheads() -> dict:
    """The constants of ``parc/model/data/overheads.toml`` (each with its source there)."""
    return overheads_table()


def nccl_communicators(pp, dp, cp, tp, ep, etp, moe: bool):
    """NCCL communicators one rank joins and uses in training with Megatron-LM's groups: the world
    (initialisation and barriers), and each of tp, cp, the gradient group dp·cp, pp, the
    model-parallel group tp·pp (the gradient norm) when it differs from tp and pp, and for a MoE
    model ep and the expert-data-parallel group, each counted when it has more than one rank.
    Scalars or numpy arrays."""
    n = 1 + (tp > 1) + (cp > 1) + (dp * cp > 1) + (pp > 1) + ((tp > 1) & (pp > 1))
    if moe:
        n = n + (ep > 1) + (expert_dp_of(dp, cp, tp, ep, etp) > 1)
    return n


def overhead_bytes(cluster, communicators, activations) -> tuple[float, float, float]:
    """(CUDA context, NCCL buffers, allocator fragmentation) bytes on one GPU: the cluster's
    ``cuda_context``, ``nccl_buffers`` per communicator × ``communicators`` and ``fragmentation``
    × ``activations``, each defaulting to ``overheads.toml``. Scalars or numpy arrays."""
    d = overheads()
    ctx = cluster.cuda_context if cluster.cuda_context is not None else d["cuda_context"]
    nccl = cluster.nccl_buffers if cluster.nccl_buffers is not None else d["nccl_buffers"]
    frag = cluster.fragmentation if cluster.fragmentation is not None else d["fragmentation"]
    return float(ctx), nccl * communicators, frag * activations


def linear_params(parts: dict):
    """The parameters of a stage's parts that FP8 training runs in FP8 GEMMs: attention, MLPs,
    experts and the MTP projection (Megatron-LM keeps the embedding, output head, router and norms
    in 16 bits)."""
    return parts["attention"] + parts["mlp"] + parts["experts"] + parts.get("mtp", 0)


def caches_fp8_weights(train) -> bool:
    """Whether a training plan pays :func:`fp8_weight_cache_bytes`: FP8 GEMMs with the cache kept
    (``train.fp8_weight_cache``, Transformer Engine's behaviour, the default)."""
    return bool(train and train.precision == "fp8" and train.fp8_weight_cache)


def fp8_weight_terms(train, linear):
    """(change of the weights' bytes, FP8 cache bytes) FP8 training brings for ``linear`` linear-layer
    parameters on one GPU (:func:`linear_params`). The cache is :func:`fp8_weight_cache_bytes` when
    kept (``fp8_weight_cache``). With ``fp8_param_gather`` (Megatron-LM ``--fp8-param-gather``,
    TransformerConfig.fp8_param: "keep the parameters in fp8 precision to save memory ... primarily
    the weights of GEMMs") the module's weights are FP8 themselves, 1 byte a parameter instead of 2
    (the fp32 master copy stays with the distributed optimizer), and only the transpose is cached, 1
    more. Nothing without ``precision = fp8``. Scalars or numpy arrays."""
    if not (train and train.precision == "fp8"):
        return 0.0, 0.0
    fp8p = bool(train.fp8_param_gather)
    cache = (linear * 1.0 if fp8p else fp8_weight_cache_bytes(linear)) if train.fp8_weight_cache else 0.0
    return (-1.0 * linear if fp8p else 0.0), cache


def fp8_weight_cache_bytes(linear_params) -> float:
    """FP8 training keeps an FP8 copy of each linear layer's weight and of its transpose for the
    step (Transformer Engine caches both across microbatches, Hopper's FP8 GEMM needs the
    transpose for the data gradient): 2 bytes per linear parameter on top of the 16-bit weights.
    torchtitan's float8 casts per use and keeps none, nor does DeepSeek-V3 report one: a plan
    says so with ``fp8_weight_cache = false``."""
    return 2.0 * linear_params


# --- serving -----------------------------------------------------------------------------------------

def kv_bytes_per_token(layers: int, kv_heads: int, head_dim_: int, nbytes: int, tp: int = 1) -> int:
    """KV cache bytes per token on one GPU: 2 (K and V) · layers · kv_heads' · head_dim · bytes,
    with kv_heads' = max(1, kv_heads // tp): TP splits the KV heads and replicates them once
    tp > kv_heads (Kwon et al. 2023, the vLLM paper; vLLM ``get_num_kv_heads``). A 70B with 80
    layers and 8 KV heads of 128 in fp16 stores 327,680 B per token."""
    return 2 * layers * kv_heads_per_gpu(kv_heads, tp) * head_dim_ * nbytes


def model_kv_bytes_per_token(m: Model, layers: int, nbytes: int, tp: int = 1, context=None, local=None, *,
                             dcp: int = 1):
    """:func:`kv_bytes_per_token` of ``layers`` layers of ``m``; with multi-head latent attention
    the cache holds the latent and the rotary key, (kv_lora_rank + qk_rope_head_dim) · layers ·
    bytes per token, the same on every TP rank (vLLM's MLA backends replicate it): DeepSeek-V3
    in bf16 stores (512 + 64) · 61 · 2 = 70,272 B per token.

    With local attention (``attention_window``) and sequences of ``context`` tokens, a local layer
    caches only the last window of each sequence (vLLM's sliding-window and chunked-local KV
    managers free the blocks that fall out of it): the bytes per token are the mean over a
    ``context``-token sequence, per layer × (global + local · min(context, window) / context),
    rounded up. ``local``: how many of the layers are local (a stage's
    :attr:`~parc.cost.params.StageLayout.local_layers`); by default those of layers 0..layers-1.
    Scalars or numpy arrays (``tp``, ``context``).

    Decode context parallelism (``dcp``) spreads the tokens of each sequence over dcp ranks of the
    tp group that would otherwise hold the same KV heads (vLLM ``decode_context_parallel_size``,
    ``cp_kv_cache_interleave_size``: token i on rank i mod dcp), so one GPU stores 1/dcp of them:
    the bytes per token of a sequence on one GPU are divided by dcp (Llama 3 70B at tp 16, dcp 2:
    one KV head per GPU, 40,960 / 2 = 20,480 B)."""
    if m.is_mla:
        per_layer = (m.kv_lora_rank + m.qk_rope_head_dim) * nbytes
    else:
        per_layer = kv_bytes_per_token(1, m.kv_heads, head_dim(m), nbytes, tp)
    if context is None or m.attention_window <= 0:
        per = per_layer * layers
    else:
        per = -(-per_layer * kv_layer_tokens(m, layers, context, local) // context)
    if dcp == 1:
        return per
    return per // dcp if isinstance(per, int) and per % dcp == 0 else per / dcp


def kv_layer_tokens(m: Model, layers: int, context, local=None):
    """Layer-tokens one ``context``-token sequence keeps in the KV cache of ``layers`` layers of
    ``m`` of which ``local`` attend locally (by default those of layers 0..layers-1,
    :func:`parc.model.params.is_local_layer`): every global layer all of it, every local layer at
    most ``attention_window``. gpt-oss-120b (36 layers, 18 local with a window of 128) at 8,192
    tokens: 18 · 8,192 + 18 · 128 = 149,760."""
    if local is None:
        local = local_layers_between(m, 0, layers)
    w = m.attention_window
    kept = w + (context < w) * (context - w)                      # min(context, window)
    return (layers - local) * context + local * kept


def kv_capacity_tokens(capacity: float, utilization: float, weights: float, per_token: float) -> int:
    """Tokens of KV cache that fit: (utilization · memory − weights) / bytes per token, as vLLM
    sizes its block pool; ``weights`` is everything else the engine holds (the estimate passes
    weights, peak activations and engine overheads, vLLM's ``non_kv_cache_memory``)."""
    if per_token <= 0:
        return 0
    return max(0, int((utilization * capacity - weights) // per_token))


def serving_activation_bytes(m: Model, tokens: float, tp: int, ep: int, etp: int, moe_dp: int = 1) -> float:
    """Peak activation bytes of one serving forward pass over ``tokens`` tokens on one GPU (an
    inference pass frees each layer's tensors before the next): the residual stream and the norm's
    output (2h), and the widest of the layer's inner tensors, the MLP's gate/up and its activation
    (3 · ffn/tp for SwiGLU) or a MoE layer's routed copies with their experts' (top_k · (h + 3 ·
    moe_ffn/etp) for the tokens of the ``moe_dp`` dp ranks whose MoE layer it shares, over ep),
    16-bit. Bytes, per GPU."""
    dense = 3 * m.ffn_hidden / tp if (not m.is_moe or m.first_k_dense or m.moe_every > 1) else 0
    moe = (m.top_k or 1) * (m.hidden + 3 * m.moe_ffn_hidden / etp) * moe_dp / ep + 3 * m.shared_experts \
        * m.moe_ffn_hidden / tp if m.is_moe else 0
    return 2 * tokens * (2 * m.hidden + max(dense, moe))


def sampler_bytes(m: Model, seqs: int) -> float:
    """The sampler's fp32 logits and probabilities over the vocabulary for ``seqs`` sequences, on
    the last pipeline stage (vLLM's ``_dummy_sampler_run`` profiles max_num_seqs of them)."""
    return 2 * 4 * seqs * m.vocab
