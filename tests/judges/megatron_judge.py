"""Runs inside the Megatron-LM virtual environment (tests/judges/megatron_env.sh), never in parc's own.

Reads JSON lists of {"argv": [...], "env": {...}, "world": N} on stdin, one list a line: each argv
is what parc's launch.sh passes to pretrain_gpt.py, env the variables the launch sets. For each it
prints whether Megatron-LM's own argument handling accepts it, with what Megatron derives, or its
message:

* megatron.training.arguments.parse_args (the parser pretrain_gpt.py builds), then validate_args
  with WORLD_SIZE = world and the launch's environment (CUDA_DEVICE_MAX_CONNECTIONS);
* core_transformer_config_from_args: the TransformerConfig (MLATransformerConfig with
  --multi-latent-attention) the model is built from, whose __post_init__ runs Megatron-core's
  model checks; its fields are returned for the test to compare with the plan.

Without a GPU three probes are answered for the judge: the device's architecture is Hopper (9, as
an H100's: validate_args asks it for CUDA_DEVICE_MAX_CONNECTIONS), Transformer Engine is 2.9
(TransformerConfig checks its version for FP8 MoE) and has its fused RoPE kernel (TransformerConfig
checks that it imports for apply_rope_fusion). No kernel runs. megatron-core's wheel asks for Python 3.12 and
imports typing.override, which typing_extensions supplies here.
"""
import contextlib
import io
import json
import os
import sys
import typing
import warnings

import typing_extensions

warnings.simplefilter("ignore")
typing.override = typing_extensions.override

from packaging.version import Version  # noqa: E402

import megatron.core.utils as core_utils  # noqa: E402

core_utils._te_version = Version("2.9.0")
import megatron.training.arguments as arguments  # noqa: E402

arguments.get_device_arch_version = lambda: 9
import megatron.core.models.common.embeddings.rope_utils as rope_utils  # noqa: E402

if rope_utils.fused_apply_rotary_pos_emb is None:     # Transformer Engine's fused RoPE kernel is there
    rope_utils.fused_apply_rotary_pos_emb = lambda *a, **k: None
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig  # noqa: E402
from megatron.training.argument_utils import core_transformer_config_from_args  # noqa: E402

FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
          "gated_linear_unit", "normalization", "add_bias_linear", "add_qkv_bias", "qk_layernorm", "softmax_type",
          "window_size", "window_attn_skip_freq", "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
          "moe_shared_expert_intermediate_size", "moe_layer_freq", "mtp_num_layers", "multi_latent_attention",
          "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
          "recompute_granularity", "recompute_modules", "recompute_method", "fp8", "fp8_recipe", "fp8_param",
          "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
          "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel", "attention_backend",
          "rope_type", "rotary_scaling_factor", "mscale", "mscale_all_dim", "original_max_position_embeddings",
          "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_mscale", "yarn_mscale_all_dim",
          "layernorm_epsilon", "moe_router_score_function", "moe_router_num_groups", "moe_router_group_topk",
          "moe_router_enable_expert_bias", "moe_router_topk_scaling_factor", "moe_router_pre_softmax",
          "moe_router_dtype", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
          "moe_router_force_load_balancing")
ARGS = ("data_parallel_size", "micro_batch_size", "global_batch_size", "seq_length", "max_position_embeddings",
        "padded_vocab_size", "vocab_size", "rotary_base", "position_embedding_type",
        "untie_embeddings_and_output_weights", "fp8_param_gather", "use_rope_scaling", "rope_scaling_factor",
        "rotary_seq_len_interpolation_factor", "use_megatron_fsdp", "megatron_fsdp_main_grads_dtype",
        "grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32", "nccl_ub", "fsdp_double_buffer",
        "fsdp_manual_registration")


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x if isinstance(x, (int, float, str, bool, type(None))) else str(x)


def judge(item):
    saved = dict(os.environ)
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update({"WORLD_SIZE": str(item["world"]), "RANK": "0", "LOCAL_RANK": "0", **item.get("env", {})})
    sys.argv = ["pretrain_gpt.py", *item["argv"]]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                args = arguments.parse_args()
            except SystemExit:
                return {"ok": False, "stage": "parser", "error": out.getvalue()[-600:]}
            try:
                arguments.validate_args(args, {})
            except (AssertionError, ValueError, Exception) as x:
                return {"ok": False, "stage": "validate_args", "error": f"{type(x).__name__}: {x}"}
            try:
                cls = MLATransformerConfig if args.multi_latent_attention else TransformerConfig
                cfg = core_transformer_config_from_args(args, cls)
            except Exception as x:
                return {"ok": False, "stage": "TransformerConfig", "error": f"{type(x).__name__}: {x}"}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    verdict = {"ok": True, "config": type(cfg).__name__}
    verdict.update({f: _plain(getattr(cfg, f, None)) for f in FIELDS})
    verdict.update({f: _plain(getattr(args, f, None)) for f in ARGS})
    return verdict


MARK = "@@megatron-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(item) for item in json.loads(line)]), flush=True)
