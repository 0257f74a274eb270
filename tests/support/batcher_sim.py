"""A small discrete-event simulation of the batcher that parc.cost.scheduler puts in closed form:
the reference its tests compare the closed form with.

Every step, as vLLM's V1 scheduler runs it: give every running request past its prompt one
decode token; fill what is left of the ``budget`` with prompt chunks, the running requests' first
(oldest first), then waiting requests' (oldest first), a waiting request joining the running ones
when it gets a chunk and fewer than ``seqs`` run; the step lasts ``step(d, p)`` seconds for ``d``
decode requests and ``p`` prompt tokens. A request's first token comes at the end of the step that
carries its prompt's last chunk, its last after ``output − 1`` decode steps more.

Load: a closed loop of ``users`` (each sends its next request when its last ends; the engine
has begun its next step by then, so the request waits for that step; the users start spread
over one request's life) or requests arriving at ``rate`` per second at random (Poisson, a
fixed seed). ``mixed=False`` runs SGLang's way instead: a step with prompt work to do
prefills only (the chunk in progress first, then waiting requests, up to ``budget`` tokens), a
step without decodes every running request, the budget not bounding it. ``ranks`` data-parallel
ranks in lock-step (an MoE engine's) each run this batcher with a load of their own, and every
step lasts as long as the slowest rank's. The first third of the completed requests is the
warm-up and is left out.

``kv``: tokens of KV cache a rank holds, vLLM's way (vllm/v1/core/sched/scheduler.py): a
request's cache grows by each chunk it computes and each token it decodes; when the decode
tokens of a step do not fit, the newest running request is preempted (its cache freed, back at
the head of the waiting queue, its prompt and the tokens it made computed again before it goes
on), and waiting requests are admitted only in a step without preemption and while their chunk
fits. With ``reserve`` the KV admission is SGLang's for requests of fixed length instead
(managers/schedule_policy.py PrefillAdder): a request is admitted only while the cache holds its
prompt and whole output beside every running request's, and none is ever preempted."""
from __future__ import annotations

import random
from collections import deque


class _Rank:
    """One rank's requests: waiting, arriving (at a rate) and running."""

    def __init__(self):
        self.waiting: deque = deque()
        self.arrivals: deque = deque()
        self.running: list = []

    def plan(self, t: float, budget: int, seqs: int, mixed: bool, kv: float = float("inf"), reserve: bool = False):
        """(decode requests, prompt chunks) of this rank's next step starting at ``t``, or None
        when it has nothing to run."""
        while self.arrivals and self.arrivals[0] <= t:
            self.waiting.append(self.new(self.arrivals.popleft()))
        running = self.running
        decode = [r for r in running if r["left"] == 0]
        preempted = False
        while not reserve and decode and sum(r["kv"] for r in running) + len(decode) > kv:
            victim = running.pop()          # the newest: its cache freed, its work to redo
            victim["left"], victim["kv"] = victim["size"] + victim["tok"], 0
            self.waiting.appendleft(victim)
            decode = [r for r in running if r["left"] == 0]
            preempted = True
        ready = [r for r in self.waiting if r["arr"] < t or (not running and r["arr"] <= t)]
        if not running and not ready:
            return None
        free = kv - sum(r["kv"] for r in running) - len(decode) if not reserve else float("inf")
        booked = sum(r["size"] + r["out"] for r in running)
        fits = bool(ready) and len(running) < seqs and (booked + ready[0]["size"] + ready[0]["out"] <= kv
                                                        if reserve else min(ready[0]["left"], budget) <= free)
        room = budget
        if mixed:
            room -= len(decode)
        elif any(r["left"] > 0 for r in running) or fits:
            decode = []         # a prompt step alone, run first
        chunks = []
        for r in running:
            if r["left"] > 0 and room > 0 and free > 0:
                c = min(r["left"], room, free)
                chunks.append((r, c))
                room, free = room - c, free - c
        for r in ready:
            if room <= 0 or len(running) >= seqs or preempted or min(r["left"], room) > free:
                break
            if reserve and booked + r["size"] + r["out"] > kv:
                break
            booked += r["size"] + r["out"]
            self.waiting.remove(r)
            running.append(r)
            c = min(r["left"], room)
            chunks.append((r, c))
            room, free = room - c, free - c
        return decode, chunks

    def next_event(self) -> float:
        """When this rank next has a request to run."""
        if self.waiting:
            return self.waiting[0]["arr"]
        return self.arrivals[0] if self.arrivals else float("inf")


def simulate(step, prompt: int, output: int, budget: int, seqs: int, users: int | None = None,
             rate: float | None = None, requests: int = 1500, seed: int = 1, mixed: bool = True,
             spread: float = 0.0, ranks: int = 1, kv: float = float("inf"), reserve: bool = False) -> dict:
    """Mean TTFT, TPOT (E2E − TTFT over output − 1) and requests per second of one rank."""
    rng = random.Random(seed)
    t = 0.0
    done: list = []

    def new(at: float) -> dict:
        out = output if not spread else max(2, round(output * rng.uniform(1 - spread, 1 + spread)))
        return {"arr": at, "left": prompt, "size": prompt, "tok": 0, "kv": 0, "first": None, "last": None,
                "out": out}

    rs = [_Rank() for _ in range(ranks)]
    for rank in rs:
        rank.new = new
        if users is not None:
            life = output * step(users, 0)
            rank.waiting.extend(new(life * i / users) for i in range(users))
        else:
            at = 0.0
            for _ in range(requests * 2):
                at += rng.expovariate(rate)
                rank.arrivals.append(at)
    while len(done) < requests * ranks:
        plans = [rank.plan(t, budget, seqs, mixed, kv, reserve) for rank in rs]
        if all(p is None for p in plans):
            t = max(t, min(rank.next_event() for rank in rs))
            continue
        t += max(step(len(p[0]), sum(c for _, c in p[1])) for p in plans if p is not None)
        for rank, p in zip(rs, plans):
            if p is None:
                continue
            decode, chunks = p
            finished = []
            for r in decode:
                r["tok"] += 1
                r["kv"] += 1
                r["last"] = t
                if r["tok"] >= r["out"]:
                    finished.append(r)
            for r, c in chunks:
                r["left"] -= c
                r["kv"] += c
                if r["left"] == 0 and r["first"] is None:
                    r["tok"], r["first"], r["last"] = 1, t, t
            for r in finished:
                rank.running.remove(r)
                done.append(r)
                if users is not None:
                    rank.waiting.append(new(t))
    kept = done[len(done) // 3:]
    ttft = sum(r["first"] - r["arr"] for r in kept) / len(kept)
    tpot = sum((r["last"] - r["first"]) / (r["out"] - 1) for r in kept) / len(kept)
    e2e = sum(r["last"] - r["arr"] for r in kept) / len(kept)
    return {"ttft": ttft, "tpot": tpot, "rate": users / e2e if users is not None else rate}
