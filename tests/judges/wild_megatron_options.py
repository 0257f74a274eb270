"""Prints Megatron-LM's training arguments (``megatron/training/arguments.py``,
``add_megatron_arguments``) as JSON: each option's spellings, the setting it stores, whether it
takes a value, and its default. ``tests/wild/engines/megatron.json`` is this output for the
release parc pins (NVIDIA/Megatron-LM d98e8a64ddf3, core 0.20.0):

    python tests/judges/wild_megatron_options.py /path/to/Megatron-LM > tests/wild/engines/megatron.json

Only the parser is built. The GPU libraries its modules import at the top (triton, Transformer
Engine, apex, ...) are not needed for that and are replaced by empty stand-ins; torch (CPU) must
be installed."""
import argparse
import enum
import json
import sys
import typing

import wild_stubs

STUB = {"triton", "transformer_engine", "apex", "flash_attn", "nvidia_resiliency_ext", "modelopt", "mamba_ssm",
        "causal_conv1d", "flashinfer", "deep_ep", "grouped_gemm", "nvtx", "wandb", "emerging_optimizers",
        "tensorstore", "zarr", "multistorageclient", "onnx", "einops", "flask_restful", "nltk", "sentencepiece",
        "tiktoken", "tokenizers", "transformers", "datasets"}


def main(checkout):
    wild_stubs.install(STUB, wild_stubs.AnyModule)
    typing.override = getattr(typing, "override", lambda f: f)   # Python 3.12's, for 3.11
    sys.path.insert(0, checkout)
    sys.argv = ["pretrain_gpt.py"]
    from megatron.training import arguments

    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    out = []
    for a in parser._actions:
        if not a.option_strings or a.dest == "help":
            continue
        takes = "value" if a.nargs is None or a.nargs == 1 else ("flag" if a.nargs == 0 else "list")
        neg = list(a.option_strings) if type(a).__name__ == "_StoreFalseAction" else []
        d = a.default.name if isinstance(a.default, enum.Enum) else a.default
        d = d if isinstance(d, (str, int, float, bool, type(None))) else str(d)
        out.append({"names": list(a.option_strings), "dest": a.dest, "takes": takes, "negative": neg, "default": d})
    print(json.dumps({"engine": "megatron", "version": "core 0.20.0 (NVIDIA/Megatron-LM d98e8a64ddf3)",
                      "options": out}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
