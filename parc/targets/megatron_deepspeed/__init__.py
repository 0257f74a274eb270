"""Megatron-DeepSpeed: the fork of Megatron-LM that trains under DeepSpeed's engine
(deepspeedai/Megatron-DeepSpeed). One launch: ``pretrain_gpt.py`` with the fork's own arguments
(the degrees, the model's shape, the batch, precision, recomputation) and ``--deepspeed
--deepspeed_config ds_config.json``, started by the ``deepspeed`` launcher or by torchrun
(``runner``), and the ``ds_config.json`` beside it.

A target of its own, not a flavour of ``megatron`` or ``deepspeed``: the fork parses its own
``megatron/arguments.py`` (branched from Megatron-LM in 2023, with spellings Megatron-LM 0.20 no
longer has, such as ``--num-key-value-heads`` and ``--use-rotary-position-embeddings``), and it
runs DeepSpeed's engine, whose rules come with it (target.toml ``families``). It reuses what
both write: the deepspeed target's config keys and launcher (:func:`parc.targets.deepspeed.config`,
its ``launch.sh.j2``), torchrun's launch, Megatron-LM's vocabulary divisor and CUDA settings.

What the fork derives equals the plan: ``dp = world / (tp · pp)`` (megatron/arguments.py
validate_args) and DeepSpeed's ``train_batch_size = micro · accumulation · dp`` with the data
parallel group from the fork's mpu (or its PipelineModule's topology with pp > 1). With pp = 1
the launch says ``--no-pipeline-parallel``, so pretrain_gpt.py builds GPTModel rather than a
one-stage GPTModelPipe, as the fork's own scripts do."""
from __future__ import annotations

from parc.model.targets import flag, pinned
from parc.targets.base import Cat, Env, File, Var, settings
from parc.targets import deepspeed, torchrun
from parc.targets.megatron import group_args, vocab_divisor

TARGET = "megatron_deepspeed"
DEFAULT_ENTRYPOINT = "pretrain_gpt.py"
CONFIG = deepspeed.CONFIG


def options(plan):
    """``F(what)``: the option the pinned commit spells ``what`` with (flags.toml)."""
    version = pinned(plan, TARGET) if plan is not None else None
    return lambda what: flag(TARGET, what, version)


def arg_lines(plan) -> list[list]:
    """Every argument of the plan, as the fork's parser takes them (flags.toml)."""
    return _parallel_lines(plan) + _model_lines(plan) + _training_lines(plan)


def _parallel_lines(plan) -> list[list]:
    F, me, tr = options(plan), plan.mesh, plan.train
    out = [[F("tensor_model_parallel_size"), me.tp], [F("pipeline_model_parallel_size"), me.pp]]
    if me.pp == 1:
        out.append([F("no_pipeline_parallel")])
    if tr.sequence_parallel and me.tp > 1:
        out.append([F("sequence_parallel")])
    return out


def _model_lines(plan) -> list[list]:
    F, m, me = options(plan), plan.model, plan.mesh
    out: list[list] = [[F("num_layers"), m.layers], [F("hidden_size"), m.hidden], [F("ffn_hidden_size"), m.ffn_hidden],
                       [F("num_attention_heads"), m.heads]]
    a = out.append
    if m.kv_heads != m.heads:
        a([F("num_key_value_heads"), m.kv_heads])
    if m.head_dim and m.head_dim * m.heads != m.hidden:
        a([F("kv_channels"), m.head_dim])
    a([F("seq_length"), m.seq_len])
    a([F("max_position_embeddings"), max(m.seq_len, m.max_positions or 0)])
    tok = settings(plan, TARGET).get("tokenizer")
    if tok:
        a([F("tokenizer_type"), "GPTSentencePieceTokenizer"])
        a([F("tokenizer_model"), tok])
    else:     # NullTokenizer's vocabulary is --vocab-size and its end-of-document token
        a([F("tokenizer_type"), "NullTokenizer"])
        a([F("vocab_size"), m.vocab - 1])
    divisor = vocab_divisor(m.vocab, me.tp)
    if divisor != 128:      # the fork's default
        a([F("make_vocab_size_divisible_by"), divisor])
    if m.mlp == "swiglu":
        a([F("swiglu")])
    a([F("normalization"), "rmsnorm" if m.norm == "rmsnorm" else "layernorm"])
    if m.norm_eps is not None:
        a([F("layernorm_epsilon"), f"{m.norm_eps:g}"])
    if m.position == "rope":
        a([F("use_rotary_position_embeddings")])
        if int(m.rope_theta) != 10000:     # the fork's default (type=int: P698 refuses a fraction)
            a([F("rotary_position_embeddings_theta"), int(m.rope_theta)])
    if not m.bias:
        a([F("disable_bias_linear")])
    if not m.tied_embeddings:
        a([F("untie_embeddings_and_output_weights")])
    return out


def _training_lines(plan) -> list[list]:
    F, sc, tr = options(plan), plan.schedule, plan.train
    out: list[list] = [[F("micro_batch_size"), sc.micro_batch], [F("global_batch_size"), sc.global_batch],
                       [F("optimizer"), "sgd" if tr.optimizer == "sgd" else "adam"], [F("zero_stage"), tr.zero]]
    a = out.append
    if tr.precision in ("bf16", "fp8"):      # fp8 trains in bf16 here (P687)
        a([F("bf16")])
    elif tr.precision == "fp16":
        a([F("fp16")])
    if tr.recompute == "selective":
        a([F("recompute_granularity"), "selective"])
    elif tr.recompute == "full":
        a([F("recompute_granularity"), "full"])
        a([F("recompute_method"), "uniform"])
        a([F("recompute_num_layers"), 1])
    return out


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each field of the plan the fork's arguments cannot say (P620)."""
    m, tr = plan.model, plan.train
    other = "compile for `target megatron` (Megatron-LM), which has it"
    out = []

    def no(path: str, what: str, fix: str = other) -> None:
        out.append((path, what, fix))
    if m.is_moe:
        no("model.experts", "a mixture-of-experts model: parc writes the fork's dense GPT arguments, not DeepSpeed-MoE's "
           "(--num-experts, --topk, --moe-expert-parallel-size, --expert-interval)")
    if m.is_mla:
        no("model.kv_lora_rank", "multi-latent attention: the fork's ParallelAttention has no latent projections")
    if m.qk_norm:
        no("model.qk_norm", "query/key norms: the fork has no --qk-layernorm")
    if m.qkv_bias and not m.bias:
        no("model.qkv_bias", "a bias on the QKV projection alone: the fork has --disable-bias-linear for every "
           "linear layer and no --add-qkv-bias")
    if m.attention_window:
        no("model.attention_window", "windowed attention: the fork's attention is global in every layer")
    if m.attention_sinks:
        no("model.attention_sinks", "attention sinks: the fork's softmax has no learned sink logit")
    if m.mtp_layers:
        no("model.mtp_layers", "multi-token prediction: the fork has no MTP layers")
    if m.hybrid:
        no("model.hybrid", "a hybrid model: the fork builds GPT layers, every one attention")
    if m.mlp not in ("swiglu", "gelu"):
        no("model.mlp", f"`mlp = {m.mlp}`: the fork's MLP is GeLU or --swiglu")
    split = plan.placement.layers
    if plan.placement.layers_mode == "explicit" and split and len(set(split)) > 1:
        no("placement.layers", f"the split {list(split)}: the fork's PipelineModule cuts the transformer layers "
           "itself (partition_method 'type:transformer', an even split), and no argument tells it otherwise",
           "leave `placement.layers` out, or give an even split")
    if tr is not None and tr.recompute == "selective" and tr.recompute_modules:
        no("train.recompute_modules", "the modules to recompute: the fork's selective recomputation is core attention "
           "alone", "leave `recompute_modules` out (core attention), or use `recompute = full`")
    if tr is not None and tr.recompute == "selective_op":
        no("train.recompute", "`recompute = selective_op`: the fork recomputes core attention or whole layers",
           "use `recompute = selective` or `full`")
    return out


def launch_env(plan) -> list[Env]:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 where the fork's validate_args asks for it: with sequence
    parallelism (its async tensor-parallel all-reduce, the other case, is off under --deepspeed)."""
    if plan.train.sequence_parallel and plan.mesh.tp > 1:
        return [Env("CUDA_DEVICE_MAX_CONNECTIONS", "1", "Megatron-DeepSpeed's sequence parallelism needs one CUDA work "
                    "queue (megatron/arguments.py validate_args)", default=False)]
    return []


def config(plan) -> dict:
    """ds_config.json: the deepspeed target's batch, precision and ZeRO keys, the data parallel
    size known to DeepSpeed through the fork's mpu (so ``train_batch_size`` is written at any tp);
    no AutoTP or pipeline keys (Megatron shards the layers, GPTModelPipe gives the stages)."""
    return deepspeed.config(plan, TARGET, megatron=True)


def config_file(plan) -> File:
    import json

    return File(CONFIG, json.dumps(config(plan), indent=2, ensure_ascii=True) + "\n")


def _lines(plan, folder: Var) -> list[list]:
    s = settings(plan, TARGET)
    return arg_lines(plan) + group_args(s.get("extra_args")) + [
        [deepspeed.options(plan)("deepspeed")], [deepspeed.options(plan)("deepspeed_config"), Cat((folder, "/" + CONFIG))]]


def build(plan) -> list[File]:
    s = settings(plan, TARGET)
    entry = s.get("entrypoint", DEFAULT_ENTRYPOINT)
    if s.get("runner", "deepspeed") == "torchrun":
        files = torchrun.node_files(plan, entrypoint=entry, arg_lines=_lines(plan, Var("here")), env=launch_env(plan))
        return files[:-1] + [config_file(plan)] + files[-1:]
    return deepspeed.megatron_files(plan, entry, arg_lines(plan) + group_args(s.get("extra_args")), config_file(plan),
                                    env=launch_env(plan))


def node_launch(plan, s: dict):
    """Under a scheduler every node runs torchrun with the scheduler's rendezvous (the deepspeed
    launcher would start the other nodes itself): the same arguments and ds_config.json
    (parc/targets/engines.py; ``s`` the block's settings)."""
    entry = s.get("entrypoint", DEFAULT_ENTRYPOINT)
    return torchrun.scheduled(plan, TARGET, entrypoint=entry, arg_lines=_lines(plan, Var("here")),
                              command_lines=_lines(plan, Var("dir")), env=launch_env(plan), files=[config_file(plan)])
