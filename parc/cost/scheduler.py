"""How a serving engine's scheduler turns requests into steps, in closed form: continuous
batching with chunked prefill (vLLM's V1 scheduler, SGLang's), driven the two ways `vllm bench
serve` and genai-perf drive an engine: a closed loop of ``N`` users, each sending its next
request when its last one ends (``--max-concurrency``), or requests arriving at random at a rate
(``--request-rate``, Poisson).

Every step of a data-parallel rank first gives each running request past its prompt its next
token (``v`` tokens each with speculative decoding: the drafts to verify), then fills what is
left of the step's token budget ``T`` (``max_num_batched_tokens``) with prompt chunks, oldest
request first, admitting a waiting request only while fewer than ``S`` (``max_num_seqs``) run and
the KV cache holds them. Its time is :class:`parc.cost.serve_step.StepModel`'s for the ``d``
decode requests and ``p`` prompt tokens it carries. With ``P`` prompt and ``O`` output tokens per
request, ``E`` tokens a decode step yields per request (1, or the accepted drafts plus one):

* throughput: ``X = d·E / ((O − 1)·τ̄)`` requests/s, ``τ̄`` the mean step (each request takes
  ``(O − 1)/E`` decode steps after the token its last prompt chunk yields);
* prompt tokens per step: ``p̄ = X·P·τ̄ = d·E·P / (O − 1)``; a prompt alone takes ``k = ⌈P /
  (T − v·d)⌉`` steps of ``P/k`` tokens. Where ``p̄`` is below that chunk, a share ``f = p̄ /
  (P/k)`` of the steps carry a chunk (``τ_M``) and the rest decode only (``τ_D``); above it every
  step carries ``p̄``: ``τ̄ = (1 − f)·τ_D + f·τ_M``;
* TTFT = the step in progress when the request arrives (closed loop: a whole step, the engine
  having begun the next one when the previous request ended; at a rate: its residual, E[τ²] /
  2E[τ], when the engine is busy) + the queue + ``k·τ_M``; TPOT = ``τ̄ / E``, its 99th
  percentile from the binomial count of mixed steps among a request's ``(O − 1)/E``, ITL's 99th
  the mixed step where more than 1% of steps are mixed;
* an engine that does not mix them (SGLang: ``enable_mixed_chunk`` off, prefill first) runs a
  prompt step of ``P/k`` (or ``p̄``) tokens apart, between decode steps of ``d`` requests that the
  budget does not bound: ``f_p = p̄ / chunk`` prompt steps per decode step, ``τ̄ = τ_D + f_p·τ_P``,
  the interval with a prompt step in it ``τ_M = τ_D + max(1, f_p)·τ_P``, a prompt's own steps
  ``k·τ_P``;
* ranks in lock-step (an MoE engine's data-parallel ranks, which meet in every layer's expert
  all-to-all: ``R`` ranks, :func:`parc.cost.serving.lockstep`) wait for the slowest: a rank's
  share ``f`` of steps with a prompt becomes ``1 − (1 − f)^R``, the share with a prompt on any
  rank, admissions being independent from rank to rank;
* the batch ``d`` follows from the load: a closed loop of ``N`` has ``N = d + X·TTFT`` (Little's
  law), a rate ``λ`` has ``X = λ``; it is capped by the token budget (``v·d + p̄ ≤ T``), by ``S``
  and by the KV cache (``d + X·k·τ_M`` running requests of ``P + O/2`` tokens on average as vLLM
  allocates them; of ``P + O`` where the engine reserves a request's outputs to come at admission,
  as SGLang does for requests of fixed length: :attr:`Batcher.held`). Past
  the cap a closed loop queues (``TTFT`` grows by ``(N − N_cap)/X``); a rate beyond the capped
  throughput never drains (TTFT infinite); below it the prompt budget queues as M/D/1 (Wq =
  ρ/(2(1 − ρ)) of a prompt's prefill).

Every function takes numbers or numpy arrays of users or rates and returns arrays; the batch is
found on a grid of ``d`` per rank (:meth:`Batcher.grid`), inverted by linear interpolation and
refined by two steps of regula falsi, so that explain and the planner, asking for one load or
for many, get the same numbers. ``tests/test_scheduler.py`` checks the closed form against a
discrete-event simulation of the same batcher.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GRID = 48          # batch sizes tried per rank
REFINE = 2         # regula falsi steps after the interpolation
Z99 = 2.326        # the standard normal's 99th percentile


@dataclass
class Batcher:
    """One data-parallel rank's scheduler: its step time, the workload's request and its limits."""
    step: object              # step(d, p) -> seconds (numbers or arrays) at the workload's contexts
    prompt: int
    output: int
    budget: int               # T, tokens one step schedules
    seqs: int                 # S, requests running at once
    kv_tokens: int            # tokens of KV cache
    verify: int = 1           # tokens a decode request puts in a step (drafts + 1)
    accepted: float = 1.0     # tokens a decode step yields per request
    mixed: bool = True        # decode tokens share the prompt chunks' steps (vLLM); else apart (SGLang)
    lockstep: int = 1         # ranks that run every step together (an MoE engine's data-parallel ranks)
    reserve: int = 0          # of a running request's outputs to come, the most the KV admission reserves
    _grid: dict = field(default=None, repr=False)
    _decode: tuple = field(default=None, repr=False)

    def decode_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(batch sizes, decode-only step) on ``GRID`` points up to the cap of a rank that only
        decodes (a decode pool's: the step budget and the running cap)."""
        if self._decode is None:
            hi = max(1e-6, min(self.decode_budget, self.running_cap))
            xs = hi * np.linspace(0.0, 1.0, GRID) ** 2
            self._decode = (xs, np.asarray(self.step(xs, 0.0), dtype=float))
        return self._decode

    @property
    def decode_budget(self) -> float:
        """Decode requests a step's budget holds: ``T / v`` where they share it, else unbounded."""
        return self.budget / self.verify if self.mixed else float("inf")

    @property
    def held(self) -> float:
        """KV tokens a running request holds on average. vLLM allocates a request's blocks as its
        tokens come and, when a step's do not fit, preempts the newest running request
        (vllm/v1/core/sched/scheduler.py ``schedule``): its prompt and half its output, ``P +
        O/2`` (the prompts that preemption computes again are not costed: tests/test_scheduler.py
        measures what that leaves out). An engine that reserves up to ``C`` (``reserve``) of each
        request's outputs to come at admission (SGLang, for requests of fixed length) holds its
        prompt, what it has made and what it reserves: ``P + O − max(0, O − C)²/(2O)`` over a
        request's life."""
        P, O, C = self.prompt, self.output, self.reserve
        if C <= 0:
            return max(1.0, P + O / 2)
        return max(1.0, P + O - max(0.0, O - C) ** 2 / (2 * max(O, 1)))

    @property
    def running_cap(self) -> float:
        """Requests that may run at once: ``S``, and what the KV cache holds at :attr:`held`."""
        return float(min(self.seqs, self.kv_tokens / self.held))

    def at(self, d) -> dict:
        """Every quantity of the steady state with ``d`` decode requests (arrays): ``tp`` the step
        a prompt's chunk runs in (the mixed step, or the prompt step apart)."""
        d = np.asarray(d, dtype=float)
        P, O, T, v, E = self.prompt, self.output, self.budget, self.verify, self.accepted
        room = np.maximum(T - v * d, 1.0) if self.mixed else np.full_like(d, float(T))
        k = np.ceil(P / room)
        pbar = d * E * P / max(O - 1, 1e-9)
        chunk = np.minimum(np.maximum(P / k, pbar), room)
        fp = pbar / np.maximum(chunk, 1e-9)
        n = np.size(d)
        both = np.asarray(self.step(np.concatenate([np.ravel(d), np.ravel(d) * self.mixed]),
                                    np.concatenate([np.zeros(n), np.ravel(chunk)])))
        td, tp = both[:n].reshape(np.shape(d)), both[n:].reshape(np.shape(d))
        # ranks in lock-step wait for the one whose step carries a prompt: of R ranks admitting
        # independently, a step (an interval) carries one where any of them does
        if self.lockstep > 1:
            fp = np.maximum(fp, 1 - (1 - np.clip(fp, 0.0, 1.0)) ** self.lockstep)
        f = np.clip(fp, 0.0, 1.0)
        if self.mixed:
            tm, mean = tp, (1 - f) * td + f * tp
            residual = ((1 - f) * td ** 2 + f * tp ** 2) / (2 * mean)
        else:
            tm, mean = td + np.maximum(fp, 1.0) * tp, td + fp * tp
            residual = (td ** 2 + fp * tp ** 2) / (2 * mean)
        x = d * E / (max(O - 1, 1e-9) * mean)
        busy = x * tp * np.maximum(P / room, 1 / np.maximum(np.floor(room / P), 1))
        # a closed loop's request comes when another ends: apart, at the end of a decode step,
        # when no prompt step is under way (they run first); it waits for the decode step begun
        # and meets the prompts of those that ended in the same step
        return {"d": d, "k": k, "chunk": chunk, "mixed": f, "td": td, "tm": tm, "tp": tp, "mean": mean,
                "x": x, "prefilling": x * k * tp, "pbar": pbar, "room": room, "residual": residual,
                "busy": busy, "meet": busy if self.mixed else x * mean, "arrive": residual if self.mixed else td}

    def grid(self) -> dict:
        """:meth:`at` on ``GRID`` batch sizes from 0 to the cap (denser near 0), and the cap."""
        if self._grid is None:
            v, E, P, O = self.verify, self.accepted, self.prompt, self.output
            d_budget = self.budget / (v + E * P / max(O - 1, 1e-9)) if self.mixed else float("inf")
            hi = max(1e-6, min(d_budget, self.running_cap))
            g = self.at(hi * np.linspace(0.0, 1.0, GRID) ** 2)
            running = g["d"] + g["prefilling"]
            ok = running <= self.running_cap * (1 + 1e-12)
            cap = float(g["d"][ok].max()) if ok.any() else 0.0
            if ok.all():
                limit = "budget" if d_budget <= self.running_cap else "seqs"
            else:   # between the last grid point that runs and the first that does not
                i = int(np.argmin(ok))
                sub = np.linspace(float(g["d"][i - 1]), float(g["d"][i]), GRID)
                over = sub + self.at(sub)["prefilling"] - self.running_cap
                j = max(1, int(np.argmax(over > 0)))
                lo, hi = over[j - 1], over[j]
                cap = float(sub[j - 1] + (sub[j] - sub[j - 1]) * (-lo / (hi - lo) if hi > lo else 0.0))
                limit = "seqs" if self.seqs <= self.kv_tokens / self.held else "kv"
            g["cap"], g["limit"] = cap, limit
            g["at_cap"] = self.at(cap)
            self._grid = g
        return self._grid


def _invert(xs: np.ndarray, ys: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per row of ``ys`` (rows: targets, columns: the grid ``xs``; or one row for all), the ``x``
    where ``y`` reaches the target, by linear interpolation (``y`` increasing in ``x``)."""
    ys = np.broadcast_to(ys, (len(targets), len(xs)))
    i = np.clip((ys < targets[:, None]).sum(axis=1), 1, len(xs) - 1)
    rows = np.arange(len(targets))
    y0, y1 = ys[rows, i - 1], ys[rows, i]
    t = np.clip((targets - y0) / np.where(y1 > y0, y1 - y0, 1.0), 0.0, 1.0)
    return xs[i - 1] + t * (xs[i] - xs[i - 1])


def collide(s: dict, share=1.0, held: str = "busy"):
    """Seconds a prompt waits for the steps' prompt room, which the other prompts hold a share
    ``share × busy`` of the time (busy = X · τ_M · max(P / room, 1 / ⌊room / P⌋): each prompt
    holds its share of a step's room, and where the rest cannot hold a whole prompt, the whole
    step; ``share`` the other users' part of the load, (N − 1)/N for N users): M/D/1 with a
    prompt's own steps as the service; ``held`` the key of the busy share to use)."""
    u = np.minimum(s[held] * share, 0.999)
    return u / (2 * (1 - u)) * s["k"] * s["tp"]


def _refine(fn, d: np.ndarray, xs: np.ndarray, targets: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Regula falsi on ``fn(d) − target`` inside the grid cell ``d`` fell in (``ys``: ``fn`` on
    the grid, one row per target or one for all)."""
    ys = np.broadcast_to(ys, (len(targets), len(xs)))
    i = np.clip(np.searchsorted(xs, d), 1, len(xs) - 1)
    rows = np.arange(len(targets))
    lo, hi = xs[i - 1].astype(float), xs[i].astype(float)
    flo, fhi = ys[rows, i - 1] - targets, ys[rows, i] - targets
    for _ in range(REFINE):
        fd = fn(d) - targets
        left = np.sign(fd) == np.sign(flo)
        lo, flo = np.where(left, d, lo), np.where(left, fd, flo)
        hi, fhi = np.where(left, hi, d), np.where(left, fhi, fd)
        d = np.where(fhi != flo, lo - flo * (hi - lo) / np.where(fhi != flo, fhi - flo, 1.0), d)
        d = np.clip(d, np.minimum(lo, hi), np.maximum(lo, hi))
    return d


@dataclass
class Steady:
    """A rank's steady state under its load (arrays, one entry per load asked)."""
    rate: np.ndarray          # requests completed per second
    batch: np.ndarray         # decode requests per step
    chunk: np.ndarray         # prompt tokens of a step that carries them
    mixed: np.ndarray         # share of steps carrying prompt tokens
    prefill_steps: np.ndarray  # steps a prompt takes when it is alone
    step_decode: np.ndarray
    step_mixed: np.ndarray
    step_mean: np.ndarray
    wait: np.ndarray          # TTFT: the step in progress when the request arrives
    queue: np.ndarray         # TTFT: waiting for a slot or for the prompt budget
    prefill: np.ndarray       # TTFT: the prompt's own steps
    tpot: np.ndarray
    tpot_p99: np.ndarray
    itl_p99: np.ndarray
    output_tokens_per_s: np.ndarray
    limit: list               # what caps each: users | rate | budget | seqs | kv | unstable

    @property
    def ttft(self) -> np.ndarray:
        return self.wait + self.queue + self.prefill

    def item(self, i: int = 0) -> dict:
        """Load ``i`` as numbers."""
        out = {k: float(np.asarray(getattr(self, k))[i]) for k in (
            "rate", "batch", "chunk", "mixed", "prefill_steps", "step_decode", "step_mixed", "step_mean", "wait",
            "queue", "prefill", "tpot", "tpot_p99", "itl_p99", "output_tokens_per_s")}
        out["ttft"] = out["wait"] + out["queue"] + out["prefill"]
        out["limit"] = self.limit[i]
        return out


def _steady(b: Batcher, s: dict, wait, queue, limit) -> Steady:
    E, O = b.accepted, b.output
    steps = max(1.0, (O - 1) / E)
    f = s["mixed"]
    q = np.minimum(steps, steps * f + Z99 * np.sqrt(steps * f * (1 - f)))
    tpot = s["mean"] / E if O > 1 else np.zeros_like(s["mean"])
    tpot99 = (s["td"] + (s["tm"] - s["td"]) * q / steps) / E if O > 1 else tpot
    itl99 = np.where(f > 0.01, s["tm"], s["td"])
    return Steady(s["x"], s["d"], s["chunk"], f, s["k"], s["td"], s["tm"], s["mean"], wait, queue,
                  s["k"] * s["tp"], tpot, tpot99, itl99, s["x"] * O, list(limit))


def closed_loop(b: Batcher, users) -> Steady:
    """The steady state of a closed loop of ``users`` per rank (numbers or an array)."""
    if b.output <= 1:
        return _prefill_only(b, users=np.atleast_1d(np.asarray(users, dtype=float)))
    n = np.atleast_1d(np.asarray(users, dtype=float))
    g = b.grid()
    busy = np.clip(n - 1, 0.0, 1.0)     # another request keeps the engine stepping
    share = (np.maximum(n, 1.0) - 1) / np.maximum(n, 1.0)

    def users(s, col):
        return s["d"] + s["prefilling"] + s["x"] * (col(busy) * s["arrive"] + collide(s, col(share), "meet"))

    xs = g["d"]
    ys = users(g, lambda v: v[:, None])
    within = xs <= g["cap"] * (1 + 1e-12)
    n_cap = users(g["at_cap"], lambda v: v)
    goal = np.minimum(n, n_cap)
    d = _invert(xs[within], ys[:, within], goal)
    d = np.minimum(_refine(lambda z: users(b.at(z), lambda v: v), d, xs[within], goal, ys[:, within]), g["cap"])
    s = b.at(d)
    queue = collide(s, share, "meet") + np.where(n > n_cap, (n - n_cap) / np.maximum(s["x"], 1e-30), 0.0)
    limit = [g["limit"] if over else "users" for over in (n > n_cap)]
    return _steady(b, s, busy * s["arrive"], queue, limit)


def open_loop(b: Batcher, rate) -> Steady:
    """The steady state of requests arriving at random at ``rate`` per second per rank."""
    lam = np.atleast_1d(np.asarray(rate, dtype=float))
    if b.output <= 1:
        return _prefill_only(b, rate=lam)
    g = b.grid()
    within = g["d"] <= g["cap"] * (1 + 1e-12)
    x_cap = float(g["at_cap"]["x"])
    goal = np.minimum(lam, x_cap)
    d = _invert(g["d"][within], g["x"][within][None, :], goal)
    d = np.minimum(_refine(lambda z: b.at(z)["x"], d, g["d"][within], goal, g["x"][within][None, :]), g["cap"])
    s = b.at(d)
    busy = 1 - np.exp(-(s["d"] + s["prefilling"]))
    wait = busy * s["residual"]
    queue = collide(s)
    life = s["k"] * s["tp"] + wait + s["d"] / np.maximum(s["x"], 1e-30)      # a request's time in a slot
    queue = queue + slot_wait(b.running_cap, lam * life, life)
    unstable = lam > x_cap * (1 + 1e-9)
    queue = np.where(unstable, np.inf, queue)
    s["x"] = np.where(unstable, x_cap, lam)
    return _steady(b, s, wait, queue, ["unstable" if u else "rate" for u in unstable])


def slot_wait(slots: float, offered, life):
    """Mean wait for one of ``slots`` running places under ``offered`` = λ·life Erlangs of
    Poisson requests each holding a place ``life`` seconds: half the M/M/c wait (Erlang C,
    computed by Erlang B's recursion), the M/D/c approximation for service times that vary
    little; infinite at or past saturation."""
    c = max(1, int(slots))
    a = np.atleast_1d(np.asarray(offered, dtype=float))
    b = np.ones_like(a)
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    erlang_c = c * b / np.maximum(c - a * (1 - b), 1e-12)
    wait = 0.5 * erlang_c * np.asarray(life) / np.maximum(c - a, 1e-12)
    return np.where(a < c, wait, np.inf)


def _prefill_only(b: Batcher, users=None, rate=None) -> Steady:
    """A rank that only prefills (one output token, or a prefill pool's instance)."""
    one = prefill_rank(b.step, b.prompt, b.budget)
    load = users if users is not None else rate
    cap = one["capacity"]
    if users is not None:
        x = np.minimum(load / one["alone"], cap)
        queue = np.maximum(load / x - one["alone"], 0.0)
        limit = ["budget" if q > 0 else "users" for q in queue]
        wait = np.zeros_like(load)
    else:
        x = np.minimum(load, cap)
        rho = load / cap
        queue = np.where(rho < 1, rho / (2 * np.maximum(1 - rho, 1e-12)) / cap, np.inf)
        limit = ["unstable" if r >= 1 else "rate" for r in rho]
        wait = np.zeros_like(load)
    z = np.zeros_like(load)
    t = np.full_like(load, one["step"])
    return Steady(x, z, np.full_like(load, one["chunk"]), np.ones_like(load), np.full_like(load, one["steps"]),
                  z, t, t, wait, queue, np.full_like(load, one["alone"]), z, z, t, x * b.output, limit)


def prefill_rank(step, prompt: int, budget: int) -> dict:
    """A rank that only prefills prompts of ``prompt`` tokens under a step budget of ``budget``:
    one prompt alone takes ``k = ⌈P/T⌉`` steps of ``P/k`` tokens (``alone`` seconds); at full load
    every step carries ``T`` tokens, ``capacity`` requests/s."""
    k = float(np.ceil(prompt / max(1, budget)))
    chunk = prompt / k
    t = float(np.asarray(step(0.0, chunk)))
    full = float(np.asarray(step(0.0, float(budget))))
    return {"steps": k, "chunk": chunk, "step": t, "alone": k * t, "capacity": budget / (prompt * full)}


@dataclass
class Pooled:
    """A disaggregated plan's steady state (arrays, one entry per load asked): the decode ranks'
    batch and step, and TTFT's terms."""
    rate: np.ndarray              # requests completed per second over the plan
    batch: np.ndarray             # decode requests per decode rank
    step_decode: np.ndarray
    queue: np.ndarray             # waiting for a prefill rank or a decode slot
    prefill: np.ndarray           # one prompt, alone, on a prefill rank
    kv_transfer: np.ndarray
    first_decode: np.ndarray      # the decode step that yields the first token
    tpot: np.ndarray
    output_tokens_per_s: np.ndarray
    limit: list                   # users | rate | prefill | budget | seqs | kv | unstable

    @property
    def ttft(self) -> np.ndarray:
        return self.queue + self.prefill + self.kv_transfer + self.first_decode

    def item(self, i: int = 0) -> dict:
        out = {k: float(np.broadcast_to(np.asarray(getattr(self, k)), np.shape(self.rate))[i]) for k in (
            "rate", "batch", "step_decode", "queue", "prefill", "kv_transfer", "first_decode", "tpot",
            "output_tokens_per_s")}
        out["ttft"] = out["queue"] + out["prefill"] + out["kv_transfer"] + out["first_decode"]
        out["tpot_p99"], out["itl_p99"] = out["tpot"], out["step_decode"]
        out["limit"] = self.limit[i]
        return out


def pooled(dec: Batcher, ranks_d, pre: dict, ranks_p, transfer, users=None, rate=None) -> Pooled:
    """Prefill ranks (``pre``: :func:`prefill_rank`'s, numbers or arrays) feeding ``ranks_d``
    decode ranks of ``dec`` that only decode, each request's KV cache ``transfer`` seconds
    between them; under a closed loop of ``users`` or a ``rate`` over the whole plan (every
    argument a number or an array of one length). A request comes round every ``R = prefill +
    transfer + τ_D + (O − 1)·τ_D / E`` without queueing; the plan completes ``X = ranks_d ·
    d·E / ((O − 1)·τ_D)`` requests a second with ``d`` per decode rank (``N = X·R``, Little), at
    most what the prefill ranks sustain (``ranks_p × capacity``); past it, or past the decode
    ranks' cap, requests queue (TTFT grows by ``N/X − R``); at a rate the prefill queue is
    M/D/1. Long because: both loads, each with its two caps."""
    O, E = dec.output, dec.accepted
    per = max(O - 1, 0) / E                           # decode steps after the first token
    load = np.atleast_1d(np.asarray(users if users is not None else rate, dtype=float))
    shape = load.shape
    rd = np.broadcast_to(np.asarray(ranks_d, dtype=float), shape)
    cap_p = np.broadcast_to(np.asarray(pre["capacity"], dtype=float), shape)
    alone = np.broadcast_to(np.asarray(pre["alone"], dtype=float), shape)
    xfer = np.broadcast_to(np.asarray(transfer, dtype=float), shape)
    lam = np.broadcast_to(np.asarray(ranks_p, dtype=float), shape) * cap_p / rd    # per decode rank
    n = load / rd                                                                  # per decode rank
    c = alone + xfer
    steps = max(per, 1e-9)
    xs, td = dec.decode_grid()
    xr = xs / (steps * td)

    def x_of(z):
        return z / (steps * np.asarray(dec.step(z, 0.0), dtype=float))

    def round_of(z, cc):
        return cc + np.asarray(dec.step(z, 0.0), dtype=float) * (1 + per)

    limit_cap = "budget" if dec.decode_budget <= dec.running_cap else (
        "seqs" if dec.seqs <= dec.kv_tokens / dec.held else "kv")
    if users is not None:
        ys = xr[None, :] * (c[:, None] + td[None, :] * (1 + per))
        n_cap = ys[:, -1]
        goal = np.minimum(n, n_cap)
        d = _refine(lambda z: x_of(z) * round_of(z, c), _invert(xs, ys, goal), xs, goal, ys)
        slow = x_of(d) > lam
        if slow.any():
            at_lam = np.minimum(lam, xr[-1])
            d = np.where(slow, _refine(x_of, _invert(xs, xr[None, :], at_lam), xs, at_lam, xr[None, :]), d)
        x = np.minimum(x_of(d), lam)
        queue = np.maximum(n / np.maximum(x, 1e-30) - round_of(d, c), 0.0)
        limit = ["prefill" if s else (limit_cap if q > 1e-12 else "users") for s, q in zip(slow, queue)]
    else:
        x_cap = float(xr[-1])
        goal = np.minimum(n, x_cap)
        d = _refine(x_of, _invert(xs, xr[None, :], goal), xs, goal, xr[None, :])
        rho = n / lam
        unstable = (rho >= 1) | (n > x_cap * (1 + 1e-9))
        queue = np.where(unstable, np.inf, rho / (2 * np.maximum(1 - rho, 1e-12)) / cap_p)
        x = np.minimum(n, x_cap)
        limit = ["unstable" if u else "rate" for u in unstable]
    t = np.asarray(dec.step(d, 0.0), dtype=float)
    return Pooled(x * rd, d, t, queue, alone, xfer, t, t / E, x * rd * O, limit)
