"""What ``parc plan`` prints: the ranked table, why the runner-up lost, and the best plan as a spec."""
from __future__ import annotations

from decimal import Decimal

from parc.model.plan import GPU, Model
from parc.model.fields import BLOCKS
from parc.planner.inputs import Problem
from parc.planner.plans import Candidate, placement_links, stage_split, written
from parc.planner.search import SearchResult

# --- numbers as spec text ------------------------------------------------------------------------

_BYTES = (("TB", 10**12), ("TiB", 2**40), ("GB", 10**9), ("GiB", 2**30), ("MB", 10**6), ("MiB", 2**20),
          ("KB", 10**3))
_BW = (("TB/s", 10**12), ("GB/s", 10**9), ("Gb/s", 125 * 10**6), ("MB/s", 10**6), ("Mb/s", 125 * 10**3),
       ("KB/s", 10**3))
_FLOPS = (("PFLOPS", 10**15), ("TFLOPS", 10**12), ("GFLOPS", 10**9))


def _exact(x) -> Decimal:
    return Decimal(int(x)) if float(x).is_integer() else Decimal(repr(float(x)))


def quantity(x, units, base: str) -> str:
    """``x`` base units in spec syntax, exactly: a whole number below 10,000 of some unit
    (``450GB/s``, ``100Gb/s``), else at most three decimals (``362.5TFLOPS``), else whole base
    units (``85520809984B``)."""
    d = _exact(x)
    for unit, f in units:
        q = d / f
        if q == q.to_integral_value() and 1 <= q < 10000:
            return f"{int(q)}{unit}"
    for unit, f in units:
        q = d / f
        if 1 <= q < 10000 and q == q.quantize(Decimal("0.001")):
            return f"{format(q.normalize(), 'f')}{unit}"
    if d == d.to_integral_value():
        return f"{int(d)}{base}"
    return f"{format(d.normalize(), 'f')}{base}"


def _label(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


# --- blocks --------------------------------------------------------------------------------------

def model_block(m: Model) -> list[str]:
    """A ``model`` block that resolves to ``m``: ``from = preset`` plus what differs from it."""
    from parc.cost import estimate as costmodel
    from parc.planner.inputs import load_model

    lines = [f"model {_label(m.name)} {{"]
    base = None
    if m.preset:
        try:
            base = load_model(m.preset)
        except Exception:   # a preset that no longer loads: write every field
            base = None
    if base is not None:
        lines.append(f"  from = {m.preset}")
    keys = [k for k in BLOCKS["model"] if k != "from"]
    for k in keys:
        v = getattr(m, k)
        if base is not None:
            if k == "params":
                if v == costmodel.param_count(m):
                    continue
            elif getattr(base, k) == v:
                continue
        else:
            if k == "params" and v == costmodel.param_count(m):
                continue
            if k == "head_dim" and (v is None or v == m.hidden // m.heads):
                continue
            if v is None or (k in _MODEL_DEFAULTS and _MODEL_DEFAULTS[k] == v):
                continue
        if k in ("moe_ffn_hidden", "top_k", "shared_experts", "moe_every") and not m.experts:
            continue
        lines.append(f"  {k} = {_val(v)}")
    lines.append("}")
    return lines


_MODEL_DEFAULTS = {"dtype": "bf16", "tied_embeddings": False, "mlp": "swiglu", "norm": "rmsnorm",
                   "position": "rope", "bias": False, "experts": 0, "shared_experts": 0, "moe_every": 1}


def _gpu_preset(g: GPU) -> bool:
    from parc.resolve.resolver import presets

    p = presets("gpus").get(g.name)
    if not p:
        return False
    return (int(p["memory"]) == g.memory and float(p["flops"]) == g.flops
            and float(p.get("hbm_bandwidth", 0)) == g.hbm_bandwidth
            and float(p.get("nvlink_bandwidth", 0)) == g.nvlink_bandwidth
            and float(p.get("pcie_bandwidth", 0)) == g.pcie_bandwidth)


def cluster_block(pr: Problem) -> list[str]:
    cl = pr.cluster
    lines = [f"cluster {_label(cl.name)} {{", f"  nodes = {cl.nodes}", f"  gpus_per_node = {cl.gpus_per_node}"]
    g = cl.gpu
    if _gpu_preset(g):
        lines.append(f"  gpu = {g.name}")
    else:
        lines += ["  gpu {", f"    memory = {quantity(g.memory, _BYTES, 'B')}",
                  f"    flops = {quantity(g.flops, _FLOPS, 'FLOPS')}"]
        for k in ("hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth"):
            if getattr(g, k):
                lines.append(f"    {k} = {quantity(getattr(g, k), _BW, 'B/s')}")
        lines.append("  }")
    for k in ("intra_node", "inter_node"):
        ln = getattr(cl, k)
        if ln is not None:
            lines.append(f"  {k} = {ln.kind}({quantity(ln.bandwidth, _BW, 'B/s')})")
    lines.append("}")
    return lines


def plan_text(res: SearchResult, i: int = 0) -> str:
    """Reported plan ``i`` as a complete, formatted spec that ``parc check`` accepts."""
    from parc.language.fmt import format_text

    pr, c = res.problem, res.plans[i]
    out = [f"# parc plan: rank {c.rank} of {res.valid:,} plans that fit ({res.candidates_evaluated:,} evaluated)",
           "# " + summary_line(pr, c), ""]
    out += model_block(pr.model) + [""] + cluster_block(pr) + [""]
    w = written(pr, c)
    out.append("mesh {")
    out += [f"  {ax} = {getattr(c, ax)}" for ax in w["mesh"]]
    out += ["}", ""]
    if "placement" in w:
        out.append("placement {")
        for ax, where in placement_links(pr, c).items():
            out.append(f"  {ax} on {where}")
        if c.layers == "balanced":
            out.append("  layers = balanced")
        elif c.layers == "explicit":
            lay = stage_split(pr, "explicit", c.pp * c.virtual_stages) or []
            out.append(f"  layers = [{', '.join(str(x) for x in lay)}]")
        for mp in pr.placement.modules:
            out.append(f"  {_label(mp.pattern)} = " +
                       ("replicate" if mp.style == "replicate" else f"{mp.style}({mp.axis})"))
        out += ["}", ""]
    values = {"schedule": {"pipeline": c.pipeline, "virtual_stages": c.virtual_stages, "micro_batch": c.micro_batch,
                           "global_batch": c.global_batch},
              "train": {"zero": c.zero, "sequence_parallel": c.sequence_parallel, "recompute": c.recompute},
              "serve": {"max_num_seqs": c.max_num_seqs}}
    for blk in ("schedule", "train", "serve"):
        if blk not in w:
            continue
        src = pr.train if blk == "train" else pr.serve
        out.append(blk + " {")
        for k in w[blk]:
            v = values[blk][k] if k in values[blk] else getattr(src, k)
            out.append(f"  {k} = {_val(v)}")
        out += ["}", ""]
    for name in pr.targets:
        text = pr.block_text.get(f"target.{name}")
        if text:
            out += [text, ""]
        else:
            out += [f"target {name} {{"] + [f"  {k} = {_setting(v)}" for k, v in pr.targets[name].settings.items()] \
                + ["}", ""]
    return format_text("\n".join(out).rstrip() + "\n", "best.par")


def _setting(v) -> str:
    if isinstance(v, str):
        return _label(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_setting(x) for x in v) + "]"
    return _val(v)


# --- text output ---------------------------------------------------------------------------------

def gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def secs(x: float) -> str:
    if x == 0:
        return "0"
    if x >= 100:
        return f"{x:.0f}s"
    if x >= 1:
        return f"{x:.2f}s"
    if x >= 1e-3:
        return f"{x * 1e3:.1f}ms"
    return f"{x * 1e6:.0f}us"


def rate(x: float) -> str:
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suf}"
    return f"{x:.0f}"


def summary_line(pr: Problem, c: Candidate) -> str:
    mesh = " ".join(f"{ax}={getattr(c, ax)}" for ax in pr.order) + (f" ep={c.ep}" if c.ep > 1 else "") \
        + (f" etp={c.etp}" if c.etp > 1 else "")
    mem = f"{gb(c.memory_total)}/{gb(c.memory_capacity)} GB per GPU"
    if pr.mode == "train":
        return (f"{mesh}; step {secs(c.step_time)}, {rate(c.tokens_per_second)} tokens/s, MFU {c.mfu:.1%}, "
                f"bubble {c.bubble:.1%}, {mem}")
    return (f"{mesh}; {rate(c.tokens_per_second)} tokens/s at {c.max_num_seqs} sequences per replica, "
            f"{secs(c.latency)} per token, {mem}")


def lost_text(res: SearchResult, i: int) -> str:
    lost = res.lost_on(i)
    if lost is None:
        return ""
    what, by = lost
    if res.mode == "serve":
        return f"{what} ×{by:.2f}"
    if what == "tie":
        return "tie"
    return f"{what} +{secs(by)}"


def render_table(res: SearchResult) -> str:
    from parc.report.table import table

    pr = res.problem
    rows = []
    axes = [ax for ax in ("tp", "cp", "dp", "pp", "ep") if any(c.comm_time.get(ax, 0) for c in res.plans)]
    if pr.mode == "train":
        head = ["#", "tp", "pp", "dp", "cp"] + (["ep"] if pr.model.is_moe else []) + \
            ["schedule", "mb", "zero", "recompute", "sp", "mem GB", "free", "bubble"] + \
            [f"{ax} comm" for ax in axes] + ["step", "tokens/s", "MFU", "loses on"]
        for i, c in enumerate(res.plans):
            sched = "-" if c.pp == 1 else c.pipeline + (f"×{c.virtual_stages}" if c.virtual_stages > 1 else "")
            row = [c.rank, c.tp, c.pp, c.dp, c.cp] + ([c.ep] if pr.model.is_moe else []) + \
                [sched, c.micro_batch, c.zero, c.recompute, "on" if c.sequence_parallel else "off",
                 gb(c.memory_total), f"{c.headroom:.0%}", f"{c.bubble:.1%}"] + \
                [secs(c.comm_time.get(ax, 0.0)) for ax in axes] + \
                [secs(c.step_time), rate(c.tokens_per_second), f"{c.mfu:.1%}", lost_text(res, i) or "-"]
            rows.append(row)
        align = "r" * 5 + ("r" if pr.model.is_moe else "") + "lrrlrrrr" + "r" * len(axes) + "rrrl"
    else:
        head = ["#", "tp", "pp", "dp"] + (["ep"] if pr.model.is_moe else []) + \
            ["seqs", "mem GB", "free", "step", "latency/token", "tokens/s", "loses on"]
        for i, c in enumerate(res.plans):
            rows.append([c.rank, c.tp, c.pp, c.dp] + ([c.ep] if pr.model.is_moe else []) +
                        [c.max_num_seqs, gb(c.memory_total), f"{c.headroom:.0%}", secs(c.step_time),
                         secs(c.latency), rate(c.tokens_per_second), lost_text(res, i) or "-"])
        align = "rrrr" + ("r" if pr.model.is_moe else "") + "rrrrrrl"
    if any(c.warnings for c in res.plans):   # the rule warnings each plan raises (`parc rules CODE`)
        head.append("warnings")
        for row, c in zip(rows, res.plans):
            row.append(" ".join(c.warnings) or "-")
        align += "l"
    return table(head, rows, align)


def render_text(res: SearchResult) -> str:
    pr = res.problem
    m, cl = pr.model, pr.cluster
    if pr.mode == "train":
        what = (f"training {m.name} (seq_len {m.seq_len}, global_batch {pr.global_batch}"
                if pr.global_batch is not None else f"training {m.name} (seq_len {m.seq_len}, {pr.microbatches} "
                                                     f"microbatches") + ")"
    else:
        what = f"serving {m.name} (max_model_len {pr.serve.max_model_len})"
    lines = [f"{what} on {cl.name}: {cl.nodes} × {cl.gpus_per_node} {cl.gpu.name}",
             f"{res.candidates_evaluated:,} candidates evaluated ({res.costed:,} costed in full), "
             f"{res.valid:,} fit, in {res.seconds:.2f} s"]
    if not res.plans:
        lines.append("no plan fits: " + ("every candidate needs more memory than the GPUs have"
                                         if res.valid == 0 else "the rules refuse every candidate that fits"))
        return "\n".join(lines)
    lines += ["", render_table(res), ""]
    best = res.plans[0]
    lines.append("best: " + summary_line(pr, best))
    if len(res.plans) > 1:
        lines.append(runner_up(res))
    if res.rejected:
        codes = sorted({code for _, cs in res.rejected for code in cs})
        lines.append(f"{len(res.rejected)} higher-ranked candidate(s) skipped: the rules refuse them "
                     f"({', '.join(codes)})")
    return "\n".join(lines)


def runner_up(res: SearchResult) -> str:
    a, b = res.plans[0], res.plans[1]
    what, by = res.lost_on(1)
    if res.mode == "serve":
        gap = 1 - b.tokens_per_second / a.tokens_per_second if a.tokens_per_second else 0.0
        if what == "sequences in flight":
            why = (f"it keeps fewer sequences in flight ({b.dp} × {b.max_num_seqs} over {b.pp} stage(s), "
                   f"against {a.dp} × {a.max_num_seqs} over {a.pp})")
        else:
            why = f"its decode step is slower ({secs(b.step_time)} against {secs(a.step_time)})"
        return f"#2 serves {gap:.1%} fewer tokens/s than #1: {why}"
    if what == "tie":
        return "#2 ties with #1 on step time; #1 ranks first for using less memory or the simpler settings"
    gap = b.step_time / a.step_time - 1 if a.step_time else 0.0
    return f"#2 is {gap:.2%} slower than #1 ({secs(b.step_time)} against {secs(a.step_time)}): its {what} takes " \
           f"{secs(by)} more per step"
