"""The serving timeline: what each pipeline rank of one replica does over time, forward passes
only, as the training schedule is drawn: a prompt's prefill passing the stages in turn, then
decode steps of the replica's batches (one per pipeline stage, vLLM's virtual engines), each
block as long as the cost model's estimate (:attr:`parc.cost.estimate.Estimate.serving`).
Elements: ``rect.block.P`` (prefill) and ``rect.block.D`` (decode step) with ``data-rank``,
``data-batch``, ``data-step``, ``data-start`` and ``data-end`` in seconds, ``rect.idle``."""
from __future__ import annotations

from parc.report.svg import _idle, _svg, _text, _t
from parc.units import seconds

COLORS = {"P": "#f28e2b", "D": "#4e79a7"}
HATCH = ('<defs><pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f3f3"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#c9c9c9" stroke-width="2"/></pattern></defs>')


def timeline_slots(prefill: list[float], decode: list[float], steps: int) -> list[list[tuple]]:
    """Per pipeline rank the (kind, batch, step, start, end) blocks: the prefill of one prompt
    through every stage, then ``steps`` decode steps of each of the pp batches; a stage takes a
    batch once it is free and the previous stage has handed the batch on (the last stage hands
    the next token back to the first)."""
    pp = len(decode)
    out = [[] for _ in range(pp)]
    free = [0.0] * pp
    t = 0.0
    for r in range(pp):
        out[r].append(("P", 0, 0, t, t + prefill[r]))
        t += prefill[r]
        free[r] = t
    ready = [free[0]] * pp        # when batch j may enter stage 0
    for k in range(steps):
        for j in range(pp):
            t = ready[j]
            for r in range(pp):
                start = max(free[r], t)
                out[r].append(("D", j, k, start, start + decode[r]))
                free[r] = t = start + decode[r]
            ready[j] = t
    return out


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
    slots = timeline_slots([p.time for p in sv.prefill], [p.time for p in sv.decode], steps)
    pp = len(slots)
    span = max(s[4] for row in slots for s in row) or 1.0
    left, top, row_h, gap = 96, 64, 26, 6
    unit = 1000.0 / span
    w = sv.workload
    title = (f"Serving timeline: pp = {pp}, forward passes only; a {w.prompt_tokens:,}-token prefill, then "
             f"{steps} decode steps of {sv.batch:,.4g} requests per replica")
    sub = (f"TTFT {seconds(sv.ttft)}, TPOT {seconds(sv.tpot)}; block lengths from the cost model"
           + (f"; {pp} batches in flight, one per stage" if pp > 1 else ""))
    body = [_text(16, 22, title, "title"), _text(16, 40, sub, "muted small"), HATCH]
    for r, row in enumerate(slots):
        y = top + r * (row_h + gap)
        label = f"stage {r}" if pp > 1 else "every GPU"
        body.append(_text(left - 8, y + row_h / 2 + 4, label, "small", "end"))
        t = 0.0
        for kind, j, k, s, e in row:
            if s > t + 1e-12:
                body.append(_idle(left + t * unit, y, (s - t) * unit, row_h, r, t, s))
            x, wd = left + s * unit, (e - s) * unit
            tip = f"{'prefill' if kind == 'P' else f'decode step {k} of batch {j}'}: {seconds(e - s)}"
            body.append(f'<rect class="block {kind}" data-rank="{r}" data-kind="{kind}" data-batch="{j}" '
                        f'data-step="{k}" data-start="{s!r}" data-end="{e!r}" x="{x:.1f}" y="{y}" '
                        f'width="{max(wd - 0.8, 0.5):.1f}" height="{row_h}" rx="2" fill="{COLORS[kind]}">'
                        f'<title>{_t(tip)}</title></rect>')
            if wd >= 14:
                body.append(_text(x + wd / 2, y + row_h / 2 + 3.5, "P" if kind == "P" else f"D{k}", "small",
                                  "middle", extra=' fill="#fff" style="fill:#fff"'))
            t = e
        if t < span - 1e-12:
            body.append(_idle(left + t * unit, y, (span - t) * unit, row_h, r, t, span))
    ay = top + pp * (row_h + gap) + 4
    body.append(f'<line x1="{left}" y1="{ay}" x2="{left + 1000}" y2="{ay}" stroke="#888"/>')
    body.append(_text(left, ay + 14, "0", "tiny muted") + _text(left + 1000, ay + 14, seconds(span), "tiny muted", "end"))
    lx, ly = left, ay + 30
    for kind, name in (("P", "prefill"), ("D", "decode step")):
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{COLORS[kind]}"/>'
                    + _text(lx + 16, ly, name, "small"))
        lx += 110
    return _svg("timeline", max(left + 1030, 32 + 8.4 * len(title)), ay + 44, body, title,
                attrs=f' data-pp="{pp}" data-steps="{steps}" data-ttft="{sv.ttft!r}" data-tpot="{sv.tpot!r}"')
