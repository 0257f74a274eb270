"""Runs inside the vLLM or SGLang judge environment (tests/judges/vllm_env.sh, sglang_env.sh).

Prints, as JSON on stdout, every option of the engine's own server parser (``vllm serve``'s
``make_arg_parser``; SGLang's ``ServerArgs.add_cli_args``): its spellings, the setting it stores
(``dest``), whether it takes a value, and its default. ``tests/wild/engines/<engine>.json`` is
this output: the corpus comparators read each engine's options as that engine spells them, and
``tests/test_wild.py`` (under PARC_JUDGES) checks that the file still matches the parser."""
import argparse
import json
import os
import sys


def _options(parser):
    out = []
    for a in parser._actions:
        if not a.option_strings or a.dest == "help":
            continue
        takes = "value" if a.nargs is None or a.nargs == 1 else ("flag" if a.nargs == 0 else "list")
        neg = [s for s in a.option_strings if s.startswith(("--no-", "--disable-")) and len(a.option_strings) > 1
               and type(a).__name__ in ("EnableDisableAction", "BooleanOptionalAction")]
        if type(a).__name__ == "_StoreFalseAction":
            neg = list(a.option_strings)
        default = a.default if isinstance(a.default, (str, int, float, bool, type(None))) else str(a.default)
        out.append({"names": list(a.option_strings), "dest": a.dest, "takes": takes, "negative": neg,
                    "default": default})
    return out


def main(engine):
    if engine == "vllm":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import vllm
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        parser, version = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")), vllm.__version__
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        src = open(os.path.join(here, "sglang_judge.py")).read().split("import argparse  # noqa: E402")[0]
        exec(compile(src, "sglang_judge.py", "exec"), {"__name__": "sglang_stub"})   # its torchvision stand-in
        from importlib.metadata import version as v

        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        version = v("sglang")
    print(json.dumps({"engine": engine, "version": version, "options": _options(parser)}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
