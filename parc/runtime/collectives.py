"""Autograd-aware collectives the layers use directly (plain torch.distributed underneath).

Each one states the gradient it gives, because that is where parallel runs go silently wrong:
an activation replicated over a group carries the *full* gradient on every member, a sharded
one carries the gradient of its own shard.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def _rank(group) -> int:
    return dist.get_rank(group)


class _AllGatherDim(torch.autograd.Function):
    """Concatenate every member's tensor along ``dim``. Backward: each member's contribution to
    the gathered tensor's gradient is partial, so sum over the group and keep this member's part."""

    @staticmethod
    def forward(ctx, x, dim, group, world):
        ctx.dim, ctx.group, ctx.world = dim, group, world
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g, group=ctx.group)
        return g.chunk(ctx.world, dim=ctx.dim)[_rank(ctx.group)].contiguous(), None, None, None


def all_gather_dim(x, dim: int, group, world: int):
    return _AllGatherDim.apply(x, dim, group, world)


class _ScatterDim(torch.autograd.Function):
    """Keep this member's chunk of a tensor replicated over the group (entering a sharded
    region). Backward: the chunks' gradients are gathered into the full, replicated gradient."""

    @staticmethod
    def forward(ctx, x, dim, rank, group, world):
        ctx.dim, ctx.group, ctx.world = dim, group, world
        return x.chunk(world, dim=dim)[rank].contiguous()

    @staticmethod
    def backward(ctx, g):
        parts = [torch.empty_like(g) for _ in range(ctx.world)]
        dist.all_gather(parts, g.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=ctx.dim), None, None, None, None


def scatter_dim(x, dim: int, rank: int, group, world: int):
    return _ScatterDim.apply(x, dim, rank, group, world)


class _ScatterRows(torch.autograd.Function):
    """Rows ``[rank·per, (rank+1)·per)`` of a replicated (n, h) tensor (the last share may be
    shorter). Backward: gather every share's gradient into the full, replicated gradient."""

    @staticmethod
    def forward(ctx, x, rank, per, group, world):
        ctx.n, ctx.per, ctx.group, ctx.world = x.shape[0], per, group, world
        return x[rank * per:(rank + 1) * per].contiguous()

    @staticmethod
    def backward(ctx, g):
        return _gather_padded(g, ctx.n, ctx.per, ctx.group, ctx.world), None, None, None, None


class _GatherRows(torch.autograd.Function):
    """Gather every member's share of rows back into the full (n, h) tensor. Backward: the
    downstream gradient is replicated (the same on every member), so keep this member's rows."""

    @staticmethod
    def forward(ctx, y, n, group, world):
        per = -(-n // world)
        ctx.per, ctx.rank = per, _rank(group)
        return _gather_padded(y, n, per, group, world)

    @staticmethod
    def backward(ctx, g):
        r, per = ctx.rank, ctx.per
        return g[r * per:(r + 1) * per].contiguous(), None, None, None


def _gather_padded(y, n: int, per: int, group, world: int):
    pad = per - y.shape[0]
    if pad:
        y = torch.cat([y, y.new_zeros((pad,) + tuple(y.shape[1:]))])
    parts = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(parts, y.contiguous(), group=group)
    return torch.cat(parts)[:n]


def scatter_rows(x, rank: int, per: int, group, world: int):
    return _ScatterRows.apply(x, rank, per, group, world)


def gather_rows(y, n: int, group, world: int):
    return _GatherRows.apply(y, n, group, world)


class _SumGrad(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the group (a weight replicated over
    the group that each member applied to different tokens)."""

    @staticmethod
    def forward(ctx, w, group):
        ctx.group = group
        return w.view_as(w)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


def sum_grad(w, group):
    return _SumGrad.apply(w, group)


class _AllToAll(torch.autograd.Function):
    """Uneven all-to-all of rows; backward is the reverse all-to-all."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.out_splits, ctx.in_splits, ctx.group = out_splits, in_splits, group
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        out = g.new_empty((sum(ctx.in_splits),) + tuple(g.shape[1:]))
        dist.all_to_all_single(out, g.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return out, None, None, None


def all_to_all(x, out_splits: list[int], in_splits: list[int], group):
    return _AllToAll.apply(x, out_splits, in_splits, group)


def _group_by_expert(counts, device):
    """counts [sources, experts]: rows arrive source-major (all of source 0's rows, grouped by
    expert, then source 1's...). The permutation that groups them expert-major, and its inverse."""
    n_src, local = counts.shape
    flat = counts.flatten()
    starts = (torch.cumsum(flat, 0) - flat).view(n_src, local).tolist()
    c = counts.tolist()
    idx = [torch.arange(starts[s][e], starts[s][e] + c[s][e]) for e in range(local) for s in range(n_src)]
    perm = torch.cat(idx).to(device) if idx else torch.zeros(0, dtype=torch.long, device=device)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=device)
    return perm, inv


def _gather_var(x, sizes, group, world):
    width = max(sizes)
    pad = x.new_zeros((width,) + tuple(x.shape[1:]))
    pad[:x.shape[0]] = x
    parts = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(parts, pad, group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


class _GatherVar(torch.autograd.Function):
    """Concatenate members' row blocks of different lengths (``sizes``). Backward: every member
    used all rows, so each block's gradient is the sum over members; keep this member's block."""

    @staticmethod
    def forward(ctx, x, sizes, group, world):
        ctx.sizes, ctx.group, ctx.world = sizes, group, world
        return _gather_var(x, sizes, group, world)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        r = _rank(ctx.group)
        start = sum(ctx.sizes[:r])
        return g[start:start + ctx.sizes[r]].contiguous(), None, None, None


class _ReduceScatterVar(torch.autograd.Function):
    """Sum members' partial outputs for all rows and keep this member's block (``sizes``).
    Backward: each member's partial gets the gradient of every block, gathered."""

    @staticmethod
    def forward(ctx, y, sizes, group, world):
        ctx.sizes, ctx.group, ctx.world = sizes, group, world
        total = y.contiguous().clone()
        dist.all_reduce(total, group=group)
        r = _rank(group)
        start = sum(sizes[:r])
        return total[start:start + sizes[r]]

    @staticmethod
    def backward(ctx, g):
        return _gather_var(g.contiguous(), ctx.sizes, ctx.group, ctx.world), None, None, None


def expert_all_to_all(rows, counts, experts, group, ep: int, etp_group=None, etp: int = 1):
    """Send rows (sorted by global expert index, ``counts[e]`` rows for expert e) to the ranks
    that own their experts, run the local experts, and bring the results back in the same order.

    The counts go first (an equal-split all-to-all), then the rows (uneven splits). With expert
    tensor parallelism each expert's hidden width is split over the ``etp`` group: the members
    gather each other's rows, compute partial outputs with their slice, and sum them back."""
    E = counts.numel()
    local = E // ep
    if ep > 1:
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts.contiguous(), group=group)
        send = counts.view(ep, local).sum(1).tolist()
        rc = recv_counts.view(ep, local)             # [source rank, local expert]
        recv = rc.sum(1).tolist()
        got = all_to_all(rows, recv, send, group)
        perm, inv = _group_by_expert(rc, rows.device)
        got, per_expert = got[perm], rc.sum(0)
    else:
        got, per_expert = rows, counts
    if etp > 1:
        all_counts = [torch.empty_like(per_expert) for _ in range(etp)]
        dist.all_gather(all_counts, per_expert.contiguous(), group=etp_group)
        ec = torch.stack(all_counts)                  # [etp member, local expert]
        sizes = ec.sum(1).tolist()
        mine = _GatherVar.apply(got, sizes, etp_group, etp)
        eperm, einv = _group_by_expert(ec, rows.device)
        y = experts(mine[eperm], ec.sum(0).tolist(), out_bias=_rank(etp_group) == 0, etp_group=etp_group)
        y = _ReduceScatterVar.apply(y[einv], sizes, etp_group, etp)
    else:
        y = experts(got, per_expert.tolist())
    if ep > 1:
        y = all_to_all(y[inv], send, recv, group)
    return y
