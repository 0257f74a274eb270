"""parc explain: the math behind a plan — rank map, memory, communication, bubble, step time."""
from __future__ import annotations

import sys

from parc.words import count, plural

DESCRIPTION = ("Show the numbers behind a plan: where ranks land, what each GPU holds, what each axis "
               "sends and on which link, the pipeline bubble, step time and MFU.")
EPILOG = """exit status: 0 shown, 1 the spec has errors (printed instead; with --format json, as the
`diagnostics` of a JSON object without the estimate), 2 usage or I/O failure

examples:
  parc explain examples/llama3-70b-train.par
  parc explain examples/llama3-70b-serve.par --format json
  parc explain spec.par --html plan.html"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file to explain (`-`: read it from stdin)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    from parc.cli.targets import add_target

    add_target(p, help="also apply this target's rules before explaining (repeatable)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")
    p.add_argument("--html", metavar="FILE", help="also write the explanation as an HTML page")


def run(args) -> int:
    from parc.language.diagnostics import ERROR, render_text, use_color
    from parc.cli.common import load_spec, read_error, unread

    try:
        r = load_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if (code := unread(r)) is not None:
        return code
    errors = [d for d in r.diagnostics if d.severity == ERROR]
    if (errors or r.plan is None) and args.format == "json":
        import json

        from parc.language.diagnostics import summarize

        print(json.dumps({"file": r.file, "diagnostics": [d.to_json() for d in r.diagnostics],
                          "summary": summarize(r.diagnostics, 1)}, indent=2))
        return 1
    if errors or r.plan is None:
        text = render_text(r.diagnostics, r.sources, color=use_color(sys.stderr))
        sys.stderr.write(text + ("" if text.endswith("\n") else "\n"))
        sys.stderr.write(f"parc: cannot explain {args.spec}: it has {count(len(errors), 'error')}\n")
        return 1
    page = None
    if args.html:
        try:
            from parc.report.html import explain_page
        except ImportError as e:
            if e.name not in ("parc.report", "parc.report.html"):
                raise
            print("parc: --html needs parc.report.html, which this installation lacks", file=sys.stderr)
            return 2
    from parc.cost.estimate import estimate

    est = estimate(r.plan)
    if args.html:
        page = explain_page(r.plan, est)
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as e:
            print(f"parc: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
            return 2
    if args.format == "json":
        import json

        out = est.to_json()
        out["file"] = r.file
        out["diagnostics"] = [d.to_json() for d in r.diagnostics]
        print(json.dumps(out, indent=2))
    else:
        if r.diagnostics:
            text = render_text(r.diagnostics, r.sources, color=use_color(sys.stderr))
            sys.stderr.write(text + ("" if text.endswith("\n") else "\n"))
        print(render(r.plan, est, r.file))
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


# --- numbers in the user's units --------------------------------------------------------------------

def fmt_bytes(n: float) -> str:
    """Decimal units (1 GB = 1e9 bytes), as GPU datasheets print them."""
    n = float(n)
    for div, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(n: float) -> str:
    return fmt_bytes(n) + "/s"


def fmt_time(t: float) -> str:
    if t <= 0:
        return "0"
    if t < 1e-6:
        return f"{t * 1e9:.3g} ns"
    if t < 1e-3:
        return f"{t * 1e6:.3g} µs"
    if t < 1:
        return f"{t * 1e3:.3g} ms"
    if t < 600:
        return f"{t:.3g} s"
    return f"{t / 60:.3g} min"


def fmt_count(n: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suf}"
    return f"{n:g}"


def fmt_flops(n: float) -> str:
    for div, suf in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G")):
        if n >= div:
            return f"{n / div:.3g} {suf}FLOP"
    return f"{n:.3g} FLOP"


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


# --- the text report --------------------------------------------------------------------------------

def render(plan, est, file: str) -> str:
    from parc.report.table import table

    m, cl, mesh = plan.model, plan.cluster, plan.mesh
    out = []
    what = "training" if plan.mode == "train" else "serving"
    out.append(f"{file}: {what} {m.name} ({fmt_count(est.params_total)} parameters) on {cl.nodes} × "
               f"{cl.gpus_per_node} {cl.gpu.name} ({count(est.world_size, 'GPU')}, {fmt_bytes(cl.gpu.memory)} each)")
    out.append("")

    # mesh and rank map
    rm = est.rank_map
    out.append(f"Mesh and rank map (order {', '.join(rm['order'])}; the last axis is innermost; "
               f"node = rank // {rm['gpus_per_node']})")
    rows = []
    for ax, a in rm["axes"].items():
        first = a["first_group"]
        shown = ", ".join(str(x) for x in first) + (", …" if a["size"] > len(first) else "")
        rows.append([ax, a["size"], a["stride"] if a["stride"] is not None else "-", a["groups"],
                     a["nodes_spanned"], a["link"] if a["size"] > 1 else "-", shown])
    out.append(_indent(table(["axis", "size", "stride", "groups", "nodes/group", "link", "first group"],
                             rows, "lrrrrll")))
    inside = [ax for ax, a in rm["axes"].items() if a["size"] > 1 and a["nodes_spanned"] == 1]
    across = [ax for ax, a in rm["axes"].items() if a["size"] > 1 and a["nodes_spanned"] > 1]
    line = []
    if inside:
        line.append(f"{', '.join(x.upper() for x in inside)} {plural(len(inside), 'stays', 'stay')} inside a node")
    if across:
        line.append(f"{', '.join(x.upper() for x in across)} {plural(len(across), 'crosses', 'cross')} nodes")
    if line:
        out.append("  " + "; ".join(line) + ".")
    out.append("")

    # parameters and memory
    st = est.stages[est.most_loaded_stage]
    where = f"pipeline stage {st.stage} of {mesh.pp}, " if mesh.pp > 1 else ""
    out.append(f"Memory per GPU ({where}the most loaded: {count(st.layers, 'layer')}, "
               f"{fmt_count(st.params)} parameters)")
    mem = st.memory
    rows = [["weights", fmt_bytes(mem.weights), _weights_note(plan, est)]]
    if plan.mode == "train":
        sb = est.state_bytes
        z = plan.train.zero
        rows.append(["grads", fmt_bytes(mem.grads),
                     f"{plan.train.main_grads} main grads, {sb.grads:g} B/param" + (" / dp (zero ≥ 2)" if z >= 2 else "")])
        rows.append(["optimizer", fmt_bytes(mem.optimizer),
                     f"{plan.train.optimizer}, {sb.optimizer:g} B/param" + (" / dp (zero ≥ 1)" if z >= 1 else "")])
        rows.append(["activations", fmt_bytes(mem.activations),
                     f"{fmt_bytes(est.activation_bytes_per_layer)}/layer × {count(st.layers, 'layer')} × "
                     f"{st.inflight:g} {plural(st.inflight, 'microbatch')} in flight "
                     f"({plan.train.recompute} recompute"
                     + (", SP" if plan.train.sequence_parallel and mesh.tp > 1 else "") + ")"])
    else:
        rows.append(["kv cache", fmt_bytes(mem.kv_cache),
                     f"{count(est.kv_capacity_tokens, 'token', sep=True)} × {est.kv_bytes_per_token:,} B/token"])
    free = mem.capacity - mem.total
    rows.append(["total", fmt_bytes(mem.total),
                 f"of {fmt_bytes(mem.capacity)} ({_pct(mem.total / mem.capacity)}), "
                 + (f"{fmt_bytes(free)} free" if free >= 0 else f"{fmt_bytes(-free)} OVER")])
    out.append(_indent(_rows(rows, "lrl")))
    if len(est.stages) > 1:
        rows = [[s.stage, s.layers, fmt_count(s.params), fmt_bytes(s.memory.total),
                 f"{s.inflight:g}" if plan.mode == "train" else "-"] for s in est.stages]
        out.append("")
        out.append(_indent(table(["stage", "layers", "params", "memory", "in flight"], rows, "rrrrr")))
    if plan.mode == "serve":
        srv = plan.serve
        out.append("")
        out.append(f"KV cache: {est.kv_bytes_per_token:,} bytes per token per GPU; "
                   f"{count(est.kv_capacity_tokens, 'token', sep=True)} fit at gpu_memory_utilization = "
                   f"{srv.gpu_memory_utilization:g}, i.e. {count(est.max_concurrent_seqs, 'concurrent sequence')} "
                   f"of max_model_len = {srv.max_model_len:,}")
    out.append("")

    # communication
    per = "per step" if plan.mode == "train" else "per decoded token"
    out.append(f"Communication per GPU {per}")
    rows = []
    for ax in ("tp", "cp", "ep", "pp", "dp"):
        ln = est.comm_link.get(ax)
        if ln is None:
            continue
        bw = est.link_bandwidth.get(ln, 0)
        rows.append([ax, _comm_what(plan, ax), fmt_bytes(est.comm_bytes[ax]),
                     f"{ln} ({est.link_kind.get(ln)})", fmt_rate(bw), fmt_time(est.comm_time[ax])])
    if rows:
        out.append(_indent(table(["axis", "collective", "bytes", "link", "bandwidth", "time"], rows, "llrlrr")))
    else:
        out.append("  none: every axis has size 1")
    notes = list(est.notes)
    if plan.mode == "train" and "train" not in plan.spans:
        t = plan.train
        notes.append(f"the spec has no `train` block; memory and time assume the defaults (optimizer = "
                     f"{t.optimizer}, zero = {t.zero}, recompute = {t.recompute}) and `parc check` does "
                     f"not judge them")
    for n in notes:
        out.append(f"  note: {n}")
    out.append("")

    if plan.mode == "train":
        sch = plan.schedule
        v = f", {sch.virtual_stages} virtual stages" if sch.virtual_stages > 1 else ""
        out.append("Schedule and time")
        rows = [
            ["pipeline", f"{sch.pipeline}{v}, {count(est.microbatches, 'microbatch')} of {sch.micro_batch}"],
            ["bubble", f"{_pct(est.bubble_fraction)} of the step idle"
                       + (f" (pp = {mesh.pp})" if mesh.pp > 1 else " (no pipeline)")],
            ["tokens/step", f"{est.tokens_per_step:,}"],
            ["FLOPs/step", f"{fmt_flops(est.model_flops_per_step)} model, "
                           f"{fmt_flops(est.hardware_flops_per_step)} with recompute"],
            ["compute", f"{fmt_time(est.compute_time)} at {_pct(est.efficiency)} of "
                        f"{fmt_count(cl.gpu.flops)}FLOP/s per GPU"],
            ["step time", fmt_time(est.step_time)],
            ["MFU", _pct(est.mfu)],
            ["tokens/s", f"{est.tokens_per_second:,.0f} ({est.tokens_per_second / est.world_size:,.0f} per GPU)"],
        ]
        out.append(_indent(_rows(rows, "ll")))
    return "\n".join(out).rstrip() + "\n"


def _weights_note(plan, est) -> str:
    from parc.cost.estimate import dtype_bytes

    dt = plan.train.precision if plan.mode == "train" else plan.model.dtype
    z3 = " / dp (zero 3)" if plan.mode == "train" and plan.train.zero >= 3 else ""
    return f"{dt}, {dtype_bytes(dt)} B/param{z3}"


def _comm_what(plan, ax: str) -> str:
    sp = plan.mode == "train" and plan.train.sequence_parallel
    if ax == "tp":
        return "all-gather + reduce-scatter per layer" if sp else "all-reduce per layer"
    if ax == "cp":
        return "ring K/V exchange per layer"
    if ax == "ep":
        return "all-to-all per MoE layer"
    if ax == "pp":
        return "send/recv per microbatch" if plan.mode == "train" else "send/recv of activations"
    z = plan.train.zero if plan.mode == "train" else 0
    return {0: "gradient all-reduce", 1: "grad reduce-scatter + param all-gather",
            2: "grad reduce-scatter + param all-gather", 3: "param all-gather ×2 + grad reduce-scatter"}[z]


def _indent(s: str) -> str:
    return "\n".join("  " + ln for ln in s.splitlines())


def _rows(rows, align: str) -> str:
    """Aligned rows without a header."""
    from parc.report.table import table

    return "\n".join(table([""] * len(align), rows, align).splitlines()[2:])
