"""The model fields a serving target can override in the checkpoint's config.json
(``hf_config.toml``: the key of each field per Hugging Face model family). vLLM and SGLang read
the model from the checkpoint, so a model block that changes a field of its preset is either
written as an override of that key or refused (P620) where the family has none."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "hf_config.toml"


@lru_cache(maxsize=1)
def _table() -> dict:
    import tomllib

    with open(DATA, "rb") as f:
        return tomllib.load(f)


def family(preset: str | None) -> dict | None:
    """The family entry of a model preset, or None."""
    for entry in _table()["families"].values():
        if preset in entry["presets"]:
            return entry
    return None


def key_of(preset: str | None, field: str) -> str:
    """The config.json key of ``field`` for the preset's family ("" where it has none)."""
    fam = family(preset)
    if fam is None:
        return ""
    return fam.get(field, _table()["keys"].get(field, ""))


def overrides(m) -> tuple[dict, list[tuple[str, object]]]:
    """(the config.json overrides of model ``m``'s fields that differ from its preset, (field, the
    preset's value) of those that differ and have no key). The overrides nest under the family's
    ``section``."""
    from parc.resolve.catalog import preset_changes

    found, missing = {}, []
    for name, (was, value) in preset_changes(m).items():
        key = key_of(m.preset, name)
        if key:
            found[key] = value
        else:
            missing.append((name, was))
    fam = family(m.preset) or {}
    if found and fam.get("section"):
        found = {fam["section"]: found}
    return found, missing


def inexpressible(plan, engine: str, option: str) -> list[tuple[str, str, str]]:
    """P620's findings for a serving engine that loads the checkpoint of the model's preset:
    each changed field no config.json key can carry."""
    m = plan.model
    _, missing = overrides(m)
    out = []
    for name, was in missing:
        out.append((f"model.{name}", f"`{name} = {getattr(m, name)}` (the preset {m.preset} has "
                    f"{was}): {engine} builds the model from the checkpoint's config.json, "
                    f"and it has no key for {name} that {option} could override",
                    f"remove `{name}` to serve the checkpoint as published, or give `model` a checkpoint "
                    f"whose config.json says it"))
    return out

