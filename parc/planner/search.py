"""The search: enumerate, cost in bulk, rank, and check the plans it reports with the full rules."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Optional

import numpy as np

from parc.cost import estimate as cm
from parc.language.diagnostics import ERROR
from parc.cost.engine import max_model_len, memory_fraction
from parc.planner.inputs import Problem, problem as make_problem
from parc.planner.columns import Cols, row, take
from parc.planner.plans import Candidate, build_plan
from parc.planner.space import PIPELINES, RECOMPUTE, SPLITS, mesh_shapes

# Rank keys compare costs to a relative 1e-9: closer values are a tie, broken by the next key.
_RESOLUTION = 1e9
MAX_REJECTED_WALK = 2000   # ranked candidates the rules may refuse in a row before the walk stops

Progress = Callable[[float, str], None]

# column -> record key, in the order records show them
RECORD_NAMES = {"pp": "pp", "dp": "dp", "cp": "cp", "tp": "tp", "ep": "ep", "etp": "etp", "pipeline": "pipeline",
                "v": "virtual_stages", "mb": "micro_batch", "m": "microbatches", "gb": "global_batch",
                "split": "layers", "zero": "zero", "recompute": "recompute", "sp": "sequence_parallel",
                "max_num_seqs": "max_num_seqs", "step_time": "step_time", "tokens_per_second": "tokens_per_second",
                "throughput": "tokens_per_second", "latency": "latency", "mfu": "mfu", "bubble": "bubble",
                "memory": "memory_total", "compute": "compute_time", "t_tp": "comm_tp", "t_cp": "comm_cp",
                "t_dp": "comm_dp", "t_pp": "comm_pp", "t_ep": "comm_ep"}


@dataclass
class SearchResult:
    """What :func:`search` found. ``plans`` are the reported plans, best first, each checked by
    the full rule set and costed by ``estimate``; ``columns`` holds every candidate that fits
    (numpy arrays in rank order) for sweeps and plots, ``records()`` the same as dicts."""

    problem: Problem
    mode: str
    candidates_evaluated: int = 0     # plans decided on: refused by the memory bound or costed in full
    costed: int = 0                   # costed by the full model
    valid: int = 0                    # fit in memory and pass the rules the search models
    seconds: float = 0.0
    plans: list[Candidate] = field(default_factory=list)
    rejected: list[tuple[Candidate, list[str]]] = field(default_factory=list)
    truncated: bool = False           # the walk stopped before finding `top` plans the rules accept
    raw: Cols = field(default_factory=dict, repr=False)   # columns, unordered (a Columns in training)
    _order: Optional[np.ndarray] = field(default=None, repr=False)
    _sorted: Optional[dict] = field(default=None, repr=False)
    least_memory: Optional[float] = None   # with no plan: the least memory per GPU any candidate needs
    fits_on_nodes: Optional[int] = None     # with no plan: the fewest nodes of this kind on which one fits

    @property
    def order(self) -> np.ndarray:
        """Every candidate that fits, as indices into ``raw`` in rank order (sorted on first use: the
        search itself ranks only its head, :func:`best_first`)."""
        if self._order is None:
            n = len(self.raw["step_time"]) if self.raw else 0
            self._order = (np.zeros(0, dtype=np.int64) if not n else
                           train_order(self.raw, self.problem.cluster.gpu.memory) if self.mode == "train"
                           else serve_order(self.raw))
        return self._order

    @property
    def columns(self) -> Cols:
        """Every candidate that fits, one numpy array per setting and cost, in rank order."""
        if self._sorted is None:
            self._sorted = take(self.raw, self.order)
        return self._sorted

    @property
    def best(self) -> Optional[Candidate]:
        return self.plans[0] if self.plans else None

    def plan(self, i: int = 0):
        """The full :class:`~parc.model.plan.Plan` of reported plan ``i``."""
        return build_plan(self.problem, self.plans[i])

    def records(self) -> list[dict]:
        """Every candidate that fits, in rank order, as plain dicts with :class:`Candidate`'s names
        (``comm_tp``… for the communication time per axis): for a notebook,
        ``pandas.DataFrame(result.records())``."""
        cols = self.columns
        names = {"pipeline": PIPELINES, "recompute": RECOMPUTE, "split": SPLITS}
        keys = [k for k in RECORD_NAMES if k in cols]
        lists = []
        for k in keys:
            vals = cols[k].tolist()
            if k in names:
                vals = [names[k][x] for x in vals]
            elif k == "sp":
                vals = [bool(x) for x in vals]
            lists.append(vals)
        n = len(lists[0]) if lists else 0
        keys = ["rank"] + [RECORD_NAMES[k] for k in keys]
        return [dict(zip(keys, row)) for row in zip(range(1, n + 1), *lists)]

    def lost_on(self, i: int) -> Optional[tuple[str, float]]:
        """Why reported plan ``i`` ranks below plan 0: the cost that grew most, and by how much
        (seconds per step in training; for serving a ratio of throughput)."""
        if i <= 0 or i >= len(self.plans):
            return None
        a, b = self.plans[0], self.plans[i]
        if self.mode == "serve":
            conc_a, conc_b = a.dp * a.max_num_seqs / a.pp, b.dp * b.max_num_seqs / b.pp
            if conc_b < conc_a and conc_a / conc_b >= b.step_time / a.step_time:
                return ("sequences in flight", conc_b / conc_a)
            return ("decode step", b.step_time / a.step_time if a.step_time else 1.0)
        da, db = breakdown(a), breakdown(b)
        deltas = {k: db[k] - da[k] for k in da}
        k = max(deltas, key=lambda x: (deltas[x], x))
        if deltas[k] <= 0:
            return ("tie", 0.0)
        return (k, deltas[k])

    def to_json(self) -> dict:
        pr = self.problem
        plans = []
        for c in self.plans:
            d = {"rank": c.rank, "mesh": c.mesh, "etp": c.etp, "virtual_stages": c.virtual_stages,
                 "micro_batch": c.micro_batch, "microbatches": c.microbatches, "global_batch": c.global_batch,
                 "schedule": c.pipeline, "layers": c.layers, "zero": c.zero, "recompute": c.recompute,
                 "sequence_parallel": c.sequence_parallel, "step_time": c.step_time,
                 "tokens_per_second": c.tokens_per_second, "mfu": c.mfu, "bubble_fraction": c.bubble,
                 "compute_time": c.compute_time, "comm_time": dict(c.comm_time),
                 "memory_per_gpu": {"total": int(c.memory_total), "capacity": int(c.memory_capacity)},
                 "headroom": c.headroom, "warnings": list(c.warnings)}
            if self.mode == "serve":
                d.update(schedule=None, virtual_stages=None, micro_batch=None, microbatches=None,
                         global_batch=None, zero=None, recompute=None, sequence_parallel=None, mfu=None,
                         max_num_seqs=c.max_num_seqs, throughput=c.tokens_per_second, latency=c.latency)
            lost = self.lost_on(c.rank - 1)
            d["lost_on"] = {"cost": lost[0], "by": lost[1]} if lost else None
            plans.append(d)
        return {"mode": self.mode, "model": pr.model.name, "cluster": pr.cluster.name,
                "world_size": pr.cluster.world, "global_batch": pr.global_batch if self.mode == "train" else None,
                "seq_len": pr.model.seq_len if self.mode == "train" else max_model_len(pr),
                "candidates_evaluated": self.candidates_evaluated, "costed": self.costed, "valid": self.valid,
                "rejected_by_rules": len(self.rejected), "truncated": self.truncated, "seconds": self.seconds,
                "least_memory": self.least_memory, "fits_on_nodes": self.fits_on_nodes, "plans": plans}


def breakdown(c: Candidate) -> dict[str, float]:
    """A training step split into the costs it adds up to (seconds): compute, the pipeline
    bubble, the communication of each axis that compute does not hide (``Estimate.comm_exposed``:
    the plan's overlap settings decide)."""
    ct = c.comm_exposed or c.comm_time
    inner = c.compute_time + sum(ct.get(ax, 0.0) for ax in ("tp", "cp", "ep", "pp"))
    stretched = inner / (1 - c.bubble) if c.bubble < 1 else inner
    out = {"compute": c.compute_time, "bubble": stretched - inner}
    for ax in ("tp", "cp", "ep", "pp"):
        out[f"{ax} communication"] = ct.get(ax, 0.0)
    out["dp communication"] = max(0.0, c.step_time - stretched)
    return out


def _q(x: np.ndarray) -> np.ndarray:
    """Costs as integers at a relative resolution of 1e-9 (ties below it are ties)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 0, np.round(np.log(np.maximum(x, 1e-300)) * _RESOLUTION), -2**62).astype(np.int64)


def over_headroom(memory, capacity: float) -> np.ndarray:
    """Whether a candidate leaves less memory free than P405 asks (``parc.rules.memory.HEADROOM``):
    runs estimated above that share of capacity have run out of memory, none below."""
    from parc.rules.memory import HEADROOM

    return np.asarray(memory) > (1 - HEADROOM) * capacity


def _primary(cols: dict, capacity: float) -> np.ndarray:
    """The rank's leading keys in one integer: plans within the memory headroom before those
    that are not, then time per sequence."""
    return _q(cols["step_time"] / cols["gb"]) + over_headroom(cols["memory"], capacity) * (1 << 61)


def train_order(cols: dict, capacity: float) -> np.ndarray:
    """Rank order of training candidates: first those that leave the memory headroom P405 asks
    for, then time per sequence (step time for the requested global batch), then memory per GPU,
    then the settings (fewer stages, then smaller degrees first)."""
    settings = [cols[k] for k in ("pp", "v", "tp", "cp", "dp", "ep", "etp", "split", "pipeline", "mb", "zero",
                                  "recompute", "sp")]
    return np.lexsort(_packed(settings)[::-1] + [_q(cols["memory"]), _primary(cols, capacity)])


def best_first(cols: dict, capacity: float, head: int):
    """Indices of training candidates in :func:`train_order`, generated lazily: the ``head``
    best by the leading key (and every tie with the last of them) are ranked first, by
    ``np.argpartition`` and a sort of those alone; the whole order only where a walk goes past them."""
    n = len(cols["step_time"])
    key = _primary(cols, capacity)
    if head < n:
        cut = key[np.argpartition(key, head)[head]]
        part = np.nonzero(key <= cut)[0]
        sub = take(cols, part)
        yield from part[train_order(sub, capacity)].tolist()
        if len(part) >= n:
            return
        rest = train_order(cols, capacity)[len(part):]
    else:
        rest = train_order(cols, capacity)
    yield from rest.tolist()


def _packed(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Non-negative integer sort keys (most significant first) packed into as few int64 keys as
    their ranges allow, keeping their lexicographic order."""
    out, cur, used = [], None, 0
    for k in keys:
        bits = max(1, int(k.max()).bit_length()) if len(k) else 1
        if cur is None or used + bits > 62:
            if cur is not None:
                out.append(cur)
            cur, used = k.astype(np.int64), bits
        else:
            cur = (cur << bits) | k
            used += bits
    if cur is not None:
        out.append(cur)
    return out


def serve_order(cols: dict) -> np.ndarray:
    """Rank order of serving candidates: throughput (highest first), latency, memory, settings."""
    keys = [cols[k] for k in ("etp", "ep", "dp", "tp", "pp")]
    keys += [_q(cols["memory"]), _q(cols["latency"]), -_q(cols["throughput"])]
    return np.lexsort(keys)


def candidate_from(cols: dict, i: int, rank: int, mode: str) -> Candidate:
    g = row(cols, i)
    if mode == "serve":
        return Candidate(rank=rank, pp=g["pp"], dp=g["dp"], cp=g["cp"], tp=g["tp"], ep=g["ep"], etp=g["etp"],
                         layers=SPLITS[g["split"]], max_num_seqs=g["max_num_seqs"])
    return Candidate(rank=rank, pp=g["pp"], dp=g["dp"], cp=g["cp"], tp=g["tp"], ep=g["ep"], etp=g["etp"],
                     pipeline=PIPELINES[g["pipeline"]], virtual_stages=g["v"], micro_batch=g["mb"],
                     microbatches=g["m"], global_batch=g["gb"], layers=SPLITS[g["split"]], zero=g["zero"],
                     recompute=RECOMPUTE[g["recompute"]], sequence_parallel=bool(g["sp"]))


def fill_costs(pr: Problem, c: Candidate, plan=None, est=None, efficiency: Optional[float] = None
               ) -> Candidate:
    """Set ``c``'s costs from the cost model's ``estimate`` of its plan."""
    plan = plan or build_plan(pr, c)
    if efficiency is None:
        efficiency = pr.profile.gemm_efficiency
    est = est or cm.estimate(plan, efficiency)
    c.memory_total = est.memory.total
    c.memory_capacity = est.memory.capacity
    c.comm_time = {ax: est.comm_time.get(ax, 0.0) for ax in ("tp", "cp", "dp", "pp", "ep")}
    c.comm_exposed = {ax: est.comm_exposed.get(ax, 0.0) for ax in ("tp", "cp", "dp", "pp", "ep")}
    if pr.mode == "train":
        c.step_time, c.tokens_per_second, c.mfu = est.step_time, est.tokens_per_second, est.mfu
        c.bubble, c.compute_time = est.bubble_fraction, est.compute_time
    else:
        from parc.cost.serving import serve_perf

        perf = serve_perf(plan, est, efficiency)
        c.step_time, c.latency, c.tokens_per_second = perf.step_time, perf.latency, perf.throughput
    return c


# Rules whose verdict no plan shape changes: a key only the user can give (the script torchrun
# starts). The search ranks shapes; ``parc plan`` names the missing key when it writes the spec.
NOT_A_SHAPE = frozenset({"P602"})


def check_candidate(pr: Problem, c: Candidate, targets: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(error codes, warning codes) the full rule set gives ``c``'s plan (but
    :data:`NOT_A_SHAPE`)."""
    from parc.rules import run_rules
    from parc.targets import load_rules

    load_rules()

    plan = build_plan(pr, c)
    diags = run_rules(plan, targets)
    errs = sorted({d.code for d in diags if d.severity == ERROR and d.code not in NOT_A_SHAPE})
    warns = sorted({d.code for d in diags if d.severity != ERROR})
    return errs, warns


# --- the searches ------------------------------------------------------------------------------------

def _train_columns(pr: Problem, progress, efficiency):
    from parc.planner.vector import train_costs

    tc = train_costs(pr, efficiency, progress=(lambda f: progress(f, "costing")) if progress else None)
    return tc.cols, tc.enumerated, tc.costed


def _serve_columns(pr: Problem, progress, efficiency):
    """Serving candidates are few (mesh shapes only): each is costed by ``estimate`` itself."""
    from parc.cost.serving import serve_perf

    meshes = mesh_shapes(pr)
    rows = []
    fixed_seqs = pr.fixed.get("serve.max_num_seqs")
    for i, (pp, dp, cp, tp, ep, etp) in enumerate(meshes):
        from parc.planner.space import _split_mode

        split = _split_mode(pr, pp)
        if split is None:
            continue
        c = Candidate(rank=0, pp=pp, dp=dp, cp=cp, tp=tp, ep=ep, etp=etp, layers=SPLITS[split], max_num_seqs=1)
        plan = build_plan(pr, c)
        est = cm.estimate(plan, efficiency, cache=False)
        seqs = est.max_concurrent_seqs
        if seqs < 1 or est.memory.weights > memory_fraction(plan) * est.memory.capacity:
            continue
        if fixed_seqs is not None:   # a spec's max_num_seqs is kept; the memory may hold fewer
            seqs = fixed_seqs
        plan.serve.max_num_seqs = seqs
        est = cm.estimate(plan, efficiency, cache=False)   # the engine's start-up depends on max_num_seqs
        perf = serve_perf(plan, est, efficiency)
        rows.append((pp, dp, cp, tp, ep, etp, split, seqs, perf.throughput, perf.latency, perf.step_time,
                     est.memory.total))
        if progress is not None and i % 16 == 0:
            progress((i + 1) / len(meshes), "costing")
    names = ("pp", "dp", "cp", "tp", "ep", "etp", "split", "max_num_seqs", "throughput", "latency", "step_time",
             "memory")
    arr = list(zip(*rows)) if rows else [[] for _ in names]
    cols = {}
    for k, a in zip(names, arr):
        cols[k] = np.asarray(a, dtype=np.float64 if k in ("throughput", "latency", "step_time", "memory")
                             else np.int64)
    return cols, len(meshes), len(meshes)


def search_problem(pr: Problem, *, top: Optional[int] = 10, targets: Iterable[str] = (),
                   progress: Optional[Progress] = None, efficiency: Optional[float] = None) -> SearchResult:
    """Search the plans of ``pr``. ``top`` plans are checked by the full rules and reported
    (``None``: every candidate that fits). See :func:`search`. ``efficiency`` defaults to the
    problem's profile."""
    t0 = time.perf_counter()
    if efficiency is None:
        efficiency = pr.profile.gemm_efficiency
    tnames = list(dict.fromkeys(list(pr.extra_targets) + list(targets)))
    if tnames != list(pr.extra_targets):
        pr = replace(pr, extra_targets=tuple(tnames))
    if pr.mode == "train":
        cols, evaluated, costed = _train_columns(pr, progress, efficiency)
    else:
        cols, evaluated, costed = _serve_columns(pr, progress, efficiency)
    n = len(cols["step_time"]) if cols else 0
    res = SearchResult(pr, pr.mode, candidates_evaluated=evaluated, costed=costed, valid=n, raw=cols)
    want = n if top is None else min(top, n)
    if n and progress is not None:
        progress(1.0, "ranking")
    if not n or top is None or pr.mode != "train":
        walk = iter(res.order.tolist())
    else:   # the head of the ranking alone, until the walk needs more of it
        walk = best_first(cols, pr.cluster.gpu.memory, max(64, 8 * want))
    misses = 0
    for i in walk:
        if len(res.plans) >= want:
            break
        c = candidate_from(cols, int(i), len(res.plans) + 1, pr.mode)
        errs, warns = check_candidate(pr, c, tnames)
        if errs:
            res.rejected.append((c, errs))
            misses += 1
            if misses >= MAX_REJECTED_WALK and top is not None:
                res.truncated = True
                break
            continue
        misses = 0
        c.warnings = warns
        fill_costs(pr, c, efficiency=efficiency)
        res.plans.append(c)
        if progress is not None and want:
            progress(len(res.plans) / want, "checking")
    if not res.plans and pr.mode == "train":
        _size_up(res, efficiency)
    res.seconds = time.perf_counter() - t0
    return res


def _size_up(res: SearchResult, efficiency, most: int = 16) -> None:
    """With no plan that fits: the least memory per GPU any candidate needs, and the fewest nodes
    of the cluster's kind (doubling, up to 2^``most`` times as many) on which one fits and passes
    the rules the search models."""
    from parc.planner.vector import train_costs

    pr = res.problem
    tc = train_costs(pr, efficiency, least=True)
    res.least_memory = tc.least_memory
    nodes = pr.cluster.nodes
    for _ in range(most):
        nodes *= 2
        bigger = replace(pr, cluster=replace(pr.cluster, nodes=nodes), memo={})
        if len(train_costs(bigger, efficiency).cols.get("pp", ())):
            res.fits_on_nodes = nodes
            return


def search(model, cluster=None, mode: str = "train", *, seq_len: Optional[int] = None,
           global_batch: Optional[int] = None, top: Optional[int] = 10, targets: Iterable[str] = (),
           progress: Optional[Progress] = None, efficiency: Optional[float] = None, root=None,
           **problem_fields) -> SearchResult:
    """Search every valid plan for ``model`` on ``cluster`` and rank them by the cost model.

    ``model`` is a :class:`~parc.model.plan.Model`, a preset name or a ``.par`` file holding a
    ``model`` block (or a :class:`Problem`, then ``cluster`` is not given); ``cluster`` a
    :class:`~parc.model.plan.Cluster` or a ``.par`` file. ``mode`` is ``"train"`` (ranked by step
    time for ``global_batch`` sequences of ``seq_len`` tokens) or ``"serve"`` (ranked by
    throughput at the memory limit, ``seq_len`` being ``max_model_len``). Fields of
    :class:`Problem` (``fixed={"mesh.tp": 8}``, ``train=Train(...)``, ...) pass through.

    Returns a :class:`SearchResult`: ``plans`` (the best ``top``, each passing the full rule set
    for the named ``targets``), and ``columns``/``records()`` with every candidate that fits.
    """
    if isinstance(model, Problem):
        pr = model
    else:
        pr = make_problem(model, cluster, mode, seq_len=seq_len, global_batch=global_batch, root=root,
                          **problem_fields)
    return search_problem(pr, top=top, targets=targets, progress=progress, efficiency=efficiency)
