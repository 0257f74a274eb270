"""The cost model over arrays of candidates.

:func:`parc.cost.estimate.estimate` costs one plan; the planner costs hundreds of thousands,
so this module evaluates the same formulas over numpy arrays. It reuses the cost model's own
functions wherever they can be called once per distinct input and broadcast:

* stage layouts and per-stage parameter counts (``stage_layouts``, ``_stage_parts``) are computed
  once per distinct (pp, virtual stages, placement, split) and (tp, ep, etp, dp, cp) shape;
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
from parc.planner.space import (PIPELINES, RECOMPUTE, SPLITS, ask_rank_map, batch_options, crosses,
                    few_microbatches_refused, layout_options, mesh_shapes, train_options, zero_options)
from parc.planner.plans import stage_split

_PIPE = {name: i for i, name in enumerate(PIPELINES)}
CHUNK = 1 << 17          # rows costed at a time
AXES = cm.AXES


def _per_unit(fn, keys: np.ndarray) -> np.ndarray:
    """``fn(key)`` for each element of an integer key array, called once per distinct key."""
    uniq, inv = np.unique(keys, return_inverse=True)
    vals = np.array([fn(int(k)) for k in uniq], dtype=np.float64)
    return vals[inv.reshape(keys.shape)]


# --- stage layouts and the parameters each stage holds -----------------------------------------------

class _Shapes:
    """Memoised stage classes and parameter counts (scalar cost-model calls, once per shape)."""

    def __init__(self, pr: Problem):
        self.pr = pr
        self.layouts: dict[tuple, list] = {}
        self.params: dict[tuple, tuple[int, ...]] = {}

    def classes(self, pp: int, v: int, pipeline: str, split: int) -> list:
        """The distinct stages of a layout, first stage of each kind, by stage index: pipeline rank
        ``i`` and the next ranks that hold the same layers, embedding and head have the same
        memory and FLOPs except for fewer microbatches in flight, so the first one bounds them."""
        key = (pp, v, schedules.placement_style(pipeline, v), split)
        got = self.layouts.get(key)
        if got is None:
            m = self.pr.model
            split = cm.split_layers(m.layers, pp, v, stage_split(self.pr, SPLITS[split], pp * v))
            seen, got = set(), []
            for st in cm.layouts_of(m, pipeline, pp, split):
                k = (st.layers, st.moe_layers, st.embedding, st.head)
                if k not in seen:
                    seen.add(k)
                    got.append(st)
            self.layouts[key] = got
        return got

    def stage_params(self, mesh: tuple, st) -> tuple[int, ...]:
        """(dense, expert) parameters of one GPU of stage ``st`` before ZeRO-3, and after it (the
        first, largest torch.chunk shard), then the linear parameters FP8 copies (before and after)."""
        pp, dp, cp, tp, ep, etp = mesh
        key = (dp, cp, tp, ep, etp, st.layers, st.moe_layers, st.embedding, st.head)
        got = self.params.get(key)
        if got is None:
            full = cm.stage_parts(self.pr.model, st, dp, cp, tp, ep, etp)
            z3 = cm.stage_parts(self.pr.model, st, dp, cp, tp, ep, etp, zero3=True)
            got = (sum(full.values()) - full["experts"], full["experts"],
                   sum(z3.values()) - z3["experts"], z3["experts"], cm.linear_params(full), cm.linear_params(z3))
            self.params[key] = got
        return got


# --- training ---------------------------------------------------------------------------------------

class TrainCosts:
    """Costs of every training candidate; ``cols`` holds the settings, the rest the estimate."""

    def __init__(self):
        self.cols: dict[str, np.ndarray] = {}
        self.enumerated = 0        # candidates the search decided on (bounded out or fully costed)
        self.bounded = 0           # of which the memory lower bound refused without the full model
        self.costed = 0            # costed in full
        self.meshes: list = []


def _layouts(pr: Problem, meshes):
    """The layout options (mesh index, pipeline, virtual stages, split) and, per option, the
    table of its stage classes: stage index, layers, MoE layers, embedding, head, validity and
    the parameters of one GPU (dense, expert, and their ZeRO-3 shards)."""
    shapes = _Shapes(pr)
    lo_mesh, lo_pipe, lo_v, lo_split, lo_cls = [], [], [], [], []
    for mi, mesh in enumerate(meshes):
        for pi, v, split in layout_options(pr, mesh[0]):
            lo_mesh.append(mi)
            lo_pipe.append(pi)
            lo_v.append(v)
            lo_split.append(split)
            lo_cls.append(shapes.classes(mesh[0], v, PIPELINES[pi], split))
    n_lo, K = len(lo_mesh), max((len(c) for c in lo_cls), default=0)
    ints = [np.zeros((n_lo, K), dtype=np.int64) for _ in range(3)]        # stage, layers, MoE layers
    flags = [np.zeros((n_lo, K), dtype=bool) for _ in range(3)]           # embedding, head, valid
    c_par = np.zeros((6, n_lo, K), dtype=np.float64)    # dense, expert, their ZeRO-3 shards, linear (both)
    for i, cls in enumerate(lo_cls):
        for k, st in enumerate(cls):
            ints[0][i, k], ints[1][i, k], ints[2][i, k] = st.stage, st.layers, st.moe_layers
            flags[0][i, k], flags[1][i, k], flags[2][i, k] = st.embedding, st.head, True
            c_par[:, i, k] = shapes.stage_params(meshes[lo_mesh[i]], st)
    return lo_mesh, lo_pipe, lo_v, lo_split, (*ints, *flags, c_par[:4], c_par[4:])


def train_costs(pr: Problem, efficiency: float | None = None, progress=None) -> TrainCosts:
    """Every training candidate of ``pr`` that fits in memory (``efficiency``: the profile's)."""
    efficiency = pr.profile.gemm_efficiency if efficiency is None else efficiency
    out = TrainCosts()
    out.meshes = meshes = mesh_shapes(pr)
    if not meshes:
        return out
    per = cm.state_bytes_per_param(pr.train.precision, pr.train.main_grads, pr.train.optimizer_state,
                                   pr.train.optimizer)
    cap = float(pr.cluster.gpu.memory)

    # 1. layout options (mesh, pipeline, virtual stages, split) and their stage classes
    lo_mesh, lo_pipe, lo_v, lo_split, tables = _layouts(pr, meshes)
    if not lo_mesh:
        return out
    c_stage, c_layers, c_moe, c_emb, c_head, c_valid, c_par, c_lin = tables
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
    out.enumerated = 0
    for z in zeros:
        w, g, o = cm.model_state_bytes(*c_par, z, lo_shard[:, None], lo_edp[:, None], per)
        state[z] = (w, g, o)
        allowed = np.ones(len(lo_mesh), dtype=bool)
        if z not in zero_options(pr, 2):                                 # P615 with a pipeline
            allowed = mesh_a[lo_mesh_a, 0] <= 1
        out.enumerated += int(per_s[allowed[s_lo]].sum())
        fit[z] = allowed & (np.where(c_valid, w + g + o, -np.inf).max(axis=1) <= cap)
    parts = [(np.nonzero(fit[z][s_lo])[0], z) for z in zeros]
    r_s = np.concatenate([p_ for p_, _ in parts])
    zero = np.concatenate([np.full(len(p_), z, dtype=np.int64) for p_, z in parts])
    out.bounded = out.enumerated - int(per_s[r_s].sum())

    # 4. expand the pairs that fit by (recompute, sequence parallel)
    t_mesh = lo_mesh_a[s_lo[r_s]]
    r2 = np.repeat(np.arange(len(r_s)), tcount[t_mesh])
    r_t = toff[t_mesh][r2] + _ramp(tcount[t_mesh])
    lo, r_b, zero = s_lo[r_s][r2], s_b[r_s][r2], zero[r2]
    mb, nmb, gb = bopts[r_b, 0], bopts[r_b, 1], bopts[r_b, 2]
    rc, sp = topts[r_t, 0], topts[r_t, 1]
    mi = lo_mesh_a[lo]
    pp, dp, cp, tp, ep, etp = (mesh_a[mi, j] for j in range(6))
    pipe, v = lo_pipe_a[lo], lo_v_a[lo]
    split = np.asarray(lo_split, dtype=np.int64)[lo]
    n = len(lo)
    out.costed = n
    if n == 0:
        return out

    # 5. the full model, in chunks (a progress callback sees each one)
    ctx = _Context(pr=pr, per=per, cap=cap, zeros=zeros, state=state, c_stage=c_stage, c_layers=c_layers,
                   c_moe=c_moe, c_emb=c_emb, c_head=c_head, c_valid=c_valid, c_par=c_par, c_lin=c_lin,
                   links=_axis_links(pr, meshes), efficiency=efficiency)
    rows = dict(lo=lo, zero=zero, mb=mb, m=nmb, gb=gb, recompute=rc, sp=sp, mesh=mi, pp=pp, dp=dp, cp=cp,
                tp=tp, ep=ep, etp=etp, pipeline=pipe, v=v, split=split)
    chunks = []
    for start in range(0, n, CHUNK):
        sel = slice(start, min(n, start + CHUNK))
        chunks.append(_cost_rows(ctx, {k: a[sel] for k, a in rows.items()}))
        if progress is not None:
            progress(min(n, start + CHUNK) / n)
    out.cols = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
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
    links: tuple
    efficiency: float


def _memory(ctx: _Context, r: dict):
    """(total bytes of every stage class, the most loaded class, its bytes) for rows ``r``."""
    m, lo, zero, tp = ctx.pr.model, r["lo"], r["zero"], r["tp"]
    n, K = len(lo), ctx.c_valid.shape[1]
    w, g, o = (np.empty((n, K)) for _ in range(3))
    for z in ctx.zeros:
        sel = zero == z
        if sel.any():
            w[sel], g[sel], o[sel] = (x[lo[sel]] for x in ctx.state[z])
    act_d, act_m = _layer_activations(ctx.pr, r["mb"], tp, r["cp"], r["etp"], r["recompute"], r["sp"])
    inflight = schedules.inflight_array(r["pipeline"][:, None], r["pp"][:, None], r["m"][:, None], r["v"][:, None],
                                        ctx.c_stage[lo])
    layers, moe = ctx.c_layers[lo], ctx.c_moe[lo]
    tr = ctx.pr.train
    act = cm.stage_activation_bytes(layers - moe, moe, act_d[:, None], act_m[:, None], inflight, ctx.c_emb[lo],
                                    ctx.c_head[lo], (m.seq_len / r["cp"])[:, None], r["mb"][:, None], m,
                                    tp[:, None], tr.offload_layers)
    comms = cm.nccl_communicators(r["pp"], r["dp"], r["cp"], tp, r["ep"], r["etp"], m.is_moe)
    ctx_b, nccl, frag = cm.overhead_bytes(ctx.pr.cluster, comms[:, None], act)
    total = w                           # w, g and o are this call's own arrays: summed in place
    total += g
    total += o
    total += act
    if tr.precision == "fp8":
        delta, cache = cm.fp8_weight_terms(tr, np.where((zero >= 3)[:, None], ctx.c_lin[1][lo], ctx.c_lin[0][lo]))
        total += delta + cache
    most = np.argmax(np.where(ctx.c_valid[lo], total + frag, -np.inf), axis=1)
    # the CUDA context and NCCL buffers are the same on every stage of a row: added to the most
    # loaded one, in the order Memory.total adds them
    rows = np.arange(n)
    return most, total[rows, most] + ((ctx_b + nccl[:, 0]) + frag[rows, most])


_FACTORS = np.array([cm.recompute_factors(name) for name in RECOMPUTE])   # (matmul, attention) per code


def _comm(ctx: _Context, r: dict, L_s, moe_s, most) -> tuple[dict, dict]:
    """Bytes per GPU per step on each axis, and how many collectives carry them, through the cost
    model's kernels, one call per (recompute, zero) group of rows."""
    pr = ctx.pr
    lo, rc, zero = r["lo"], r["recompute"], r["zero"]
    edp = cm.shard_groups(r["dp"], r["cp"], r["tp"], r["ep"], r["etp"])[1]
    comm = {ax: np.zeros(len(lo)) for ax in (*AXES, "dp_gather")}
    calls = {ax: np.zeros(len(lo)) for ax in AXES}
    for key in np.unique(rc * 4 + zero):
        sel = (rc * 4 + zero) == key
        got = cm.train_comm_bytes(
            pr.model, r["mb"][sel] * (pr.model.seq_len / r["cp"][sel]), L_s[sel], moe_s[sel], pp=r["pp"][sel],
            tp=r["tp"][sel], cp=r["cp"][sel], ep=r["ep"][sel], v=r["v"][sel], microbatches=r["m"][sel],
            wbytes=cm.dtype_bytes(pr.train.precision), recompute=RECOMPUTE[int(key) >> 2], sp=r["sp"][sel],
            dense_params=ctx.c_par[0][lo[sel], most[sel]], expert_params_=ctx.c_par[1][lo[sel], most[sel]],
            zero=int(key) & 3, n_dp=r["dp"][sel] * r["cp"][sel], n_exp=edp[sel], per=ctx.per)
        n_calls = cm.comm_calls(L_s[sel], moe_s[sel], r["m"][sel], r["v"][sel], r["cp"][sel], RECOMPUTE[int(key) >> 2])
        for ax in comm:
            comm[ax][sel] = got[ax]
        for ax in AXES:
            calls[ax][sel] = n_calls[ax]
    return comm, calls


def _comm_times(ctx: _Context, r: dict, comm: dict, calls: dict) -> dict:
    """Seconds of each axis's communication per step (:func:`parc.cost.comm.axis_time`)."""
    m, gpu = ctx.pr.model, ctx.pr.cluster.gpu
    local_t, intra, inter = ctx.links
    sizes = {"tp": r["tp"], "cp": r["cp"], "pp": r["pp"], "ep": r["ep"], "dp": r["dp"] * r["cp"]}
    ctime = {}
    for j, ax in enumerate(AXES):
        n = sizes[ax]
        t, _ = cm.axis_time(ax, comm[ax], n, calls[ax], local_t[r["mesh"], j], intra, inter, gpu.nvls)
        ctime[ax] = np.where((n > 1) & (ax != "ep" or m.is_moe), t, 0.0)
    return ctime


def _cost_rows(ctx: _Context, r: dict) -> dict:
    """The estimate of every row of ``r`` that fits in memory (the others are dropped)."""
    m, cl, pr = ctx.pr.model, ctx.pr.cluster, ctx.pr
    most, mem_total = _memory(ctx, r)
    keep = np.nonzero(mem_total <= ctx.cap)[0]
    if len(keep) < len(most):   # only what fits is costed further
        r = {k: a[keep] for k, a in r.items()}
        most, mem_total = most[keep], mem_total[keep]
    lo, rows = r["lo"], np.arange(len(most))
    layers, moe, head = ctx.c_layers[lo], ctx.c_moe[lo], ctx.c_head[lo]
    # seconds per microbatch of every stage class (at the rates of its GEMM shapes), the slowest one
    f = _FACTORS[r["recompute"]]
    tokens = r["mb"] * (m.seq_len / r["cp"])
    rates = [np.asarray(x)[:, None] for x in np.broadcast_arrays(*cm.stage_rates(
        m, tokens, r["tp"], r["etp"], r["ep"], cl.gpu, pr.train.precision, pr.profile, ctx.efficiency,
        pr.train.flash_attention))]
    share = schedules.microbatch_share_array(r["pipeline"])       # DualPipe: half a rank's layers
    gemm, attn = cm.stage_compute_time(m, tokens[:, None], r["tp"][:, None], rates, layers - moe, moe, head,
                                       f[:, 0:1], f[:, 1:2])
    gemm, attn = share[:, None] * gemm, share[:, None] * attn
    crit = np.argmax(np.where(ctx.c_valid[lo], gemm + attn, -np.inf), axis=1)
    comm, calls = _comm(ctx, r, layers[rows, crit] * share, moe[rows, crit] * share, most)
    ctime = _comm_times(ctx, r, comm, calls)
    # step time, MFU (on the BF16 peak)
    bub = schedules.bubble_array(r["pipeline"], r["pp"], r["m"], r["v"])
    gemm, attn = gemm[rows, crit] * r["m"], attn[rows, crit] * r["m"]
    gather = np.where(comm["dp"] > 0, ctime["dp"] * comm["dp_gather"] / np.maximum(comm["dp"], 1e-300), 0.0)
    exposed = cm.exposed_comm(ctime, gemm, attn, ctime["dp"] - gather, gather, r["m"], pr.train, pr.profile.overlap)
    step = cm.step_time(gemm + attn, exposed, bub)
    tokens = r["gb"] * m.seq_len
    mflops = _per_unit(lambda k: cm.model_flops(m, k), tokens)
    cols = {k: a for k, a in r.items() if k != "lo"}
    cols.update(step_time=step, tokens_per_second=tokens / step, mfu=mflops / (step * cl.world * cl.gpu.flops),
                bubble=bub, memory=mem_total, compute=gemm + attn)
    for ax in AXES:
        cols[f"t_{ax}"] = ctime[ax]
    return cols


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
    for gkey in np.unique(groups):
        sel = groups == gkey
        r = RECOMPUTE[int(rc[sel][0])]
        s_on = bool(spe[sel][0])
        kw = dict(t=tp[sel], sp=s_on, recompute=r, cp=cp[sel], ffn=m.ffn_hidden, mlp=m.mlp,
                  kv_heads=m.kv_heads, head_dim=cm.head_dim(m), flash=True,
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
