"""What ``parc explain`` prints: the numbers behind a plan as text (rank map, memory,
communication, schedule and time) and as JSON. The HTML page is ``parc.report.html``."""
from __future__ import annotations

import json

from parc.printable import printable
from parc.report.term import indent, rows as aligned, table
from parc.units import flops, nbytes, number, percent, rate, seconds
from parc.words import count, plural


# --- JSON ------------------------------------------------------------------------------------------

def render_json(est, file: str, diagnostics) -> str:
    """The estimate as JSON, with the spec's file and its (non-error) diagnostics."""
    out = est.to_json()
    out["file"] = file
    out["diagnostics"] = [d.to_json() for d in diagnostics]
    return json.dumps(out, indent=2)


# --- text ------------------------------------------------------------------------------------------

def rank_map_rows(axes: dict) -> list[list]:
    """One row per mesh axis: size, stride, groups, nodes per group, link, first group."""
    out = []
    for ax, a in axes.items():
        first = a.get("first_group") or []
        shown = ", ".join(str(x) for x in first) + (", …" if a.get("size", 0) > len(first) else "")
        out.append([ax, a.get("size"), a.get("stride") if a.get("stride") is not None else "-", a.get("groups"),
                    a.get("nodes_spanned"), a.get("link") if a.get("size", 1) > 1 else "-", shown])
    return out


# The memory errors whose help names the smallest change that fits.
MEMORY_CODES = ("P401", "P402", "P403")


def render_text(plan, est, file: str, diagnostics=()) -> str:
    """The report: the plan in one line, then the rank map, memory, communication and (for
    training) the schedule and step time. A plan with errors is explained as written, under a
    line that says so; a memory error's fix is shown under the memory table."""
    m, cl = plan.model, plan.cluster
    what = "training" if plan.mode == "train" else "serving"
    out = [printable(f"{file}: {what} {m.name} ({number(est.params_total)} parameters) on {cl.nodes} × "
                     f"{cl.gpus_per_node} {cl.gpu.name} ({count(est.world_size, 'GPU')}, "
                     f"{nbytes(cl.gpu.memory)} each)")]
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        out.append(f"The spec has {count(len(errors), 'error')} ({', '.join(sorted({d.code for d in errors}))}, "
                   "listed above); the numbers below are the plan as written.")
    out.append("")
    memory = _memory(plan, est, est.serving if plan.mode == "serve" else None) if not plan.pools \
        else _pool_memory(plan, est)
    fixes = [d for d in errors if d.code in MEMORY_CODES]
    if fixes:
        memory[2:2] = [f"  does not fit ({d.code}): {d.help}" if d.help else f"  does not fit ({d.code})"
                       for d in fixes]   # right under the table (heading, table, ...)
    from parc.report import explain_serve

    if plan.pools:
        out += explain_serve.pool_lines(plan, est) + memory + _pool_sections(plan, est)
    else:
        out += _mesh(est) + memory + _communication(plan, est)
    if plan.mode == "train":
        out += _time(plan, est)
    else:
        out += explain_serve.speed_lines(plan, est)
    return "\n".join(out).rstrip() + "\n"


def _mesh(est) -> list[str]:
    rm = est.rank_map
    g = rm["gpus_per_node"]
    dom = rm.get("nvlink_domain", g)
    key, unit = ("nodes_spanned", "node") if dom == g else ("domains_spanned", "NVLink domain")
    out = [f"Mesh and rank map (order {', '.join(rm['order'])}; the last axis is innermost; "
           f"node = rank // {g}" + (f"; NVLink domain = rank // {dom}" if dom != g else "") + ")",
           indent(table(["axis", "size", "stride", "groups", "nodes/group", "link", "first group"],
                        rank_map_rows(rm["axes"]), "lrrrrll"))]
    inside = [ax for ax, a in rm["axes"].items() if a["size"] > 1 and a[key] == 1]
    across = [ax for ax, a in rm["axes"].items() if a["size"] > 1 and a[key] > 1]
    line = []
    if inside:
        line.append(f"{', '.join(x.upper() for x in inside)} {plural(len(inside), 'stays', 'stay')} inside a {unit}")
    if across:
        line.append(f"{', '.join(x.upper() for x in across)} {plural(len(across), 'crosses', 'cross')} {unit}s")
    if line:
        out.append("  " + "; ".join(line) + ".")
    gpus = rm.get("physical_gpu")
    if gpus is not None:
        moved = gpus != list(range(len(gpus)))
        out.append("  Physical GPU of each local rank" + (" (the launch sets this order on every node)" if moved
                                                          else "") + ": "
                   + ", ".join(f"{i}→GPU{g}" for i, g in enumerate(gpus)) + ".")
    return out + [""]


def _memory(plan, est, serving=None) -> list[str]:
    mesh = plan.mesh
    st = est.stages[est.most_loaded_stage]
    where = f"pipeline stage {st.stage} of {mesh.pp}, " if mesh.pp > 1 else ""
    out = [f"Memory per GPU ({where}the most loaded: {count(st.layers, 'layer')}, "
           f"{number(st.params)} parameters)"]
    mem = st.memory
    cells = [["weights", nbytes(mem.weights), _weights_note(plan)]] + _state_rows(plan, est, st)
    free = mem.capacity - mem.total
    cells.append(["total", nbytes(mem.total),
                  f"of {nbytes(mem.capacity)} ({percent(mem.total / mem.capacity)}), "
                  + (f"{nbytes(free)} free" if free >= 0 else f"{nbytes(-free)} OVER")])
    out.append(indent(aligned(cells, "lrl")))
    if len(est.stages) > 1:
        cells = [[s.stage, s.layers, number(s.params), nbytes(s.memory.total),
                  f"{s.inflight:g}" if plan.mode == "train" else "-"] for s in est.stages]
        out += ["", indent(table(["stage", "layers", "params", "memory", "in flight"], cells, "rrrrr"))]
    if plan.mode == "serve":
        from parc.report.explain_serve import kv_lines

        out += [""] + kv_lines(plan, est, serving)
    return out + [""]


def _pool_memory(plan, est) -> list[str]:
    """A disaggregated plan's memory: one GPU of each pool, as the plan one instance runs."""
    out = []
    for name, p in (est.serving.pools if est.serving else {}).items():
        out += [f"Pool {name}: {count(p['instances'], 'instance')} of {count(p['gpus_per_instance'], 'GPU')}, "
                "each:"] + _memory(p["plan"], p["estimate"])
    return out


def _pool_sections(plan, est) -> list[str]:
    """Each pool's rank map and communication, as the plan one of its instances runs."""
    out = []
    for name, p in (est.serving.pools if est.serving else {}).items():
        out += [f"Pool {name}, one instance:"] + _mesh(p["estimate"]) + _communication(p["plan"], p["estimate"])
    return out


def _state_rows(plan, est, st) -> list[list]:
    """The rows between weights and total: training state, or the serving KV cache."""
    mem = st.memory
    if plan.mode != "train":
        from parc.report.explain_serve import memory_rows

        return memory_rows(plan, est, st)
    sb, t = est.state_bytes, plan.train
    sp = ", SP" if t.sequence_parallel and plan.mesh.tp > 1 else ""
    return _training_rows(plan, est, st, sb, t, sp) + _overhead_rows(plan, est, st)


def _overhead_rows(plan, est, st) -> list[list]:
    """FP8 weight copies, Megatron-FSDP's double buffers and the framework overheads
    (parc/model/data/overheads.toml)."""
    from parc.cost.estimate import nccl_communicators

    mem, mesh = st.memory, plan.mesh
    rows = [["fp8 weights", nbytes(mem.fp8_weights), "FP8 copies of the linear weights and their transposes"]] \
        if mem.fp8_weights else []
    if mem.fsdp_buffers:
        sb = est.state_bytes
        unit = mem.fsdp_buffers / (2 * (sb.weights + sb.grads))
        rows.append(["fsdp buffers", nbytes(mem.fsdp_buffers),
                     f"Megatron-FSDP's double buffer: 2 × one layer's {number(unit)} parameters gathered "
                     f"({sb.weights:g} B/param) and their gradients ({sb.grads:g} B/param)"])
    comms = int(nccl_communicators(mesh.pp, mesh.dp, mesh.cp, mesh.tp, mesh.ep, mesh.etp, plan.model.is_moe))
    frag = mem.fragmentation / mem.activations if mem.activations else 0.0
    return rows + [
        ["cuda context", nbytes(mem.cuda_context), "context, kernels and library workspaces"],
        ["nccl buffers", nbytes(mem.nccl_buffers), f"{count(comms, 'communicator')} × {nbytes(mem.nccl_buffers / comms)}"],
        ["fragmentation", nbytes(mem.fragmentation), f"{percent(frag)} of the activations"],
    ]


def _training_rows(plan, est, st, sb, t, sp) -> list[list]:
    mem = st.memory
    off = f", {t.offload_layers} offloaded" if t.offload_layers else ""
    rc = t.recompute + (f" ({', '.join(t.recompute_modules)})" if t.recompute == "selective" and t.recompute_modules
                        else "")
    return [
        ["grads", nbytes(mem.grads),
         f"{t.main_grads} main grads, {sb.grads:g} B/param" + (f" / {_shard_words(plan)} (zero ≥ 2)" if t.zero >= 2 else "")
         + _gathered_words(plan, sb.grads)],
        ["optimizer", nbytes(mem.optimizer),
         f"{t.optimizer}, {sb.optimizer:g} B/param" + (f" / {_shard_words(plan)} (zero ≥ 1)" if t.zero >= 1 else "")],
        ["activations", nbytes(mem.activations),
         f"{nbytes(est.activation_bytes_per_layer)}/layer × {count(st.layers, 'layer')} × "
         f"{st.inflight:g} {plural(st.inflight, 'microbatch')} in flight ({rc} recompute{sp}{off})"],
    ]


# The axes whose collectives a plan runs: a serving plan's dp ranks are replicas (or, with
# data-parallel attention, the ep group's ranks) and exchange no gradients.
COMM_AXES = {"train": ("tp", "cp", "ep", "pp", "dp"), "serve": ("tp", "cp", "ep", "pp", "dcp")}


def comm_table(plan, est) -> tuple[list[str], list[list[str]], str]:
    """(headings, rows, alignment) of the communication table, which the text and the HTML page
    both show: per axis its collective, bytes, link, bandwidth, algorithm and time, and in
    training the time compute does not hide."""
    train = plan.mode == "train"
    cells = []
    for ax in COMM_AXES[plan.mode]:
        ln = est.comm_link.get(ax)
        if ln is None:
            continue
        bw = est.link_bandwidth.get(ln, 0)
        row = [ax, _comm_what(plan, ax), nbytes(est.comm_bytes[ax]), f"{ln} ({est.link_kind.get(ln)})", rate(bw),
               est.comm_algorithm.get(ax) or "-", seconds(est.comm_time[ax])]
        cells.append(row + ([seconds(est.comm_exposed.get(ax, 0.0))] if train else []))
    head = ["axis", "collective", "bytes", "link", "bandwidth", "algorithm", "time"] + (["exposed"] if train else [])
    return head, cells, "llrlrlr" + ("r" if train else "")


def _communication(plan, est) -> list[str]:
    per = "per step" if plan.mode == "train" else "per decoded token"
    out = [f"Communication per GPU {per}"]
    head, cells, align = comm_table(plan, est)
    if cells:
        out.append(indent(table(head, cells, align)))
    else:
        out.append("  none: every axis has size 1")
    notes = list(est.notes)
    if plan.mode == "train" and "train" not in plan.spans:
        t = plan.train
        notes.append(f"the spec has no `train` block; memory and time assume the defaults (optimizer = "
                     f"{t.optimizer}, zero = {t.zero}, recompute = {t.recompute}) and `parc check` does "
                     f"not judge them")
    out += [f"  note: {n}" for n in notes]
    return out + [""]


def _time(plan, est) -> list[str]:
    sch, mesh, cl = plan.schedule, plan.mesh, plan.cluster
    v = f", {sch.virtual_stages} virtual stages" if sch.virtual_stages > 1 else ""
    cells = [
        ["pipeline", f"{sch.pipeline}{v}, {count(est.microbatches, 'microbatch')} of {sch.micro_batch}"],
        ["bubble", f"{percent(est.bubble_fraction)} of the step idle"
                   + (f" (pp = {mesh.pp})" if mesh.pp > 1 else " (no pipeline)")],
        ["tokens/step", f"{est.tokens_per_step:,}"],
        ["FLOPs/step", f"{flops(est.model_flops_per_step)} model, "
                       f"{flops(est.hardware_flops_per_step)} with recompute"],
        ["compute", _compute_line(plan, est)],
        ["step time", seconds(est.step_time)],
        ["MFU", f"{percent(est.mfu)} (of the {number(cl.gpu.flops)}FLOP/s BF16 peak, as published tables count)"],
        ["tokens/s", f"{est.tokens_per_second:,.0f} ({est.tokens_per_second / est.world_size:,.0f} per GPU)"],
    ]
    return ["Schedule and time", indent(aligned(cells, "ll"))]


def _compute_line(plan, est) -> str:
    """Compute per step of the slowest stage: its GEMMs at the rate their shapes reach (of the
    peak of the plan's precision), attention's core, the memory-bound kernels, and the optimizer's
    update once a step."""
    c = est.compute_split()
    prec = "FP8" if est.gemm_peak != plan.cluster.gpu.flops else "BF16"
    return (f"{seconds(est.compute_time)}: GEMMs {seconds(c['gemm'])} at {percent(c['gemm_efficiency'])} of "
            f"{number(est.gemm_peak)}FLOP/s ({prec} peak; {_largest_shapes(plan, est)}), "
            f"attention core {seconds(c['attention'])}, memory-bound kernels {seconds(c['memory_bound'])} "
            f"(elementwise, casts, loss); optimizer step {seconds(c['optimizer'])}")


def _largest_shapes(plan, est) -> str:
    """The fraction of the peak the largest GEMMs reach (the estimate's, by precision): under FP8
    the FP8 one, and the BF16 one of the GEMMs that stay 16-bit (the output head's, and the weight
    gradients' where the recipe keeps them)."""
    ceil = est.gemm_ceilings or {"bf16": est.efficiency}
    if "fp8" not in ceil:
        return f"{percent(ceil['bf16'])} for the largest shapes"
    from parc.model.frameworks import fp8_recipe

    which = "the output head's" + (" and the weight gradients'"
                                   if fp8_recipe(plan.train).get("high_precision_wgrad") else "")
    return (f"{percent(ceil['fp8'])} for the largest shapes; {which} in BF16 at {percent(ceil['bf16'])} "
            f"of {number(plan.cluster.gpu.flops)}FLOP/s")


def _weights_note(plan) -> str:
    """The precision the weights are stored in and its bytes per parameter: training keeps FP8
    runs' weights in bf16 (the GEMMs take FP8 copies, ``state_bytes_per_param``) unless they
    gather FP8 parameters; a serving engine holds its checkpoint's storage."""
    if plan.mode != "train":
        return _served_weights_note(plan.model)
    dt = plan.train.precision
    z3 = f" / {_shard_words(plan)} (zero 3)" if plan.train.zero >= 3 else ""
    from parc.cost.memory import state_bytes_per_param

    t = plan.train
    per = state_bytes_per_param(t.precision, t.main_grads, t.optimizer_state, t.optimizer)
    return _trained_weights_note(plan, dt, z3) + _gathered_words(plan, per.weights)


def _trained_weights_note(plan, dt: str, z3: str) -> str:
    from parc.cost.estimate import dtype_bytes

    if dt == "fp8" and plan.train.fp8_param_gather:
        return f"linear layers fp8, 1 B/param, the rest bf16, 2 B/param{z3} (fp8_param_gather)"
    if dt == "fp8":
        return f"bf16, 2 B/param{z3} (FP8 GEMMs on copies)"
    return f"{dt}, {dtype_bytes(dt)} B/param{z3}"


def _served_weights_note(m) -> str:
    """How a serving engine holds the weights (parc/model/data/checkpoints.toml)."""
    from parc.cost.estimate import part_weight_bytes
    from parc.model.checkpoints import ONLINE_FP8, storage, table

    st = storage(m)
    e = table()[st]
    if e["bits"] >= 16:
        return f"{st}, {e['bits'] // 8} B/param"
    parts = [p for p in e["parts"] if p != "mtp"]
    b = part_weight_bytes(m, parts[0])
    what = ("a 16-bit checkpoint quantized to fp8 at load" if st == ONLINE_FP8
            else f"{st} checkpoint")
    return f"{what}: {', '.join(parts)} {b:.4g} B/param, the rest {m.checkpoint_format if st == ONLINE_FP8 else 'bf16'}"


def _gathered_words(plan, nbytes: float) -> str:
    """What a pipeline stage keeps gathered besides its ZeRO-3 shards, in words, where its
    framework's FSDP holds the stage's parameters and gradients for the step
    (:func:`parc.cost.memory.pipeline_gathered`); "" elsewhere."""
    from parc.cost.memory import pipeline_gathered
    from parc.model.frameworks import framework

    t, mesh = plan.train, plan.mesh
    if t.zero < 3 or mesh.dp * mesh.cp <= 1 or not pipeline_gathered(framework(t.framework), mesh.pp):
        return ""
    return f", + {nbytes:g} B/param gathered for the step (FSDP under the pipeline)"


def _shard_words(plan) -> str:
    """The group ZeRO shards a dense parameter's state over, in words: ``dp`` or ``dp·cp = 8``
    (:func:`parc.cost.params.shard_groups`)."""
    from parc.cost.params import dense_shard_group

    mesh = plan.mesh
    return "dp" if mesh.cp <= 1 else f"dp·cp = {dense_shard_group(mesh.dp, mesh.cp)}"


def _comm_what(plan, ax: str) -> str:
    """The collective an axis runs, in words."""
    sp = plan.mode == "train" and plan.train.sequence_parallel
    if ax == "tp":
        return "all-gather + reduce-scatter per layer" if sp else "all-reduce per layer"
    if ax == "cp":
        return "ring K/V exchange per layer"
    if ax == "ep":
        return "all-to-all per MoE layer"
    if ax == "dcp":
        return "all-gather + reduce-scatter per layer"
    if ax == "pp":
        return "send/recv per microbatch" if plan.mode == "train" else "send/recv of activations"
    z = plan.train.zero if plan.mode == "train" else 0
    return {0: "gradient all-reduce", 1: "grad reduce-scatter + param all-gather",
            2: "grad reduce-scatter + param all-gather", 3: "param all-gather ×2 + grad reduce-scatter"}[z]
