"""Completion, all from parc's own data: the blocks (``parc/model/fields.py``), each block's
keys with their documentation, the targets and their keys (each folder's ``target.toml``), the
model and GPU presets (``parc/model/data``), and the values an enumerated key takes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from parc.lsp.scan import context

# The blocks a block may hold, besides its keys.
_NESTED = {"cluster": ("gpu", "topology", "group"), "serve": ("prefill", "decode")}
_AXIS_DOCS = {"pp": "pipeline-parallel degree: stages the layers are split over",
              "dp": "data-parallel degree: model copies that split the batch",
              "cp": "context-parallel degree: GPUs that split each sequence",
              "tp": "tensor-parallel degree: GPUs that split each layer's matrices",
              "ep": "expert-parallel degree: GPUs the experts are spread over",
              "etp": "expert tensor-parallel degree: GPUs that split each expert"}


@dataclass(frozen=True)
class Item:
    """One completion: ``kind`` is block, key, value, preset or target; ``insert`` the text
    (a snippet with ``$0`` when ``snippet``)."""

    label: str
    kind: str
    detail: str = ""
    doc: str = ""
    insert: str | None = None
    snippet: bool = False


def _doc(f) -> str:
    from parc.model.fields import KIND_WORDS

    words = KIND_WORDS.get(f.kind, f.kind)
    if f.choices:
        words += ": " + ", ".join(f.choices)
    return f"{f.doc} ({words})" if f.doc else words


@lru_cache(maxsize=64)
def key_docs(block: str, label: str | None) -> dict[str, str]:
    """Each key of ``block`` (a target block: of target ``label``) with its documentation."""
    from parc.model import fields as SC

    if block == "target":
        from parc.resolve.catalog import target_keys

        if not label:
            return {}
        try:
            keys = target_keys(label)
        except (KeyError, ValueError, OSError):
            return {}
        return {k: _doc(SC.F(v.get("kind", "any"), choices=tuple(v.get("choices", ())), doc=v.get("doc", "")))
                for k, v in keys.items()}
    out = {k: _doc(f) for k, f in SC.BLOCKS.get(block, {}).items()}
    for k in out.keys() & _AXIS_DOCS.keys():
        if block in ("mesh", "prefill", "decode") and not SC.BLOCKS[block][k].doc:
            out[k] = f"{_AXIS_DOCS[k]} ({SC.KIND_WORDS[SC.BLOCKS[block][k].kind]})"
    return out


def _choices(block: str, label: str | None, key: str) -> tuple[str, list[str]]:
    """The kind of value ``block.key`` takes and the names it may be (presets, choices)."""
    from parc.model import fields as SC
    from parc.resolve.catalog import presets

    if block == "target":
        from parc.resolve.catalog import target_keys

        spec = (target_keys(label) if label else {}).get(key, {})
        return spec.get("kind", "any"), [str(c) for c in spec.get("choices", ())]
    f = SC.BLOCKS.get(block, {}).get(key)
    if f is None:
        return "any", []
    if f.kind == "preset" or (block == "cluster" and key == "gpu"):
        return "preset", list(presets("gpus" if block in ("cluster", "gpu", "group") else "models"))
    if f.kind == "bool":
        return "bool", ["true", "false"]
    if f.kind == "int_or_auto":
        return f.kind, ["auto"]
    if f.kind == "link":
        return f.kind, [f"{k}(" for k in SC.LINK_KINDS]
    if f.kind == "split":
        return f.kind, ["even", "balanced"]
    return f.kind, list(f.choices)


def _preset_doc(kind: str, name: str) -> str:
    from parc.resolve.catalog import presets

    p = presets(kind).get(name, {})
    return ", ".join(f"{k} = {v}" for k, v in p.items() if k != "source")


def complete(text: str, offset: int) -> list[Item]:
    """What may be written at ``offset``: block names at the top, a block's keys (and the
    blocks it holds) at the start of a statement inside it, a target's name after `target`,
    and the presets or names a key takes after its `=`."""
    from parc.model import fields as SC
    from parc.resolve.catalog import known_targets

    ctx = context(text, offset)
    if ctx.in_use:
        return []
    if ctx.head == "target" or (ctx.head is None and ctx.key is None and ctx.block is None
                               and text[:ctx.start].rstrip().endswith("target")):
        return [Item(t, "target", "target", _target_doc(t)) for t in known_targets()]
    if ctx.in_value and ctx.block:
        kind, names = _choices(ctx.block, ctx.label, ctx.key or "")
        if kind == "preset":
            table = "gpus" if ctx.block in ("cluster", "gpu", "group") else "models"
            return [Item(n, "preset", f"{table[:-1]} preset", _preset_doc(table, n)) for n in names]
        return [Item(n, "value", kind) for n in names]
    if ctx.in_value:
        return []
    if ctx.block is None:
        return [Item(b, "block", "block", _block_doc(b), _block_snippet(b), True) for b in SC.TOP_BLOCKS]
    docs = key_docs(ctx.block, ctx.label)
    items = [Item(k, "key", f"{ctx.block} key", d, f"{k} = ") for k, d in docs.items()]
    items += [Item(b, "block", f"block in {ctx.block}", _block_doc(b), _block_snippet(b), True)
              for b in _NESTED.get(ctx.block, ())]
    return items


def _target_doc(name: str) -> str:
    from parc.resolve.catalog import target_spec

    spec = target_spec(name) or {}
    return f"{spec.get('display', name)} ({', '.join(spec.get('modes', ()))})"


def _block_doc(kind: str) -> str:
    return {"model": "the model: a preset (`from`) and its shapes", "cluster": "the GPUs: nodes, GPU, links",
            "mesh": "the parallel degrees: pp, dp, cp, tp, ep", "placement": "where axes and layers go",
            "schedule": "batch and pipeline schedule", "train": "training: ZeRO, recompute, precision",
            "serve": "serving: context length, batch, disaggregation", "profile": "measured efficiency factors",
            "target": "what to compile for: `target vllm { ... }`"}.get(kind, kind)


def _block_snippet(kind: str) -> str:
    from parc.model import fields as SC

    label = ' "${1:name}"' if SC.LABELS.get(kind) == "required" and kind != "target" else ""
    if kind == "target":
        label = " ${1:vllm}"
    return f"{kind}{label} {{\n  $0\n}}"
