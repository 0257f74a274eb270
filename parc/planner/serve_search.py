"""``parc plan --serve --objective ...``: the serving deployment that meets a latency target with
the fewest GPUs, or serves the most output tokens per GPU.

A deployment is either one mesh of ``n`` engine replicas (prefill and decode on the same GPUs),
or two pools (``n_p`` prefill instances and ``n_d`` decode instances, each pool with its own
layout, the KV cache of each prompt sent from one to the other). Every engine layout comes from
:mod:`parc.planner.serve_space` (the degrees the rules accept), every instance's memory, prefill
and decode step from :mod:`parc.planner.serve_costs`; the deployments built from them are
evaluated together as numpy arrays. With ``C`` requests in flight, each ``P`` prompt and ``O``
output tokens, and ``r`` data-parallel ranks per instance (1, or dp with data-parallel attention):

* one mesh: a rank holds ``b = ⌈C / (n·r)⌉`` sequences and prefills each of its requests between
  decode steps, so one turn of its ``b`` requests takes ``b·t_prefill + O·t_step(b)``; a request
  waits ``t_prefill + t_step`` for its first token (TTFT) and ``t_step + (b − 1)·t_prefill / O``
  per output token after it (TPOT, the prefills of its neighbours spread over its tokens);
* two pools: the decode ranks hold ``b = ⌈C / (n_d·r_d)⌉`` sequences and TPOT is ``t_step(b)``;
  TTFT is ``t_prefill + t_transfer + t_step(b)`` while the prefill pool keeps up, and a request
  comes round every ``R = max(TTFT + O·TPOT, C·t_prefill / (n_p·r_p))`` seconds (when the
  prefill pool is the bottleneck, requests queue for it and TTFT grows to ``R − O·TPOT``);
* throughput is ``C·O / R`` output tokens/s (Little's law over the ``C`` requests in flight).

Without a concurrency each rank holds as many sequences as its memory and the TPOT target
allow (the largest such ``b``, found by bisection: TPOT grows with ``b``), one mesh takes the
whole cluster, and a prefill pool is sized to keep its decode pool fed. With one, the prefill
pools tried are one instance and the counts around the fewest that keep up or meet TTFT
(:func:`_prefill_counts`: more only add GPUs), so the pairs of pools grow with the layouts and
the decode instance counts, not with their product with the prefill counts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np

from parc.cost.serving import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS
from parc.planner.inputs import Problem
from parc.planner.serve_costs import InstanceCost, kv_transfer_time, largest
from parc.planner.serve_space import instance_costs

OBJECTIVES = ("min-gpus", "tokens-per-gpu")
# the workload when neither the spec nor a flag gives one: explain's (vLLM's benchmark's)
DEFAULT_PROMPT, DEFAULT_OUTPUT = DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS
MAX_REJECTED_WALK = 200


@dataclass
class Goal:
    """What the search optimises and the workload it serves."""
    objective: str = "tokens-per-gpu"
    ttft: Optional[float] = None           # seconds, at most
    tpot: Optional[float] = None           # seconds per output token, at most
    concurrency: Optional[int] = None      # requests in flight
    prompt_tokens: int = DEFAULT_PROMPT
    output_tokens: int = DEFAULT_OUTPUT
    disaggregate: bool = True              # also try prefill/decode pools

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")

    @property
    def context(self) -> int:
        """Tokens of a sequence's KV cache midway through its output."""
        return self.prompt_tokens + self.output_tokens // 2

    def targets_text(self) -> str:
        from parc.units import seconds_short

        parts = [f"TTFT ≤ {seconds_short(self.ttft)}"] if self.ttft else []
        parts += [f"TPOT ≤ {seconds_short(self.tpot)}"] if self.tpot else []
        return " and ".join(parts) or "no latency target"


def workload_goal(pr: Problem, objective: str = "tokens-per-gpu", **kw) -> Goal:
    """A :class:`Goal` whose workload defaults to the spec's ``serve`` keys, then to vLLM's
    serving benchmark's random requests (1,024 prompt and 128 output tokens, as explain assumes),
    shortened in proportion to fit ``max_model_len``."""
    srv = pr.serve
    prompt = kw.pop("prompt_tokens", None) or srv.prompt_tokens
    output = kw.pop("output_tokens", None) or srv.output_tokens
    conc = kw.pop("concurrency", None) or srv.concurrency
    from parc.cost.engine import max_model_len

    scale = min(1.0, max_model_len(pr) / (DEFAULT_PROMPT + DEFAULT_OUTPUT))
    prompt = prompt or max(1, int(DEFAULT_PROMPT * scale))
    output = output or max(1, int(DEFAULT_OUTPUT * scale))
    return Goal(objective=objective, prompt_tokens=int(prompt), output_tokens=int(output),
                concurrency=int(conc) if conc else None, **kw)


@dataclass
class Deployment:
    """One way to serve the workload, with its estimated latency and throughput. ``prefill`` is
    None for one mesh of ``instances`` replicas (``decode`` then names their layout)."""
    decode: InstanceCost
    instances: int
    prefill: Optional[InstanceCost] = None
    prefill_instances: int = 0
    batch: float = 0.0             # decode requests per step of a decode rank (the scheduler's steady state)
    users: int = 0                 # requests in flight over the deployment (the written concurrency)
    gpus: int = 0
    ttft: float = 0.0
    tpot: float = 0.0
    throughput: float = 0.0        # output tokens/s of the deployment
    memory: float = 0.0            # bytes per GPU, the fullest decode GPU at the workload
    rank: int = 0
    warnings: list = field(default_factory=list)

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def tokens_per_gpu(self) -> float:
        return self.throughput / self.gpus if self.gpus else 0.0

    @property
    def capacity(self) -> float:
        return self.decode.memory_capacity

    def label(self) -> str:
        if not self.disaggregated:
            return f"{self.instances} × [{self.decode.shape.label()}]"
        return (f"prefill {self.prefill_instances} × [{self.prefill.shape.label()}] + "
                f"decode {self.instances} × [{self.decode.shape.label()}]")

    def to_json(self) -> dict:
        def pool(ic, n):
            s = ic.shape
            return {"instances": n, "tp": s.tp, "pp": s.pp, "dp": s.dp, "ep": s.ep, "dcp": s.dcp,
                    "dp_attention": s.dp_attention, "gpus_per_instance": s.gpus}
        return {"rank": self.rank, "disaggregated": self.disaggregated, "gpus": self.gpus,
                "prefill": pool(self.prefill, self.prefill_instances) if self.prefill else None,
                "decode": pool(self.decode, self.instances), "batch_per_rank": self.batch,
                "ttft": self.ttft, "tpot": self.tpot, "throughput": self.throughput,
                "tokens_per_gpu": self.tokens_per_gpu,
                "memory_per_gpu": {"total": int(self.memory), "capacity": int(self.capacity)},
                "warnings": list(self.warnings)}


@dataclass
class ServeResult:
    """What :func:`search_serving` found: ``plans`` (best first, each passing ``parc check``),
    how many deployments were evaluated and why the others failed, and when none meets the
    goal, the ``closest``."""
    problem: Problem
    goal: Goal
    mode: str = "serve"
    evaluated: int = 0
    feasible: int = 0
    failed: dict = field(default_factory=dict)        # reason -> deployments
    plans: list = field(default_factory=list)
    rejected: list = field(default_factory=list)      # (deployment, error codes)
    closest: Optional[Deployment] = None
    seconds: float = 0.0

    @property
    def best(self) -> Optional[Deployment]:
        return self.plans[0] if self.plans else None

    def to_json(self) -> dict:
        g, pr = self.goal, self.problem
        return {"mode": "serve", "objective": g.objective, "model": pr.model.name, "cluster": pr.cluster.name,
                "world_size": pr.cluster.world,
                "workload": {"prompt_tokens": g.prompt_tokens, "output_tokens": g.output_tokens,
                             "concurrency": g.concurrency, "ttft": g.ttft, "tpot": g.tpot},
                "evaluated": self.evaluated, "feasible": self.feasible, "failed": dict(self.failed),
                "rejected_by_rules": len(self.rejected), "seconds": self.seconds,
                "plans": [d.to_json() for d in self.plans],
                "closest": self.closest.to_json() if self.closest else None}


# --- deployments as arrays --------------------------------------------------------------------------

class _Table:
    """Deployments as columns: which instance costs, how many of each, and the estimates."""

    KEYS = ("dec", "n", "pre", "n_p", "batch", "gpus", "ttft", "tpot", "tput", "memory", "fits", "users")

    def __init__(self):
        self.parts: dict[str, list] = {k: [] for k in self.KEYS}

    def add(self, **cols):
        size = max(np.size(v) for v in cols.values())
        for k in self.KEYS:
            self.parts[k].append(np.broadcast_to(np.asarray(cols[k]), (size,)))

    def columns(self) -> dict[str, np.ndarray]:
        return {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in self.parts.items()}


def _fits(ic: InstanceCost) -> bool:
    """Whether the instance's KV cache holds one max_model_len request (else the engine refuses
    to start: P402)."""
    return ic.kv_capacity_tokens >= ic.inst.limits.max_model_len


def _meets(goal: Goal, ttft, tpot):
    ok = np.ones(np.shape(ttft), dtype=bool)
    if goal.ttft is not None:
        ok &= np.asarray(ttft) <= goal.ttft
    if goal.tpot is not None:
        ok &= np.asarray(tpot) <= goal.tpot
    return ok


def _colocated(t: _Table, ic: InstanceCost, goal: Goal, world: int, per: int):
    """One mesh of ``n`` replicas of ``ic``: the scheduler of each rank under its share of the
    closed loop (:func:`parc.cost.scheduler.closed_loop`)."""
    from parc.cost.scheduler import closed_loop

    P, O = goal.prompt_tokens, goal.output_tokens
    r, g = ic.shape.ranks, ic.shape.gpus
    most = 1 if ic.shape.dp_attention else world // g
    if most < 1:
        return
    b = ic.batcher(P, O)
    alone = ic.prefill(P, O)["alone"]
    if goal.ttft is not None and alone > goal.ttft:     # its prefill alone misses TTFT
        t.add(dec=ic, n=most, pre=None, n_p=0, batch=0.0, gpus=most * g, ttft=alone, tpot=np.inf, tput=0.0,
              memory=ic.weights, fits=True, users=1)
        return
    if goal.concurrency is not None:
        n = np.arange(1, most + 1)
        n = n[(n * g <= per) | (n * g % per == 0)]   # whole nodes, or part of one
        users = goal.concurrency / (n * r)
    else:   # the most users per rank the targets allow (latencies grow with the users)
        tried = np.unique(np.rint(np.geomspace(1, max(1, int(b.running_cap)), 64)))
        ok = _meets(goal, *_latencies(closed_loop(b, tried)))
        best = tried[ok].max() if ok.any() else 1.0
        n, users = np.array([most]), np.array([float(best)])
    st = closed_loop(b, users)
    t.add(dec=ic, n=n, pre=None, n_p=0, batch=st.batch, gpus=n * g, ttft=st.ttft, tpot=st.tpot,
          tput=n * r * st.output_tokens_per_s, memory=ic.memory_at(np.minimum(users, b.running_cap), P + O),
          fits=_fits(ic), users=np.rint(users * n * r))


def _latencies(st):
    return st.ttft, st.tpot


def _pool_nodes(gpus, per: int):
    return -(-gpus // per)


def _disaggregated(t: _Table, pre: list[InstanceCost], dec: list[InstanceCost], goal: Goal, pr: Problem):
    """Every prefill pool × decode pool that fits the cluster's nodes, as arrays."""
    P, O = goal.prompt_tokens, goal.output_tokens
    xfer = np.array([kv_transfer_time(pr, p, P) for p in pre])
    alone = np.array([p.prefill(P, O)["alone"] for p in pre])
    cap = np.array([p.prefill(P, O)["capacity"] for p in pre])
    for d in dec:
        same = [i for i, p in enumerate(pre) if p.shape.dp_attention == d.shape.dp_attention]
        if same:
            _pools_for(t, [pre[i] for i in same], d, goal, pr, xfer[same], alone[same], cap[same])


def _pools_for(t: _Table, pre: list[InstanceCost], d: InstanceCost, goal: Goal, pr: Problem, xfer: np.ndarray,
               alone: np.ndarray, cap: np.ndarray):
    """Decode pools of ``d``'s layout with every prefill pool of ``pre`` (one `dp_attention`
    setting serves both pools; ``xfer``, ``alone`` and ``cap`` each prefill layout's KV transfer,
    prompt alone and full-load rate), each evaluated by :func:`parc.cost.scheduler.pooled` at the
    goal's users (or, without a concurrency, at the users that fill the decode ranks to the TPOT
    target)."""
    from parc.cost.scheduler import pooled

    cl = pr.cluster
    P, O, per = goal.prompt_tokens, goal.output_tokens, cl.gpus_per_node
    bd = d.batcher(P, O)
    p_r = np.array([p.shape.ranks for p in pre])
    p_g = np.array([p.shape.gpus for p in pre])
    n_d = np.arange(1, cl.world // d.shape.gpus + 1)
    left = cl.nodes - _pool_nodes(n_d * d.shape.gpus, per)          # nodes the prefill pool may take
    I, J = (a.ravel() for a in np.meshgrid(np.arange(len(n_d)), np.arange(len(pre)), indexing="ij"))
    ranks_d = n_d[I] * d.shape.ranks
    if goal.concurrency is not None:
        users = np.full(len(I), float(goal.concurrency))
    else:   # the decode ranks at the largest batch that meets TPOT, the prefill pool keeping up
        xs, td = bd.decode_grid()
        ok = (xs >= 1) & ((td / bd.accepted <= goal.tpot) if goal.tpot is not None else True)
        if not ok.any():
            return
        per_rank = float(np.floor(xs[ok].max()))
        steps = max(O - 1, 0) / bd.accepted
        td = float(bd.step(float(per_rank), 0.0))
        rate = ranks_d * per_rank / (max(steps, 1e-9) * td)
        users = np.maximum(1.0, np.rint(rate * (alone[J] + xfer[J] + td * (1 + steps))))
    free = pooled(bd, ranks_d, {"alone": alone[J], "capacity": cap[J]}, 1e9, xfer[J], users=users)
    need = free.rate / (cap[J] * p_r[J])                           # prefill instances that keep up
    counts = [np.ones(len(I)), np.floor(need), np.ceil(need)]
    if goal.ttft is not None:
        room = goal.ttft + free.step_decode * max(O - 1, 0) / bd.accepted
        counts.append(np.ceil(users / np.maximum(room, 1e-9) / (cap[J] * p_r[J])))
    N = np.unique(np.maximum(np.stack(counts, axis=1), 1).astype(np.int64), axis=1) if len(I) else np.zeros((0, 1))
    rows = [(i, n) for i in range(len(I)) for n in sorted(set(N[i].tolist()))]
    K = np.array([i for i, _ in rows], dtype=np.int64)
    NP = np.array([n for _, n in rows], dtype=np.int64)
    if not len(K):
        return
    ok = _pool_nodes(NP * p_g[J[K]], per) <= left[I[K]]
    K, NP = K[ok], NP[ok]
    if not len(K):
        return
    st = pooled(bd, ranks_d[K], {"alone": alone[J[K]], "capacity": cap[J[K]]}, NP * p_r[J[K]], xfer[J[K]],
                users=users[K])
    t.add(dec=d, n=n_d[I[K]], pre=np.array(pre, dtype=object)[J[K]], n_p=NP, batch=st.batch,
          gpus=n_d[I[K]] * d.shape.gpus + NP * p_g[J[K]], ttft=st.ttft, tpot=st.tpot, tput=st.output_tokens_per_s,
          memory=d.memory_at(np.minimum(st.batch, bd.running_cap), P + O), fits=np.full(len(K), _fits(d)),
          users=users[K])


# --- ranking, checking, the search --------------------------------------------------------------------

def _order(cols: dict, goal: Goal) -> np.ndarray:
    per_gpu = cols["tput"] / np.maximum(cols["gpus"], 1)
    if goal.objective == "min-gpus":
        return np.lexsort((cols["ttft"], -per_gpu, cols["gpus"]))
    return np.lexsort((cols["ttft"], cols["gpus"], -np.round(per_gpu, 6)))


def _deployment(cols: dict, i: int) -> Deployment:
    pre = cols["pre"][i]
    return Deployment(decode=cols["dec"][i], instances=int(cols["n"][i]), prefill=pre,
                      prefill_instances=int(cols["n_p"][i]) if pre is not None else 0,
                      batch=float(cols["batch"][i]), users=int(cols["users"][i]), gpus=int(cols["gpus"][i]),
                      ttft=float(cols["ttft"][i]),
                      tpot=float(cols["tpot"][i]), throughput=float(cols["tput"][i]),
                      memory=float(cols["memory"][i]))


def _as_explained(d: Deployment, plan) -> None:
    """``d``'s numbers as ``parc explain`` gives them for the spec written for it (the search
    ranks by its own costing of the instances, which that spec's plan may differ from in the
    last percent: its NCCL groups and cluster are the deployment's whole)."""
    from parc.cost.estimate import estimate

    sv = estimate(plan, cache=False).serving
    d.ttft, d.tpot, d.throughput, d.batch = sv.ttft, sv.tpot, sv.output_tokens_per_s, sv.batch


def _verdicts(cols: dict, goal: Goal, world: int) -> tuple[np.ndarray, dict]:
    """Which deployments meet the goal, and how many fail for each reason (the first that applies)."""
    reasons = [("memory", ~cols["fits"].astype(bool)), ("cluster", cols["gpus"] > world)]
    if goal.ttft is not None:
        reasons.append(("ttft", cols["ttft"] > goal.ttft))
    if goal.tpot is not None:
        reasons.append(("tpot", cols["tpot"] > goal.tpot))
    bad = np.zeros(len(cols["gpus"]), dtype=bool)
    failed = {}
    for name, mask in reasons:
        new = mask & ~bad
        if new.any():
            failed[name] = int(new.sum())
        bad |= mask
    return ~bad, failed


def _closest(cols: dict, goal: Goal, world: int) -> Optional[int]:
    """The deployment that fits memory and the cluster and misses the latency targets least."""
    ok = cols["fits"].astype(bool) & (cols["gpus"] <= world)
    if not ok.any():
        return None
    miss = np.ones(len(ok))
    if goal.ttft is not None:
        miss = np.maximum(miss, cols["ttft"] / goal.ttft)
    if goal.tpot is not None:
        miss = np.maximum(miss, cols["tpot"] / goal.tpot)
    miss = np.where(ok, miss, np.inf)
    return int(np.lexsort((cols["gpus"], miss))[0])


def search_serving(pr: Problem, goal: Goal, *, top: int = 10, targets: Iterable[str] = ()) -> ServeResult:
    """The deployments of ``pr``'s model on its cluster that best meet ``goal``, each checked by
    ``parc check`` on the spec :func:`parc.planner.serve_emit.deployment_text` writes for it."""
    from dataclasses import replace

    from parc.planner.serve_emit import check_text, deployment_text

    t0 = time.perf_counter()
    if goal.objective == "min-gpus" and goal.concurrency is None:
        raise ValueError("the min-gpus objective needs a concurrency (--concurrency, or serve.concurrency)")
    tnames = tuple(dict.fromkeys(list(pr.extra_targets) + list(targets)))
    pr = replace(pr, extra_targets=tnames)
    costs, small = instance_costs(pr, goal)
    usable = [ic for ic in costs if ic.weights_fit]
    t = _Table()
    for ic in usable:
        _colocated(t, ic, goal, pr.cluster.world, pr.cluster.gpus_per_node)
    prefill = [ic for ic in usable if _fits(ic)]
    if goal.disaggregate and prefill:
        _disaggregated(t, prefill, usable, goal, pr)
    cols = t.columns()
    unfit = len(costs) - len(usable) + small       # engine layouts whose weights alone overflow
    res = ServeResult(pr, goal, evaluated=len(cols["gpus"]) + unfit)
    if unfit:
        res.failed["memory"] = unfit
    if not len(cols["gpus"]):
        res.seconds = time.perf_counter() - t0
        return res
    good, failed = _verdicts(cols, goal, pr.cluster.world)
    for k, v in failed.items():
        res.failed[k] = res.failed.get(k, 0) + v
    res.feasible = int(good.sum())
    order = _order(cols, goal)
    misses = 0
    for i in order[good[order]]:
        if len(res.plans) >= top or misses >= MAX_REJECTED_WALK:
            break
        d = _deployment(cols, int(i))
        errs, warns, plan = check_text(deployment_text(pr, goal, d, formatted=False), tnames)
        if errs:
            res.rejected.append((d, errs))
            misses += 1
            continue
        _as_explained(d, plan)
        if not _meets(goal, d.ttft, d.tpot):       # its own spec, explained, misses the targets
            misses += 1
            continue
        d.rank, d.warnings = len(res.plans) + 1, warns
        res.plans.append(d)
    if not res.plans:
        j = _closest(cols, goal, pr.cluster.world)
        res.closest = _deployment(cols, j) if j is not None else None
    res.seconds = time.perf_counter() - t0
    return res


def evaluate_deployment(pr: Problem, plan):
    """The search's numbers for the deployment a spec's ``plan`` lays out (one mesh of dp ranks,
    or its pools): each instance costed through :mod:`parc.planner.serve_costs`, the deployment
    evaluated as the search evaluates its own (the closed loop of the spec's workload over one
    mesh's ranks, or the prefill pool feeding the decode pool). ``parc explain`` of the same spec
    gives the same TTFT, TPOT and step (tests/test_serving_views.py)."""
    from types import SimpleNamespace

    from parc.cost.estimate import estimate
    from parc.cost.scheduler import closed_loop, open_loop, pooled
    from parc.cost.serving import kv_transfer, serve_load
    from parc.model.pools import instance_gpus, pool_plans
    from parc.planner.serve_costs import instance_cost_of

    est = estimate(plan, pr.profile.gemm_efficiency, cache=False)
    w, dec_inst = serve_load(plan, est)
    P, O = w.prompt_tokens, w.output_tokens
    if not plan.pools:
        ic = instance_cost_of(plan, est, pr.profile.gemm_efficiency)
        ranks = plan.mesh.dp
        b = ic.batcher(P, O)
        st = (open_loop(b, w.request_rate / ranks) if w.request_rate is not None
              else closed_loop(b, w.concurrency / ranks)).item()
        return SimpleNamespace(ttft=st["ttft"], tpot=st["tpot"], step=st["step_mean"],
                               gpus_per_instance={"serve": instance_gpus(plan.mesh)})
    ics = {p.name: (instance_cost_of(pp, estimate(pp, pr.profile.gemm_efficiency, cache=False),
                                     pr.profile.gemm_efficiency), p.instances * pp.mesh.dp) for p, pp in pool_plans(plan)}
    (pre, n_p), (dec, n_d) = ics["prefill"], ics["decode"]
    xfer = kv_transfer(plan, pre.est, P)[1]
    st = pooled(dec.batcher(P, O), n_d, pre.prefill(P, O), n_p, xfer, users=w.concurrency, rate=w.request_rate).item()
    return SimpleNamespace(ttft=st["ttft"], tpot=st["tpot"], step=st["step_decode"],
                           gpus_per_instance={k: instance_gpus(ic.plan.mesh) for k, (ic, _) in ics.items()})
