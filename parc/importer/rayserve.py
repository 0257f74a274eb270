"""A Ray Serve config of Ray Serve LLM applications read back (the inverse of parc/targets/rayserve;
Ray 2.60): each application's builder (``import_path``: ``ray.serve.llm:build_openai_app`` with
``args.llm_configs``, ``build_dp_openai_app`` with ``args.llm_config``, ``build_pd_openai_app``
with ``args.prefill_config`` and ``args.decode_config``) and each ``LLMConfig`` (inline, or a
YAML file the config names, relative to the folder ``serve run`` starts in: the config's own,
never outside it).

An LLMConfig's ``engine_kwargs`` are vLLM's EngineArgs, read as the ``vllm serve`` options that
say the same (each key dashed; ``True`` the switch, ``False`` its ``--no-`` form, a mapping or
list as JSON), with ``model_loading_config.model_id`` the model;
``deployment_config.num_replicas`` its replicas (a pool's instances);
``placement_group_config``'s bundles the GPUs of one engine (STRICT_PACK: on one node);
``accelerator_type`` the target's key; ``runtime_env.env_vars`` the engine's environment."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from parc.importer.orchestrated import count, pods_facts, replicas, setting, worker
from parc.importer.yamlfiles import SCALARS, _get

ROLES = {"prefill_config": "prefill", "decode_config": "decode"}
# the most parts (mappings, lists, scalars) a JSON-valued engine_kwarg is written out with: YAML's
# aliases share one object, which written out could be exponentially large
MAX_NODES = 10_000


def _small(v, budget: list | None = None) -> bool:
    """Whether ``v`` has at most MAX_NODES parts, counted without writing it out."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        return False
    items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    return all(_small(x, budget) for x in items)


def engine_defaults() -> dict:
    """rayserve.toml's [defaults]: engine_kwargs left to vLLM where they hold its own default."""
    import tomllib

    return tomllib.loads((Path(__file__).parent / "rayserve.toml").read_text(encoding="utf-8"))["defaults"]


def kwargs_words(kwargs: dict, notes: list | None = None) -> list[str]:
    """vLLM's engine keyword arguments as the command line that states them (those holding vLLM's
    default that parc has no key for left out, each noted in ``notes``)."""
    out = []
    defaults = engine_defaults()
    for k, v in kwargs.items():
        if k in defaults and v == defaults[k] and type(v) is type(defaults[k]):
            if notes is not None:
                notes.append(f"engine_kwargs {k}: {json.dumps(v)} is vLLM's own default, left to it")
            continue
        flag = "--" + str(k).replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + str(k).replace("_", "-"))
        elif isinstance(v, (dict, list)) and _small(v):
            out += [flag, json.dumps(v, separators=(",", ":"))]
        elif isinstance(v, (dict, list)) and notes is not None:
            notes.append(f"engine_kwargs {k}: a value of more than {MAX_NODES} parts (YAML aliases?), not read")
        elif isinstance(v, SCALARS):
            out += [flag, str(v)]
    return out


def _config(src, c, what: str) -> dict | None:
    """An LLMConfig: the mapping, or the YAML file a path names (inside the config's folder)."""
    if isinstance(c, dict):
        return c
    if not isinstance(c, str):
        return None
    from parc.importer.sources import ImportError_, read_text

    folder = Path(src.folder).resolve()
    path = (folder / c).resolve()
    if folder != path and folder not in path.parents:
        src.warnings.append(("P042", f"{src.name} {what}", f"{c[:80]!r} lies outside the config's folder: not read"))
        return None
    try:
        text = read_text(str(path))
    except ImportError_ as e:
        src.warnings.append(("P042", f"{src.name} {what}", f"{e}: the LLMConfig is not read"))
        return None
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        src.warnings.append(("P042", f"{src.name} {what}", f"{c[:80]!r} is no LLMConfig mapping: not read"))
        return None
    return data


def _configs(args: dict) -> list[tuple[str, object, str | None]]:
    out = [(f"llm_configs[{i}]", c, None) for i, c in enumerate(args.get("llm_configs") or [])]
    out += [(k, args[k], ROLES.get(k)) for k in ("llm_config", "prefill_config", "decode_config") if k in args]
    return out


def read(src, doc: dict, variables: dict) -> None:
    """The LLMConfigs of a Serve config's applications, added to ``src`` (module doc)."""
    src.kind = "rayserve"
    keys: dict = {}
    src.scheduler = {"target": "rayserve", "keys": keys, "what": "replicas"}
    pods, launches = [], []
    for app in doc.get("applications") or []:
        if not isinstance(app, dict) or not isinstance(app.get("args"), dict):
            continue
        if isinstance(app.get("name"), str):
            setting(src, keys, "name", app["name"], f"{src.name} application name")
        for what, c, role in _configs(app["args"]):
            cfg = _config(src, c, what)
            if cfg is None:
                continue
            launches += _llm_config(src, cfg, what, role, variables, keys, pods)
    if launches and not any(la.role for la in launches):
        n = launches[0].instances
        replicas(src, n, f"{src.name} deployment_config.num_replicas: {n}")
    pods_facts(src, [(c, 1, g) for c, g in pods], "placement_group_config")
    port = _get(doc, "http_options", "port")
    if isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
        src.notes.append(f"{src.name}: http_options.port {port} is Serve's HTTP port: `port = {port}` in "
                         "`target vllm` says so")


def _replicas(src, cfg: dict, what: str) -> int:
    """deployment_config.num_replicas; an autoscaled deployment (``autoscaling_config``, or
    ``num_replicas: auto``) as the replicas it starts with (initial_replicas, else min_replicas), noted."""
    dep = cfg.get("deployment_config") if isinstance(cfg.get("deployment_config"), dict) else {}
    auto = dep.get("autoscaling_config") if isinstance(dep.get("autoscaling_config"), dict) else None
    if auto is not None or dep.get("num_replicas") == "auto":
        auto = auto or {}
        start = next((k for k in ("initial_replicas", "min_replicas") if k in auto), None)
        n = count(auto.get(start) if start else None, f"{what}.autoscaling_config.{start}", src)
        src.notes.append(f"{src.name} {what}: an autoscaled deployment, read as the {n} replica(s) it starts with"
                         + (f" ({start})" if start else "") + "; parc plans a fixed number")
        return n
    return count(dep.get("num_replicas"), f"{what}.deployment_config.num_replicas", src)


def _llm_config(src, cfg: dict, what: str, role, variables: dict, keys: dict, pods: list) -> list:
    model = _get(cfg, "model_loading_config", "model_id")
    notes: list[str] = []
    kwargs = cfg.get("engine_kwargs") if isinstance(cfg.get("engine_kwargs"), dict) else {}
    words = ["vllm", "serve", *([str(model)] if isinstance(model, SCALARS) else []), *kwargs_words(kwargs, notes)]
    env = _get(cfg, "runtime_env", "env_vars")
    env = {str(k): str(v) for k, v in env.items() if isinstance(v, SCALARS)} if isinstance(env, dict) else {}
    if isinstance(cfg.get("accelerator_type"), str):
        setting(src, keys, "accelerator_type", cfg["accelerator_type"], f"{src.name} {what} accelerator_type")
        src.facts.setdefault("gpu", (cfg["accelerator_type"], f"{src.name} {what} accelerator_type"))
    copies = _replicas(src, cfg, what)
    bundles = _get(cfg, "placement_group_config", "bundles") or []
    gpus = sum(int(b["GPU"]) for b in bundles if isinstance(b, dict) and isinstance(b.get("GPU"), int)
               and not isinstance(b.get("GPU"), bool) and 0 <= b["GPU"] <= 64)
    dp = kwargs.get("data_parallel_size")
    ranks = dp if isinstance(dp, int) and not isinstance(dp, bool) and 1 <= dp <= 4096 else 1
    if _get(cfg, "placement_group_config", "strategy") in ("STRICT_PACK", None) and gpus:
        pods.append((copies * ranks, gpus))    # a data-parallel engine: a placement group a rank
    src.notes += [f"{src.name} {what}: {n}" for n in notes]
    return worker(src, shlex.join(words), variables, env, role, copies, what)
