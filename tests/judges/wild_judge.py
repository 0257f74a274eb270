"""Runs inside the vLLM, SGLang or SkyPilot judge environment (tests/judges/vllm_env.sh,
sglang_env.sh, skypilot_env.sh), never in parc's own: the engine's own parser reads the real-config
corpus's launches.

Reads JSON lists of items, one list a line, on stdin; each item is ``{"argv": [...], "cwd": DIR}``,
the words after ``vllm serve`` or ``python -m sglang.launch_server``. For each it prints the
settings the parser stores (every option, defaults included: ``vars()`` of its namespace), or its
refusal. vLLM's FlexibleArgumentParser reads ``--config FILE`` relative to ``cwd`` itself, and the
positional model is reported as ``model``. SGLang's parser is built as ``prepare_server_args``
builds it (``ServerArgs.add_cli_args``); its resolution is left to the test, which applies the same
two SGLang rules to both launches (tests/support/wild_argv.py ``sglang_resolved``).

With ``skypilot`` each item is ``{"text": TASK_YAML}``: ``sky.Task.from_yaml_config`` (the task
schema, unknown fields refused) builds the task, and the answer is its node count and the
accelerators of each of its candidate resources.

    python tests/judges/wild_judge.py vllm|sglang|skypilot"""
import argparse
import contextlib
import io
import json
import os
import sys

ENGINE = sys.argv[1]
MARK = f"@@wild-{ENGINE} "


def _plain(v):
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


def _vllm_parser():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def _sglang_parser():
    here = os.path.dirname(os.path.abspath(__file__))
    src = open(os.path.join(here, "sglang_judge.py")).read().split("import argparse  # noqa: E402")[0]
    exec(compile(src, "sglang_judge.py", "exec"), {"__name__": "sglang_stub"})   # its torchvision stand-in
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    return p


def judge(parser, item):
    saved = os.getcwd()
    try:
        os.chdir(item["cwd"])
        with contextlib.redirect_stderr(io.StringIO()) as err:
            ns = parser.parse_args(item["argv"])
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1:] or ["refused"]}
    finally:
        os.chdir(saved)
    out = {k: _plain(v) for k, v in vars(ns).items()}
    if ENGINE == "vllm":
        out["model"] = out.pop("model_tag", None) or out.get("model")
    return {"ok": True, "settings": out}


def sky_task(item):
    import sky
    import yaml

    try:
        task = sky.Task.from_yaml_config(yaml.safe_load(item["text"]))
    except Exception as x:   # noqa: BLE001  (any refusal, with SkyPilot's message)
        return {"ok": False, "error": f"{type(x).__name__}: {x}"}
    acc = sorted(f"{k}:{int(v)}" for r in task.resources for k, v in (r.accelerators or {}).items())
    return {"ok": True, "num_nodes": task.num_nodes, "accelerators": acc}


def main():
    if ENGINE == "skypilot":
        import tempfile

        os.environ["HOME"] = tempfile.mkdtemp(prefix="wild-sky-")   # SkyPilot keeps state under ~/.sky
        for line in sys.stdin:
            if line.strip():
                print(MARK + json.dumps([sky_task(item) for item in json.loads(line)]), flush=True)
        return
    parser = _vllm_parser() if ENGINE == "vllm" else _sglang_parser()
    for line in sys.stdin:
        if line.strip():
            print(MARK + json.dumps([judge(parser, item) for item in json.loads(line)]), flush=True)


if __name__ == "__main__":
    main()
