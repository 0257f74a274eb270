"""The data the resolver looks names up in: the model and GPU presets and the targets' keys
(read by parc.model.targets, the one reader of the target folders)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from parc.resolve.evaluate import did_you_mean

PACKAGE = Path(__file__).resolve().parent.parent
DATA = PACKAGE / "model" / "data"


@lru_cache(maxsize=None)
def presets(kind: str) -> dict[str, dict]:
    """The built-in presets of ``kind`` (``models`` or ``gpus``) from the data folder."""
    import tomllib

    with open(DATA / f"{kind}.toml", "rb") as f:
        return tomllib.load(f)


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
    return did_you_mean(name, _known_targets())
