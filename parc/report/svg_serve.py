"""The serving timeline: what the GPUs of one replica do over time as the engine's scheduler runs
them, forward passes only, each block as long as the cost model's step
(:attr:`parc.cost.estimate.Estimate.serving`):

* one mesh: a row per pipeline stage of one replica; a request's prompt in its chunks (``P``, each
  riding a step beside the decode requests), then decode steps of the replica's micro-batches
  (one per stage, vLLM's virtual engines), the share of them that carry another request's prompt
  chunk drawn as mixed steps (``M``), the rest decode only (``D``); an engine that does not mix
  them (SGLang) runs a prompt step (``P``) after those decode steps instead;
* a decode server alone (SGLang ``--disaggregation-mode decode``,
  :func:`parc.cost.serving.only_decodes`): decode steps only, from the start, as the cost model
  runs it (its requests arrive prefilled; the queue for a decode slot is named in the caption);
* prefill and decode pools: the rows of a prefill instance's stages, the KV transfer (``K``),
  then the rows of a decode instance's stages; the queue for a prefill rank is named in the
  caption, not drawn.

Elements: ``rect.block.P|M|D|K`` with ``data-rank``, ``data-pool``, ``data-batch``,
``data-step``, ``data-start`` and ``data-end`` in seconds, ``rect.idle``; the ``svg`` carries
``data-ttft``, ``data-tpot``, ``data-step`` and ``data-gpus`` (``pool:GPUs per instance``)."""
from __future__ import annotations

from parc.report.svg import _idle, _svg, _text, _t
from parc.units import seconds

COLORS = {"P": "#f28e2b", "M": "#76b7b2", "D": "#4e79a7", "K": "#b07aa1"}
NAMES = {"P": "prompt chunk", "M": "mixed step", "D": "decode step", "K": "KV transfer"}
HATCH = ('<defs><pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f3f3"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#c9c9c9" stroke-width="2"/></pattern></defs>')


def mixed_steps(share: float, steps: int) -> list[bool]:
    """Which of ``steps`` decode steps carry a prompt chunk, spread evenly at ``share``."""
    return [int((i + 1) * share + 1e-9) > int(i * share + 1e-9) for i in range(steps)]


def timeline_slots(prefill: list[float], chunks: int, decode: list[float], mixed: list[float], share: float,
                   steps: int, start: float = 0.0, apart: bool = False) -> list[list[tuple]]:
    """Per pipeline rank the (kind, batch, step, start, end) blocks: a prompt's ``chunks`` passing
    the stages in turn (each stage ``prefill[r]`` long), then ``steps`` steps of each of the pp
    micro-batches, mixed (``mixed[r]``) at ``share`` and decode-only (``decode[r]``) otherwise
    (``apart``: an engine that does not mix them runs the decode step, then a prompt step of
    ``mixed[r]``); a stage takes a micro-batch once it is free and the previous stage has handed
    it on (the last stage hands the next token back to the first)."""
    pp = len(decode)
    out = [[] for _ in range(pp)]
    free = [start] * pp
    t = start
    for k in range(chunks):
        t = free[0] if k else start
        for r in range(pp):
            s = max(free[r], t)
            out[r].append(("P", 0, k, s, s + prefill[r]))
            free[r] = t = s + prefill[r]
    ready = [free[-1]] * pp
    kinds = mixed_steps(share, steps * pp)
    for k in range(steps):
        for j in range(pp):
            t = ready[j]
            kind = "M" if kinds[k * pp + j] and mixed else "D"
            parts = [("D", decode), ("P", mixed)] if kind == "M" and apart else [(kind, mixed if kind == "M" else decode)]
            for r in range(pp):
                s = max(free[r], t)
                for name, durs in parts:
                    out[r].append((name, j, k, s, s + durs[r]))
                    s += durs[r]
                free[r] = t = s
            ready[j] = t
    return out


def _rows(plan, sv, steps: int) -> list[tuple[str, str, list[tuple]]]:
    """(label, pool, blocks) per row: one mesh's stages (a decode server's without a prompt), or
    the prefill stages, the transfer and the decode stages of a disaggregated plan."""
    from parc.cost.serving import only_decodes

    dec = [p.time for p in sv.decode]
    if not sv.pools:
        mixed = [p.time for p in sv.mixed] if sv.mixed and sv.mixed_share > 0 else []
        chunk = mixed or [p.time for p in sv.prefill]
        chunks = 0 if only_decodes(plan) else int(sv.prefill_steps)
        slots = timeline_slots(chunk, chunks, dec, mixed, sv.mixed_share, steps, apart=not sv.limits.mixed)
        label = (lambda r: f"stage {r}") if len(slots) > 1 else (lambda r: "the replica")
        return [(label(r), "serve", row) for r, row in enumerate(slots)]
    pre = timeline_slots([p.time for p in sv.prefill], int(sv.prefill_steps), [0.0] * len(sv.prefill), [], 0.0, 0)
    end = max(b[4] for row in pre for b in row)
    xfer = [("K", 0, 0, end, end + sv.kv_transfer_time)]
    d = timeline_slots([0.0] * len(dec), 0, dec, [], 0.0, steps, start=end + sv.kv_transfer_time)
    rows = [(f"prefill stage {r}" if len(pre) > 1 else "prefill", "prefill", row) for r, row in enumerate(pre)]
    rows.append(("KV transfer", "kv_transfer", xfer))
    rows += [(f"decode stage {r}" if len(d) > 1 else "decode", "decode", row) for r, row in enumerate(d)]
    return rows


def timeline(plan, estimate=None, steps: int = 6) -> str:
    """The drawing (see the module doc); a training plan has none."""
    if estimate is None:
        from parc.cost.estimate import estimate as _estimate

        estimate = _estimate(plan)
    sv = getattr(estimate, "serving", None)
    if plan.mode != "serve" or sv is None:
        body = [_text(16, 24, "Serving timeline", "title"),
                _text(16, 46, "a training plan has no serving timeline; see the pipeline schedule", "muted small")]
        return _svg("timeline", 640, 64, body, "Serving timeline: none")
    from parc.model.pools import instance_gpus
    from parc.report.explain_serve import ttft_text

    rows = _rows(plan, sv, steps)
    span = max(b[4] for _, _, row in rows for b in row) or 1.0
    left, top, row_h, gap = 120, 64, 26, 6
    unit = 1000.0 / span
    w = sv.workload
    gpus = ({k: v["gpus_per_instance"] for k, v in sv.pools.items()} if sv.pools
            else {"serve": instance_gpus(plan.mesh)})
    from parc.model.pools import replica_gpus
    from parc.words import count

    where = " → ".join(f"{k} instance ({count(v, 'GPU')})" for k, v in gpus.items()) if sv.pools else \
        f"one replica of {count(replica_gpus(plan.mesh), 'GPU')}"
    from parc.cost.serving import only_decodes

    prompt = (f"{w.prompt_tokens:,}-token prompts arrive prefilled, then" if only_decodes(plan)
              else f"a {w.prompt_tokens:,}-token prompt, then")
    title = (f"Serving timeline: {where}; forward passes only; {prompt} {steps} steps of {sv.batch:,.4g} "
             f"requests per replica")
    sub = f"TTFT {ttft_text(sv)}; TPOT {seconds(sv.tpot)}; block lengths from the cost model"
    body = [_text(16, 22, title, "title"), _text(16, 40, sub, "muted small"), HATCH]
    for r, (label, pool, row) in enumerate(rows):
        y = top + r * (row_h + gap)
        body.append(_text(left - 8, y + row_h / 2 + 4, label, "small", "end"))
        body += _row_blocks(row, r, pool, y, row_h, left, unit, span)
    ay = top + len(rows) * (row_h + gap) + 4
    body.append(f'<line x1="{left}" y1="{ay}" x2="{left + 1000}" y2="{ay}" stroke="#888"/>')
    body.append(_text(left, ay + 14, "0", "tiny muted") + _text(left + 1000, ay + 14, seconds(span), "tiny muted", "end"))
    lx, ly = left, ay + 30
    kinds = sorted({b[0] for _, _, row in rows for b in row}, key="PMDK".index)
    for kind in kinds:
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{COLORS[kind]}"/>'
                    + _text(lx + 16, ly, NAMES[kind], "small"))
        lx += 110
    attrs = (f' data-pp="{len(sv.decode)}" data-steps="{steps}" data-ttft="{sv.ttft!r}" data-tpot="{sv.tpot!r}" '
             f'data-step="{sv.step!r}" data-gpus="{",".join(f"{k}:{v}" for k, v in gpus.items())}"')
    return _svg("timeline", max(left + 1030, 32 + 8.4 * len(title)), ay + 44, body, title, attrs=attrs)


def _row_blocks(row, r: int, pool: str, y: float, row_h: float, left: float, unit: float, span: float) -> list[str]:
    """One row's blocks and the idle time between them."""
    out, t = [], 0.0
    for kind, j, k, s, e in row:
        if s > t + 1e-12:
            out.append(_idle(left + t * unit, y, (s - t) * unit, row_h, r, t, s))
        x, wd = left + s * unit, (e - s) * unit
        what = {"P": f"prompt chunk {k + 1}", "K": "KV transfer", "M": f"step {k} of batch {j} with a prompt chunk",
                "D": f"decode step {k} of batch {j}"}[kind]
        out.append(f'<rect class="block {kind}" data-rank="{r}" data-pool="{pool}" data-kind="{kind}" '
                   f'data-batch="{j}" data-step="{k}" data-start="{s!r}" data-end="{e!r}" x="{x:.1f}" y="{y}" '
                   f'width="{max(wd - 0.8, 0.5):.1f}" height="{row_h}" rx="2" fill="{COLORS[kind]}">'
                   f'<title>{_t(f"{what}: {seconds(e - s)}")}</title></rect>')
        if wd >= 14:
            out.append(_text(x + wd / 2, y + row_h / 2 + 3.5, kind if kind in "PK" else f"{kind}{k}", "small",
                             "middle", extra=' fill="#fff" style="fill:#fff"'))
        t = e
    if t < span - 1e-12:
        out.append(_idle(left + t * unit, y, (span - t) * unit, row_h, r, t, span))
    return out


# --- a disaggregated plan's pools, each drawn as the plan one of its instances runs ---------------

def pools_picture(plan, kind: str, draw_one, estimate=None) -> str:
    """``draw_one(instance plan, its estimate)`` for every pool of a disaggregated plan, stacked
    in one drawing under a heading per pool (its instances, their GPUs); the drawing carries
    ``data-world`` (every pool's GPUs) and ``data-pools`` (``pool:instances×GPUs``)."""
    import re

    if estimate is None:
        from parc.cost.estimate import estimate as _estimate

        estimate = _estimate(plan)
    pools = estimate.serving.pools
    y, width, body = 48.0, 560.0, []
    total = sum(p["gpus"] for p in pools.values())
    title = (f"{kind.capitalize()} of a disaggregated plan: {total} GPUs in "
             + " and ".join(f"{name} {p['instances']} × {p['gpus_per_instance']} GPUs" for name, p in pools.items()))
    body.append(_text(16, 22, title, "title"))
    body.append(_text(16, 40, "each pool drawn as the plan one of its instances runs; the KV cache of every request "
                              "moves from a prefill instance to a decode instance", "muted small"))
    for name, p in pools.items():
        inner = draw_one(p["plan"], p["estimate"])
        w = float(re.search(r'width="(\d+)"', inner)[1])
        h = float(re.search(r'height="(\d+)"', inner)[1])
        body.append(_text(16, y + 16, f"pool {name}: {p['instances']} instance{'s' if p['instances'] > 1 else ''} of "
                                      f"{p['gpus_per_instance']} GPUs ({p['gpus']} in all)", "title"))
        body.append(inner.replace("<svg ", f'<svg x="0" y="{y + 24:.0f}" ', 1))
        y += 24 + h + 16
        width = max(width, w)
    gpus = ",".join(f"{name}:{p['instances']}x{p['gpus_per_instance']}" for name, p in pools.items())
    return _svg(kind, max(width, 32 + 8.4 * len(title)), y, body, title,
                attrs=f' data-world="{total}" data-pools="{gpus}"')
