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

from parc.model.targets import rank_orders
from parc.targets.base import Env, File, settings, order_over
from parc.targets import torchrun

TARGET = "megatron"
DEFAULT_ENTRYPOINT = "pretrain_gpt.py"


def mapping(plan) -> tuple[bool, str | None]:
    """(expressible, flag): whether Megatron can lay ranks out in the plan's order, and how."""
    big = order_over(plan)
    for canon, flag in rank_orders(TARGET):   # target.toml's rank_orders
        if big == [ax for ax in canon if plan.mesh.size(ax) > 1]:
            return True, flag or None
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
    pp, v = plan.mesh.pp, plan.schedule.virtual_stages
    layers = plan.placement.layers
    if pp == 1:
        return []
    vflag = [["--num-virtual-stages-per-pipeline-rank", v]] if v > 1 else []
    if not layers or len(set(layers)) == 1:
        return vflag
    # loop placement: virtual stage s lives on pipeline rank s % pp
    chunks = [[layers[c * pp + r] for c in range(v)] for r in range(pp)]
    totals = [sum(ch) for ch in chunks]
    middle = totals[1:-1]
    if (all(len(set(ch)) == 1 for ch in chunks) and len(set(middle)) <= 1 and min(totals) > 0):
        return [["--decoder-first-pipeline-num-layers", totals[0]],
                ["--decoder-last-pipeline-num-layers", totals[-1]]] + vflag
    stages = []
    for s, n in enumerate(layers):
        stages.append(("E" if s == 0 else "") + "t" * n + ("L" if s == len(layers) - 1 else ""))
    return [["--pipeline-model-parallel-layout", "|".join(stages)]]


def moe_layer_freq(m) -> str:
    """parc's layer i is MoE when (i+1) % moe_every == 0; Megatron's list gives 1 for MoE layers."""
    bits = ["1" if (i + 1) % m.moe_every == 0 else "0" for i in range(m.layers)]
    if m.layers % m.moe_every == 0:
        return "([0]*%d+[1])*%d" % (m.moe_every - 1, m.layers // m.moe_every)
    return "[" + ",".join(bits) + "]"


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
    unfused``. P654, P655 and P659 refuse the combinations Megatron-LM asserts against."""
    tr, me = plan.train, plan.mesh
    out: list[list] = []
    if tr.overlap_grad_reduce:
        out.append(["--overlap-grad-reduce"])
    if tr.overlap_param_gather:
        out.append(["--overlap-param-gather"])
    if tr.tp_comm_overlap and me.tp > 1:
        out.append(["--tp-comm-overlap"])
    if tr.ep_comm_overlap and plan.model.is_moe and me.ep > 1:
        out.append(["--overlap-moe-expert-parallel-comm"])
    if not tr.flash_attention:
        out.append(["--attention-backend", "unfused"])
    return out


def _parallel_lines(plan) -> list[list]:
    m, me, tr = plan.model, plan.mesh, plan.train
    out: list[list] = []
    a = out.append
    a(["--tensor-model-parallel-size", me.tp])
    a(["--pipeline-model-parallel-size", me.pp])
    a(["--context-parallel-size", me.cp])
    _, flag = mapping(plan)
    if flag:
        a([flag])
    if tr.sequence_parallel and me.tp > 1:
        a(["--sequence-parallel"])
    out.extend(layer_flags(plan))
    if m.is_moe:
        a(["--expert-model-parallel-size", me.ep])
        a(["--expert-tensor-parallel-size", me.etp])
    return out


def _model_lines(plan) -> list[list]:
    m, me = plan.model, plan.mesh
    out: list[list] = []
    a = out.append
    a(["--num-layers", m.layers])
    a(["--hidden-size", m.hidden])
    a(["--ffn-hidden-size", m.ffn_hidden])
    a(["--num-attention-heads", m.heads])
    if m.kv_heads != m.heads:
        a(["--group-query-attention"])
        a(["--num-query-groups", m.kv_heads])
    if m.head_dim and m.head_dim * m.heads != m.hidden:
        a(["--kv-channels", m.head_dim])
    a(["--seq-length", m.seq_len])
    # the model's own position count (a learned table's size), never below seq_len (MEG-41)
    a(["--max-position-embeddings", max(m.seq_len, m.max_positions or 0)])
    a(["--vocab-size", m.vocab])
    a(["--make-vocab-size-divisible-by", vocab_divisor(m.vocab, me.tp)])
    if m.mlp == "swiglu":
        a(["--swiglu"])
    a(["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"])
    a(["--position-embedding-type", "rope" if m.position == "rope" else "learned_absolute"])
    if m.position == "rope":
        a(["--rotary-base", m.rope_theta])   # Megatron's default is 10000; Llama 3 uses 500000
    if not m.bias:
        a(["--disable-bias-linear"])
    if not m.tied_embeddings:
        a(["--untie-embeddings-and-output-weights"])
    if m.is_moe:
        a(["--num-experts", m.experts])
        a(["--moe-router-topk", m.top_k])
        a(["--moe-ffn-hidden-size", m.moe_ffn_hidden])
        if m.shared_experts:
            a(["--moe-shared-expert-intermediate-size", m.shared_experts * m.moe_ffn_hidden])
        if m.moe_every > 1:
            a(["--moe-layer-freq", moe_layer_freq(m)])
        if me.ep > 1:
            a(["--moe-token-dispatcher-type", "alltoall"])
    return out


def _training_lines(plan) -> list[list]:
    sc, tr = plan.schedule, plan.train
    out: list[list] = []
    a = out.append
    a(["--micro-batch-size", sc.micro_batch])
    a(["--global-batch-size", sc.global_batch])
    # optimizer and precision
    a(["--optimizer", "sgd" if tr.optimizer == "sgd" else "adam"])
    if tr.zero >= 1:
        a(["--use-distributed-optimizer"])
    if fsdp(plan):
        a(["--use-megatron-fsdp"])
        a(["--data-parallel-sharding-strategy", "optim_grads_params"])
        a(["--ckpt-format", "fsdp_dtensor"])   # validate_args: Megatron-FSDP's only checkpoint format
    if tr.precision in ("bf16", "fp8"):
        a(["--bf16"])
    elif tr.precision == "fp16":
        a(["--fp16"])
    if tr.precision == "fp8":
        a(["--fp8-format", "hybrid"])
    if tr.main_grads == "bf16" or tr.optimizer_state == "bf16":
        a(["--use-precision-aware-optimizer"])
        if tr.main_grads == "bf16":
            a(["--main-grads-dtype", "bf16"])
        if tr.optimizer_state == "bf16":
            a(["--exp-avg-dtype", "bf16"])
            a(["--exp-avg-sq-dtype", "bf16"])
    if tr.recompute == "selective":
        a(["--recompute-activations"])
    elif tr.recompute == "full":
        a(["--recompute-granularity", "full"])
        a(["--recompute-method", "uniform"])
        a(["--recompute-num-layers", 1])
    a(["--transformer-impl", "transformer_engine"])
    tok = settings(plan, TARGET).get("tokenizer")
    if tok:
        a(["--tokenizer-type", "HuggingFaceTokenizer"])
        a(["--tokenizer-model", tok])
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
