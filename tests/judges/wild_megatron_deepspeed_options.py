"""Prints Megatron-DeepSpeed's training arguments (``megatron/arguments.py`` parse_args, with
DeepSpeed's ``deepspeed.add_config_arguments``) as JSON: each option's spellings, the setting it
stores, whether it takes a value, its default, and what argparse checks of it (its type and
choices). ``tests/wild/engines/megatron_deepspeed.json`` is this output for the commit parc
follows (deepspeedai/Megatron-DeepSpeed 4efb479d5317, beside DeepSpeed 0.19.8), made in the
DeepSpeed judge's environment (tests/judges/deepspeed_env.sh: torch and deepspeed):

    DS_ACCELERATOR=cpu python tests/judges/wild_megatron_deepspeed_options.py /path/to/Megatron-DeepSpeed \
        > tests/wild/engines/megatron_deepspeed.json

The fork is on no package registry, so its judge (tests/judges/megatron_deepspeed_judge.py) parses
with this table. Only the parser is built: parse_args is stopped where it would parse. The modules
the fork imports at the top for its tokenizers and kernels are replaced by empty stand-ins."""
import argparse
import json
import sys

import wild_stubs

STUB = {"transformers", "sentencepiece", "tiktoken", "tokenizers", "apex", "transformer_engine", "flash_attn",
        "amp_C", "einops", "nltk", "regex", "six"}


class _Built(Exception):
    def __init__(self, parser):
        self.parser = parser


def _stop(self, *a, **k):
    raise _Built(self)


def describe(a) -> dict:
    kind = type(a).__name__
    takes = ("flag" if a.nargs == 0 else "value" if a.nargs in (None, 1, "?") else "list")
    d = a.default if isinstance(a.default, (str, int, float, bool, type(None))) else str(a.default)
    if isinstance(a.default, list):
        d = list(a.default)
    return {"names": list(a.option_strings), "dest": a.dest, "takes": takes,
            "negative": list(a.option_strings) if kind == "_StoreFalseAction" else [], "default": d,
            "type": getattr(a.type, "__name__", None), "choices": list(a.choices) if a.choices else None,
            "nargs": a.nargs, "const": a.const if isinstance(a.const, (str, int, float, bool, type(None))) else None}


def main(checkout):
    wild_stubs.install(STUB, wild_stubs.AnyModule)
    sys.path.insert(0, checkout)
    sys.argv = ["pretrain_gpt.py"]
    from megatron import arguments

    argparse.ArgumentParser.parse_args = _stop
    try:
        arguments.parse_args()
    except _Built as b:
        parser = b.parser
    out = [describe(a) for a in parser._actions if a.option_strings and a.dest != "help"]
    print(json.dumps({"engine": "megatron_deepspeed",
                      "version": "deepspeedai/Megatron-DeepSpeed 4efb479d5317 with DeepSpeed 0.19.8",
                      "options": out}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
