"""One self-contained HTML page for ``parc explain --html``: the three drawings (rank map,
pipeline schedule, memory per stage) with the explain tables. No script, no external file:
styles are inline and the drawings are inline SVG, so the page opens from disk anywhere."""
from __future__ import annotations

from html import escape

from parc.printable import printable

from parc.words import count

from parc.report import svg
from parc.report.explain import MEMORY_CODES, rank_map_rows
from parc.units import flops, nbytes, number, percent, rate, seconds

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; color: #1f2328;
       background: #fafbfc; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
p.lead { color: #57606a; margin: 0 0 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0 8px; }
.card { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 8px 14px; min-width: 120px; }
.card .k { font-size: 12px; color: #57606a; } .card .v { font-size: 18px; font-weight: 600; }
.card.bad .v { color: #cf222e; }
figure { margin: 8px 0; background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 8px;
         overflow-x: auto; }
figure svg { display: block; max-width: none; }
table { border-collapse: collapse; background: #fff; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; }
th { background: #f6f8fa; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.over td { color: #cf222e; }
.errors, .fix { color: #cf222e; }
ul.notes { color: #57606a; font-size: 13px; }
footer { margin-top: 32px; color: #8c959f; font-size: 12px; }
"""


def _e(s) -> str:
    return escape(printable(str(s)), quote=True)


def _bytes(n) -> str:
    return nbytes(n or 0)


def _time(t) -> str:
    return seconds(float(t or 0))


def _count(n) -> str:
    return number(float(n or 0))


def _pct(x) -> str:
    return percent(float(x or 0))


def _table(headers: list[str], rows: list[list], num: str = "", cls: str = "", row_cls=None) -> str:
    """``num``: one character per column, ``r`` for right-aligned numbers."""
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in headers)
           + "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        rc = row_cls(i) if row_cls else ""
        out.append(f'<tr class="{rc}">' if rc else "<tr>")
        for j, c in enumerate(r):
            klass = ' class="num"' if j < len(num) and num[j] == "r" else ""
            out.append(f"<td{klass}>{_e(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def explain_page(plan, estimate, diagnostics=()) -> str:
    """The page: summary cards, then the rank map, the schedule and memory, each with its table,
    then communication and time. A plan with errors is shown as written, under the list of its
    errors; a memory error's fix stands under the memory table."""
    from parc import __version__

    est = svg._as_dict(estimate)
    errors = [d for d in diagnostics if d.severity == "error"]
    title = f"parc explain: {plan.file}"
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<meta name=\"generator\" content=\"parc {_e(__version__)}\">"
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>",
             f"<h1>{_e(title)}</h1>", _lead(plan, est), _errors(errors), _cards(plan, est)]
    if plan.pools:
        from parc.report.html_serve import pool_sections

        parts += pool_sections(plan, estimate, errors)
    else:
        parts.append(_rank_map(plan, est))
        if plan.mode == "train":
            parts.append(_schedule(plan, est))
        parts += [_memory(plan, est, errors), _communication(plan, estimate)]
    if plan.mode == "train":
        parts.append(_step_time(est))
    elif est.get("serving"):
        from parc.cost.serving import only_decodes
        from parc.report.explain_serve import html_rows

        parts.append('<section id="serving"><h2>Serving at the workload</h2>'
                     f'<figure class="drawing">{svg.draw(plan, "timeline", estimate)}</figure>'
                     + _table(["quantity", "value"], html_rows(est["serving"], only_decodes(plan)), "ll") + "</section>")
    notes = est.get("notes") or []
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append(f"<footer>Made by parc {_e(__version__)} from {_e(plan.file)}. Memory is per GPU; "
                 "times are estimates from the cost model (see <code>parc explain</code>).</footer>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _lead(plan, est) -> str:
    m, cl, mesh = plan.model, plan.cluster, plan.mesh
    what = "Training" if plan.mode == "train" else "Serving"
    head = (f'<p class="lead">{what} <b>{_e(m.name)}</b> ({_count(est.get("params", {}).get("total"))} '
            f"parameters) on {cl.nodes} × {cl.gpus_per_node} {_e(cl.gpu.name)} "
            f"({count(est.get('world_size', plan.world_size), 'GPU')}, {_bytes(cl.gpu.memory)} each); ")
    if plan.pools:
        from parc.report.html_serve import pools_lead

        return head + pools_lead(est) + "</p>"
    return (head + "mesh " + _e(" × ".join(f"{a}={mesh.size(a)}" for a in mesh.order))
            + (f", ep={mesh.ep}" if mesh.ep > 1 else "") + (f", etp={mesh.etp}" if mesh.etp > 1 else "")
            + "</p>")


def _cards(plan, est) -> str:
    if plan.pools:
        from parc.report.html_serve import pool_cards

        cards = pool_cards(plan, est)
    else:
        cards = _plan_cards(plan, est)
    return '<div class="cards">' + "".join(
        f'<div class="card{" bad" if bad else ""}"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
        for k, v, bad in cards) + "</div>"


def _plan_cards(plan, est) -> list[tuple]:
    mem = est.get("memory_per_gpu", {})
    cap = mem.get("capacity") or plan.cluster.gpu.memory
    over = (mem.get("total") or 0) > cap
    cards = [("GPUs", f"{est.get('world_size', plan.world_size):,}", False),
             ("memory per GPU", f"{_bytes(mem.get('total'))} / {_bytes(cap)}", over)]
    if plan.mode == "train":
        cards += [("step time", _time(est.get("step_time")), False), ("MFU", _pct(est.get("mfu")), False),
                  ("pipeline bubble", _pct(est.get("bubble_fraction")), False),
                  ("tokens/s", f"{float(est.get('tokens_per_second') or 0):,.0f}", False)]
    else:
        kv = est.get("kv_cache", {})
        cards += [("KV cache tokens", f"{int(kv.get('capacity_tokens') or 0):,}", False),
                  ("concurrent sequences", f"{int(kv.get('max_concurrent_seqs') or 0):,}", False)]
        cards += speed_cards(est.get("serving"))
    return cards


def speed_cards(sv) -> list[tuple]:
    """TTFT, TPOT and output tokens/s of a serving plan's JSON ``serving`` object."""
    if not sv:
        return []
    return [("TTFT", _time(sv["ttft"]) if sv["ttft"] is not None else "unbounded", False),
            ("TPOT", _time(sv["tpot"]), False),
            ("output tokens/s", f"{float(sv['output_tokens_per_s']):,.0f}", False)]


def _rank_map(plan, est) -> str:
    parts = ['<section id="mesh"><h2>Rank map</h2>', f'<figure class="drawing">{svg.mesh(plan)}</figure>']
    rows = rank_map_rows((est.get("rank_map") or {}).get("axes") or {})
    if rows:
        parts.append(_table(["axis", "size", "rank stride", "groups", "nodes per group", "link", "first group"],
                            rows, "lrrrrll"))
    return "".join(parts) + "</section>"


def _schedule(plan, est) -> str:
    sch = plan.schedule
    return ('<section id="schedule"><h2>Pipeline schedule</h2>'
            f'<figure class="drawing">{svg.schedule(plan)}</figure>'
            + _table(["pipeline", "virtual stages", "micro batch", "microbatches", "in flight (stage 0)",
                      "bubble (cost model)"],
                     [[sch.pipeline, sch.virtual_stages, sch.micro_batch, est.get("microbatches"),
                       est.get("inflight_microbatches"), _pct(est.get("bubble_fraction"))]], "lrrrrr")
            + "</section>")


def _errors(errors) -> str:
    if not errors:
        return ""
    items = "".join(f"<li><b>{_e(d.code)}</b> {_e(d.message)}" + (f" <i>Fix:</i> {_e(d.help)}" if d.help else "")
                    + "</li>" for d in errors)
    return (f'<div class="errors"><p>The spec has {_e(count(len(errors), "error"))}; the numbers below are '
            f"the plan as written.</p><ul>{items}</ul></div>")


def _memory(plan, est, errors=()) -> str:
    fixes = "".join(f'<p class="fix">Does not fit ({_e(d.code)}): {_e(d.help)}</p>'
                    for d in errors if d.code in MEMORY_CODES and d.help)
    stages = est.get("stages") or []
    cols = [c for c in svg.MEMORY_PARTS if any((s["memory"].get(c) or 0) > 0 for s in stages)] or ["weights"]
    rows = [[s["stage"], s.get("layers"), _count(s.get("params"))] + [_bytes(s["memory"].get(c)) for c in cols]
            + [_bytes(s["memory"]["total"]), _pct(s["memory"]["total"] / (s["memory"]["capacity"] or 1))]
            for s in stages]
    return ('<section id="memory"><h2>Memory per GPU</h2>'
            f'<figure class="drawing">{svg.memory(plan, est)}</figure>'
            + _table(["stage", "layers", "params"] + [c.replace("_", " ") for c in cols] + ["total", "of capacity"],
                     rows, "r" * (len(cols) + 5),
                     row_cls=lambda i: "over" if stages[i]["memory"]["total"] > stages[i]["memory"]["capacity"]
                     else "")
            + fixes + "</section>")


def _communication(plan, estimate) -> str:
    """The text's communication table (:func:`parc.report.explain.comm_table`), as HTML."""
    from parc.report.explain import comm_table

    train = plan.mode == "train"
    head = ('<section id="communication"><h2>Communication per GPU '
            + ("per step" if train else "per decoded token") + "</h2>")
    cols, rows, align = comm_table(plan, estimate)
    body = _table(cols, rows, align) if rows else "<p>None: every axis has size 1.</p>"
    return head + body + "</section>"


def _step_time(est) -> str:
    rows = [["tokens per step", f"{int(est.get('tokens_per_step') or 0):,}"],
            ["model FLOPs per step", flops(float(est.get("model_flops_per_step") or 0))],
            ["compute time", _time(est.get("compute_time"))],
            ["step time", _time(est.get("step_time"))],
            ["MFU", _pct(est.get("mfu"))],
            ["tokens/s", f"{float(est.get('tokens_per_second') or 0):,.0f}"]]
    return '<section id="time"><h2>Step time</h2>' + _table(["quantity", "value"], rows, "lr") + "</section>"
