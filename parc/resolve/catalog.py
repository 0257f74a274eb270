"""The data the resolver looks names up in: the model and GPU presets and the targets' keys
(read by parc.model.targets, the one reader of the target folders)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
DATA = PACKAGE / "model" / "data"


@lru_cache(maxsize=None)
def presets(kind: str) -> dict[str, dict]:
    """The built-in presets of ``kind`` (``models`` or ``gpus``) from the data folder."""
    import tomllib

    with open(DATA / f"{kind}.toml", "rb") as f:
        return tomllib.load(f)


def gpu_capability(gpu) -> tuple[int, int] | None:
    """The CUDA compute capability of a GPU preset (gpus.toml ``compute_capability``), as
    (major, minor); None for a GPU parc has no preset of, or an AMD one."""
    cc = presets("gpus").get(getattr(gpu, "name", "") or "", {}).get("compute_capability")
    if not cc:
        return None
    major, minor = str(cc).split(".")
    return int(major), int(minor)


def hub_id(model) -> str | None:
    """The Hugging Face id the model's preset was read from (its `source` names the
    config.json), or None: no preset, or a shape the spec changed (another model)."""
    import re

    pre = presets("models").get(getattr(model, "preset", None) or "", {})
    shape = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "experts")
    if any(k in pre and getattr(model, k) != pre[k] for k in shape):
        return None
    found = re.search(r"([A-Za-z0-9][\w.-]*/[\w.-]+) config\.json", str(pre.get("source", "")))
    return found.group(1) if found else None


def target_spec(name: str) -> dict | None:
    """A target's declarations (``parc/targets/<name>/target.toml``: its ``keys`` among them),
    or None if unknown; parc.model.targets reads the folders."""
    from parc.model.targets import spec

    return spec(name)


def target_keys(name: str) -> dict[str, dict]:
    """The keys a ``target name { ... }`` block takes: its own and those every target takes."""
    from parc.model.targets import keys

    return keys(name)


def _known_targets() -> tuple[str, ...]:
    from parc.model.targets import names

    return tuple(names())


def known_targets() -> list[str]:
    """The targets parc can emit for (the folder is read once)."""
    return list(_known_targets())


@lru_cache(maxsize=1024)
def near_target(name: str) -> str | None:
    from parc.resolve.evaluate import did_you_mean     # the evaluator: not loaded to read a preset

    return did_you_mean(name, _known_targets())


# The model fields a launch builds the model from: every field of `model` but its name, its
# parameter count (derived), the workload's sequence length and how it is served or stored.
_NOT_SHAPE = ("name", "params", "seq_len", "dtype", "checkpoint_format", "preset")


def preset_changes(m) -> dict[str, tuple]:
    """{field: (the preset's value, the model's)} for each field of model ``m`` that differs from
    the preset it came from (``from = ...``): the model that a launch taking the preset's
    checkpoint or config function would build otherwise. A field the preset leaves out has the
    language's default (the Model dataclass's), head_dim hidden / heads. Empty without a preset."""
    import dataclasses

    pre = presets("models").get(m.preset or "")
    if not pre:
        return {}
    out = {}
    for f in dataclasses.fields(m):
        if f.name in _NOT_SHAPE:
            continue
        if f.name in pre:
            want = pre[f.name]
        elif f.name == "head_dim":
            want = pre["hidden"] // pre["heads"]
        elif f.name == "kv_heads":
            want = pre["heads"]
        else:
            want = f.default
        if getattr(m, f.name) != want:
            out[f.name] = (want, getattr(m, f.name))
    return out
