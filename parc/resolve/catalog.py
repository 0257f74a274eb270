"""The data the resolver looks names up in: the model and GPU presets and the targets' keys."""
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


@lru_cache(maxsize=64)
def target_spec(name: str) -> dict | None:
    """A backend's declared keys (``parc/targets/<name>/target.toml``), or None if unknown."""
    import tomllib

    if name not in _known_targets():  # an unknown name touches no file
        return None
    path = PACKAGE / "targets" / name / "target.toml"
    with open(path, "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def _known_targets() -> tuple[str, ...]:
    base = PACKAGE / "targets"
    return tuple(sorted(p.parent.name for p in base.glob("*/target.toml")))


def known_targets() -> list[str]:
    """The targets parc can emit for (the folder is read once)."""
    return list(_known_targets())


@lru_cache(maxsize=1024)
def near_target(name: str) -> str | None:
    return did_you_mean(name, _known_targets())
