"""Megatron-LM: ``pretrain_gpt.py`` (or the spec's entry point) under the torchrun launch, with
the argument list that gives Megatron-LM the plan's model, mesh, schedule and training setup.

Flag names follow Megatron-LM core 0.20.0 (``megatron/training/arguments.py``). What Megatron derives
from these arguments equals the plan: ``dp = world / (tp·pp·cp)`` and
``microbatches = global_batch / (micro_batch · dp)``.

Rank order: Megatron lays ranks out as ``tp-cp-ep-dp-pp`` (tp innermost, pp outermost), or
``tp-cp-ep-pp-dp`` with ``--use-tp-pp-dp-mapping``; parc's mesh orders ``pp, dp, cp, tp`` and
``dp, pp, cp, tp`` are those two (any other order is refused by rule P608; P603, P607, P612
and P613 refuse the other plans Megatron-LM cannot run).
"""
from __future__ import annotations

from parc.model.targets import flag, pinned, rank_orders
from parc.targets.base import Env, File, settings, order_over
from parc.targets import torchrun
from parc.targets.megatron.router import dispatcher_lines, norm_lines, router_lines

TARGET = "megatron"
DEFAULT_ENTRYPOINT = "pretrain_gpt.py"


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml);
    ``plan`` None: the newest release's."""
    version = pinned(plan, TARGET) if plan is not None else None
    return lambda what: flag(TARGET, what, version)


def mapping(plan) -> tuple[bool, str | None]:
    """(expressible, option): whether Megatron can lay ranks out in the plan's order, and the
    option that picks it (target.toml's rank_orders name its flags.toml entry)."""
    big = order_over(plan)
    for canon, what in rank_orders(TARGET):
        if big == [ax for ax in canon if plan.mesh.size(ax) > 1]:
            return True, options(plan)(what) if what else None
    return False, None


def vocab_divisor(vocab: int, tp: int) -> int:
    """--make-vocab-size-divisible-by: the largest power of two up to Megatron's default 128 for
    which vocab is already a multiple of (divisor · tp), so Megatron pads nothing and the model
    has exactly the plan's shape; 128 (Megatron pads) when vocab is not a multiple of tp."""
    d = 128
    while d >= 1:
        if vocab % (d * tp) == 0:
            return d
        d //= 2
    return 128


def layer_flags(plan) -> list[list]:
    """Virtual stages and the layer split: nothing for an even split, first/last-stage layer
    counts when only the first and last pipeline ranks differ, else an explicit layout."""
    F = options(plan)
    pp, v = plan.mesh.pp, plan.schedule.virtual_stages
    layers = plan.placement.layers
    if pp == 1:
        return []
    vflag = [[F("num_virtual_stages_per_pipeline_rank"), v]] if v > 1 else []
    if not layers or len(set(layers)) == 1:
        return vflag
    # loop placement: virtual stage s lives on pipeline rank s % pp
    chunks = [[layers[c * pp + r] for c in range(v)] for r in range(pp)]
    totals = [sum(ch) for ch in chunks]
    middle = totals[1:-1]
    if (all(len(set(ch)) == 1 for ch in chunks) and len(set(middle)) <= 1 and min(totals) > 0):
        return [[F("decoder_first_pipeline_num_layers"), totals[0]],
                [F("decoder_last_pipeline_num_layers"), totals[-1]]] + vflag
    stages = []
    for s, n in enumerate(layers):
        stages.append(("E" if s == 0 else "") + "t" * n + ("L" if s == len(layers) - 1 else ""))
    return [[F("pipeline_model_parallel_layout"), "|".join(stages)]]


def layer_pattern(bits: list[int]) -> str:
    """A 0/1 list per layer as the Python list expression Megatron-LM's ``moe_freq_type`` evaluates
    (``--moe-layer-freq``, ``--window-attn-skip-freq``): runs, and a repeated period where the list
    (after its first run) is one: ``[0]*3+[1]*58``, ``([0]*1+[1]*1)*24``."""
    def runs(xs: list[int]) -> str:
        out, i = [], 0
        while i < len(xs):
            j = i
            while j < len(xs) and xs[j] == xs[i]:
                j += 1
            out.append(f"[{xs[i]}]*{j - i}")
            i = j
        return "+".join(out)

    for lead in (0, next((i for i, b in enumerate(bits) if b != bits[0]), len(bits))):
        rest = bits[lead:]
        for p in range(1, len(rest) // 2 + 1):
            if len(rest) % p == 0 and rest == rest[:p] * (len(rest) // p) and len(set(rest[:p])) > 1:
                return (runs(bits[:lead]) + "+" if lead else "") + f"({runs(rest[:p])})*{len(rest) // p}"
    return runs(bits)


def moe_layer_freq(m) -> str | None:
    """``--moe-layer-freq``: 1 for each MoE layer (:func:`parc.model.params.is_moe_layer`: the
    first ``first_k_dense`` dense, then every ``moe_every``-th), None when every layer is MoE
    (Megatron-LM's default 1). DeepSeek-V3: ``[0]*3+[1]*58``, as Megatron-LM's own DeepSeek-R1
    configuration writes it (examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh)."""
    from parc.model.params import is_moe_layer

    bits = [int(is_moe_layer(m, i)) for i in range(m.layers)]
    return None if all(bits) else layer_pattern(bits)


def arg_lines(plan) -> list[list]:
    """Every Megatron-LM argument of the plan: its parallelism, its model, its training setup."""
    return _parallel_lines(plan) + _model_lines(plan) + _training_lines(plan) + overlap_lines(plan)


def overlap_lines(plan) -> list[list]:
    """The train block's overlap keys as Megatron-LM 0.20 spells them. Each of its switches is
    off unless given (``--overlap-grad-reduce``, ``--overlap-param-gather`` and
    ``--tp-comm-overlap`` in megatron/training/arguments.py; ``--overlap-moe-expert-parallel-comm``
    generated from ModelParallelConfig), so a true key is its flag and a false one is nothing;
    ``--tp-comm-overlap`` only with tp > 1 and ``--overlap-moe-expert-parallel-comm`` only with
    ep > 1, where they have collectives to overlap (Megatron-LM turns sequence parallelism off at
    tp = 1 and then refuses the first; it refuses the second without expert parallelism). The attention
    backend is ``auto`` by default (Transformer Engine picks its flash or cuDNN fused kernel,
    parc's ``flash_attention = true``); ``flash_attention = false`` is ``--attention-backend
    unfused``, and the block's ``attention_backend`` is written as it is (P026 where it contradicts
    ``flash_attention``). P654, P655 and P659 refuse the combinations Megatron-LM asserts against."""
    F = options(plan)
    tr, me = plan.train, plan.mesh
    out: list[list] = []
    if tr.overlap_grad_reduce:
        out.append([F("overlap_grad_reduce")])
    if tr.overlap_param_gather:
        out.append([F("overlap_param_gather")])
    if tr.tp_comm_overlap and me.tp > 1:
        out.append([F("tp_comm_overlap")])
    if tr.ep_comm_overlap and plan.model.is_moe and me.ep > 1:
        out.append([F("overlap_moe_expert_parallel_comm")])
    backend = settings(plan, TARGET).get("attention_backend")
    if backend or not tr.flash_attention:
        out.append([F("attention_backend"), backend or "unfused"])
    return out


def _parallel_lines(plan) -> list[list]:
    F = options(plan)
    m, me, tr = plan.model, plan.mesh, plan.train
    out: list[list] = []
    a = out.append
    a([F("tensor_model_parallel_size"), me.tp])
    a([F("pipeline_model_parallel_size"), me.pp])
    a([F("context_parallel_size"), me.cp])
    _, layout = mapping(plan)
    if layout:
        a([layout])
    if tr.sequence_parallel and me.tp > 1:
        a([F("sequence_parallel")])
    out.extend(layer_flags(plan))
    if m.is_moe:
        a([F("expert_model_parallel_size"), me.ep])
        a([F("expert_tensor_parallel_size"), me.etp])
    return out


def _model_lines(plan) -> list[list]:
    F = options(plan)
    m, me = plan.model, plan.mesh
    out: list[list] = []
    a = out.append
    a([F("num_layers"), m.layers])
    a([F("hidden_size"), m.hidden])
    a([F("ffn_hidden_size"), m.ffn_hidden])
    a([F("num_attention_heads"), m.heads])
    if m.kv_heads != m.heads:
        a([F("group_query_attention")])
        a([F("num_query_groups"), m.kv_heads])
    if m.head_dim and m.head_dim * m.heads != m.hidden:
        a([F("kv_channels"), m.head_dim])
    a([F("seq_length"), m.seq_len])
    # the model's own position count (a learned table's size), never below seq_len (MEG-41)
    a([F("max_position_embeddings"), max(m.seq_len, m.max_positions or 0)])
    a([F("vocab_size"), m.vocab])
    a([F("make_vocab_size_divisible_by"), vocab_divisor(m.vocab, me.tp)])
    if m.mlp == "swiglu":
        a([F("swiglu")])
    a([F("normalization"), "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"])
    out += norm_lines(m, F)
    a([F("position_embedding_type"), position_type(m)])
    if m.position == "rope":
        a([F("rotary_base"), m.rope_theta])   # Megatron's default is 10000; Llama 3 uses 500000
        out += rope_lines(m, F)
    if not m.bias:
        a([F("disable_bias_linear")])
    if m.qkv_bias and not m.bias:
        a([F("add_qkv_bias")])
    if not m.tied_embeddings:
        a([F("untie_embeddings_and_output_weights")])
    out += attention_lines(m, F)
    if m.is_moe:
        a([F("num_experts"), m.experts])
        a([F("moe_router_topk"), m.top_k])
        a([F("moe_ffn_hidden_size"), m.moe_ffn_hidden])
        if m.shared_experts:
            a([F("moe_shared_expert_intermediate_size"), m.shared_experts * m.moe_ffn_hidden])
        if moe_layer_freq(m):
            a([F("moe_layer_freq"), moe_layer_freq(m)])
        out += router_lines(m, F) + dispatcher_lines(plan, F)
    if m.mtp_layers:
        a([F("mtp_num_layers"), m.mtp_layers])
    return out


# The positions Megatron-LM's own RoPE scalings are built for (rotary_pos_embedding.py
# _apply_scaling: Llama 3.1's 8192; MLATransformerConfig.original_max_position_embeddings: 4096),
# which no argument changes
FIXED_ORIGINAL = {"llama3": 8192, "mla_yarn": 4096}


def position_type(m) -> str:
    """--position-embedding-type: rope, yarn (YaRN on attention that is not multi-latent: the GPT
    model's YarnRotaryEmbedding; multi-latent attention runs its own YaRN under rope), or a learned table."""
    if m.position != "rope":
        return "learned_absolute"
    return "yarn" if m.rope_scaling == "yarn" and not m.is_mla else "rope"


def rope_lines(m, F) -> list[list]:
    """The model's RoPE scaling as Megatron-LM spells it (flags.toml); what it cannot say is P620
    (:func:`rope_fault`). mscale and mscale_all_dim only where the model states them: Megatron-LM's
    defaults (1.0, 0.0) are Hugging Face's YaRN without them."""
    if m.rope_scaling == "none" or rope_fault(m):
        return []
    if m.rope_scaling == "llama3":
        return [[F("use_rope_scaling")], [F("rope_scaling_factor"), f"{m.rope_factor:g}"]]
    if m.rope_scaling == "linear":
        return [[F("rotary_seq_len_interpolation_factor"), int(m.rope_factor)]]
    out = [[F("rotary_scaling_factor"), f"{m.rope_factor:g}"]]
    if not m.is_mla and m.rope_original_positions:
        out.append([F("yarn_original_max_position_embeddings"), m.rope_original_positions])
    for what, v in (("mscale", m.rope_mscale), ("mscale_all_dim", m.rope_mscale_all_dim)):
        if v is not None:
            out.append([F(what), f"{v:g}"])
    return out


def rope_fault(m) -> tuple[str, str] | None:
    """(path, why) where Megatron-LM's arguments cannot build the model's RoPE scaling, or None."""
    kind = "mla_yarn" if m.rope_scaling == "yarn" and m.is_mla else m.rope_scaling
    if m.position != "rope" or kind in ("none", "yarn"):
        return None
    if kind in ("dynamic", "longrope"):
        return ("model.rope_scaling",
                f"{kind} RoPE scaling: Megatron-LM has Llama 3.1's, linear (position interpolation) and YaRN only")
    if kind == "linear" and m.rope_factor != int(m.rope_factor):
        return ("model.rope_factor", f"linear RoPE scaling by {m.rope_factor:g}: Megatron-LM's "
                "--rotary-seq-len-interpolation-factor takes an integer")
    fixed = FIXED_ORIGINAL.get(kind)
    if fixed and m.rope_original_positions not in (None, fixed):
        what = "Llama 3.1's RoPE scaling" if kind == "llama3" else "multi-latent attention's YaRN"
        return ("model.rope_original_positions", f"{what} from {m.rope_original_positions:,} original positions: "
                f"its code fixes them at {fixed:,}, and no argument changes that")
    return None


def attention_lines(m, F=None) -> list[list]:
    """The attention's shape as Megatron-LM 0.20 spells it (megatron/training/arguments.py, the
    TransformerConfig fields it generates): multi-head latent attention (``--multi-latent-attention``
    with its ranks and head widths, and ``--qk-layernorm`` for the latents' norms, as Megatron-LM's
    DeepSeek-R1 configuration does), per-head query/key norms (``--qk-layernorm``), one learned sink
    logit per head (``--softmax-type learnable``) and a sliding window over all but every
    ``global_every``-th layer (``--window-size W-1,0`` and ``--window-attn-skip-freq``, as its gpt-oss
    example: examples/gptoss/02_train.sh). Chunked local attention has no Megatron-LM spelling
    (P620)."""
    F = F or options(None)
    out: list[list] = []
    a = out.append
    if m.is_mla:
        a([F("multi_latent_attention")])
        if m.q_lora_rank:       # Megatron's default None: queries projected directly
            a([F("q_lora_rank"), m.q_lora_rank])
        a([F("kv_lora_rank"), m.kv_lora_rank])
        a([F("qk_head_dim"), m.qk_nope_head_dim])
        a([F("qk_pos_emb_head_dim"), m.qk_rope_head_dim])
        a([F("v_head_dim"), m.v_head_dim])
    if m.is_mla or m.qk_norm:
        a([F("qk_layernorm")])
    if m.attention_sinks:
        a([F("softmax_type"), "learnable"])
    if m.attention_window and m.local_attention == "sliding":
        a([F("window_size"), f"{m.attention_window - 1},0"])
        if m.global_every:
            a([F("window_attn_skip_freq"), m.global_every])
    return out


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each field of the plan Megatron-LM's arguments cannot say (P620)."""
    m, tr = plan.model, plan.train
    out = []
    if m.attention_window and m.local_attention == "chunked":
        out.append(("model.local_attention", "chunked local attention (each local layer attends within its own "
                    f"chunk of {m.attention_window} tokens): Megatron-LM has sliding windows only (--window-size)",
                    "compile for a target that builds the model from its checkpoint (vllm, sglang), or describe "
                    "a sliding window with `local_attention = sliding`"))
    if m.hybrid:
        out.append(("model.hybrid", "a hybrid model (layers with a Mamba or linear-attention recurrent state): parc "
                    "writes the arguments of Megatron-LM's GPT model, every layer attention, not its hybrid Mamba "
                    "model's layer pattern (--hybrid-override-pattern)",
                    "train it with Megatron-LM's own hybrid launch outside parc, or remove `hybrid`"))
    if rope_fault(m):
        out.append((*rope_fault(m), "compile for a target that builds the model from its checkpoint (vllm, "
                    "sglang), or describe a scaling Megatron-LM has"))
    if tr is None:
        return out
    if tr.recompute == "selective_op":
        out.append(("train.recompute", "`recompute = selective_op` (torchtitan's per-op selective checkpointing): "
                    "Megatron-LM recomputes whole modules (--recompute-granularity selective --recompute-modules)",
                    "use `recompute = selective` with `recompute_modules`, or `full`"))
    if tr.precision == "fp8" and tr.fp8_recipe in ("rowwise", "rowwise_with_gw_hp"):
        out.append(("train.fp8_recipe", f"`fp8_recipe = {tr.fp8_recipe}` (torchao's row-wise scaling): Megatron-LM's "
                    "--fp8-recipe is delayed, tensorwise, blockwise, mxfp8 or custom",
                    "use `fp8_recipe = blockwise` (per-block scaling) or `tensorwise`"))
    return out


def _training_lines(plan) -> list[list]:
    F = options(plan)
    sc, tr = plan.schedule, plan.train
    out: list[list] = []
    a = out.append
    a([F("micro_batch_size"), sc.micro_batch])
    a([F("global_batch_size"), sc.global_batch])
    # optimizer and precision
    a([F("optimizer"), "sgd" if tr.optimizer == "sgd" else "adam"])
    if tr.zero >= 1:
        a([F("use_distributed_optimizer")])
    if fsdp(plan):
        a([F("use_megatron_fsdp")])
        a([F("data_parallel_sharding_strategy"), "optim_grads_params"])
        a([F("ckpt_format"), "fsdp_dtensor"])   # validate_args: Megatron-FSDP's only checkpoint format
    out += buffer_lines(plan, F)
    if tr.precision in ("bf16", "fp8"):
        a([F("bf16")])
    elif tr.precision == "fp16":
        a([F("fp16")])
    out += fp8_lines(tr, F)
    out += main_grads_lines(plan, F)
    if tr.optimizer_state == "bf16":
        a([F("use_precision_aware_optimizer")])
        a([F("exp_avg_dtype"), "bf16"])
        a([F("exp_avg_sq_dtype"), "bf16"])
    if tr.recompute == "selective":
        a([F("recompute_granularity"), "selective"])
        if tr.recompute_modules:     # Megatron-LM's default is core_attn alone
            a([F("recompute_modules"), *tr.recompute_modules])
    elif tr.recompute == "full":
        a([F("recompute_granularity"), "full"])
        a([F("recompute_method"), "uniform"])
        a([F("recompute_num_layers"), 1])
    a([F("transformer_impl"), "transformer_engine"])
    tok = settings(plan, TARGET).get("tokenizer")
    if tok:
        a([F("tokenizer_type"), "HuggingFaceTokenizer"])
        a([F("tokenizer_model"), tok])
    return out


def main_grads_lines(plan, F) -> list[list]:
    """``main_grads``, the dtype gradients accumulate and reduce in. Megatron-LM's DDP buffer is
    fp32 for bf16 training (validate_args: accumulate_allreduce_grads_in_fp32) unless
    ``--grad-reduce-in-bf16``; Megatron-FSDP ignores both and takes ``--megatron-fsdp-main-grads-dtype``,
    whose default ``auto`` is the parameters' own dtype (megatron_fsdp/param_and_grad_buffer.py
    ``_resolve_group_grad_dtype``: bf16 under --bf16), so with FSDP it is written either way."""
    tr = plan.train
    if fsdp(plan):
        return [[F("megatron_fsdp_main_grads_dtype"), tr.main_grads]]
    return [[F("grad_reduce_in_bf16")]] if tr.main_grads == "bf16" else []


def buffer_lines(plan, F) -> list[list]:
    """The data-parallel buffers' switches of `target megatron`, each where given: Megatron-FSDP's
    double buffer (``--fsdp-double-buffer``, zero = 3 only: P028) and NCCL user-buffer registration
    (``--use-nccl-ub``, with which Megatron-LM double-buffers Megatron-FSDP itself). What they hold
    is :func:`parc.cost.memory.fsdp_double_buffer_bytes`."""
    s = settings(plan, TARGET)
    return [[F(what)] for what in ("fsdp_double_buffer", "nccl_ub") if s.get(what)]


# Megatron-LM's --fp8-recipe for each of train.fp8_recipe it has (TransformerConfig.fp8_recipe)
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")


def fp8_lines(tr, F=None) -> list[list]:
    """FP8 training as Megatron-LM spells it: ``--fp8-format`` (hybrid: e4m3 forward, e5m2
    gradients, parc's choice for the delayed and tensorwise recipes; e4m3 for the block-scaled
    recipes, which scale every tensor per block as DeepSeek-V3 trained, §3.3.2), ``--fp8-recipe``
    where the plan names one (Megatron-LM's default is delayed), ``--fp8-param-gather`` where the
    linear weights are kept in FP8 (its check wants the distributed optimizer or Megatron-FSDP:
    P621)."""
    F = F or options(None)
    if tr.precision != "fp8":
        return []
    blocks = tr.fp8_recipe in ("blockwise", "mxfp8")
    out: list[list] = [[F("fp8_format"), "e4m3" if blocks else "hybrid"]]
    if tr.fp8_recipe in FP8_RECIPES:
        out.append([F("fp8_recipe"), tr.fp8_recipe])
    if tr.fp8_param_gather:
        out.append([F("fp8_param_gather")])
    return out


def group_args(args) -> list[list]:
    """Extra arguments grouped for reading: an option and the values after it on one line."""
    out: list[list] = []
    for x in args or []:
        if out and not str(x).startswith("-") and out[-1] and str(out[-1][0]).startswith("-"):
            out[-1].append(x)
        else:
            out.append([x])
    return out


def fsdp(plan) -> bool:
    """ZeRO-3 is Megatron-FSDP (``--use-megatron-fsdp``, parameters sharded too)."""
    return plan.train is not None and plan.train.zero >= 3


def launch_env(plan) -> list[Env]:
    """CUDA_DEVICE_MAX_CONNECTIONS as Megatron-LM's validate_args wants it: 1 with tensor or
    context parallelism (asserted before Blackwell), but never 1 with Megatron-FSDP, which
    asserts the opposite (it is unset there; validate_args only warns about tp/cp with FSDP)."""
    me = plan.mesh
    if fsdp(plan):
        return [Env("CUDA_DEVICE_MAX_CONNECTIONS", None,
                    "Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS unset or above 1", default=False)]
    if me.tp > 1 or me.cp > 1:
        return [Env("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                    "Megatron-LM's tensor and context parallelism need one CUDA work queue "
                    "(in order kernel launch for comm/compute overlap)", default=False)]
    return []


def build(plan) -> list[File]:
    s = settings(plan, TARGET)
    env = launch_env(plan)
    lines = arg_lines(plan) + group_args(s.get("extra_args"))
    return torchrun.node_files(plan, entrypoint=s.get("entrypoint", DEFAULT_ENTRYPOINT), arg_lines=lines,
                               env=env)


def node_launch(plan, s: dict):
    """Megatron-LM under a scheduler: the same launch.sh and command on every node
    (parc/targets/engines.py; ``s`` the block's settings)."""
    return torchrun.scheduled(plan, TARGET, entrypoint=s.get("entrypoint", DEFAULT_ENTRYPOINT),
                              arg_lines=arg_lines(plan) + group_args(s.get("extra_args")), env=launch_env(plan))
