"""The cost model over arrays of candidates.

:func:`parc.cost.estimate.estimate` costs one plan; the planner costs hundreds of thousands,
so this module evaluates the same formulas over numpy arrays. It reuses the cost model's own
functions wherever they can be called once per distinct input and broadcast:

* stage layouts and per-stage parameter counts (:mod:`parc.planner.stages`) are computed once per
  distinct (pp, virtual stages, placement, split) and (tp, ep, etp, dp, cp) shape;
* a stage's compute, and a layer's activations, once per distinct (stage shapes on a mesh, batch
  option, train option) of a chunk: the layout options of a mesh that differ only in schedule share
  them;
* ``activation_bytes_per_layer`` and ``zero_state_bytes`` take arrays as they are;
* the communication volumes (``tp_bytes_per_layer``, ``cp_bytes_per_layer``, ``ep_bytes_per_layer``,
  ``pp_bytes_per_microbatch``, ``dp_bytes``) are linear in the tokens or parameters they move, so
  each is called once per distinct degree with one unit and scaled.

The pipeline's idle share and microbatches in flight come from :mod:`parc.model.schedules`'
array entry points, which evaluate each distinct (pipeline, pp, m, v) once. What is written out
here are the few lines of ``_estimate`` that combine the pieces (most loaded stage, critical
stage, step time). ``tests/test_planner.py`` checks every
one against the scalar cost model, and whole candidates against ``estimate``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parc.cost import estimate as cm
from parc.model import schedules
from parc.planner.inputs import Problem
from parc.planner.space import (PIPELINES, RECOMPUTE, ask_rank_map, batch_options, crosses,
                    few_microbatches_refused, mesh_shapes, train_options, zero_options)
from parc.cost.kernels import grad_accumulation_bytes, ring_merge_bytes
from parc.model.frameworks import context_parallel, framework
from parc.planner.columns import Columns, Rows
from parc.planner.stages import layouts

_PIPE = {name: i for i, name in enumerate(PIPELINES)}
INDEXES = ("lo", "bopt", "topt")     # per candidate: its layout, batch and train option
# the settings' columns, in the order a candidate's columns are shown, before the stored ones
COLUMNS = ["mb", "m", "gb", "recompute", "sp", "mesh", "pp", "dp", "cp", "tp", "ep", "etp", "pipeline", "v",
           "split"]
CHUNK = 1 << 17          # rows costed at a time
AXES = cm.AXES


def _per_unit(fn, keys: np.ndarray) -> np.ndarray:
    """``fn(key)`` for each element of an integer key array, called once per distinct key."""
    if keys.size and (keys == keys.flat[0]).all():   # one key (a search of one global batch): no sort
        return np.full(keys.shape, float(fn(int(keys.flat[0]))))
    uniq, inv = np.unique(keys, return_inverse=True)
    vals = np.array([fn(int(k)) for k in uniq], dtype=np.float64)
    return vals[inv.reshape(keys.shape)]


# --- training ---------------------------------------------------------------------------------------

class TrainCosts:
    """Costs of every training candidate; ``cols`` holds the settings, the rest the estimate."""

    def __init__(self):
        self.cols: dict[str, np.ndarray] = {}
        self.enumerated = 0        # candidates the search decided on (bounded out or fully costed)
        self.bounded = 0           # of which the memory lower bound refused without the full model
        self.costed = 0            # costed in full
        self.meshes: list = []
        self.least_memory = float("inf")   # the least memory per GPU of any candidate (a bound where none was costed)


def train_costs(pr: Problem, efficiency: float | None = None, progress=None, least: bool = False) -> TrainCosts:
    """Every training candidate of ``pr`` that fits in memory (``efficiency``: the profile's);
    with ``least``, also the least memory per GPU any candidate needs (``TrainCosts.least_memory``:
    the smallest estimate among those costed, else the smallest model-state bound).

    Long because: one pipeline of array stages, each pruning before the next multiplies out
    (layouts, batches, the state bound per ZeRO stage, the train options, the chunks)."""
    efficiency = (pr.profile.gemm_efficiency or pr.cluster.gpu.gemm_efficiency) if efficiency is None else efficiency
    out = TrainCosts()
    out.meshes = meshes = mesh_shapes(pr)
    if not meshes:
        return out
    per = cm.state_bytes_per_param(pr.train.precision, pr.train.main_grads, pr.train.optimizer_state,
                                   pr.train.optimizer)
    cap = float(pr.cluster.gpu.memory)

    # 1. layout options (mesh, pipeline, virtual stages, split) and their stage classes
    lo_mesh, lo_pipe, lo_v, lo_split, tables, twin = layouts(pr, meshes)
    if not lo_mesh:
        return out
    c_stage, c_layers, c_moe, c_emb, c_head, c_valid, c_par, c_lin, c_unit = tables
    lo_mesh_a = np.asarray(lo_mesh, dtype=np.int64)
    mesh_a = np.asarray(meshes, dtype=np.int64)
    lo_dp = mesh_a[lo_mesh_a, 1]
    lo_shard, lo_edp = cm.shard_groups(*(mesh_a[lo_mesh_a, j] for j in range(1, 6)))

    # 2. layout options × batch options, and the schedule rules that need the microbatch count
    bopts, boff, bcount = _batch_table(pr, meshes)
    s_lo = np.repeat(np.arange(len(lo_mesh)), bcount[lo_dp])
    s_b = boff[lo_dp][s_lo] + _ramp(bcount[lo_dp])
    lo_pipe_a, lo_v_a = np.asarray(lo_pipe, dtype=np.int64), np.asarray(lo_v, dtype=np.int64)
    ok = schedule_ok_vec(pr, lo_pipe_a[s_lo], mesh_a[lo_mesh_a[s_lo], 0], bopts[s_b, 1], lo_v_a[s_lo])
    s_lo, s_b = s_lo[ok], s_b[ok]

    # 3. model-state memory per (layout option, zero stage), a lower bound on the memory of every
    #    candidate that shares them: pairs over capacity are refused before anything else is costed
    zeros = zero_options(pr)
    topts, toff, tcount = _train_table(pr, meshes)
    per_s = tcount[lo_mesh_a[s_lo]]
    state, fit = {}, {}
    gathered = cm.pipeline_gathered(framework(pr.train.framework), mesh_a[lo_mesh_a, 0])[:, None]
    out.enumerated = 0
    for z in zeros:
        w, g, o = cm.model_state_bytes(*c_par, z, lo_shard[:, None], lo_edp[:, None], per, gathered)
        state[z] = (w, g, o)
        allowed = np.ones(len(lo_mesh), dtype=bool)
        if z not in zero_options(pr, 2):                                 # P615 with a pipeline
            allowed = mesh_a[lo_mesh_a, 0] <= 1
        out.enumerated += int(per_s[allowed[s_lo]].sum())
        bound = np.where(c_valid, w + g + o, -np.inf).max(axis=1)
        fit[z] = allowed & (bound <= cap)
        if least and allowed.any():
            out.least_memory = min(out.least_memory, float(bound[allowed].min()))
    zfit = np.stack([fit[z][s_lo] for z in zeros])                    # (ZeRO stage, pair)
    out.costed = int((per_s * zfit.sum(axis=0)).sum())
    out.bounded = out.enumerated - out.costed

    # 4. expand the pairs some ZeRO stage fits by (recompute, sequence parallel): each (pair, train
    #    option) is costed once, its ZeRO stages a last dimension (they differ only in the model
    #    state and the data-parallel traffic), kept as indices and gathered chunk by chunk
    u_pairs = np.nonzero(zfit.any(axis=0))[0]
    if not len(u_pairs):
        return out
    t_mesh = lo_mesh_a[s_lo[u_pairs]]
    u2 = np.repeat(np.arange(len(u_pairs)), tcount[t_mesh])
    r_t = (toff[t_mesh][u2] + _ramp(tcount[t_mesh])).astype(np.int32)
    pair = u_pairs[u2].astype(np.int32)
    n = len(pair)

    # 5. what depends only on the pair (layout option, batch option): microbatches in flight per
    #    stage class and the pipeline's idle share, once per pair
    p_pipe, p_pp, p_m, p_v = lo_pipe_a[s_lo], mesh_a[lo_mesh_a[s_lo], 0], bopts[s_b, 1], lo_v_a[s_lo]
    tables = dict(inflight=schedules.inflight_array(p_pipe[:, None], p_pp[:, None], p_m[:, None], p_v[:, None],
                                                    c_stage[s_lo]),
                  bubble=schedules.bubble_array(p_pipe, p_pp, p_m, p_v))

    # 6. the full model, in chunks (a progress callback sees each one)
    ctx = _Context(pr=pr, per=per, cap=cap, zeros=zeros, state=state, c_stage=c_stage, c_layers=c_layers,
                   c_moe=c_moe, c_emb=c_emb, c_head=c_head, c_valid=c_valid, c_par=c_par, c_lin=c_lin, c_unit=c_unit,
                   twin=twin, n_opts=(len(bopts), len(topts)), links=_axis_links(pr, meshes), efficiency=efficiency, factors=_factors(pr), pairs=tables,
                   state_stack=(np.stack([np.where(c_valid, (state[z][0] + state[z][1]) + state[z][2], -np.inf)
                                          for z in zeros]),
                                np.stack([state[z][2] for z in zeros])),
                   zero_index=np.array([zeros.index(z) if z in zeros else 0 for z in range(4)]))
    split_a = np.asarray(lo_split, dtype=np.int64)
    cols, least_costed = Rows(out.costed), float("inf")
    for start in range(0, n, CHUNK):
        sel = slice(start, min(n, start + CHUNK))
        pr_, lo, b, t = pair[sel], s_lo[pair[sel]], s_b[pair[sel]], r_t[sel]
        mi = lo_mesh_a[lo]
        rows = dict(pair=pr_, topt=t, lo=lo, bopt=b, mb=bopts[b, 0], m=bopts[b, 1], gb=bopts[b, 2],
                    recompute=topts[t, 0], sp=topts[t, 1], mesh=mi,
                    **{k: mesh_a[mi, j] for j, k in enumerate(("pp", "dp", "cp", "tp", "ep", "etp"))},
                    pipeline=lo_pipe_a[lo], v=lo_v_a[lo], split=split_a[lo])
        got, lowest = _cost_rows(ctx, rows, zfit)
        cols.add(got)
        least_costed = min(least_costed, lowest)
        if progress is not None:
            progress(min(n, start + CHUNK) / n)
    derived = {k: ("lo", mesh_a[lo_mesh_a, j]) for j, k in enumerate(("pp", "dp", "cp", "tp", "ep", "etp"))}
    derived.update(mb=("bopt", bopts[:, 0]), m=("bopt", bopts[:, 1]), gb=("bopt", bopts[:, 2]),
                   recompute=("topt", topts[:, 0]), sp=("topt", topts[:, 1]), mesh=("lo", lo_mesh_a),
                   pipeline=("lo", lo_pipe_a), v=("lo", lo_v_a), split=("lo", split_a))
    stored = cols.done()
    out.cols = Columns(stored, derived, COLUMNS + [k for k in stored if k not in INDEXES])
    if least and least_costed < float("inf"):
        out.least_memory = least_costed
    return out


@dataclass
class _Context:
    """What every chunk of rows shares: the problem, state bytes and the stage classes' tables."""
    pr: Problem
    per: object
    cap: float
    zeros: list
    state: dict
    c_stage: np.ndarray
    c_layers: np.ndarray
    c_moe: np.ndarray
    c_emb: np.ndarray
    c_head: np.ndarray
    c_valid: np.ndarray
    c_par: np.ndarray
    c_lin: np.ndarray
    c_unit: np.ndarray       # the unit Megatron-FSDP's double buffer holds (0 where none is asked for)
    links: tuple
    efficiency: float
    factors: np.ndarray      # (matmul, attention, elementwise) recompute factors per RECOMPUTE code
    pairs: dict              # per (layout, batch) pair: "inflight" per stage class, "bubble"
    # (weights + grads + optimizer, optimizer) per (zero index, layout option, stage class); the
    # first -inf in the classes a layout option does not have, so a maximum over classes skips them
    state_stack: tuple = ()
    zero_index: np.ndarray = None   # ZeRO stage -> its index in state_stack
    twin: np.ndarray = None  # per layout option: the first of its mesh with the same stage classes' shapes
    n_opts: tuple = ()       # (batch options, train options)


def _activations(ctx: _Context, s: dict):
    """(activation bytes of every stage class, CUDA context + NCCL bytes, fragmentation bytes) of
    the distinct rows ``s``."""
    m, lo, tp = ctx.pr.model, s["lo"], s["tp"]
    # a layer's activations depend on the mesh, batch and train option, not on the layout: once each
    n_b, n_t = ctx.n_opts
    _, first, inv = np.unique((s["mesh"] * n_b + s["bopt"]) * n_t + s["topt"], return_index=True,
                              return_inverse=True)
    act_d, act_m = _layer_activations(ctx.pr, *(s[k][first] for k in ("mb", "tp", "cp", "etp", "recompute", "sp")))
    act_d, act_m = act_d[inv], act_m[inv]
    inflight = ctx.pairs["inflight"][s["pair"]]
    layers, moe = ctx.c_layers[lo], ctx.c_moe[lo]
    act = cm.stage_activation_bytes(layers - moe, moe, act_d[:, None], act_m[:, None], inflight, ctx.c_emb[lo],
                                    ctx.c_head[lo], (m.seq_len / s["cp"])[:, None], s["mb"][:, None], m,
                                    tp[:, None], ctx.pr.train.offload_layers)
    comms = cm.nccl_communicators(s["pp"], s["dp"], s["cp"], tp, s["ep"], s["etp"], m.is_moe)
    ctx_b, nccl, frag = cm.overhead_bytes(ctx.pr.cluster, comms[:, None], act)
    return act, ctx_b + nccl[:, 0], frag


def _memory(ctx: _Context, u: dict, zfit: np.ndarray):
    """The rows of ``u`` (distinct (pair, train option) rows) × ZeRO stage that fit in memory:
    (index into ``u``, ZeRO stage, most loaded stage class, its bytes, its optimizer state's bytes),
    and the least memory per GPU among all of them, fitting or not."""
    lo = u["lo"]
    act, fixed, frag = _activations(ctx, u)
    states, opt = ctx.state_stack
    tr = ctx.pr.train
    got, lowest = [], float("inf")
    for k, z in enumerate(ctx.zeros):
        zm = zfit[k][u["pair"]]
        sel = np.nonzero(zm)[0]
        if not len(sel):
            continue
        # most rows: cost them all and drop the others after, instead of gathering the most
        whole = 2 * len(sel) > len(lo)
        lz, a_, f_, x_ = (lo, act, frag, fixed) if whole else (lo[sel], act[sel], frag[sel], fixed[sel])
        total = states[k][lz]           # weights + grads + optimizer (summed in that order), this call's own
        total += a_
        if tr.precision == "fp8":   # the FP8 weight copies (and FP8 parameters' saving)
            delta, cache = cm.fp8_weight_terms(tr, ctx.c_lin[1][lz] if z >= 3 else ctx.c_lin[0][lz])
            total += delta + cache
        if z >= 3:                  # Megatron-FSDP's double buffers (0 where the spec asks for none)
            total += cm.fsdp_double_buffer_bytes(ctx.c_unit[lz], ctx.per)
        most = np.argmax(total + f_, axis=1)     # -inf in the classes lz lacks (state_stack)
        # the CUDA context and NCCL buffers are the same on every stage of a row: added to the most
        # loaded one, in the order Memory.total adds them
        rows = np.arange(len(lz))
        mem = total[rows, most] + (x_ + f_[rows, most])
        lowest = min(lowest, float((mem[sel] if whole else mem).min()))
        keep = np.nonzero(zm & (mem <= ctx.cap) if whole else mem <= ctx.cap)[0]
        got.append((keep if whole else sel[keep], np.full(len(keep), z), most[keep], mem[keep],
                    opt[k][lz[keep], most[keep]]))
    if not got:
        return (np.zeros(0, dtype=np.int64),) * 3 + (np.zeros(0),) * 2, lowest
    return tuple(np.concatenate(x) for x in zip(*got)), lowest



def _factors(pr: Problem) -> np.ndarray:
    """(matmul, attention, elementwise) recompute factors per RECOMPUTE code."""
    return np.array([cm.recompute_factors(name) for name in RECOMPUTE])


ROW_AXES = ("tp", "cp", "pp", "ep")   # axes whose traffic does not depend on the ZeRO stage


def _comm(ctx: _Context, r: dict, L_s, moe_s, most=None, zero=None) -> tuple[dict, dict]:
    """Bytes per GPU per step and how many collectives carry them, through the cost model's
    kernels: of :data:`ROW_AXES` for rows ``r`` (``zero`` None), or of the data-parallel axis for
    rows ``r`` of ZeRO stages ``zero`` with their most loaded stage class ``most``, one call per stage."""
    pr = ctx.pr
    lo, full = r["lo"], r["recompute"] == RECOMPUTE.index("full")
    kw = lambda sel: dict(pp=r["pp"][sel], tp=r["tp"][sel], cp=r["cp"][sel], ep=r["ep"][sel],   # noqa: E731
                          v=r["v"][sel], microbatches=r["m"][sel], wbytes=cm.comm_dtype_bytes(pr.train.precision),
                          recompute=full[sel], sp=(r["sp"][sel] == 1) & (r["tp"][sel] > 1), per=ctx.per,
                          fp8=pr.train.precision == "fp8", ring=context_parallel(pr.train.framework))
    tokens = r["mb"] * (pr.model.seq_len / r["cp"])
    if zero is None:
        got = cm.train_comm_bytes(pr.model, tokens, L_s, moe_s, dense_params=0.0, expert_params_=0.0, zero=0,
                                  n_dp=1, n_exp=1, axes=ROW_AXES, **kw(slice(None)))
        calls = cm.comm_calls(L_s, moe_s, r["m"], r["v"], r["cp"], full)
        return got, {ax: calls[ax] for ax in ROW_AXES}
    edp = cm.shard_groups(r["dp"], r["cp"], r["tp"], r["ep"], r["etp"])[1]
    comm = {ax: np.zeros(len(lo)) for ax in ("dp", "dp_gather")}
    calls = {"dp": np.full(len(lo), 2.0)}
    fw = framework(pr.train.framework)
    for z in _values(zero):
        z = int(z)
        sel = zero == z
        passes = cm.zero3_passes(z, r["pp"][sel], r["m"][sel], fw)
        got = cm.train_comm_bytes(
            pr.model, tokens[sel], L_s[sel], moe_s[sel], dense_params=ctx.c_par[0][lo[sel], most[sel]],
            expert_params_=ctx.c_par[1][lo[sel], most[sel]], zero=z, n_dp=r["dp"][sel] * r["cp"][sel],
            n_exp=edp[sel], passes=passes, axes=("dp",), **kw(sel))
        for ax in comm:
            comm[ax][sel] = got[ax]
        if z >= 3:   # per layer: a gather for the forward, one for the backward, a reduce-scatter
            calls["dp"][sel] = 3 * L_s[sel] * passes
    return comm, calls


def _comm_times(ctx: _Context, r: dict, comm: dict, calls: dict) -> dict:
    """Seconds of each axis's communication in ``comm`` per step (:func:`parc.cost.comm.axis_time`)."""
    m, gpu = ctx.pr.model, ctx.pr.cluster.gpu
    local_t, intra, inter = ctx.links
    sizes = {"tp": r["tp"], "cp": r["cp"], "pp": r["pp"], "ep": r["ep"], "dp": r["dp"] * r["cp"]}
    sp = (r["sp"] == 1) & (r["tp"] > 1)
    flat = framework(ctx.pr.train.framework)["zero3_collectives"] == "flat"
    zero = r.get("zero", np.zeros(len(sp), dtype=np.int64))
    ctime = {}
    for j, ax in enumerate(AXES):
        if ax not in comm:
            continue
        n = sizes[ax]
        local = local_t[r["mesh"], j]
        if ax == "dp" and flat:           # ZeRO-3's flat rings: each GPU's share on its own link
            local = np.where(zero >= 3, 1.0, local)
        t, _ = cm.axis_time(ax, comm[ax], n, calls[ax], local, intra, inter, cm.nvls_allreduce(gpu, ax, sp, zero))
        ctime[ax] = np.where((n > 1) & (ax != "ep" or m.is_moe), t, 0.0)
    return ctime


def _compute(ctx: _Context, s: dict):
    """(GEMM, attention-core and memory-bound seconds per microbatch of every stage class, and the
    seconds per HBM byte) of the distinct rows ``s``: computed once per distinct (stage classes'
    shapes on a mesh, batch option, train option), the layout options of one mesh that differ
    only in schedule sharing it (a DualPipe rank's share of its layers applied after)."""
    n_b, n_t = ctx.n_opts
    key = (ctx.twin[s["lo"]] * n_b + s["bopt"]) * n_t + s["topt"]
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    gemm, attn, memb, per_hbm_byte = _compute_once(ctx, {k: s[k][first] for k in _COMPUTE_READS})
    share = schedules.microbatch_share_array(s["pipeline"])[:, None]      # DualPipe: half a rank's layers
    return share * gemm[inv], share * attn[inv], share * memb[inv], per_hbm_byte[inv]


_COMPUTE_READS = ("lo", "recompute", "mb", "m", "cp", "sp", "tp", "etp", "ep", "pp")


def _compute_once(ctx: _Context, s: dict):
    """:func:`_compute` of rows ``s`` before the schedule's share of a rank's layers."""
    m, cl, pr, lo = ctx.pr.model, ctx.pr.cluster, ctx.pr, s["lo"]
    layers, moe, head = ctx.c_layers[lo], ctx.c_moe[lo], ctx.c_head[lo]
    f = ctx.factors[s["recompute"]]
    tokens = s["mb"] * (m.seq_len / s["cp"])
    sp = (s["sp"] == 1) & (s["tp"] > 1)
    got = cm.stage_rates(m, tokens, s["tp"], s["etp"], s["ep"], cl.gpu, pr.train, pr.profile, ctx.efficiency, sp)
    rates = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), tokens.shape)[:, None] for k, v in got.items()}
    casts = 1.0 / np.maximum(s["m"], 1)[:, None] if cm.caches_fp8_weights(pr.train) else 1.0
    accumulate = (grad_accumulation_bytes(framework(pr.train.framework), s["pp"], s["m"])[:, None]
                  * (ctx.c_par[0][lo] + ctx.c_par[1][lo]))
    if (s["cp"] > 1).any():   # the context-parallel ring's eager ops, as the estimate counts them
        accumulate = accumulate + ring_merge_bytes(m, tokens[:, None], s["tp"][:, None], s["cp"][:, None], layers,
                                                   context_parallel(pr.train.framework), 1 + (f[:, 1:2] > 1))
    gemm, attn, memb = cm.stage_compute_time(m, tokens[:, None], s["tp"][:, None], rates, layers - moe, moe, head,
                                             f[:, 0:1], f[:, 1:2], f[:, 2:3], casts, accumulate)
    return gemm, attn, memb, rates["per_hbm_byte"][:, 0]


def _distinct(idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(idx, return_inverse=True)`` for indices below ``n``, without sorting."""
    seen = np.zeros(n, dtype=bool)
    seen[idx] = True
    return np.nonzero(seen)[0], (np.cumsum(seen) - 1)[idx]


def _values(a: np.ndarray) -> np.ndarray:
    """The distinct values of a non-negative integer array of small values, ascending (as
    ``np.unique``), by counting instead of sorting."""
    return np.flatnonzero(np.bincount(a.astype(np.int64))) if len(a) else a[:0]


def _cost_rows(ctx: _Context, u: dict, zfit: np.ndarray) -> tuple[dict, float]:
    """The estimate of every (row of ``u``, ZeRO stage) that fits in memory (the others are
    dropped), and the least memory per GPU among all of them."""
    m, cl, pr = ctx.pr.model, ctx.pr.cluster, ctx.pr
    (idx, zero, most, mem_total, opt_bytes), lowest = _memory(ctx, u, zfit)
    first, inv = _distinct(idx, len(u["lo"]))
    # what does not depend on the ZeRO stage, once per distinct row: the compute of every stage
    # class (at the rates of its GEMM shapes), the slowest one, and the tp, cp, pp and ep traffic
    f = {k: a[first] for k, a in u.items()}
    gemm, attn, memb, per_hbm_byte = _compute(ctx, f)
    crit = np.argmax(np.where(ctx.c_valid[f["lo"]], gemm + attn + memb, -np.inf), axis=1)
    frows = np.arange(len(first))
    share = schedules.microbatch_share_array(f["pipeline"])       # DualPipe: half a rank's layers
    L_s, moe_s = ctx.c_layers[f["lo"], crit] * share, ctx.c_moe[f["lo"], crit] * share
    comm_f, calls_f = _comm(ctx, f, L_s, moe_s)
    ctime_f = _comm_times(ctx, f, comm_f, calls_f)
    gemm, attn, memb = gemm[frows, crit][inv], attn[frows, crit][inv], memb[frows, crit][inv]
    r = {k: a[idx] for k, a in u.items()}
    r["zero"] = zero
    comm, calls = _comm(ctx, r, L_s[inv], moe_s[inv], most, zero)
    ctime = {ax: t[inv] for ax, t in ctime_f.items()} | _comm_times(ctx, r, comm, calls)
    per_hbm_byte = per_hbm_byte[inv]
    # step time, MFU (on the BF16 peak)
    bub = ctx.pairs["bubble"][r["pair"]]
    gemm, attn, memb = gemm * r["m"], attn * r["m"], memb * r["m"]
    gather = np.where(comm["dp"] > 0, ctime["dp"] * comm["dp_gather"] / np.maximum(comm["dp"], 1e-300), 0.0)
    exposed = cm.exposed_comm(ctime, gemm, attn, ctime["dp"] - gather, gather, r["m"], pr.train, pr.profile.overlap,
                              memory=memb, zero3=r["zero"] >= 3, cp=r["cp"],
                              cp_gathered=cm.cp_gathered_share(context_parallel(pr.train.framework), pr.train.precision))
    per = ctx.per
    owned = opt_bytes / per.optimizer if per.optimizer else 0.0
    opt = cm.optimizer_bytes(owned, per) * per_hbm_byte
    step = cm.step_time(gemm + attn + memb, exposed, bub) + opt
    tokens = r["gb"] * m.seq_len
    mflops = _per_unit(lambda k: cm.model_flops(m, k), tokens)
    cols = {k: r[k] for k in INDEXES} | {"zero": zero}    # the settings: read through these (Columns)
    cols.update(step_time=step, tokens_per_second=tokens / step, mfu=mflops / (step * cl.world * cl.gpu.flops),
                bubble=bub, memory=mem_total, compute=gemm + attn + memb)
    for ax in AXES:
        cols[f"t_{ax}"] = ctime[ax]
    return cols, lowest


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0, 1, …, c-1 for each count c, concatenated."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total) - np.repeat(starts, counts)


def _batch_table(pr: Problem, meshes):
    """All (micro_batch, microbatches, global_batch) options, grouped by dp: the table, and per dp
    value (arrays indexed by dp) the offset and count of its options."""
    dps = sorted({mesh[1] for mesh in meshes})
    rows = []
    off = np.zeros(max(dps) + 1, dtype=np.int64)
    cnt = np.zeros(max(dps) + 1, dtype=np.int64)
    for d in dps:
        opts = batch_options(pr, d)
        off[d], cnt[d] = len(rows), len(opts)
        rows.extend(opts)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3), off, cnt


def _train_table(pr: Problem, meshes):
    """All (recompute, sequence_parallel) options, per mesh index: table, offsets, counts."""
    rows = []
    off = np.zeros(len(meshes), dtype=np.int64)
    cnt = np.zeros(len(meshes), dtype=np.int64)
    seen: dict = {}
    for i, mesh in enumerate(meshes):
        key = (mesh[3], mesh[2])
        if key not in seen:
            opts = train_options(pr, mesh[3], mesh[2])
            seen[key] = (len(rows), len(opts))
            rows.extend(opts)
        off[i], cnt[i] = seen[key]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2), off, cnt


def _layer_activations(pr: Problem, mb, tp, cp, etp, rc, sp):
    """``layer_activation_bytes`` (dense and MoE layers) for every row, calling the cost model's
    ``activation_bytes_per_layer`` once per (recompute, sequence parallel, etp) with arrays."""
    m = pr.model
    n = len(mb)
    act_d = np.zeros(n)
    act_m = np.zeros(n)
    spe = (sp == 1) & (tp > 1)
    groups = rc * 2 + spe
    if m.is_moe:
        groups = groups * 4096 + etp
    for gkey in _values(groups):
        sel = groups == gkey
        r = RECOMPUTE[int(rc[sel][0])]
        s_on = bool(spe[sel][0])
        kw = dict(t=tp[sel], sp=s_on, recompute=r, cp=cp[sel], ffn=m.ffn_hidden, mlp=m.mlp,
                  kv_heads=m.kv_heads, head_dim=cm.head_dim(m),
                  **cm.model_activation_options(m, pr.train))
        act_d[sel] = cm.activation_bytes_per_layer(m.seq_len, mb[sel], m.hidden, m.heads, **kw)
        if m.is_moe:
            e = int(etp[sel][0])
            act_m[sel] = cm.activation_bytes_per_layer(
                m.seq_len, mb[sel], m.hidden, m.heads, moe=(m.top_k or 1, m.moe_ffn_hidden, e, m.shared_experts),
                **kw)
        else:
            act_m[sel] = act_d[sel]
    return act_d, act_m


def _axis_links(pr: Problem, meshes):
    """The links every row's collectives run on: per mesh shape and axis the members of a group
    in one node (from its rank map; a group that spans nodes has fewer than its size), and the
    (bytes/s, seconds per step) of the intra- and inter-node links (None: a single node)."""
    bw, kind, _ = cm.links(pr.cluster, pr.cluster.world)
    lp = cm.link_params(pr.profile, bw, kind)
    table = np.ones((len(meshes), len(AXES)))
    for i, mesh in enumerate(meshes):
        pp, dp, cp, tp, ep, _ = mesh
        sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep}
        for j, grp in enumerate(cm.axis_groups(cp).values()):
            table[i, j] = cm.members_per_node(grp, sizes, lambda ax: spanned(pr, mesh, ax))
    return table, lp["intra_node"], lp.get("inter_node")


def spanned(pr: Problem, mesh: tuple, axis) -> int:
    """The most NVLink domains (nodes, unless the cluster says ``nvlink_domain``) a group of
    ``axis`` touches under mesh shape ``mesh`` (1 when none crosses one; a rank map is built only
    for shapes whose groups cross, through ``crosses``)."""
    if not crosses(pr, mesh, axis):
        return 1
    key = ("spanned", mesh, axis)
    got = pr.memo.get(key)
    if got is None:
        got = pr.memo[key] = ask_rank_map(pr, mesh, lambda rm: rm.domains_spanned(axis))
    return got


def schedule_ok_vec(pr: Problem, pipe, p, n, v):
    """:func:`parc.planner.space.schedule_ok` over arrays."""
    ok = (pipe != _PIPE["1f1b"]) | (n >= p) | (not few_microbatches_refused(pr))
    ok &= (pipe != _PIPE["dualpipe_v"]) | (n >= 2 * p)
    ok &= (pipe != _PIPE["dualpipe"]) | ((n >= 2 * p) & (n % 2 == 0) & (p % 2 == 0))
    rounds_ok = n % np.maximum(1, n // np.maximum(p, 1)) == 0
    ok &= ~((pipe == _PIPE["zero_bubble"]) & (v > 2)) | rounds_ok
    inter = (pipe == _PIPE["interleaved_1f1b"]) & (v > 1)
    if "megatron" in pr.rule_targets:
        ok &= ~inter | ((n >= p) & (n % np.maximum(p, 1) == 0))
    if "torch" in pr.rule_targets:
        ok &= ~inter | rounds_ok
    return ok | (p <= 1)
