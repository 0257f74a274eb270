"""Runs inside the DeepSpeed virtual environment (tests/judges/deepspeed_env.sh), never in parc's own.

Reads JSON lists of {"argv": what parc's launch passes to Megatron-DeepSpeed's pretrain_gpt.py,
"world": the ranks the launcher starts, "cwd": where the launch ran}, one list a line, on stdin. For
each it prints what Megatron-DeepSpeed (deepspeedai/Megatron-DeepSpeed 4efb479d5317) and DeepSpeed
0.19.8 make of it, or their message:

* the fork's argument parsing. With PARC_MEGATRON_DEEPSPEED_SRC naming a checkout of the fork, its
  own megatron/arguments.py: parse_args (with deepspeed.add_config_arguments) and validate_args,
  with WORLD_SIZE = world (the modules it imports for tokenizers and kernels stubbed, as
  wild_megatron_deepspeed_options.py does). The fork is on no package registry, so without a
  checkout the parser is rebuilt from tests/wild/engines/megatron_deepspeed.json, the table of that
  parser's options (spellings, nargs, type, choices, defaults) read from the same source: argparse
  refuses exactly what the fork's parser refuses. validate_args's checks and derivations that
  decide the run's shape are then applied as the fork writes them (quoted below);
* ParallelAttention's split of the heads over the tensor-parallel ranks (megatron/model/
  transformer.py: core.utils.divide of num_attention_heads and num_key_value_heads by tp);
* the config --deepspeed_config names, through DeepSpeed's own DeepSpeedConfig with the data
  parallel size the fork gives deepspeed.initialize (its mpu; with pp > 1 GPTModelPipe's
  PipeModelDataParallelTopology), its batch checks included; and PipelineEngine's ZeRO assertion.

The answer carries the degrees and the model the fork builds."""
import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")   # no GPU here: DeepSpeed's CPU accelerator
os.environ.setdefault("DS_BUILD_OPS", "0")

import deepspeed.comm as dist  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology  # noqa: E402
from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: E402

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "wild" / "engines" / "megatron_deepspeed.json"
SOURCE = os.environ.get("PARC_MEGATRON_DEEPSPEED_SRC")
TYPES = {"int": int, "float": float, "str": str, None: None}


class _Grid:
    """What deepspeed.initialize reads from the fork's mpu (or its PipelineModule's topology)."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def _table_parser():
    p = argparse.ArgumentParser(allow_abbrev=False)
    for o in json.loads(TABLE.read_text())["options"]:
        if o["takes"] == "flag":
            action = "store_false" if o["negative"] else "store_true"
            p.add_argument(*o["names"], dest=o["dest"], action=action, default=o["default"])
        else:
            p.add_argument(*o["names"], dest=o["dest"], type=TYPES.get(o["type"], str), nargs=o["nargs"],
                           choices=o["choices"], default=o["default"])
    return p


def _validate(a, world):
    """megatron/arguments.py validate_args, the lines that decide the run's shape."""
    a.world_size = world
    a.tensor_model_parallel_size = min(a.tensor_model_parallel_size, world)
    assert world % a.tensor_model_parallel_size == 0, "world size ({}) is not divisible by tensor model " \
        "parallel size ({})".format(world, a.tensor_model_parallel_size)
    a.pipeline_model_parallel_size = min(a.pipeline_model_parallel_size, world // a.tensor_model_parallel_size)
    if a.no_pipeline_parallel:
        assert a.pipeline_model_parallel_size == 1, \
            "pipeline_model_parallel_size must be 1 if pipeline parallel is disabled"
    mp = a.pipeline_model_parallel_size * a.tensor_model_parallel_size * a.ds_sequence_parallel_size
    assert world % mp == 0, "world size is not divisible by tensor parallel size times pipeline parallel size"
    a.data_parallel_size = world // mp
    assert a.micro_batch_size is not None and a.micro_batch_size > 0
    if a.global_batch_size is None:
        a.global_batch_size = a.micro_batch_size * a.data_parallel_size
    assert not (a.fp16 and a.bf16)
    if a.ffn_hidden_size is None:
        a.ffn_hidden_size = int((4 * a.hidden_size * 2 / 3) / 64) * 64 if a.swiglu else 4 * a.hidden_size
    if a.kv_channels is None:
        assert a.hidden_size % a.num_attention_heads == 0
        a.kv_channels = a.hidden_size // a.num_attention_heads
    if a.max_position_embeddings is not None and a.seq_length is not None:
        assert a.max_position_embeddings >= a.seq_length
    if a.recompute_granularity == "selective":
        assert a.recompute_method is None, "recompute method is not yet supported for selective recomputing granularity"
    if a.num_key_value_heads is None:
        a.num_key_value_heads = a.num_attention_heads
    assert a.num_attention_heads % a.num_key_value_heads == 0, "num_attention_heads must be divisible by " \
        "num_key_value_heads"
    return a


def _source_args(argv, world):
    """The fork's own parse_args and validate_args (PARC_MEGATRON_DEEPSPEED_SRC)."""
    if "megatron.arguments" not in sys.modules:
        sys.path.insert(0, str(HERE))
        import wild_megatron_deepspeed_options as gen
        import wild_stubs

        wild_stubs.install(gen.STUB, wild_stubs.AnyModule)
        sys.path.insert(0, SOURCE)
    from megatron import arguments

    os.environ.update({"WORLD_SIZE": str(world), "RANK": "0"})
    sys.argv = ["pretrain_gpt.py", *argv]
    args = arguments.parse_args()
    return arguments.validate_args(args)


def _padded(a):
    """megatron/tokenizer/tokenizer.py: NullTokenizer's vocabulary is --vocab-size and its
    end-of-document token, padded to a multiple of --make-vocab-size-divisible-by · tp."""
    if a.tokenizer_type != "NullTokenizer":
        return None
    after, multiple = a.vocab_size + 1, a.make_vocab_size_divisible_by * a.tensor_model_parallel_size
    while after % multiple:
        after += 1
    return after


def judge(item):
    world, out = item["world"], [None, None]
    try:
        if SOURCE:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                a = _source_args(item["argv"], world)
        else:
            try:
                a = _table_parser().parse_args(item["argv"])
            except SystemExit:
                return {"ok": False, "stage": "parser", "error": "the fork's parser refused the arguments"}
            a = _validate(a, world)
    except SystemExit:
        return {"ok": False, "stage": "parser", "error": "the fork's parser refused the arguments"}
    except (AssertionError, ValueError, RuntimeError) as x:
        return {"ok": False, "stage": "validate_args", "error": f"{type(x).__name__}: {x}"}
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    for what in ("num_attention_heads", "num_key_value_heads"):   # ParallelAttention, core.utils.divide
        if getattr(a, what) % tp:
            return {"ok": False, "stage": "model build",
                    "error": f"{getattr(a, what)} is not divisible by {tp} ({what} over the tensor-parallel ranks)"}
    if not a.deepspeed or not a.deepspeed_config:
        return {"ok": False, "stage": "deepspeed", "error": "no --deepspeed --deepspeed_config"}
    path = Path(a.deepspeed_config)
    cfg = json.loads((path if path.is_absolute() else Path(item["cwd"]) / path).read_text())
    dist.get_rank = lambda group=None: 0
    dist.get_world_size = lambda group=None: world
    dp = world // (tp * pp)
    grid = _Grid(PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp).get_dim("data") if pp > 1 else dp)
    try:
        c = DeepSpeedConfig(dict(cfg), grid)
        if pp > 1 and not a.no_pipeline_parallel:   # PipelineEngine.__init__ on the config alone
            assert c.zero_optimization_stage < ZeroStageEnum.gradients, \
                "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    except (AssertionError, ValueError) as x:
        return {"ok": False, "stage": "DeepSpeedConfig", "error": str(x)}
    out = {"ok": True, "parser": "source" if SOURCE else "table", "tp": tp, "pp": pp, "dp": a.data_parallel_size,
           "micro": a.micro_batch_size, "global": a.global_batch_size, "zero_stage": a.zero_stage,
           "no_pipeline_parallel": a.no_pipeline_parallel, "bf16": a.bf16, "fp16": a.fp16,
           "layers": a.num_layers, "hidden": a.hidden_size, "ffn_hidden": a.ffn_hidden_size,
           "heads": a.num_attention_heads, "kv_heads": a.num_key_value_heads, "kv_channels": a.kv_channels,
           "seq_len": a.seq_length, "max_positions": a.max_position_embeddings, "swiglu": a.swiglu,
           "normalization": a.normalization, "rope": a.use_rotary_position_embeddings, "rope_theta": a.rope_theta,
           "bias": a.add_bias_linear, "untied": a.untie_embeddings_and_output_weights, "padded_vocab": _padded(a),
           "norm_eps": a.layernorm_epsilon,
           "recompute": a.recompute_granularity, "sequence_parallel": a.sequence_parallel,
           "ds_train_batch_size": c.train_batch_size, "ds_micro": c.train_micro_batch_size_per_gpu,
           "ds_gas": c.gradient_accumulation_steps, "ds_zero": int(c.zero_optimization_stage),
           "ds_bf16": bool(c.bfloat16_config.enabled)}
    return out


# One JSON list a line, answered by one line that starts with MARK (DeepSpeed logs to stdout too).
MARK = "@@megatron-deepspeed-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(item) for item in json.loads(line)]), flush=True)
