"""The serving parts of the HTML page that a disaggregated plan needs: every pool in the lead and
its own sections (rank map, memory and communication of one of its instances), so that the page
counts and draws every GPU the plan uses."""
from __future__ import annotations

from html import escape

from parc.report.explain_serve import mesh_text
from parc.report.html import _bytes, _communication, _memory, _rank_map, speed_cards


def pools_lead(est: dict) -> str:
    """``prefill 2 × 8 GPUs (tp 8, ep 8) and decode 1 × 16 GPUs (dp 2, tp 8, ep 16)``."""
    pools = (est.get("serving") or {}).get("pools") or {}
    return escape(" and ".join(f"{name} {p['instances']} × {p['gpus_per_instance']} GPUs ({mesh_text(p['mesh'])})"
                               for name, p in pools.items()))


def pool_sections(plan, estimate, errors=()) -> list[str]:
    """One section per pool: its instance's rank map, memory and communication."""
    out = []
    pools = estimate.to_json()["serving"]["pools"]
    for name, p in estimate.serving.pools.items():
        est = pools[name]
        heading = (f'<section id="pool-{escape(name)}"><h2>Pool {escape(name)}: {p["instances"]} × '
                   f'{p["gpus_per_instance"]} GPUs ({escape(mesh_text(p["mesh"]))})</h2>')
        body = [_rank_map(p["plan"], est), _memory(p["plan"], est, errors), _communication(p["plan"], p["estimate"])]
        out.append(heading + "".join(b.replace('<section id="', f'<section id="{escape(name)}-', 1)
                                     for b in body) + "</section>")
    return out


def pool_cards(plan, est: dict) -> list[tuple]:
    """The summary cards of a disaggregated plan: every pool's GPUs, the fullest GPU of each, the
    decode pool's KV cache, and the speed."""
    sv = est.get("serving") or {}
    pools = sv.get("pools") or {}
    cards = [("GPUs", f"{sum(p['gpus'] for p in pools.values()):,} ("
              + " + ".join(f"{name} {p['gpus']}" for name, p in pools.items()) + ")", False)]
    for name, p in pools.items():
        mem = p["memory_per_gpu"]
        cards.append((f"{name} memory per GPU", f"{_bytes(mem['total'])} / {_bytes(mem['capacity'])}",
                      mem["total"] > mem["capacity"]))
    if "decode" in pools:
        cards.append(("decode KV cache tokens", f"{pools['decode']['kv_capacity_tokens']:,}", False))
    return cards + speed_cards(sv)
