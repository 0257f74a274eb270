"""The per-rank compute orders of the pipeline schedules, as torch.distributed.pipelining
(torch 2.13) and deepseek-ai/DualPipe compute them: one function per schedule giving rank
``rank``'s actions as ``(kind, microbatch, stage)`` with kind F, B (a full backward), I (the
input part of a split backward) or W (its weight part). :mod:`parc.model.schedules` turns them
into :class:`~parc.model.schedules.Action` lists and everything derived from them."""
from __future__ import annotations

Raw = list[tuple[str, int, int]]          # (kind F/B/I/W, microbatch, stage)


def one_f_one_b(rank: int, pp: int, n: int) -> Raw:
    # Schedule1F1B._step_microbatches: warm-up of min(n, pp - rank) forwards, then B/F pairs,
    # then the remaining backwards (its pipeline_order attribute is not what it executes).
    ops: Raw = []
    warm = min(n, pp - rank)
    f = b = 0
    for _ in range(warm):
        ops.append(("F", f, rank))
        f += 1
    while True:
        ops.append(("B", b, rank))
        b += 1
        if f == n:
            break
        ops.append(("F", f, rank))
        f += 1
    while b < n:
        ops.append(("B", b, rank))
        b += 1
    return ops


def interleaved(rank: int, pp: int, n: int, v: int, zero_bubble: bool) -> Raw:
    # ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble._calculate_single_rank_operations
    rounds = max(1, n // pp)
    per_round = n // rounds
    factor = 1 if zero_bubble else 2
    warmup = min((v - 1) * per_round + factor * (pp - 1 - rank), n * v)
    total_mb_ops = v * n
    fwd_bwd = total_mb_ops - warmup
    cooldown = total_mb_ops - fwd_bwd

    def fwd_stage(step: int) -> int:
        return ((step // per_round) % v) * pp + rank

    def bwd_stage(step: int) -> int:
        return (v - 1 - ((step - warmup) // per_round) % v) * pp + rank

    fmb: dict[int, int] = {}
    bmb: dict[int, int] = {}
    wmb: dict[int, int] = {}
    ops: Raw = []
    bwd_ids: list[int] = []
    w_count = 0
    first_w_after = rank                       # num_1f1b_microbatches in torch
    bkind = "I" if zero_bubble else "B"

    def nxt(d: dict[int, int], s: int) -> int:
        d[s] = d.get(s, 0) + 1
        return d[s] - 1

    def weight() -> None:
        nonlocal w_count
        s = bwd_stage(bwd_ids[w_count])
        ops.append(("W", nxt(wmb, s), s))
        w_count += 1

    for op in range(warmup + fwd_bwd + cooldown):
        if op < warmup:
            s = fwd_stage(op)
            ops.append(("F", nxt(fmb, s), s))
        elif op < warmup + fwd_bwd:
            s = fwd_stage(op)
            ops.append(("F", nxt(fmb, s), s))
            s = bwd_stage(op)
            ops.append((bkind, nxt(bmb, s), s))
            bwd_ids.append(op)
            if zero_bubble and op - warmup >= first_w_after:
                weight()
        else:
            s = bwd_stage(op)
            ops.append((bkind, nxt(bmb, s), s))
            bwd_ids.append(op)
            if zero_bubble and op - warmup >= first_w_after:
                weight()
    while zero_bubble and w_count < len(bwd_ids):
        weight()
    return ops


def zbv(rank: int, pp: int, n: int) -> Raw:
    # ScheduleZBVZeroBubble._calculate_single_rank_operations
    n_micro = max(2 * pp - 1, n)
    s0, s1 = rank, 2 * pp - 1 - rank
    ops: Raw = []
    f0 = f1 = b0 = b1 = 0
    for _ in range(2 * (pp - rank) - 1):
        ops.append(("F", f0, s0))
        f0 += 1
    for _ in range(rank):
        ops.append(("F", f1, s1))
        f1 += 1
        ops.append(("F", f0, s0))
        f0 += 1
    for _ in range(pp - rank):
        ops.append(("F", f1, s1))
        f1 += 1
        ops.append(("I", b1, s1))
        ops.append(("W", b1, s1))
        b1 += 1
    while f1 < f0 or f0 < n_micro:
        if f0 < n_micro:
            ops.append(("F", f0, s0))
            f0 += 1
        ops.append(("I", b0, s0))
        ops.append(("W", b0, s0))
        b0 += 1
        ops.append(("F", f1, s1))
        f1 += 1
        ops.append(("I", b1, s1))
        ops.append(("W", b1, s1))
        b1 += 1
    w0, w1 = b0, b1
    for _ in range(rank):
        ops.append(("I", b0, s0))
        b0 += 1
        ops.append(("I", b1, s1))
        b1 += 1
    for _ in range(pp - rank):
        ops.append(("I", b0, s0))
        b0 += 1
        ops.append(("W", w0, s0))
        w0 += 1
    while w1 < b1:
        ops.append(("W", w1, s1))
        w1 += 1
    while w0 < b0:
        ops.append(("W", w0, s0))
        w0 += 1
    # torch pads to 2pp-1 microbatches and blanks the surplus
    return [o for o in ops if o[1] < n]


def dualpipe_v(rank: int, pp: int, n: int) -> Raw:
    # ScheduleDualPipeV._calculate_single_rank_operations; an overlapped F/B pair runs its
    # forward, then its (full) backward.
    s0, s1 = rank, 2 * pp - 1 - rank
    count: dict[tuple[int, str], int] = {}
    wq: list[tuple[int, int]] = []
    ops: Raw = []

    def add(s: int, kind: str) -> None:
        key = (s, "I" if kind == "B" else kind)
        m = count.get(key, 0)
        ops.append((kind, m, s))
        if kind == "B":
            count[(s, "I")] = m + 1
            count[(s, "W")] = count.get((s, "W"), 0) + 1
        else:
            if kind == "I":
                wq.append((s, m))
            count[key] = m + 1

    def add_w() -> None:
        if wq:
            s, m = wq.pop(0)
            ops.append(("W", m, s))
            count[(s, "W")] = count.get((s, "W"), 0) + 1

    def overlap(fs: int, bs: int) -> None:
        add(fs, "F")
        add(bs, "B")

    for _ in range((pp - rank - 1) * 2):
        add(s0, "F")
    for _ in range(rank + 1):
        add(s0, "F")
        add(s1, "F")
    for _ in range(pp - rank - 1):
        add(s1, "I")
        add_w()
        add(s1, "F")
    for i in range(n - pp * 2 + rank + 1):
        if i == 0 and rank == pp - 1:
            add(s0, "F")
            add(s1, "B")
        else:
            overlap(s0, s1)
        overlap(s1, s0)
    for _ in range(pp - rank - 1):
        add(s1, "B")
        overlap(s1, s0)
    zb = False
    steps6 = rank + 1
    for i in range(steps6):
        if i == steps6 // 2 and rank % 2 == 1:
            zb = True
        add(s1, "I" if zb else "B")
        if i == steps6 // 2 and rank % 2 == 0:
            zb = True
        add(s0, "I" if zb else "B")
    for _ in range(pp - rank - 1):
        add_w()
        add(s0, "I" if zb else "B")
    for _ in range(rank + 1):
        add_w()
    return ops



def dualpipe(rank: int, pp: int, n: int) -> Raw:
    # DualPipe.step (deepseek-ai/DualPipe dualpipe/dualpipe.py), steps 1-8. Half the microbatches
    # (0 … n/2−1) enter at rank 0 and pass the model's stages 0 … pp−1 on ranks 0 … pp−1; the other
    # half (n/2 … n−1) enter at rank pp−1 and pass them on ranks pp−1 … 0. On the first half of the
    # ranks "phase 0" is the first direction, on the second half the reverse one. An overlapped
    # F&B pair runs its forward, then its (full) backward; a zero-bubble backward ("I") leaves its
    # weight part to a later "W", first in first out.
    half, h = pp // 2, min(rank, pp - 1 - rank)
    second = rank >= half
    count = {(p, k): 0 for p in (0, 1) for k in "FB"}
    wq: list[tuple[int, int]] = []
    ops: Raw = []

    def where(phase: int) -> tuple[int, int]:          # (stage, first microbatch) of a phase
        direction = phase ^ second
        return (rank, 0) if direction == 0 else (pp - 1 - rank, n // 2)

    def f(phase: int) -> None:
        s, base = where(phase)
        ops.append(("F", base + count[(phase, "F")], s))
        count[(phase, "F")] += 1

    def b(phase: int, zb: bool = False) -> None:
        s, base = where(phase)
        m = base + count[(phase, "B")]
        count[(phase, "B")] += 1
        ops.append(("I" if zb else "B", m, s))
        if zb:
            wq.append((m, s))

    def w() -> None:
        m, s = wq.pop(0)
        ops.append(("W", m, s))

    for _ in range((half - h - 1) * 2):                 # 1: nF0
        f(0)
    for _ in range(h + 1):                              # 2: nF0F1
        f(0)
        f(1)
    for _ in range(half - h - 1):                       # 3: nB1W1F1
        b(1, zb=True)
        w()
        f(1)
    for _ in range(n // 2 - pp + h + 1):                # 4: nF0B1F1B0
        f(0)
        b(1)
        f(1)
        b(0)
    for _ in range(half - h - 1):                       # 5: nB1F1B0
        b(1)
        f(1)
        b(0)
    zb = False
    for i in range(h + 1):                              # 6: nB1B0, the second half zero-bubble
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        b(1, zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        b(0, zb)
    for _ in range(half - h - 1):                       # 7: nWB0
        w()
        b(0, zb=True)
    for _ in range(h + 1):                              # 8: nW
        w()
    return ops
