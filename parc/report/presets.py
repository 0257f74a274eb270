"""What ``parc presets`` prints: the built-in model and GPU presets as tables (with the source
of each figure on request), or as JSON."""
from __future__ import annotations

import json

from parc.report.term import table
from parc.units import number


def render_json(kinds: dict) -> str:
    """``kinds``: ``{"models": {...}, "gpus": {...}}`` as the preset files hold them."""
    return json.dumps(kinds, indent=2, sort_keys=True)


def _sources(rows: dict) -> list[str]:
    return [f"  {name}: {p['source']}" for name, p in rows.items()]


def render_models(models: dict, params: dict, sources: bool = False) -> str:
    """``params``: each preset's parameter count (the cost model's)."""
    cells = []
    for name, m in models.items():
        moe = f"{m['experts']}x top-{m['top_k']}" if m.get("experts") else "-"
        cells.append([name, number(params[name]), m["layers"], m["hidden"], m["ffn_hidden"],
                      m["heads"], m.get("kv_heads", m["heads"]), m["vocab"], m["seq_len"], moe])
    lines = ["models", table(["preset", "params", "layers", "hidden", "ffn", "heads", "kv", "vocab", "seq_len",
                              "experts"], cells, align="lrrrrrrrrl")]
    return "\n".join(lines + (_sources(models) if sources else []))


def render_gpus(gpus: dict, sources: bool = False) -> str:
    cells = [[name, f"{g['memory'] / 2**30:.0f} GiB", f"{g['flops'] / 1e12:g} TFLOPS",
              f"{g['hbm_bandwidth'] / 1e9:g} GB/s",
              f"{g['nvlink_bandwidth'] / 1e9:g} GB/s" if g["nvlink_bandwidth"] else "-"]
             for name, g in gpus.items()]
    lines = ["gpus", table(["preset", "memory", "bf16 dense", "HBM", "NVLink (per dir.)"], cells, align="lrrrr")]
    return "\n".join(lines + (_sources(gpus) if sources else []))
