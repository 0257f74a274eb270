"""Runs inside the torchtitan judge environment (tests/judges/torchtitan_env.sh): prints, as JSON,
what each config function the corpus's launches name sets, in the corpus's keys (the sections of
torchtitan's 0.2 TOML files), so that a launch of ``--module M --config C`` and overrides is read as
the configuration torchtitan 0.3.0 runs. ``tests/wild/engines/torchtitan.json`` is this output:

    python tests/judges/wild_torchtitan_configs.py > tests/wild/engines/torchtitan.json

torchao (the Float8 converter's library) is not installed there and there is no GPU: a stand-in
module and a capable GPU's answer to the converters' capability checks let the config functions
that name a converter build their Config (nothing is converted)."""
import contextlib
import importlib
import inspect
import io
import json
import types

import wild_stubs

FUNCTIONS = [("llama3", "llama3_8b"), ("llama3", "llama3_8b_mxfp8"), ("llama3", "llama3_70b"), ("llama3", "llama3_405b"),
             ("qwen3", "qwen3_32b"), ("deepseek_v3", "deepseek_v3_16b")]


class _Module(types.ModuleType):
    """Any name it is asked for: a plain class (capitalised) or a function doing nothing."""

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return type(k, (), {}) if k[:1].isupper() else (lambda *a, **kw: None)


def _settings(c, source: str) -> dict:
    ac = type(c.activation_checkpoint).__qualname__.split(".")[0]
    mode = {"SelectiveAC": "selective", "FullAC": "full"}.get(ac, "none")
    out = {"activation_checkpoint.mode": mode, "compile.enable": c.compile.enable,
           "compile.components": list(c.compile.components),
           "compile.enable_async_tensor_parallel": c.compile.enable_async_tensor_parallel}
    if mode == "selective":
        out["activation_checkpoint.selective_ac_option"] = "op"   # 0.3.0's SelectiveAC is op-level
    if "Float8LinearConverter" in source:    # the converter is applied inside the model's build
        out["model.converters"] = ["float8"]
    elif "MXFP8LinearConverter" in source:
        out["model.converters"] = ["mxfp8"]
    t, p = c.training, c.parallelism
    out.update({"training.local_batch_size": t.local_batch_size, "training.seq_len": t.seq_len,
                "training.global_batch_size": t.global_batch_size,
                "training.mixed_precision_param": t.mixed_precision_param})
    for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
              "tensor_parallel_degree", "enable_sequence_parallel", "pipeline_parallel_degree",
              "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "context_parallel_degree",
              "expert_parallel_degree"):
        out[f"parallelism.{k}"] = getattr(p, k)
    return out


def main():
    wild_stubs.install({"torchao"}, _Module)
    from torchtitan.components.quantization import float8, mx
    from torchtitan.config.manager import ConfigManager

    # the GPUs the converters' configs are written for (Hopper's FP8, Blackwell's MXFP8)
    float8.has_cuda_capability = mx.has_cuda_capability = lambda *a: True

    out = {}
    for module, config in FUNCTIONS:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            c = ConfigManager().parse_args(["--module", module, "--config", config])
        fn = getattr(importlib.import_module(f"torchtitan.models.{module}.config_registry"), config)
        out[f"{module}/{config}"] = _settings(c, inspect.getsource(fn))
    import torchtitan

    print(json.dumps({"engine": "torchtitan", "version": getattr(torchtitan, "__version__", "0.3.0"),
                      "config_functions": out}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
