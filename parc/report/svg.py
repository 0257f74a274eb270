"""Plain SVG drawings of a plan: the rank map, the pipeline schedule and per-GPU memory.

Written by hand (no plotting library), deterministic, and self-contained: each drawing carries
its own ``<style>``. Elements have stable classes and ``data-`` attributes so tools and tests
can read them back: ``g.gpu`` (``data-rank``, ``data-node``, ``data-pp`` … ``data-tp-group``),
``g.node``, ``path.link`` (``data-axes``), ``rect.block.F|B|W`` (``data-rank``,
``data-microbatch``, ``data-stage``), ``rect.idle``, ``g.bar`` (``data-stage``) with
``rect.segment.<part>`` and ``line.capacity``.

Large plans are summarised: at most ``max_nodes`` nodes are drawn (the first ones and the
last, with the number left out), and a schedule with many microbatches is drawn with the
fewest microbatches that show its warm-up, steady state and cool-down.
"""
from __future__ import annotations

from html import escape

from parc.printable import printable

from parc.units import nbytes, percent
from parc.words import count, plural

# ColorBrewer-like qualitative palette (12), readable on white and distinct side by side
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
           "#b07aa1", "#ff9da7", "#9c755f", "#86bc86", "#d37295", "#a0cbe8")
AXIS_COLORS = {"pp": "#e15759", "dp": "#4e79a7", "cp": "#59a14f", "tp": "#f28e2b", "ep": "#b07aa1",
               "etp": "#9c755f"}
KIND_COLORS = {"F": "#4e79a7", "B": "#59a14f", "W": "#f28e2b"}
PART_COLORS = {"weights": "#4e79a7", "grads": "#f28e2b", "optimizer": "#e15759", "activations": "#59a14f",
               "kv_cache": "#b07aa1", "fp8_weights": "#76b7b2", "fsdp_buffers": "#d37295",
               "cuda_context": "#9c755f", "nccl_buffers": "#bab0ac",
               "fragmentation": "#edc948", "cuda_graphs": "#ff9da7", "sampler": "#86bc86"}
# the memory parts in the order they stack (Memory.to_json's keys)
MEMORY_PARTS = ("weights", "grads", "optimizer", "activations", "kv_cache", "fp8_weights", "fsdp_buffers",
                "cuda_context", "nccl_buffers", "fragmentation", "cuda_graphs", "sampler")
FONT = "font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"

_BASE_CSS = (f"text {{ {FONT}; fill: #222; font-size: 11px; }} .muted {{ fill: #666; }} "
             ".title { font-weight: 600; font-size: 14px; } .small { font-size: 9px; } .tiny { font-size: 7.5px; } "
             ".small.title { font-size: 9px; }")


def _min_width(title: str) -> float:
    """Room for a bold 14px title (about 8.4 px per character in common sans fonts) and margins."""
    return 32 + 8.4 * len(title)


def _t(s) -> str:
    """Text for the SVG: XML escaped, and a spec's control characters (which XML 1.0 cannot
    hold) written as escapes."""
    return escape(printable(str(s)), quote=True)


def _svg(kind: str, width: float, height: float, body: list[str], title: str, css: str = "",
         attrs: str = "") -> str:
    w, h = int(round(width)), int(round(height))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="parc-{kind}" data-kind="{kind}" '
            f'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{_t(title)}"{attrs}>\n'
            f"<title>{_t(title)}</title>\n<style>{_BASE_CSS} {css}</style>\n"
            f'<rect class="background" x="0" y="0" width="{w}" height="{h}" fill="#fff"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def _text(x, y, s, cls="", anchor="start", extra="") -> str:
    c = f' class="{cls}"' if cls else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{c}{a}{extra}>{_t(s)}</text>'


def _as_dict(estimate) -> dict:
    if estimate is None:
        return {}
    if isinstance(estimate, dict):
        return estimate
    return estimate.to_json()


# ============================================================================ rank map

def mesh(plan, max_nodes: int = 16) -> str:
    """The rank map: nodes as boxes with their GPUs inside, each GPU coloured by its TP group
    and labelled with its rank and (pp, dp, cp, tp) coordinates; arcs on the right join the
    nodes whose GPUs talk to each other, labelled with the axes that cross."""
    if plan.pools:
        from parc.report.svg_serve import pools_picture

        return pools_picture(plan, "mesh", lambda p, _e: mesh(p, max_nodes))
    from parc.model.rankmap import RankMap

    rm = RankMap(plan)
    g, world, n_nodes = rm.gpus_per_node, rm.world, rm.nodes
    shown = list(range(max_nodes - 1)) + [n_nodes - 1] if n_nodes > max_nodes else list(range(n_nodes))
    per_row = min(g, 8)
    rows_per_node = -(-g // per_row)
    box = {"gw": 74, "gh": 40, "gap": 6, "pad": 10, "head": 20, "left": 16, "per_row": per_row}
    box["node_w"] = box["pad"] * 2 + per_row * box["gw"] + (per_row - 1) * box["gap"]
    box["node_h"] = box["head"] + rows_per_node * box["gh"] + (rows_per_node - 1) * box["gap"] + box["pad"]
    if plan.cluster.topology is not None:   # each rank's physical GPU under the launch's device order
        from parc.model.topology import physical_gpus

        box["gpus"] = physical_gpus(plan)
    left, tp = box["left"], rm.sizes["tp"]
    experts = "".join(f", {a}={rm.size(a)}" for a in ("ep", "etp") if rm.size(a) > 1)
    title = (f"Rank map: {count(world, 'GPU')} on {count(n_nodes, 'node')} × {g}; "
             f"mesh {' × '.join(f'{a}={rm.sizes[a]}' for a in rm.order)}{experts} (last axis innermost)")
    sub = ("GPUs coloured by tensor-parallel group; label: rank and (pp, dp, cp, tp)" if tp > 1 else
           "tp = 1: every GPU is its own tensor-parallel group; label: rank and (pp, dp, cp, tp)")
    body = [_text(left, 22, title, "title"), _text(left, 40, sub, "muted small")]
    node_y, height = _mesh_nodes(rm, shown, box, body)
    width, height = _mesh_links(plan, rm, shown, box, node_y, height, body)
    width = max(width, left + box["node_w"] + 20, 560, _min_width(title))
    return _svg("mesh", width, height, body, title,
                attrs=f' data-world="{world}" data-nodes="{n_nodes}" data-nodes-drawn="{len(shown)}"')


def _mesh_nodes(rm, shown: list[int], box: dict, body: list[str]) -> tuple[dict[int, float], float]:
    """Draw the shown nodes (and a line for each run of skipped ones) into ``body``; returns
    each node's y and the drawing's height so far."""
    import numpy as np

    g, world = rm.gpus_per_node, rm.world
    ranks = np.arange(world, dtype=np.int64)
    coords = rm.coords(ranks)
    tp = rm.sizes["tp"]
    tp_group_key = ranks - coords["tp"] * rm.stride["tp"]  # the group's smallest rank
    uniq = {int(k): i for i, k in enumerate(sorted(set(int(x) for x in tp_group_key)))}
    gw, gh, gap, pad, left = box["gw"], box["gh"], box["gap"], box["pad"], box["left"]
    node_w, node_h, per_row = box["node_w"], box["node_h"], box["per_row"]
    y = 58
    node_y: dict[int, float] = {}
    for i, node in enumerate(shown):
        if i > 0 and node != shown[i - 1] + 1:
            skipped = node - shown[i - 1] - 1
            body.append(f'<g class="skipped" data-nodes="{skipped}">'
                        + _text(left + node_w / 2, y + 16,
                                f"⋮  {skipped} more {plural(skipped, 'node')} "
                                f"(ranks {(shown[i - 1] + 1) * g}–{node * g - 1}) follow the same pattern",
                                "muted", "middle") + "</g>")
            y += 30
        node_y[node] = y
        body.append(f'<g class="node" data-node="{node}" transform="translate({left},{y:.0f})">')
        body.append(f'<rect class="node-box" x="0" y="0" width="{node_w}" height="{node_h}" rx="8" '
                    f'fill="#f6f7f9" stroke="#9aa3ad"/>')
        first, last = node * g, min(world, node * g + g) - 1
        body.append(_text(pad, 14, f"node {node}  ·  ranks {first}–{last}", "small title"))
        for local in range(min(g, world - node * g)):
            r = node * g + local
            gx = pad + (local % per_row) * (gw + gap)
            gy = box["head"] + (local // per_row) * (gh + gap)
            c = {a: int(coords[a][r]) for a in ("pp", "dp", "cp", "tp")}
            grp = uniq[int(tp_group_key[r])]
            fill = PALETTE[grp % len(PALETTE)] if tp > 1 else "#8fa9c4"
            phys = box["gpus"][local] if "gpus" in box else None
            where = f"local {local}" + (f", GPU {phys}" if phys is not None else "")
            tip = (f"rank {r} (node {node}, {where}): pp={c['pp']} dp={c['dp']} cp={c['cp']} "
                   f"tp={c['tp']}; TP group {grp}")
            body.append(
                f'<g class="gpu" data-rank="{r}" data-node="{node}" data-local="{local}" '
                f'data-pp="{c["pp"]}" data-dp="{c["dp"]}" data-cp="{c["cp"]}" data-tp="{c["tp"]}" '
                f'data-tp-group="{grp}"' + (f' data-gpu="{phys}"' if phys is not None else "")
                + f' transform="translate({gx},{gy})">'
                f"<title>{_t(tip)}</title>"
                f'<rect x="0" y="0" width="{gw}" height="{gh}" rx="4" fill="{fill}" fill-opacity="0.85" '
                f'stroke="#333" stroke-width="0.6"/>'
                + _text(gw / 2, 15, f"r{r}" + (f" · gpu{phys}" if phys is not None else ""), "small title", "middle")
                + _text(gw / 2, 30, f"({c['pp']},{c['dp']},{c['cp']},{c['tp']})", "tiny", "middle")
                + "</g>")
        body.append("</g>")
        y += node_h + 14
    return node_y, y + 10


def _mesh_links(plan, rm, shown, box, node_y, height, body) -> tuple[float, float]:
    """Draw the links between nodes into ``body``: arcs between drawn nodes, dashed stubs to
    nodes not drawn, and the legend of crossing axes; returns the width and height."""
    all_links = _node_links(rm)
    drawn = set(shown)
    links = {k: v for k, v in all_links.items() if k[0] in drawn and k[1] in drawn}
    stubs: dict[tuple[int, str], int] = {}  # (drawn node, axis) -> a partner node not drawn
    for (a, b), axes in sorted(all_links.items()):
        for ax in axes:
            if a in drawn and b not in drawn:
                stubs.setdefault((a, ax), b)
            elif b in drawn and a not in drawn:
                stubs.setdefault((b, ax), a)
    arc_x0, node_h = box["left"] + box["node_w"], box["node_h"]
    max_span = max([1] + [shown.index(b) - shown.index(a) for (a, b) in links])
    width = arc_x0 + 40 + 26 * min(max_span, 12) + 90 + (130 if stubs else 0)
    link = rm_link_name(plan)
    for (a, b), axes in sorted(links.items()):
        off = ("pp", "dp", "cp", "ep", "tp").index(axes[0]) * 6 - 9
        ya = node_y[a] + node_h / 2 + off
        yb = node_y[b] + node_h / 2 + off
        bulge = 30 + 26 * min(shown.index(b) - shown.index(a), 12)
        color = AXIS_COLORS.get(axes[0], "#555")
        label = ", ".join(axes)
        body.append(
            f'<g class="link" data-from="{a}" data-to="{b}" data-axes="{" ".join(axes)}">'
            f"<title>{_t(f'node {a} ↔ node {b}: {label} over {link}')}</title>"
            f'<path class="link" d="M{arc_x0},{ya:.1f} C{arc_x0 + bulge},{ya:.1f} {arc_x0 + bulge},{yb:.1f} '
            f'{arc_x0},{yb:.1f}" fill="none" stroke="{color}" stroke-width="1.6" stroke-opacity="0.8"/>'
            + _text(arc_x0 + bulge * 0.75 + 4, (ya + yb) / 2 + 3, label, "small", extra=f' fill="{color}"')
            + "</g>")
    sx = arc_x0 + 40 + 26 * min(max_span, 12) + 60
    per_node: dict[int, int] = {}
    for (node, ax), other in sorted(stubs.items(), key=lambda kv: (kv[0][0], "pp dp cp ep tp".find(kv[0][1]))):
        k = per_node.get(node, 0)
        per_node[node] = k + 1
        yy = node_y[node] + 14 + 12 * k
        color = AXIS_COLORS.get(ax, "#555")
        body.append(f'<g class="link stub" data-from="{node}" data-to="{other}" data-axes="{ax}">'
                    f"<title>{_t(f'node {node} ↔ node {other} (not drawn): {ax} over {link}')}</title>"
                    f'<line x1="{arc_x0}" y1="{yy:.1f}" x2="{sx:.1f}" y2="{yy:.1f}" stroke="{color}" '
                    f'stroke-width="1.4" stroke-dasharray="4 3"/>'
                    + _text(sx + 4, yy + 3, f"{ax} ↔ node {other}", "small", extra=f' fill="{color}"') + "</g>")
    if not all_links and rm.nodes > 1:
        body.append(_text(box["left"], height - 4, "no group crosses a node: nodes exchange nothing but "
                                                   "what the data loader sends", "muted small"))
        height += 8
    if all_links:
        legend_y = 48
        crossing = sorted({a for axes in all_links.values() for a in axes}, key=lambda a: "pp dp cp tp ep".find(a))
        x = arc_x0 + 8
        body.append(_text(x, legend_y - 8, f"between nodes ({link}):", "small muted"))
        for ax in crossing:
            body.append(f'<rect x="{x}" y="{legend_y - 2}" width="10" height="4" fill="{AXIS_COLORS.get(ax, "#555")}"/>'
                        + _text(x + 14, legend_y + 3, ax, "small"))
            x += 40
    return width, height


def rm_link_name(plan) -> str:
    ln = plan.cluster.inter_node
    return f"{ln.kind}" if ln is not None else "inter_node"


def _node_links(rm) -> dict[tuple[int, int], list[str]]:
    """{(node a, node b): axes} for the node pairs that hold consecutive members of a group."""
    out: dict[tuple[int, int], list[str]] = {}
    axes = [a for a in ("pp", "dp", "cp", "tp") if rm.sizes[a] > 1 and rm.crosses_node(a)]
    if rm.ep > 1 and rm.crosses_node("ep"):
        axes.append("ep")
    g = rm.gpus_per_node
    for ax in axes:
        nodes = rm.groups(ax) // g
        a, b = nodes[:, :-1].ravel(), nodes[:, 1:].ravel()
        for x, y in {(int(min(x, y)), int(max(x, y))) for x, y in zip(a, b) if x != y}:
            lst = out.setdefault((x, y), [])
            if ax not in lst:
                lst.append(ax)
    return out


# ============================================================================ schedule

def schedule_microbatches(pipeline: str, pp: int, microbatches: int, virtual_stages: int = 1,
                          limit: int | None = None) -> int:
    """How many microbatches to draw: all of them when few, else the fewest the schedule accepts
    from max(2·pp, 8) up, which shows warm-up, steady state and cool-down."""
    from parc.model import schedules as S

    want = limit if limit is not None else max(2 * pp, 8)
    if microbatches <= want:
        return microbatches
    for m in range(want, microbatches + 1):
        if S.check(pipeline, pp, m, virtual_stages) is None:
            return m
    return microbatches


def _serving_frame(pp: int, microbatches: int | None) -> tuple:
    """The slots, counts, shares and captions of a serving pipeline's picture: each batch in
    flight passes stage 0, 1, ... in turn; a stage takes the next batch as soon as it hands one
    on, so the pipeline is full once pp batches are in flight."""
    from parc.model import schedules as S

    m = microbatches if microbatches is not None else 2 * pp
    slots = [[S.Slot(S.Action("F", j, r), r, float(r + j), float(r + j + 1)) for j in range(m)]
             for r in range(pp)]
    drawn = S.bubble_fraction(slots)
    title = f"Serving pipeline: pp = {pp}, forward passes only (no backward), {count(m, 'batch')}"
    sub = (f"unit cost: F = 1 per stage; each batch passes the stages in turn, the next right behind "
           f"it; idle (hatched) = {drawn * 100:.1f}% of pp × span while the pipeline fills and drains")
    # a serving plan has no training step to idle in (explain: 0)
    return slots, m, m, S.makespan(slots), 0.0, drawn, pp, title, sub, (("F", "forward"),)


def _training_frame(plan, microbatches: int | None) -> tuple | str:
    """The slots, counts, shares and captions of a training schedule's picture (or the picture
    saying why it cannot be drawn). The plan's idle share is stated beside the picture's when
    the picture shows fewer microbatches than the plan runs."""
    from parc.model import schedules as S

    pp, sch = plan.mesh.pp, plan.schedule
    v = sch.virtual_stages
    total_m = sch.microbatches or 0
    m = schedule_microbatches(sch.pipeline, pp, total_m, v) if microbatches is None else microbatches
    why = S.check(sch.pipeline, pp, m, v)
    bubble = S.bubble(sch.pipeline, pp, total_m, v)
    if why:
        body = [_text(16, 24, f"Pipeline schedule: {sch.pipeline}", "title"),
                _text(16, 46, f"cannot be drawn: {why}; the plan idles {bubble * 100:.2f}% of each step",
                      "muted small")]
        return _svg("schedule", 640, 64, body, f"Pipeline schedule {sch.pipeline}: {why}",
                    attrs=f' data-pp="{pp}" data-blocks="0" data-bubble="{bubble!r}"')
    slots = S.timeline(sch.pipeline, pp, m, v)
    drawn = S.bubble(sch.pipeline, pp, m, v)
    nstages = pp * S.stages_per_rank(sch.pipeline, v)
    shown_m = (count(m, "microbatch") if m == total_m
               else f"{m} of {count(total_m, 'microbatch')} (the steady state repeats)")
    origin = "torch" if S.in_torch(sch.pipeline) else "deepseek-ai/DualPipe"
    title = (f"Pipeline schedule {sch.pipeline} ({origin} {S.torch_schedule_name(sch.pipeline, v)}): pp = {pp}"
             + (f", {nstages // pp} stages per rank" if nstages > pp else "") + f", {shown_m}")
    idle = (f"idle (hatched) = {bubble * 100:.1f}% of pp × step" if m == total_m else
            f"the plan idles {bubble * 100:.2f}% of each step; idle (hatched) = {drawn * 100:.1f}% of this "
            f"picture, which shows {m} of the plan's {total_m} microbatches")
    sub = f"unit costs: F = 1, B = 2 (B = 1 and W = 1 when split); {idle}"
    legend = (("F", "forward"), ("B", "backward"), ("W", "weight grads"))
    return slots, m, total_m, S.makespan(slots), bubble, drawn, nstages, title, sub, legend


def schedule(plan, microbatches: int | None = None) -> str:
    """The pipeline schedule per rank as a time line under unit costs (F = 1, B = 2, or B = 1
    and W = 1 when the backward is split): one row per pipeline rank, F/B/W blocks numbered by
    microbatch and shaded by virtual stage, idle time hatched. A serving plan runs forward
    passes only: its batches flow through the stages with no backward."""
    from parc.model import schedules as S

    pp = plan.mesh.pp
    sch = plan.schedule
    serve = plan.mode == "serve"
    v = 1 if serve else sch.virtual_stages
    if pp <= 1:
        what = ("runs the forward passes of the whole model" if serve
                else "runs forward and backward of the whole model")
        body = [_text(16, 24, "Pipeline schedule", "title"),
                _text(16, 46, f"pp = 1: no pipeline parallelism, so every GPU {what} with no pipeline "
                              "bubble.", "muted small")]
        return _svg("schedule", 640, 64, body, "Pipeline schedule: none (pp = 1)",
                    attrs=' data-pp="1" data-blocks="0" data-bubble="0.0"')
    frame = _serving_frame(pp, microbatches) if serve else _training_frame(plan, microbatches)
    if isinstance(frame, str):
        return frame
    slots, m, total_m, span, bubble, drawn, nstages, title, sub, legend = frame
    left, top, row_h, gap = 70, 64, 26, 6
    unit = max(6.0, min(28.0, 1100.0 / max(span, 1.0)))
    width = left + span * unit + 30
    height = top + pp * (row_h + gap) + 46
    body: list[str] = []
    body.append(_text(16, 22, title, "title"))
    body.append(_text(16, 40, sub, "muted small"))
    body.append('<defs><pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
                'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f3f3"/>'
                '<line x1="0" y1="0" x2="0" y2="6" stroke="#c9c9c9" stroke-width="2"/></pattern></defs>')
    n_blocks = 0
    for r, rank_slots in enumerate(slots):
        y = top + r * (row_h + gap)
        body.append(_text(left - 8, y + row_h / 2 + 4, f"rank {r}", "small", "end"))
        body.append(f'<g class="rank" data-rank="{r}">')
        t = 0.0
        for s in sorted(rank_slots, key=lambda s: s.start):
            if s.start > t + 1e-9:
                body.append(_idle(left + t * unit, y, (s.start - t) * unit, row_h, r, t, s.start))
            a = s.action
            kind = a.kind
            split = a.split
            style = "loop" if serve else S.placement_style(sch.pipeline, v)
            vs = (0 if serve else a.stage // pp if style == "loop"
                  else int(a.microbatch >= m // 2) if style == "dual"       # DualPipe: the direction
                  else (0 if a.stage < pp else 1))
            shade = _shade(KIND_COLORS[kind], vs, nstages // pp)
            x, w = left + s.start * unit, (s.end - s.start) * unit
            label = f"{a.microbatch}"
            tip = (f"rank {r}: {'B (input grads)' if split else kind} of {'batch' if serve else 'microbatch'} "
                   f"{a.microbatch}, "
                   f"stage {a.stage}; t = {s.start:g}–{s.end:g}")
            body.append(
                f'<rect class="block {kind}" data-rank="{r}" data-kind="{kind}" data-microbatch="{a.microbatch}" '
                f'data-stage="{a.stage}" data-start="{s.start:g}" data-end="{s.end:g}" x="{x:.1f}" y="{y}" '
                f'width="{max(w - 0.8, 0.5):.1f}" height="{row_h}" rx="2" fill="{shade}"><title>{_t(tip)}</title></rect>')
            if w >= 11:
                body.append(_text(x + w / 2, y + row_h / 2 + 3.5, label, "small", "middle",
                                  extra=' fill="#fff" style="fill:#fff"'))
            n_blocks += 1
            t = max(t, s.end)
        if t < span - 1e-9:
            body.append(_idle(left + t * unit, y, (span - t) * unit, row_h, r, t, span))
        body.append("</g>")
    note = ("" if nstages <= pp else f"darker: microbatches {m // 2}–{m - 1}, fed at rank {pp - 1}"
            if S.placement_style(sch.pipeline, v) == "dual" else "darker: later virtual stage")
    body += _time_axis_and_legend(left, top + pp * (row_h + gap) + 4, span, unit, legend, note)
    return _svg("schedule", max(width, 620, _min_width(title), 32 + 6.2 * len(sub)), height, body, title,
                attrs=f' data-pp="{pp}" data-microbatches="{m}" data-plan-microbatches="{total_m}" data-blocks="{n_blocks}" '
                      f'data-bubble="{bubble!r}" data-drawn-bubble="{drawn!r}" '
                      f'data-mode="{"serve" if serve else "train"}"')


def _time_axis_and_legend(left: float, ay: float, span: float, unit: float, legend, note: str) -> list[str]:
    """The schedule's time axis at height ``ay`` and, below it, the legend of block kinds."""
    body = [f'<line x1="{left}" y1="{ay}" x2="{left + span * unit:.1f}" y2="{ay}" stroke="#888"/>']
    step = max(1, int(round(span / 10)))
    for k in range(0, int(span) + 1, step):
        x = left + k * unit
        body.append(f'<line x1="{x:.1f}" y1="{ay}" x2="{x:.1f}" y2="{ay + 4}" stroke="#888"/>'
                    + _text(x, ay + 14, k, "tiny muted", "middle"))
    lx, ly = left, ay + 30
    for kind, name in legend:
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{KIND_COLORS[kind]}"/>'
                    + _text(lx + 16, ly, f"{kind} {name}", "small"))
        lx += 110
    body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="url(#idle-hatch)" stroke="#bbb"/>'
                + _text(lx + 16, ly, "idle", "small"))
    if note:
        body.append(_text(lx + 60, ly, note, "small muted"))
    return body


def _idle(x, y, w, h, rank, t0, t1) -> str:
    return (f'<rect class="idle" data-rank="{rank}" data-start="{t0:g}" data-end="{t1:g}" x="{x:.1f}" y="{y}" '
            f'width="{w:.1f}" height="{h}" fill="url(#idle-hatch)"/>')


def _shade(color: str, level: int, levels: int) -> str:
    """``color`` darkened for later virtual stages."""
    if levels <= 1 or level <= 0:
        return color
    f = 1.0 - 0.45 * level / max(levels - 1, 1)
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"#{int(r * f):02x}{int(g * f):02x}{int(b * f):02x}"


# ============================================================================ memory

def memory(plan, estimate=None) -> str:
    """Per-GPU memory as stacked bars against the GPU's capacity, one bar per pipeline stage."""
    if estimate is None:
        from parc.cost.estimate import estimate as _estimate

        estimate = _estimate(plan)
    if plan.pools and not isinstance(estimate, dict):
        from parc.report.svg_serve import pools_picture

        return pools_picture(plan, "memory", memory, estimate)
    est = _as_dict(estimate)
    stages = est.get("stages") or [{"stage": 0, "memory": est["memory_per_gpu"], "layers": plan.model.layers}]
    parts = [p for p in MEMORY_PARTS if any((s["memory"].get(p) or 0) > 0 for s in stages)]
    cap = max(s["memory"]["capacity"] for s in stages)
    top_val = max(cap, max(s["memory"]["total"] for s in stages)) * 1.08
    n = len(stages)
    left, top, plot_h = 64, 58, 260
    bar_w = max(8, min(56, 760 // max(n, 1) - 8))
    gap = max(4, min(24, bar_w // 2))
    width = left + n * (bar_w + gap) + 170
    height = top + plot_h + 48
    body: list[str] = []
    gpu = plan.cluster.gpu.name
    title = (f"Memory per GPU by pipeline stage ({count(n, 'stage')}) against the "
             f"{gpu}'s {nbytes(cap)}")
    body.append(_text(16, 22, title, "title"))
    most = est.get("most_loaded_stage", 0)
    body.append(_text(16, 40, f"the most loaded is stage {most}: "
                              f"{nbytes(stages[most]['memory']['total'])} "
                              f"({percent(stages[most]['memory']['total'] / cap)} of capacity)", "muted small"))

    def ypos(v):
        return top + plot_h - v / top_val * plot_h

    # grid
    tick = _nice_step(top_val / 1e9 / 5)
    k = 0.0
    while k * 1e9 <= top_val:
        yy = ypos(k * 1e9)
        body.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + n * (bar_w + gap):.1f}" y2="{yy:.1f}" '
                    f'stroke="#eee"/>' + _text(left - 6, yy + 3, f"{k:g} GB", "tiny muted", "end"))
        k += tick
    for i, s in enumerate(stages):
        x = left + gap / 2 + i * (bar_w + gap)
        mem, stage = s["memory"], s["stage"]
        over = mem["total"] > mem["capacity"]
        body.append(f'<g class="bar" data-stage="{s["stage"]}" data-total="{mem["total"]:.0f}" '
                    f'data-capacity="{mem["capacity"]:.0f}" data-over="{str(over).lower()}">')
        base = 0.0
        for p in parts:
            v = float(mem.get(p) or 0)
            if v <= 0:
                continue
            y1, y0 = ypos(base + v), ypos(base)
            body.append(f'<rect class="segment {p}" data-part="{p}" data-bytes="{v:.0f}" x="{x:.1f}" '
                        f'y="{y1:.1f}" width="{bar_w}" height="{max(y0 - y1, 0.5):.1f}" fill="{PART_COLORS[p]}">'
                        f"<title>{_t(f'stage {stage}: {p} {nbytes(v)}')}</title></rect>")
            base += v
        body.append(_text(x + bar_w / 2, ypos(base) - 4, f"{base / 1e9:.0f}", "tiny", "middle")
                    if bar_w >= 14 else "")
        body.append(_text(x + bar_w / 2, top + plot_h + 14, s["stage"], "tiny muted", "middle")
                    if n <= 48 or i % max(1, n // 24) == 0 else "")
        body.append("</g>")
    cy = ypos(cap)
    body.append(f'<line class="capacity" data-bytes="{cap:.0f}" x1="{left - 2}" y1="{cy:.1f}" '
                f'x2="{left + n * (bar_w + gap) + 2:.1f}" y2="{cy:.1f}" stroke="#d62728" stroke-width="1.5" '
                f'stroke-dasharray="6 3"/>'
                + _text(left + n * (bar_w + gap) + 6, cy + 3, f"capacity {nbytes(cap)}", "small",
                        extra=' fill="#d62728" style="fill:#d62728"'))
    body.append(_text(left + n * (bar_w + gap) / 2, top + plot_h + 30, "pipeline stage", "small muted", "middle"))
    lx, ly = left + n * (bar_w + gap) + 16, max(top + 30, cy + 24)
    for p in reversed(parts):
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{PART_COLORS[p]}"/>'
                    + _text(lx + 16, ly, p.replace("_", " "), "small"))
        ly += 16
    return _svg("memory", max(width, 520, _min_width(title)), height, body, title,
                attrs=f' data-stages="{n}" data-capacity="{cap:.0f}"')


def _nice_step(x: float) -> float:
    import math

    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if x <= m * e:
            return m * e
    return 10 * e


DRAWINGS = {"mesh": mesh, "schedule": schedule, "memory": memory}


def draw(plan, what: str, estimate=None) -> str:
    if what == "memory":
        return memory(plan, estimate)
    if what == "timeline":
        from parc.report.svg_serve import timeline

        return timeline(plan, estimate)
    if what not in DRAWINGS:
        raise ValueError(f"unknown drawing {what!r}; expected one of {', '.join(DRAWINGS)}")
    return DRAWINGS[what](plan)
