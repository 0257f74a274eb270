"""Command lines read as each engine reads its own: the settings a launch asks for.

Every function here takes the words a program was started with (recorded by ``wild_shell``) and
returns ``{setting: value}`` in the engine's own names. They are written from the engines' own
parsers and docs, never from parc's builders, so that a launch parc emits and a launch someone
published are read by the same, independent code:

* vLLM and SGLang: their server parsers' options, spellings, aliases and defaults, as the engines
  themselves list them (``tests/wild/engines/{vllm,sglang}.json``, made by
  ``tests/judges/wild_options.py`` from the installed parsers);
* Megatron-LM: its training arguments as ``megatron/training/arguments.py`` declares them
  (``tests/wild/engines/megatron.json``, made by ``tests/judges/wild_megatron_options.py``);
* torchtitan: ``--section.option value`` overrides on top of a TOML file's sections (0.2) or of
  what a config function sets (0.3: ``tests/wild/engines/torchtitan.json``, made by
  ``tests/judges/wild_torchtitan_configs.py`` from torchtitan 0.3.0's own config functions);
* TensorRT-LLM: trtllm-serve's click options as ``tensorrt_llm/commands/serve.py`` declares them
  (``tests/wild/engines/trtllm.json``, transcribed by hand: tensorrt_llm cannot be installed here),
  and the LLM API keys of its ``--extra_llm_api_options`` YAML as ``llm_api.<key>``;
* torchrun and DeepSpeed's launcher: their own options (``torch/distributed/run.py``,
  ``deepspeed/launcher/runner.py``), and the script and its arguments after them."""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

ENGINES = Path(__file__).resolve().parent.parent / "wild" / "engines"


@cache
def options(engine: str) -> tuple[dict, dict]:
    """(option spelling -> option, dest -> option) of an engine's server parser."""
    data = json.loads((ENGINES / f"{engine}.json").read_text())
    by_name, by_dest = {}, {}
    for o in data["options"]:
        by_dest[o["dest"]] = o
        for n in o["names"]:
            by_name[n] = o
    return by_name, by_dest


def _number(v):
    if isinstance(v, str):
        if re.fullmatch(r"-?\d+", v):
            return int(v)
        if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)(e-?\d+)?", v, re.IGNORECASE):
            return float(v)
    return v


def _lookup(by_name: dict, name: str, abbrev: bool):
    if name in by_name:
        return by_name[name], name
    dashed = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    if dashed in by_name:
        return by_name[dashed], dashed
    if abbrev and name.startswith("--"):   # argparse takes a unique prefix of a long option
        hits = {id(o): (o, n) for n, o in by_name.items() if n.startswith(dashed)}
        if len(hits) == 1:
            return next(iter(hits.values()))
    return None, name


def server_settings(engine: str, argv: list[str], cwd: Path | None = None) -> dict:
    """The options ``argv`` sets, by dest, for ``vllm serve`` (engine "vllm"), SGLang's
    ``launch_server`` ("sglang") or Megatron-LM's ``pretrain_*.py`` ("megatron"). Unknown options
    are kept under their own name."""
    by_name, _ = options(engine)
    out: dict = {}
    i, words = 0, list(argv)
    positional = []
    while i < len(words):
        w = words[i]
        if not w.startswith("-") or re.fullmatch(r"-\d.*", w):
            positional.append(w)
            i += 1
            continue
        name, eq, value = w.partition("=")
        if engine == "vllm" and name.startswith("-O") and len(name) > 2 and not eq:   # -O3
            name, eq, value = "-O", "=", name[2:]
        opt, spelled = _lookup(by_name, name, abbrev=engine == "sglang")
        if engine == "vllm" and opt is None and "." in name:   # --eplb-config.window_size 1000
            base, key = name.split(".", 1)
            opt, spelled = _lookup(by_name, base, False)
            if opt is not None:
                sub = out.setdefault(opt["dest"], {})
                if isinstance(sub, str):
                    sub = out[opt["dest"]] = json.loads(sub)
                sub[key] = _number(value if eq else words[i + 1])
                i += 1 if eq else 2
                continue
        if opt is None and engine == "vllm" and name.startswith("--no-"):
            pos, _ = _lookup(by_name, "--" + name[5:], False)
            if pos is not None and pos["takes"] == "flag":
                out[pos["dest"]] = False
                i += 1
                continue
        if opt is None:
            dest = name.lstrip("-").replace("-", "_")
            if eq:
                out[dest] = _number(value)
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                out[dest] = _number(words[i + 1])
                i += 1
            else:
                out[dest] = True
            i += 1
            continue
        if opt["takes"] == "flag":
            out[opt["dest"]] = spelled not in opt["negative"] if not eq else value.lower() in ("1", "true", "yes")
            i += 1
        elif opt["takes"] == "list":
            vals = [value] if eq else []
            j = i + 1
            while not eq and j < len(words) and not words[j].startswith("--"):
                vals.append(words[j])
                j += 1
            out[opt["dest"]] = [_number(v) for v in vals]
            i = j if not eq else i + 1
        else:
            out[opt["dest"]] = _number(value if eq else words[i + 1])
            i += 1 if eq else 2
    if engine in ("vllm", "trtllm") and positional:
        out["model"] = positional.pop(0)
    if engine == "trtllm" and out.get("extra_llm_api_options") and cwd is not None:
        out.update(_llm_api_file(Path(cwd) / str(out["extra_llm_api_options"])))
    if positional:           # words the parser would refuse ("unrecognized arguments")
        out["unrecognized"] = positional
    if engine == "vllm" and "config" in out and cwd is not None:
        out = {**_vllm_config_file(Path(cwd) / str(out.pop("config"))), **out}
    return out


def _llm_api_file(path: Path) -> dict:
    """trtllm-serve's --extra_llm_api_options YAML (LLM API keys, serve.py
    update_llm_args_with_extra_dict), each leaf as ``llm_api.<dotted key>``."""
    import yaml

    def flat(d: dict, pre: str) -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{pre}{k}.") if isinstance(v, dict) else {f"{pre}{k}": _number(v)})
        return out

    return flat(yaml.safe_load(path.read_text()) or {}, "llm_api.")


def _vllm_config_file(path: Path) -> dict:
    """``--config FILE``: vLLM reads each YAML key as the option of that name (a true boolean as
    the switch alone, FlexibleArgumentParser.load_config_file)."""
    import yaml

    argv = []
    for k, v in (yaml.safe_load(path.read_text()) or {}).items():
        if v is True:
            argv.append(f"--{k}")
        elif v is not False:
            argv += [f"--{k}", str(v)]
    return server_settings("vllm", argv)


def with_defaults(engine: str, settings: dict, keys) -> dict:
    """``settings`` with each of ``keys`` it leaves out filled with the parser's default."""
    _, by_dest = options(engine)
    out = dict(settings)
    for k in keys:
        if k not in out and k in by_dest:
            out[k] = by_dest[k]["default"]
    return out


# SGLang 0.5.23's all-to-all backends whose experts span the whole server
# (sglang/srt/arg_groups/overrides.py _A2A_EP_SPANNING_BACKENDS)
_SGLANG_EP_SPANNING = {"megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep", "flashinfer",
                       "flashinfer_megamoe", "mori", "pplx"}


def sglang_resolved(s: dict) -> dict:
    """Two of SGLang 0.5.23's own resolutions: ``--dp-size N --enable-dp-attention`` (the spelling
    of 0.5.21 and before) is ``--attn-dp-size N`` with one replica (arg_groups/parallel_hook.py
    _handle_deprecated_dp_attention), and an all-to-all backend that spans the server sets
    ``ep_size`` to ``tp_size`` (arg_groups/overrides.py _a2a_ep_size)."""
    out = dict(s)
    if out.pop("enable_dp_attention", False):
        out["attn_dp_size"] = out.get("dp_size", 1)
        out["dp_size"] = 1
    if out.get("moe_a2a_backend") in _SGLANG_EP_SPANNING:
        out["ep_size"] = out.get("tp_size", 1)
    return out


def long_options(argv: list[str]) -> tuple[list[str], dict]:
    """Megatron-LM's style: positional words first, then ``--name [value...]``; an option with
    no value is a switch (True), one value a scalar, several a list."""
    pos, out, i = [], {}, 0
    while i < len(argv) and not argv[i].startswith("--"):
        pos.append(argv[i])
        i += 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        key = name[2:].replace("-", "_") if name.startswith("--") else name
        vals = [value] if eq else []
        j = i + 1
        while not eq and j < len(argv) and (not argv[j].startswith("-") or re.fullmatch(r"-\d.*", argv[j])):
            vals.append(argv[j])
            j += 1
        out[key] = True if not vals else _number(vals[0]) if len(vals) == 1 else [_number(v) for v in vals]
        i = j
    return pos, out


# torchrun's switches (torch/distributed/run.py); every other option takes a value
_TORCHRUN_SWITCHES = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path"}
# DeepSpeed's launcher switches (deepspeed/launcher/runner.py parse_args)
_DS_SWITCHES = {"--no_python", "--no_local_rank", "--module", "--force_multi", "--save_pid", "--bind_cores_to_rank",
                "--no_ssh_check", "--no_ssh", "--elastic_training", "--enable_each_rank_log"}


def launcher(argv: list[str], switches: set) -> tuple[dict, list[str]]:
    """A launcher's own options (``--name value``, ``--name=value``, switches) and the words
    after them: the script (or ``-m module``) and its arguments."""
    out, i = {}, 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        key = name.lstrip("-").replace("-", "_")
        if name in switches:
            out[key] = True
            i += 1
            if name in ("-m", "--module"):
                break
        else:
            out[key] = _number(value if eq else argv[i + 1])
            i += 1 if eq else 2
    return out, argv[i:]


# torchrun's defaults (torch/distributed/run.py get_args_parser)
TORCHRUN_DEFAULTS = {"nnodes": 1, "nproc_per_node": 1, "rdzv_backend": "static", "max_restarts": 0,
                     "standalone": False, "no_python": False, "m": False, "module": False}


def torchrun(argv: list[str], env: dict) -> tuple[dict, list[str]]:
    """torchrun's settings (its PET_* environment variables are the defaults of its options) and
    the command it starts."""
    opts, rest = launcher(argv, _TORCHRUN_SWITCHES)
    for k, v in env.items():
        if k.startswith("PET_"):
            opts.setdefault(k[4:].lower(), _number(v))
    opts.pop("m", None)
    opts.pop("module", None)
    return opts, rest


def deepspeed_launcher(argv: list[str]) -> tuple[dict, list[str]]:
    opts, rest = launcher(argv, _DS_SWITCHES)
    if "num_accelerators" in opts:
        opts["num_gpus"] = opts.pop("num_accelerators")
    return opts, rest


def toml_flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(toml_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def torchtitan_overrides(argv: list[str]) -> dict:
    """``--section.option value`` overrides (torchtitan's tyro command line: a boolean is the
    switch alone, ``--section.no_option`` its negation; ``field:member`` picks a union field's
    member, as ``activation-checkpoint:full`` does; ``--module``/``--config`` name the config
    function, ``--job.config_file`` a TOML file)."""
    out, i = {}, 0
    while i < len(argv):
        if not argv[i].startswith("--") and ":" in argv[i]:   # tyro's choice of a union's member
            field_, _, member = argv[i].partition(":")
            if field_ == "activation-checkpoint":     # SelectiveAC is op-level in 0.3.0
                out["activation_checkpoint.mode"] = member
                if member == "selective":
                    out["activation_checkpoint.selective_ac_option"] = "op"
            else:
                out[field_.replace("-", "_")] = member
            i += 1
            continue
        name, eq, value = argv[i].partition("=")
        key = name[2:]
        if eq:
            out[key] = _number(value)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            j = i + 1                 # a list field takes every word up to the next option
            while j < len(argv) and not argv[j].startswith("--") and ":" not in argv[j]:
                j += 1
            vals = [_number(w) for w in argv[i + 1:max(j, i + 2)]]
            out[key] = vals[0] if len(vals) == 1 else vals
            i = max(j, i + 2)
        else:
            section, _, opt = key.rpartition(".")
            if opt.startswith("no_"):
                out[f"{section}.{opt[3:]}"] = False
            else:
                out[key] = True
            i += 1
    for k, v in list(out.items()):
        if isinstance(v, str) and v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
    return out


def torchtitan_config_function(module: str, config: str, cwd: Path | None = None) -> dict:
    """What torchtitan 0.3.0's config function ``module/config`` sets, in the TOML's keys
    (``tests/wild/engines/torchtitan.json``, made by tests/judges/wild_torchtitan_configs.py); an
    unknown function sets nothing the corpus can read. A module of the launch's own (``module``.py
    beside it, on its PYTHONPATH) is read as that script reads torchtitan's: the shipped function it
    calls, with the converter its source names (tests/test_torchtitan_judge.py loads it in
    torchtitan itself)."""
    data = json.loads((ENGINES / "torchtitan.json").read_text())["config_functions"]
    own = Path(cwd or ".") / f"{module}.py"
    if f"{module}/{config}" not in data and own.is_file():
        text = own.read_text()
        base = re.search(r"^from torchtitan\.models\.(\w+)\.config_registry import (\w+)$", text, re.M)
        out = dict(data.get(f"{base[1]}/{base[2]}", {})) if base else {}
        if "Float8LinearConverter.Config(" in text:
            out["model.converters"] = ["float8"]
        return out
    return dict(data.get(f"{module}/{config}", {}))
