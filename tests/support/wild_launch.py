"""The launches a set of files starts: each engine process's settings, read the same way from a
published original and from what parc emits.

A *launch* is one engine started on one node (or one server of a pool): its engine, its role
(``serve``, ``train``, ``prefill``, ``decode``, ``router``), its node and its settings, keyed
``<format>.<name>``: ``vllm.tensor_parallel_size``, ``megatron.micro_batch_size``,
``torchtitan.parallelism.context_parallel_degree``, ``ds.zero_optimization.stage``,
``torchrun.nnodes``. A scheduler's own settings (``slurm.nodes``, ``lws.size``,
``skypilot.num_nodes``) form one more launch of role ``scheduler``.

Shell scripts are run (``wild_shell``); Kubernetes, LeaderWorkerSet, TrainJob and SkyPilot YAML
is read for its resources and its containers' or nodes' commands, which are then run the same
way with the variables those systems set (the kubelet's ``$(VAR)``, LWS_*, PET_*, SKYPILOT_*)."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from support import wild_argv as A
from support import wild_shell

# What a comparison sets aside: paths, hosts, ports, images, credentials, logging, the data
# pipeline, and the optimizer's hyperparameters (learning rate and its schedule, betas, weight
# decay, clipping, initialisation, dropout, the step count), which a parallelism plan does not state.
_MEGATRON_HYPER = {"lr", "min_lr", "lr_decay_style", "lr_decay_iters", "lr_decay_samples", "lr_warmup_fraction",
                   "lr_warmup_iters", "lr_warmup_samples", "lr_warmup_init", "decoupled_lr", "decoupled_min_lr",
                   "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad", "init_method_std",
                   "train_iters", "train_samples", "train_tokens", "lr_decay_tokens", "lr_warmup_tokens",
                   "override_opt_param_scheduler", "attention_dropout", "hidden_dropout", "distributed_backend",
                   "data_impl", "tokenizer_type", "mock_data", "tiktoken_pattern",
                   "create_attention_mask_in_dataloader", "mmap_bin_files", "exit_interval", "moe_aux_loss_coeff",
                   "moe_z_loss_coeff", "moe_router_bias_update_rate", "mtp_loss_scaling_factor"}
IGNORED = {
    "vllm": {"host", "port", "data_parallel_address", "data_parallel_rpc_port", "download_dir", "api_key",
             "uvicorn_log_level", "served_model_name", "config"},
    "sglang": {"host", "port", "dist_init_addr", "disaggregation_ib_device", "deepep_config", "log_level",
               "init_expert_location", "disaggregation_bootstrap_port", "watchdog_timeout", "decode_log_interval",
               "device"},
    "sglang_router": {"host", "port", "prefill", "decode", "worker_urls"},
    "trtllm": {"host", "port", "extra_llm_api_options"},
    "megatron": {"save", "load", "data_path", "vocab_file", "merge_file", "tensorboard_dir", "data_cache_path",
                 "wandb_project", "wandb_exp_name", "wandb_save_dir", "tokenizer_model", "log_interval",
                 "save_interval", "eval_interval", "eval_iters", "tensorboard_queue_size", "log_throughput",
                 "logging_level", "distributed_timeout_minutes", "exit_duration_in_mins", "profile",
                 "profile_step_start", "profile_step_end", "num_workers", "split", "ckpt_format",
                 "log_timers_to_tensorboard", "log_memory_to_tensorboard", "log_num_zeros_in_grad",
                 "log_params_norm", "log_validation_ppl_to_tensorboard", "log_batch_size_to_tensorboard",
                 "log_optimizer_states_to_tensorboard", "auto_detect_ckpt_format", "dist_ckpt_strictness",
                 "no_load_optim", "no_load_rng", "load_optim", "load_rng", "seed", "deprecated_use_mcore_models",
                 "deepspeed_config", "deepspeed"} | _MEGATRON_HYPER,
    "megatron_deepspeed": {"save", "load", "data_path", "vocab_file", "merge_file", "tensorboard_dir",
                           "data_cache_path", "wandb_project", "wandb_exp_name", "wandb_save_dir", "tokenizer_model",
                           "log_interval", "save_interval", "eval_interval", "eval_iters", "split", "seed",
                           "deepspeed_config", "deepspeed"} | _MEGATRON_HYPER,
    "torchrun": {"master_addr", "master_port", "rdzv_endpoint", "rdzv_id", "local_ranks_filter", "tee", "role",
                 "redirects", "log_dir", "node_rank"},
    "torchtitan": {"job.dump_folder", "job.config_file", "job.description", "job.print_config",
                   "model.hf_assets_path", "checkpoint.folder", "checkpoint.enable", "checkpoint.interval",
                   "checkpoint.last_save_model_only", "checkpoint.export_dtype", "checkpoint.async_mode",
                   "metrics.log_freq", "metrics.enable_tensorboard", "metrics.save_tb_folder",
                   "metrics.disable_color_printing", "metrics.enable_wandb", "profiling.enable_profiling",
                   "profiling.save_traces_folder", "profiling.profile_freq", "profiling.enable_memory_snapshot",
                   "profiling.save_memory_snapshot_folder", "validation.enable", "validation.dataset",
                   "validation.freq", "validation.steps", "training.dataset", "training.dataset_path",
                   "training.steps", "training.max_norm", "optimizer.name", "optimizer.lr", "optimizer.eps",
                   "lr_scheduler.warmup_steps", "lr_scheduler.decay_ratio", "lr_scheduler.decay_type",
                   "lr_scheduler.min_lr_factor"},
    "deepspeed": {"master_addr", "master_port", "hostfile", "deepspeed_config", "ssh_port", "launcher_args"},
    "args": {"output_dir", "data_path", "checkpoint_dir", "logging_steps", "save_steps", "save_strategy",
             "deepspeed", "deepspeed_config", "learning_rate", "weight_decay", "warmup_steps", "lr_scheduler_type",
             "num_train_epochs", "eval_strategy", "model_name_or_path"},
    "ds": {"steps_per_print", "wall_clock_breakdown", "flops_profiler.enabled", "flops_profiler.profile_step",
           "flops_profiler.module_depth", "flops_profiler.top_modules", "flops_profiler.detailed",
           "flops_profiler.output_file", "gradient_clipping", "prescale_gradients",
           "zero_optimization.gather_16bit_weights_on_model_save"}
          | {f"{k}.{p}" for k in ("optimizer", "scheduler") for p in ("type", "params.lr", "params.betas",
             "params.eps", "params.weight_decay", "params.total_num_steps", "params.warmup_min_lr",
             "params.warmup_max_lr", "params.warmup_num_steps")},
    "env": set(),
    "skypilot": {"ports", "name", "workdir", "disk_tier"},
    "lws": {"image"},
    "pytorchjob": {"image"},
    "trainjob": {"image"},
    "slurm": {"job_name", "partition", "account", "time", "output", "error", "dependency"},
}
_ENV_KEPT = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
# Megatron-LM entry points: a torchrun or python command running one of them is Megatron-LM.
_MEGATRON = re.compile(r"(^|/)pretrain_\w+\.py$")


@dataclass
class Launch:
    engine: str
    role: str
    settings: dict = field(default_factory=dict)
    node: int = 0
    partial: bool = False      # the original states only some settings: compare those
    argv: list = field(default_factory=list)   # a server's own words (vLLM, SGLang), for the judges
    cwd: str = ""


def _keyed(fmt: str, d: dict) -> dict:
    return {f"{fmt}.{k}": v for k, v in d.items() if k not in IGNORED.get(fmt, ())}


def _env(rec: dict) -> dict:
    return {f"env.{k}": rec["env"][k] for k in _ENV_KEPT if k in rec["env"]}


def _deepspeed_config(args: dict, cwd: Path) -> dict:
    """A DeepSpeed JSON named by ``--deepspeed_config`` (or HF Trainer's ``--deepspeed``): its
    keys, with HF Trainer's "auto" values filled from the script's arguments as
    transformers/integrations/deepspeed.py does (micro batch, accumulation, bf16)."""
    path = args.get("deepspeed_config") or (args.get("deepspeed") if isinstance(args.get("deepspeed"), str) else None)
    if not path:
        return {}
    data = A.toml_flat(json.loads((Path(cwd) / str(path)).read_text()))
    auto = {"train_micro_batch_size_per_gpu": args.get("per_device_train_batch_size"),
            "gradient_accumulation_steps": args.get("gradient_accumulation_steps"),
            "bf16.enabled": str(args.get("bf16", "")).lower() == "true" or None}
    for k, v in list(data.items()):
        if v == "auto":
            if auto.get(k) is not None:
                data[k] = auto[k]
            else:
                del data[k]    # left to HF Trainer's own derivation
    return _keyed("ds", data)


def _script(words: list[str], cwd: Path, role: str, base: dict) -> list[Launch]:
    """The program a launcher starts (``rest``: a script and its arguments, or a module)."""
    if not words:
        return []
    if _MEGATRON.search(words[0]):
        # Megatron-DeepSpeed's pretrain_gpt.py (it runs DeepSpeed's engine) is read with the fork's parser
        fmt = "megatron_deepspeed" if any(w.partition("=")[0] == "--deepspeed" for w in words[1:]) else "megatron"
        args = A.server_settings(fmt, words[1:])
        return [Launch(fmt, role, {**base, **_keyed(fmt, args), **_deepspeed_config(args, cwd)})]
    if words[0] == "torchtitan.train":
        over = A.torchtitan_overrides(words[1:])
        toml = {}
        if "job.config_file" in over:       # torchtitan 0.2: a TOML file, then the overrides
            import tomllib

            toml = A.toml_flat(tomllib.loads((Path(cwd) / str(over["job.config_file"])).read_text()))
        elif "module" in over and "config" in over:   # 0.3: a config function, then the overrides
            toml = A.torchtitan_config_function(over["module"], over["config"], Path(cwd))
        return [Launch("torchtitan", role, {**base, **_keyed("torchtitan", {**toml, **over})})]
    _, args = A.long_options(words[1:])
    return [Launch("script", role, {**base, "script": Path(words[0]).name, **_keyed("args", args),
                                    **_deepspeed_config(args, cwd)})]


def from_records(records: list[dict], role: str = "") -> list[Launch]:
    """The engine launches among the programs a script started, in order."""
    out = []
    for rec in records:
        name, argv, cwd = rec["name"], rec["argv"], Path(rec["cwd"])
        env = _env(rec)
        if name == "vllm" and argv[:1] == ["serve"]:
            out.append(Launch("vllm", role or "serve", {**env, **_keyed("vllm", A.server_settings("vllm", argv[1:], cwd))},
                              argv=argv[1:], cwd=str(cwd)))
        elif name == "sglang" and argv[:1] == ["serve"]:
            out.append(_sglang(argv[1:], env, role, cwd))
        elif name == "trtllm-serve":
            out.append(Launch("trtllm", role or "serve", {**env, **_keyed("trtllm", A.server_settings("trtllm", argv, cwd))},
                              argv=list(argv), cwd=str(cwd)))
        elif name in ("python", "python3") and argv[:1] == ["-m"] and len(argv) > 1:
            mod, rest = argv[1], argv[2:]
            if mod == "vllm.entrypoints.openai.api_server":
                out.append(Launch("vllm", role or "serve", {**env, **_keyed("vllm", A.server_settings("vllm", rest, cwd))},
                                  argv=rest, cwd=str(cwd)))
            elif mod == "sglang.launch_server":
                out.append(_sglang(rest, env, role, cwd))
            elif mod == "dynamo.vllm":      # Dynamo's vLLM worker: vLLM's engine arguments, the model as --model
                rest, mode = _without_option(rest, "--disaggregation-mode")
                rest, model = _without_option(rest, "--model")
                out.append(Launch("vllm", role or mode or "serve",
                                  {**env, **_keyed("vllm", A.server_settings("vllm", [model or "", *rest], cwd))},
                                  argv=[model or "", *rest], cwd=str(cwd)))
            elif mod == "dynamo.sglang":    # Dynamo's SGLang worker: SGLang's own server arguments
                out.append(_sglang(rest, env, role, cwd))
            elif mod == "sglang_router.launch_router":
                _, args = A.long_options(rest)
                out.append(Launch("sglang_router", "router", _keyed("sglang_router", args)))
            elif mod == "torchtitan.train":
                out += _script(["torchtitan.train", *rest], cwd, role or "train", env)
        elif name in ("python", "python3") and argv and _MEGATRON.search(argv[0]):
            out += _script(argv, cwd, role or "train", env)
        elif name == "torchrun":
            opts, rest = A.torchrun(argv, rec["env"])
            base = {**env, **_keyed("torchrun", opts)}
            out += _script(rest, cwd, role or "train", base)
        elif name == "deepspeed":
            opts, rest = A.deepspeed_launcher(argv)
            base = {**env, **_keyed("deepspeed", opts), **_hostfile(opts, cwd)}
            for la in _script(rest, cwd, role or "train", base):
                la.argv, la.cwd = list(argv), str(cwd)      # the launcher's words, for DeepSpeed's judge
                out.append(la)
    return out


def _without_option(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """``argv`` less ``flag`` and its value, and the value (None: absent)."""
    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:], argv[i + 1]


def _sglang(argv: list[str], env: dict, role: str, cwd: Path) -> Launch:
    s = A.sglang_resolved(A.server_settings("sglang", argv))
    return Launch("sglang", role or s.get("disaggregation_mode") or "serve", {**env, **_keyed("sglang", s)},
                  argv=list(argv), cwd=str(cwd))


def _hostfile(opts: dict, cwd: Path) -> dict:
    """A DeepSpeed hostfile (``HOST slots=N`` a line, deepspeed/launcher/runner.py
    _parse_hostfile): how many hosts and the slots of each."""
    path = opts.get("hostfile")
    p = Path(cwd) / str(path) if path else None
    if not p or not p.is_file():
        return {}
    slots = [int(m.group(1)) for line in p.read_text().splitlines()
             if (m := re.search(r"slots=(\d+)", line.split("#")[0]))]
    return {"deepspeed.hosts": len(slots), "deepspeed.slots": slots}


def docs_text(text: str) -> str:
    """A command as docs print it, made a script: a ``# comment`` after a line's continuation
    backslash (which a shell would read as the end of the command) is dropped."""
    return "\n".join(re.sub(r"\\\s+#.*$", "\\\\", line) for line in text.splitlines()) + "\n"


def command_words(text: str, cwd: Path) -> list[dict]:
    """Commands as docs print them with placeholders a shell cannot run (``<client_entry.py>``):
    each command (comment lines dropped, continuation lines joined) split into words as a shell
    would, one record each."""
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        words = shlex.split(line)
        if words:
            out.append({"name": words[0], "argv": words[1:], "env": {}, "cwd": str(cwd), "stdin": None})
    return out


def sbatch_settings(text: str) -> dict:
    """The ``#SBATCH`` options of a batch script (sbatch(1)), by long name."""
    short = {"-N": "nodes", "-n": "ntasks", "-c": "cpus_per_task", "-p": "partition", "-J": "job_name",
             "-t": "time", "-A": "account", "-o": "output", "-e": "error", "-G": "gpus"}
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*#SBATCH\s+(\S+)(?:[ =](\S+))?", line)
        if m:
            name, value = m.group(1), m.group(2)
            if "=" in name:
                name, value = name.split("=", 1)
            key = short.get(name, name.lstrip("-").replace("-", "_"))
            out[key] = True if value is None else A._number(value)
    return _keyed("slurm", out)


def shell_launches(script: str, sandbox: Path, args=(), env=None, role: str = "") -> list[Launch]:
    return from_records(wild_shell.run(script, sandbox, args, env), role)


def run_node_scripts(script: str, sandbox: Path, nodes: int, env: dict, rank_var: str | None,
                     role: str = "") -> list[Launch]:
    """A script every node runs, once per node (its rank in ``rank_var``), each launch tagged with
    its node."""
    import shutil

    out = []
    here = [p for p in sandbox.iterdir() if not p.name.startswith(("node", "wild-"))] if sandbox.is_dir() else []
    for n in range(nodes):
        e = {**env, **({rank_var: str(n)} if rank_var else {})}
        box = sandbox / f"node{n}"
        box.mkdir(parents=True, exist_ok=True)
        for p in here:      # the files the script reads, in every node's folder
            (shutil.copytree(p, box / p.name, dirs_exist_ok=True) if p.is_dir() else shutil.copy(p, box / p.name))
        for la in shell_launches(script, box, env=e, role=role):
            la.node = n
            out.append(la)
    return out


def kubelet_words(words: list[str], env: dict) -> list[str]:
    from support.kubelet import expand

    return [expand(str(w), env) for w in words]


def container_launches(container: dict, sandbox: Path, env: dict, mounts: dict | None = None,
                       role: str = "") -> list[Launch]:
    """Run one container's command and args (after the kubelet's substitution) under the
    recorders; ``mounts`` maps a mount path to the sandbox folder holding its files."""
    cenv = {e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e}
    full = {**cenv, **env}
    words = kubelet_words([*(container.get("command") or []), *(container.get("args") or [])], full)
    for mount, folder in (mounts or {}).items():
        words = [w.replace(mount, str(folder)) for w in words]
    return from_records(wild_shell.run_argv(words, sandbox, env=full, allow_none=True), role)


def shlex_join(words) -> str:
    return " ".join(shlex.quote(w) for w in words)
