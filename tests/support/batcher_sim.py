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
step without decodes every running request, the budget not bounding it. The first third of the completed requests is the warm-up and is left out."""
from __future__ import annotations

import random
from collections import deque


def simulate(step, prompt: int, output: int, budget: int, seqs: int, users: int | None = None,
             rate: float | None = None, requests: int = 1500, seed: int = 1, mixed: bool = True,
             spread: float = 0.0) -> dict:
    """Mean TTFT, TPOT (E2E − TTFT over output − 1) and requests per second."""
    rng = random.Random(seed)
    t = 0.0
    waiting: deque = deque()
    arrivals: deque = deque()
    running: list = []
    done: list = []

    def new(at: float) -> dict:
        out = output if not spread else max(2, round(output * rng.uniform(1 - spread, 1 + spread)))
        return {"arr": at, "left": prompt, "tok": 0, "first": None, "last": None, "out": out}

    if users is not None:
        life = output * step(users, 0)
        waiting.extend(new(life * i / users) for i in range(users))
    else:
        at = 0.0
        for _ in range(requests * 2):
            at += rng.expovariate(rate)
            arrivals.append(at)
    while len(done) < requests:
        while arrivals and arrivals[0] <= t:
            waiting.append(new(arrivals.popleft()))
        ready = [r for r in waiting if r["arr"] < t or (not running and r["arr"] <= t)]
        if not running and not ready:
            t = max(t, waiting[0]["arr"] if waiting else arrivals[0])
            continue
        room = budget
        decode = [r for r in running if r["left"] == 0]
        if mixed:
            room -= len(decode)
        elif any(r["left"] > 0 for r in running) or (ready and len(running) < seqs):
            decode = []         # a prompt step alone, run first
        chunks = []
        for r in running:
            if r["left"] > 0 and room > 0:
                c = min(r["left"], room)
                chunks.append((r, c))
                room -= c
        for r in ready:
            if room <= 0 or len(running) >= seqs:
                break
            waiting.remove(r)
            running.append(r)
            c = min(r["left"], room)
            chunks.append((r, c))
            room -= c
        t += step(len(decode), sum(c for _, c in chunks))
        finished = []
        for r in decode:
            r["tok"] += 1
            r["last"] = t
            if r["tok"] >= r["out"]:
                finished.append(r)
        for r, c in chunks:
            r["left"] -= c
            if r["left"] == 0:
                r["tok"], r["first"], r["last"] = 1, t, t
        for r in finished:
            running.remove(r)
            done.append(r)
            if users is not None:
                waiting.append(new(t))
    kept = done[len(done) // 3:]
    ttft = sum(r["first"] - r["arr"] for r in kept) / len(kept)
    tpot = sum((r["last"] - r["first"]) / (r["out"] - 1) for r in kept) / len(kept)
    e2e = sum(r["last"] - r["arr"] for r in kept) / len(kept)
    return {"ttft": ttft, "tpot": tpot, "rate": users / e2e if users is not None else rate}
