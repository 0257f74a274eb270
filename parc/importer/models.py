"""The model a launch runs: a preset named by its Hugging Face id (models.toml), a preset whose
shape the launch's arguments state, the model block of a spec given with ``--model``, or a model
block of the arguments (placeholders where they do not say a field)."""
from __future__ import annotations

import fnmatch
import tomllib
from functools import lru_cache
from pathlib import Path

from parc.importer.draft import Draft, Name, Placeholder

HERE = Path(__file__).resolve().parent
# the fields that say which network it is (a preset matches when every one the launch gives is
# the preset's); the others (seq_len, rope_theta, max_positions) are the run's or are carried
SHAPE = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "experts", "top_k", "moe_ffn_hidden",
         "q_lora_rank", "kv_lora_rank", "first_k_dense", "shared_experts")
# what a model block without a preset cannot do without: a placeholder each where the launch is silent
REQUIRED = ("layers", "hidden", "ffn_hidden", "heads", "vocab", "seq_len")


@lru_cache(maxsize=1)
def data() -> dict:
    with open(HERE / "models.toml", "rb") as f:
        return tomllib.load(f)


def hub_entry(model_id: str | None) -> dict | None:
    """The models.toml entry of a Hugging Face id (or a path ending in one)."""
    if not model_id:
        return None
    mid = model_id.rstrip("/").lower()
    for e in data()["hub"]:
        pat = e["match"].lower()
        if fnmatch.fnmatchcase(mid, pat) or fnmatch.fnmatchcase("x/" + mid.rsplit("/", 1)[-1], pat):
            return e
    return None


def gpu_preset(name: str | None) -> str | None:
    """The GPU preset of a name a launch file gives (``H100``, ``A100-80GB``, ``h200``)."""
    if not name:
        return None
    from parc.resolve.catalog import presets

    if name.lower() in presets("gpus"):
        return name.lower()
    table = {k.lower(): v for k, v in data()["gpus"].items()}
    return table.get(name.lower())


def shape_preset(fields: dict) -> str | None:
    """The first preset whose shape has every field of ``fields`` that SHAPE names (at least
    layers, hidden and heads given); None where none has."""
    from parc.resolve.catalog import presets

    given = {k: v for k, v in fields.items() if k in SHAPE and isinstance(v, int)}
    if not {"layers", "hidden", "heads"} <= set(given):
        return None
    for name, p in presets("models").items():
        full = dict(p)
        full.setdefault("kv_heads", p.get("heads"))
        full.setdefault("experts", 0)
        if all(full.get(k, 0 if k in ("q_lora_rank", "kv_lora_rank", "first_k_dense", "shared_experts") else None) == v
               for k, v in given.items()):
            return name
    return None


def torchtitan_preset(name, flavor) -> str | None:
    """The preset of torchtitan's ``[model] name`` and ``flavor`` (models.toml ``[[torchtitan]]``)."""
    if not name or not flavor:
        return None
    want = f"{name}/{flavor}".lower()
    return next((e["preset"] for e in data().get("torchtitan", []) if e["model"].lower() == want), None)


def label(text: str) -> str:
    """A model or cluster label from an id or a preset: its last path component, lower case."""
    base = text.rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    return "".join(c if c.isalnum() or c in "-." else "-" for c in base)[:64] or "imported"


def from_hub(draft: Draft, model_id: str | None, note: str) -> str | None:
    """``from = preset`` (and the checkpoint's format) for a Hugging Face id; the preset, or None."""
    e = hub_entry(model_id)
    if e is None:
        return None
    draft.labels["model"] = label(model_id)
    draft.set("model", "from", Name(e["preset"]), note)
    if "checkpoint_format" in e:
        draft.set("model", "checkpoint_format", Name(e["checkpoint_format"]), f"{model_id}: {e['source']}")
    return e["preset"]


def settle(draft: Draft, hint: str | None) -> None:
    """After a training launch's arguments are read into ``model``: ``from`` the preset its shape
    (or ``hint``, an id) names, keeping only the fields that differ from it; else placeholders for
    what a model block needs and the launch does not say."""
    from parc.resolve.catalog import presets

    if draft.has("model", "from") or "model" in draft.raw_blocks:
        return
    fields = {k: e.value for k, e in draft.blocks.get("model", {}).items()}
    name = (hub_entry(hint) or {}).get("preset") or shape_preset(fields)
    if name:
        pre = presets("models")[name]
        entries = draft.blocks.get("model", {})
        draft.blocks["model"] = {"from": _entry(Name(name), "the preset of this shape"), **{
            k: e for k, e in entries.items()
            if pre.get(k, _default(k, pre)) != (e.value.text if isinstance(e.value, Name) else e.value)}}
        _drop_inert_pre_softmax(draft, pre)
        draft.labels.setdefault("model", name.replace("_", "-"))
        return
    for k in REQUIRED:
        if not draft.has("model", k):
            draft.set("model", k, Placeholder(f"the model's {k}"), "not in the launch: the model's own")
    draft.labels.setdefault("model", label(hint) if hint else "imported")


def _drop_inert_pre_softmax(draft: Draft, pre: dict) -> None:
    """A pre-top-k softmax beside sigmoid scores says nothing (Megatron-LM's sigmoid router scores
    every expert before the top-k whatever --moe-router-pre-softmax says): not carried into the
    spec, where it would read as a router the model has not."""
    block = draft.blocks.get("model", {})
    score = block["router_score"].value if "router_score" in block else pre.get("router_score", "softmax")
    if "router_pre_softmax" in block and str(getattr(score, "text", score)) == "sigmoid":
        del block["router_pre_softmax"]


def _default(field: str, pre: dict):
    from parc.model.plan import Model
    import dataclasses

    if field == "kv_heads":
        return pre.get("heads")
    f = next((f for f in dataclasses.fields(Model) if f.name == field), None)
    return f.default if f is not None and f.default is not dataclasses.MISSING else None


def _entry(v, note):
    from parc.importer.draft import Entry

    return Entry(v, note)


def placeholders(draft: Draft, model_id: str | None) -> None:
    """The model block of a serving launch whose model is no preset: what its config.json says,
    which the launch does not (P040 until filled in, or ``--model``)."""
    draft.labels["model"] = label(model_id) if model_id else "imported"
    what = f"{model_id}'s config.json" if model_id else "the model's config.json"
    for k in REQUIRED:
        draft.set("model", k, Placeholder(f"{k}, from {what}"), "not in the launch: no preset of this model")


def read_overrides(draft: Draft, cfg: dict | None, note: str) -> bool:
    """A serving engine's config.json overrides (vLLM --hf-overrides, SGLang
    --json-model-override-args) as model fields (parc/targets/hf_config.toml); False where a key
    names no field of the preset's family."""
    from parc.targets.hf import family, key_of

    preset = draft.get("model", "from")
    if cfg is None or not isinstance(preset, Name):
        return False
    fam = family(preset.text) or {}
    if fam.get("section") and isinstance(cfg.get(fam["section"]), dict):
        cfg = cfg[fam["section"]]
    from parc.model.fields import BLOCKS

    back = {key_of(preset.text, f): f for f in BLOCKS["model"] if key_of(preset.text, f)}
    if not cfg or set(cfg) - set(back) or not all(isinstance(v, (int, bool)) for v in cfg.values()):
        return False
    for k, v in cfg.items():
        draft.set("model", back[k], v, note)
    return True


def given_block(path: str, block: str) -> list[str]:
    """The text of the ``block`` block of the spec at ``path`` (``--model``, ``--cluster``), as
    written; ValueError where it has none."""
    from parc.language.parser import parse_text

    text = Path(path).read_text(encoding="utf-8")
    doc = parse_text(text, path)
    for st in doc.items:
        if getattr(st, "kind", None) == block:
            s = st.span
            lines = text.splitlines()[s.line - 1:s.end_line]
            lines[-1] = lines[-1][:s.end_column - 1]
            lines[0] = lines[0][s.column - 1:]
            return lines
    raise ValueError(f"{path} has no `{block}` block")
