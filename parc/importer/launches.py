"""The engine launches among the commands a file runs: ``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``, ``python -m sglang.launch_server``, ``sglang serve``,
Megatron-LM's ``pretrain_*.py`` (under ``torchrun``, ``python`` or ``deepspeed``), ``python -m
torchtitan.train`` (under ``torchrun``), the ``deepspeed`` launcher and a plain ``torchrun``
script; and what the commands around them say (``ray start --head``/``--address``, the SGLang
router)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.importer.sh_values import Arg, Text

ENGINES = ("vllm", "sglang", "megatron", "megatron_deepspeed", "torchtitan", "deepspeed")
MEGATRON = re.compile(r"(^|/)pretrain_\w+\.py$")
PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
# scripts that start a Ray cluster for a multi-node server: vLLM's
# examples/online_serving/multi-node-serving.sh (`leader`: ray start --head; `worker`: --address)
RAY_SCRIPTS = ("multi-node-serving.sh",)
# (Dynamo's worker modules take their engine's own options: ai-dynamo 1.6.1 components/src/dynamo/
# vllm/args.py, AsyncEngineArgs.add_cli_args; dynamo/sglang/args.py, ServerArgs.add_cli_args)
MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "sglang.launch_server": "sglang",
           "dynamo.vllm": "vllm", "dynamo.sglang": "sglang",
           "torchtitan.train": "torchtitan", "sglang_router.launch_router": "sglang_router",
           "torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun"}


@dataclass
class Launch:
    """One engine started by the file: its engine (vllm, sglang, megatron, torchtitan, deepspeed,
    torchrun for a plain script, ray, sglang_router), its own arguments, what runs it (the
    launcher's options, the script), where it is, the environment and wrappers it runs under."""
    engine: str
    args: list[Arg]
    file: str
    line: int
    env: dict = field(default_factory=dict)
    launcher: str = ""
    launcher_args: list[Arg] = field(default_factory=list)
    script: Arg | None = None
    tags: tuple = ()
    wrappers: list = field(default_factory=list)
    batch: dict | None = None
    reader: object = None      # the shell reader that ran it (the files its script wrote)
    role: str = ""
    facts: dict = field(default_factory=dict)    # what the file around it says (a scheduler's resources)
    instances: int = 1         # the copies an orchestrator runs of it (a pool's replicas)

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _value(a: Arg | None) -> str | None:
    return a.value if a is not None else None


def recognize(cmd, reader=None) -> Launch | None:
    """The launch a :class:`parc.importer.sh_eval.Command` starts, or None."""
    from parc.importer.sh_wrappers import program

    args = cmd.args
    name = program(args[0]) if args else None
    base = dict(file=cmd.file, line=cmd.line, env=dict(cmd.env), tags=cmd.tags, wrappers=list(cmd.wrappers),
                batch=cmd.batch, reader=reader)
    if name == "vllm" and _value(args[1] if len(args) > 1 else None) == "serve":
        return Launch("vllm", args[2:], launcher="vllm", **base)
    if name == "sglang" and _value(args[1] if len(args) > 1 else None) == "serve":
        return Launch("sglang", args[2:], launcher="sglang", **base)
    if name == "ray" and _value(args[1] if len(args) > 1 else None) == "start":
        return Launch("ray", args[2:], launcher="ray", **base)
    if name in ("bash", "sh") and len(args) > 1 and (args[1].value or "").rsplit("/", 1)[-1] in RAY_SCRIPTS:
        return Launch("ray", args[2:], launcher="ray", script=args[1], **base)
    if name is not None and PYTHON.match(name):
        return _python(args[1:], base)
    if name == "torchrun":
        return _launcher("torchrun", args[1:], base)
    if name == "deepspeed":
        return _launcher("deepspeed", args[1:], base)
    if name and MEGATRON.search(name):                     # ./pretrain_gpt.py run directly
        return Launch(megatron_engine(args[1:]), args[1:], launcher="", script=args[0], **base)
    return None


def _python(rest: list[Arg], base: dict) -> Launch | None:
    i = 0
    while i < len(rest) and (rest[i].value or "").startswith("-") and rest[i].value not in ("-m", "-c"):
        i += 1                                             # python -u, -O, -X ...
    if i < len(rest) and rest[i].value == "-m" and i + 1 < len(rest):
        engine = MODULES.get(rest[i + 1].value or "")
        if engine == "torchrun":
            return _launcher("torchrun", rest[i + 2:], base)
        if engine:
            return Launch(engine, rest[i + 2:], launcher="python", script=rest[i + 1], **base)
        return None
    if i < len(rest) and MEGATRON.search(rest[i].value or ""):
        return Launch(megatron_engine(rest[i + 1:]), rest[i + 1:], launcher="python", script=rest[i], **base)
    return None


def megatron_engine(args: list[Arg]) -> str:
    """A pretrain_*.py given ``--deepspeed`` is Megatron-DeepSpeed's (the fork adds DeepSpeed's
    config arguments to its parser; Megatron-LM's refuses them)."""
    return "megatron_deepspeed" if any((a.value or "").partition("=")[0] == "--deepspeed" for a in args) else "megatron"


def _launcher(name: str, rest: list[Arg], base: dict) -> Launch:
    """torchrun or deepspeed: its own options, then the script (or ``-m module``) and its arguments."""
    from parc.importer.argv import launcher_split

    opts, module, script, args = launcher_split(name, rest)
    if module is not None:
        engine = MODULES.get(module.value or "", "torchrun" if name == "torchrun" else "deepspeed")
        return Launch(engine, args, launcher=name, launcher_args=opts, script=module, **base)
    if script is not None and MEGATRON.search(script.value or ""):
        return Launch(megatron_engine(args), args, launcher=name, launcher_args=opts, script=script, **base)
    return Launch(name, args, launcher=name, launcher_args=opts, script=script, **base)


def env_text(la: Launch, name: str) -> Text | None:
    return la.env.get(name)
