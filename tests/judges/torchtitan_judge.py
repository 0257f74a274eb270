"""Runs inside the torchtitan virtual environment (tests/judges/torchtitan_env.sh), never in parc's own.

Reads JSON lists of {"argv": [...], "world": N} on stdin, one list a line: each argv is what
parc's launch.sh passes after ``torchrun ... -m torchtitan.train`` ({"model": [module, config]}
asks instead for the fields of parc's model block that config function builds). For each it prints whether
torchtitan's own configuration accepts it, with the degrees torchtitan derives, or its message:

* ConfigManager().parse_args(argv): --module/--config load the config function, tyro applies the
  overrides, and Trainer.Config.__post_init__ runs torchtitan's config checks;
* ParallelDims.from_config(config.parallelism, world): ParallelDims._validate;
* the model config's update_from_config (what the model build checks against the parallelism:
  tp divides the heads and the KV heads);
* with pp > 1, torchtitan's _get_pipeline_metadata on the config's model: the stages it makes,
  and _generate_llm_fqn_per_model_part: the layers of each;
* the checks of Trainer.__init__ (torchtitan/trainer.py), which runs only with GPUs, are repeated
  here line for line: the sequence length evenness (seq_len divisible by tp with sequence
  parallel × 2·cp with cp > 1) and the batch sizes (global_batch_size % (local_batch_size ×
  dp_replicate × dp_shard) == 0, gradient accumulation and pipeline microbatches).

An item's "path" is a folder put first on sys.path (launch.sh's PYTHONPATH, where parc emits a
config function of its own beside it). Started with PARC_TORCHTITAN_FLOAT8=1, the judge answers
torchtitan's float8 converter as a Hopper GPU with torchao would (torchao is not installed here:
a stand-in whose Float8LinearConfig knows its recipes), and reports which linear layers the
converter swapped (float8_linears) and which it left (bf16_linears).
"""
import contextlib
import io
import json
import sys
import warnings

warnings.simplefilter("ignore")

import os  # noqa: E402
import types  # noqa: E402


class _Torchao(types.ModuleType):
    """torchao as the float8 converter uses it: Float8LinearConfig.from_recipe_name and classes."""

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        if k == "Float8LinearConfig":
            return type(k, (), {"from_recipe_name": staticmethod(lambda name: ("torchao", name)),
                                "__init__": lambda self, **kw: None})
        return type(k, (), {}) if k[:1].isupper() else (lambda *a, **kw: None)


if os.environ.get("PARC_TORCHTITAN_FLOAT8") == "1":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wild_stubs  # noqa: E402

    wild_stubs.install({"torchao"}, _Torchao)
    from torchtitan.components.quantization import float8 as _float8  # noqa: E402

    _float8.has_cuda_capability = lambda *a: True   # an SM90 GPU

from torchtitan.config.manager import ConfigManager  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402


def _pipeline(dims, config):
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part, _get_pipeline_metadata

    stages, layers, first, last = _get_pipeline_metadata(dims, config.parallelism, config.model_spec.model)
    name = config.parallelism.pipeline_parallel_schedule
    parts = config.parallelism.module_fqns_per_model_part or _generate_llm_fqn_per_model_part(stages, layers, first, last)
    split = [sum(1 for fqn in part if fqn.startswith("layers.")) for part in parts]
    return {"schedule": name, "schedule_class": get_schedule_class(name).__name__, "stages": stages,
            "layers": layers, "split": split}


def _moe_fields(layers) -> dict:
    """The MoE fields of parc's model block, read from torchtitan's layer configs."""
    moe = [i for i, x in enumerate(layers) if getattr(x, "moe", None) is not None]
    if not moe:
        return {"experts": 0, "moe_layers": []}
    cfg = layers[moe[0]].moe
    inner = cfg.routed_experts.inner_experts
    shared = cfg.shared_experts
    r = cfg.router
    groups = r.num_expert_groups if r.num_expert_groups and r.num_expert_groups > 1 else 0
    return {"experts": cfg.num_experts, "top_k": cfg.router.top_k, "moe_ffn_hidden": inner.hidden_dim,
            "shared_experts": shared.w1.out_features // inner.hidden_dim if shared is not None else 0,
            "moe_layers": moe, "router_score": r.score_func, "router_groups": groups,
            "router_group_topk": r.num_limited_groups if groups else 0, "router_scale": float(r.route_scale)}


def _attention_fields(layers) -> dict:
    att = layers[0].attention
    out = {"heads": att.n_heads, "rope_theta": int(att.rope.theta),
           "qk_norm": getattr(att, "qk_norm", None) is not None,
           "attention_sinks": isinstance(att.param_init, dict) and "sinks" in att.param_init}
    if getattr(att, "kv_lora_rank", None):
        out.update(kv_heads=att.n_heads, q_lora_rank=att.q_lora_rank or 0, kv_lora_rank=att.kv_lora_rank,
                   qk_rope_head_dim=att.qk_rope_head_dim, qk_nope_head_dim=att.qk_nope_head_dim,
                   v_head_dim=att.v_head_dim)
    else:
        out.update(kv_heads=att.n_kv_heads or att.n_heads, head_dim=att.head_dim or att.dim // att.n_heads)
        qkv = getattr(att, "qkv_linear", None)
        wq = getattr(qkv, "wqkv", None) or getattr(qkv, "wq", None)
        out["qkv_bias"] = bool(wq is not None and wq.bias)
    windows = [getattr(x.attention, "sliding_window_size", None) for x in layers]
    out["local_layers"] = [i for i, w in enumerate(windows) if w]
    out["attention_window"] = max((w for w in windows if w), default=0)
    return out


def model_fields(module: str, config: str) -> dict:
    """The fields of parc's model block that torchtitan's config function builds."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cfg = ConfigManager().parse_args(["--module", module, "--config", config])
    except Exception as x:
        return {"ok": False, "error": f"{type(x).__name__}: {x}"}
    m = cfg.model_spec.model
    dense = [x for x in m.layers if getattr(x, "feed_forward", None) is not None]
    out = {"ok": True, "layers": len(m.layers), "hidden": m.dim, "vocab": m.vocab_size,
           "tied_embeddings": bool(m.enable_weight_tying), "mtp_layers": len(getattr(m, "mtp_layers", None) or []),
           "norm_eps": m.norm.eps,
           "ffn_hidden": dense[0].feed_forward.w1.out_features if dense else None,
           "activation_checkpoint": type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint else None}
    out.update(_attention_fields(m.layers))
    out.update(_moe_fields(m.layers))
    return out


def _linears(config) -> dict:
    """The model's linear layers by kind: the ones torchtitan's float8 converter swapped
    (Float8Linear.Config) and the ones it left."""
    from torchtitan.models.common.linear import Linear

    out = {"float8_linears": [], "bf16_linears": []}
    for fqn, cfg, *_ in config.model_spec.model.traverse(Linear.Config):
        kind = "float8_linears" if type(cfg).__qualname__.startswith("Float8Linear") else "bf16_linears"
        out[kind].append(fqn)
    return out


def judge(item):
    if "model" in item:
        return model_fields(*item["model"])
    if item.get("path"):   # a launch of its own: its folder's modules, not an earlier launch's
        sys.path.insert(0, item["path"])
        for f in os.listdir(item["path"]):
            sys.modules.pop(f.removesuffix(".py"), None)
    argv, world = item["argv"], item["world"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            config = ConfigManager().parse_args(list(argv))
    except SystemExit:
        return {"ok": False, "stage": "parser", "error": "torchtitan's command line refused the arguments"}
    except Exception as x:
        return {"ok": False, "stage": "config", "error": f"{type(x).__name__}: {x}"}
    try:
        dims = ParallelDims.from_config(config.parallelism, world)
    except Exception as x:
        return {"ok": False, "stage": "ParallelDims", "error": f"{type(x).__name__}: {x}"}
    t, p = config.training, config.parallelism
    ac = config.activation_checkpoint
    out = {"ok": True, "activation_checkpoint": type(ac).__qualname__ if ac else None, "dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "cp": dims.cp, "tp": dims.tp,
           "pp": dims.pp, "ep": dims.ep, "world": dims.world_size, "seq_len": t.seq_len,
           "local_batch_size": t.local_batch_size, "global_batch_size": t.global_batch_size,
           "reshard_after_forward": p.fsdp_reshard_after_forward, "sequence_parallel": p.enable_sequence_parallel,
           "mixed_precision_param": t.mixed_precision_param,
           "async_tp": config.compile.enable_async_tensor_parallel, "compile": config.compile.enable,
           **_linears(config)}
    # Trainer.__init__, "validate dense activation sequence length evenness"
    divisor = (dims.tp if p.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if t.seq_len % divisor:
        return {"ok": False, "stage": "Trainer", "error": f"Training sequence length ({t.seq_len}) must be "
                f"divisible by {divisor} for the configured sequence/context parallelism."}
    # Trainer.__init__, "verify batch sizes"
    batch_degree = dims.dp_replicate * dims.dp_shard
    global_batch = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * batch_degree
    if global_batch % (t.local_batch_size * batch_degree):
        return {"ok": False, "stage": "Trainer", "error": "global batch size must be multiple of local batch size "
                f"times data-parallel degree ({global_batch} % ({t.local_batch_size} * {batch_degree}) != 0)"}
    out["grad_accumulation"] = global_batch // (t.local_batch_size * batch_degree)
    # the model build's checks against the parallelism (Decoder.Config.update_from_config: tp
    # divides the heads and the KV heads, weight tying without pp, MoE experts over ep)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            config.model_spec.model.update_from_config(config=config)
    except Exception as x:
        return {"ok": False, "stage": "model", "error": f"{type(x).__name__}: {x}"}
    if dims.pp > 1:
        out["pp_microbatches"] = t.local_batch_size // p.pipeline_parallel_microbatch_size
        try:
            out.update(_pipeline(dims, config))
        except Exception as x:
            return {"ok": False, "stage": "pipeline", "error": f"{type(x).__name__}: {x}"}
    return out


MARK = "@@torchtitan-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(item) for item in json.loads(line)]), flush=True)
