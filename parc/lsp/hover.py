"""Hover text (Markdown): a mesh degree's groups, link and bytes; a block's memory per GPU and
step time (training) or TTFT and TPOT (serving); a preset's fields; a key's documentation.

Every number is ``parc explain``'s (the estimate's JSON, the same object ``parc explain
--format json`` prints), formatted by :mod:`parc.units`.
"""
from __future__ import annotations

from parc.lsp.analysis import Analysis
from parc.lsp.scan import context
from parc.units import nbytes, percent, seconds

_AXIS_WORDS = {"pp": "pipeline", "dp": "data", "cp": "context", "tp": "tensor", "ep": "expert",
               "etp": "expert-tensor", "dcp": "decode context"}
_MESH_BLOCKS = ("mesh", "prefill", "decode")


def hover(a: Analysis, offset: int) -> str | None:
    """The Markdown to show for the word at ``offset``, or None."""
    ctx = context(a.text, offset)
    word = ctx.word
    if not word:
        return None
    if ctx.in_value and (text := preset_text(word)):
        return text
    if ctx.block in _MESH_BLOCKS and not ctx.in_value and word in _AXIS_WORDS:
        return axis_text(a, word)
    if ctx.key is None and ctx.head is None and _opens_block(a.text, ctx.end):
        return block_text(a, word)
    if ctx.key is None and ctx.block:
        return key_text(ctx.block, ctx.label, word)
    return None


def _opens_block(text: str, end: int) -> bool:
    rest = text[end:end + 200].lstrip(" \t")
    if rest.startswith('"'):
        close = rest.find('"', 1)
        rest = rest[close + 1:].lstrip(" \t") if close > 0 else ""
    elif rest[:1].isalpha():
        rest = rest.split(None, 1)[1] if len(rest.split(None, 1)) > 1 else ""
    return rest.startswith("{")


def preset_text(name: str) -> str | None:
    """A model or GPU preset's fields and their source."""
    from parc.resolve.catalog import presets

    for kind, what in (("models", "model"), ("gpus", "GPU")):
        p = presets(kind).get(name)
        if p is None:
            continue
        rows = [f"| {k} | {_value(k, v)} |" for k, v in p.items() if k != "source"]
        out = [f"**{name}** — {what} preset", "", "| field | value |", "|---|---|", *rows]
        if p.get("source"):
            out += ["", f"source: {p['source']}"]
        return "\n".join(out)
    return None


def _value(key: str, v) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if key == "memory":
            return nbytes(v)
        if key.endswith("bandwidth"):
            return nbytes(v) + "/s"
        if "flops" in key:
            return f"{v / 1e12:g} TFLOP/s"
    return f"{v}"


def _json(a: Analysis) -> dict | None:
    est = a.estimate
    return est.to_json() if est is not None else None


def axis_text(a: Analysis, axis: str) -> str:
    """A mesh degree: its groups (the first one's ranks), the link they cross and the bytes
    each GPU sends over it per step (per decoded token when serving)."""
    head = f"**{axis}** — {_AXIS_WORDS[axis]} parallelism"
    j = _json(a)
    if j is None:
        return head + "\n\n(no numbers while the spec has errors)"
    ax = j["rank_map"]["axes"].get(axis)
    if ax is None or ax["size"] <= 1:
        return head + f"\n\n{axis} = 1: no {axis} groups, no {axis} traffic"
    first = ", ".join(map(str, ax["first_group"][:16])) + (", …" if len(ax["first_group"]) > 16 else "")
    link = j.get("comm_link", {}).get(axis) or ax["link"]
    kind = j["links"].get(link, {}).get("kind") if isinstance(j.get("links"), dict) else None
    per = "step" if j["mode"] == "train" else "decoded token"
    comm = j.get("comm_per_token" if j["mode"] == "serve" else "comm_per_step") or j.get("comm_per_step", {})
    lines = [head, "",
             f"- {ax['groups']} group{'s' if ax['groups'] != 1 else ''} of {ax['size']} GPUs; the first: ranks {first}",
             f"- link: {link}" + (f" ({kind})" if kind else "") + f", spanning {ax['nodes_spanned']} node"
             + ("s" if ax["nodes_spanned"] != 1 else ""),
             f"- {nbytes(comm.get(axis, 0))} per GPU per {per}"
             + (f", {seconds(t)}" if (t := j.get("comm_time", {}).get(axis)) else "")
             + (f" ({alg})" if (alg := j.get("comm_algorithm", {}).get(axis)) else "")]
    return "\n".join(lines)


def block_text(a: Analysis, kind: str) -> str:
    """A block: the memory of the most loaded GPU and the plan's time (step time and MFU in
    training; TTFT, TPOT and output tokens/s in serving)."""
    j = _json(a)
    if j is None:
        return f"**{kind}**\n\n(no numbers while the spec has errors)"
    mem = j["memory_per_gpu"]
    parts = ", ".join(f"{k.replace('_', ' ')} {nbytes(v)}" for k, v in mem.items()
                      if k not in ("total", "capacity") and v)
    out = [f"**{kind}** — plan of {j['world_size']} GPUs", "",
           f"- memory per GPU: {nbytes(mem['total'])} of {nbytes(mem['capacity'])} "
           f"({percent(mem['total'] / mem['capacity'])}): {parts}" if mem.get("capacity") else ""]
    if j["mode"] == "train":
        out.append(f"- step time {seconds(j['step_time'])}, MFU {percent(j['mfu'])}, "
                   f"bubble {percent(j['bubble_fraction'])}")
    else:
        s = j.get("serving") or {}
        if s:
            out.append(f"- TTFT {seconds(s['ttft'])}, TPOT {seconds(s['tpot'])}, "
                       f"{s['output_tokens_per_s']:,.0f} output tokens/s at concurrency "
                       f"{s['workload']['concurrency']}")
    return "\n".join(x for x in out if x is not None)


def key_text(block: str, label: str | None, key: str) -> str | None:
    """A key's documentation: what it takes and what it means."""
    from parc.lsp.complete import key_docs

    doc = key_docs(block, label).get(key)
    return f"**{block}.{key}** — {doc}" if doc else None
