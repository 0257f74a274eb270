"""The reference decoder built from a plan's model block.

A Llama-style transformer (token embedding, RMSNorm, RoPE, grouped-query attention through
SDPA, SwiGLU MLP, output head, optional tied embeddings) that also covers the other shapes the
model block can name: LayerNorm, GELU MLPs, learned positions and linear biases. MoE layers
(every ``moe_every``-th layer: a top-k router, routed experts and optional shared experts) replace
the MLP where the model has experts.

Layers live in a ``ModuleDict`` keyed by their global index, so a pipeline stage is the same
class holding a subset of layers (and ``tok_embeddings``/``norm``/``output`` only where it owns
them) and parameter names are the same in every plan: that is what lets a checkpoint saved
under one plan load under another, and the single-process reference compare parameter by
parameter.

The parallel runtime attaches a :class:`Parallel` context (tensor-, context- and
expert-parallel groups); without one the model is the plain single-process reference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from parc.runtime import collectives as C


@dataclass
class Config:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    seq_len: int
    tied_embeddings: bool = False
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    position: str = "rope"
    bias: bool = False
    qkv_bias: bool = False   # biases on q, k, v only (Qwen2/2.5)
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    moe_every: int = 1
    rope_theta: float = 10000.0
    eps: float = 1e-5
    init_std: float = 0.02

    @classmethod
    def from_model(cls, m) -> "Config":
        return cls(vocab=m.vocab, hidden=m.hidden, layers=m.layers, heads=m.heads, kv_heads=m.kv_heads,
                   head_dim=m.head_dim or m.hidden // m.heads, ffn_hidden=m.ffn_hidden, seq_len=m.seq_len,
                   tied_embeddings=m.tied_embeddings, mlp=m.mlp, norm=m.norm, position=m.position,
                   bias=m.bias, qkv_bias=m.qkv_bias, experts=m.experts, top_k=m.top_k, moe_ffn_hidden=m.moe_ffn_hidden,
                   shared_experts=m.shared_experts, moe_every=m.moe_every)

    def is_moe_layer(self, i: int) -> bool:
        return self.experts > 0 and (i + 1) % self.moe_every == 0


@dataclass
class Parallel:
    """Process groups the layers need at run time (sizes 1 mean "not split")."""

    tp_group: object = None
    tp: int = 1
    tp_rank: int = 0
    sequence_parallel: bool = False
    cp_group: object = None
    cp: int = 1
    cp_rank: int = 0
    ep_group: object = None
    ep: int = 1
    ep_rank: int = 0
    etp_group: object = None
    etp: int = 1
    extra: dict = field(default_factory=dict)


def make_norm(cfg: Config) -> nn.Module:
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.hidden, eps=cfg.eps)
    return nn.RMSNorm(cfg.hidden, eps=cfg.eps)


def rope_tables(head_dim: int, positions: torch.Tensor, theta: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (b, t, heads, d); rotate pairs (even, odd) of the head dimension."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return out.flatten(-2)


def cp_positions(t_local: int, cp: int, cp_rank: int, device) -> torch.Tensor:
    """Global positions of a context-parallel rank's tokens: chunks r and 2cp-1-r (head-tail)."""
    if cp == 1:
        return torch.arange(t_local, device=device)
    c = t_local // 2
    a = torch.arange(cp_rank * c, (cp_rank + 1) * c, device=device)
    b = torch.arange((2 * cp - 1 - cp_rank) * c, (2 * cp - cp_rank) * c, device=device)
    return torch.cat([a, b])


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        d = cfg.head_dim
        self.head_dim = d
        qkv = cfg.bias or cfg.qkv_bias
        self.wq = nn.Linear(cfg.hidden, cfg.heads * d, bias=qkv)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=qkv)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=qkv)
        self.wo = nn.Linear(cfg.heads * d, cfg.hidden, bias=cfg.bias)
        self.rope = cfg.position == "rope"
        self.theta = cfg.rope_theta
        self.par: Optional[Parallel] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.head_dim
        q = self.wq(x).view(b, t, -1, d)
        k = self.wk(x).view(b, t, -1, d)
        v = self.wv(x).view(b, t, -1, d)
        par = self.par
        cp = par.cp if par is not None else 1
        pos = cp_positions(t, cp, par.cp_rank if par else 0, x.device)
        if self.rope:
            cos, sin = rope_tables(d, pos, self.theta, q.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))      # (b, heads, t, d)
        rep = q.shape[1] // k.shape[1]
        if cp > 1:
            # all-gather K and V (one stacked collective, autograd-aware) and mask by global position
            kv = C.all_gather_dim(torch.stack([k, v]), dim=3, group=par.cp_group, world=cp)
            k, v = kv[0], kv[1]
            kpos = torch.cat([cp_positions(t, cp, r, x.device) for r in range(cp)])
            mask = pos[:, None] >= kpos[None, :]
            if rep > 1:
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            if rep > 1:
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """SwiGLU (w1 gate, w3 up, w2 down) or GELU (w1 up, w2 down)."""

    def __init__(self, cfg: Config, width: int):
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        self.w1 = nn.Linear(cfg.hidden, width, bias=cfg.bias)
        self.w2 = nn.Linear(width, cfg.hidden, bias=cfg.bias)
        if self.swiglu:
            self.w3 = nn.Linear(cfg.hidden, width, bias=cfg.bias)

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Experts(nn.Module):
    """E routed experts as grouped weights (expert index first), so expert parallelism shards
    dim 0. Under expert parallelism the weights are DTensors sharded over the ep mesh."""

    def __init__(self, cfg: Config):
        super().__init__()
        E, h, f = cfg.experts, cfg.hidden, cfg.moe_ffn_hidden
        self.swiglu = cfg.mlp == "swiglu"
        self.w1 = nn.Parameter(torch.empty(E, f, h))
        self.w2 = nn.Parameter(torch.empty(E, h, f))
        if self.swiglu:
            self.w3 = nn.Parameter(torch.empty(E, f, h))
        self.bias = cfg.bias
        if cfg.bias:
            self.b1 = nn.Parameter(torch.zeros(E, f))
            self.b2 = nn.Parameter(torch.zeros(E, h))
            if self.swiglu:
                self.b3 = nn.Parameter(torch.zeros(E, f))

    def local(self, name: str) -> torch.Tensor:
        p = getattr(self, name)
        return p.to_local() if hasattr(p, "to_local") else p

    def forward(self, x: torch.Tensor, counts: list[int], out_bias: bool = True, etp_group=None) -> torch.Tensor:
        """x: rows grouped by local expert, ``counts[e]`` rows for local expert e. Under expert
        tensor parallelism (``etp_group``) the output is partial, summed over the group later, and
        only the member with ``out_bias`` adds the output bias; every member's copy of that bias
        gets the summed gradient."""
        w1, w2 = self.local("w1"), self.local("w2")
        b2 = self.local("b2") if self.bias else None
        if b2 is not None and etp_group is not None:
            b2 = C.sum_grad(b2, etp_group) * (1.0 if out_bias else 0.0)
        w3 = self.local("w3") if self.swiglu else None
        outs, start = [], 0
        for e, n in enumerate(counts):
            xe = x[start:start + n]
            start += n
            a = xe @ w1[e].t()
            if self.bias:
                a = a + self.local("b1")[e]
            if self.swiglu:
                u = xe @ w3[e].t()
                if self.bias:
                    u = u + self.local("b3")[e]
                a = F.silu(a) * u
            else:
                a = F.gelu(a)
            y = a @ w2[e].t()
            if b2 is not None:
                y = y + b2[e]
            outs.append(y)
        if not outs:
            return x[:0]
        return torch.cat(outs)


class MoE(nn.Module):
    """Top-k routing (softmax probabilities of the chosen experts weight their outputs), dropless
    experts and optional shared experts. Under expert parallelism tokens travel to the ranks that
    own their experts by all-to-all (counts first, then tokens) and come back the same way."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.top_k = cfg.top_k
        self.n_experts = cfg.experts
        self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.experts = Experts(cfg)
        self.shared = MLP(cfg, cfg.shared_experts * cfg.moe_ffn_hidden) if cfg.shared_experts else None
        self.par: Optional[Parallel] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        par = self.par
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        # tokens replicated over tp (no sequence parallel): each tp rank routes a share
        split_tp = par is not None and par.tp > 1 and not par.sequence_parallel
        if split_tp:
            n = tokens.shape[0]
            per = -(-n // par.tp)
            tokens = C.scatter_rows(tokens, par.tp_rank, per, par.tp_group, par.tp)
        router_w = self.router.weight
        if par is not None and par.tp > 1:
            router_w = C.sum_grad(router_w, par.tp_group)
        logits = tokens @ router_w.t()
        probs = torch.softmax(logits.float(), dim=-1).to(tokens.dtype)
        weight, expert = probs.topk(self.top_k, dim=-1)
        routed = self._dispatch(tokens, expert.reshape(-1), weight.reshape(-1))
        if split_tp:
            routed = C.gather_rows(routed, n, par.tp_group, par.tp)
        out = routed.reshape(shape)
        if self.shared is not None:
            out = out + self.shared(x)
        return out

    def _dispatch(self, tokens, expert, weight):
        k = self.top_k
        n = tokens.shape[0]
        src = torch.arange(n, device=tokens.device).repeat_interleave(k)
        order = torch.argsort(expert, stable=True)
        rows = tokens[src[order]]
        counts = torch.bincount(expert, minlength=self.n_experts)
        par = self.par
        if par is None or (par.ep == 1 and par.etp == 1):
            y = self.experts(rows, counts.tolist())
        else:
            y = C.expert_all_to_all(rows, counts, self.experts, par.ep_group, par.ep, par.etp_group, par.etp)
        y = y * weight[order, None]
        out = torch.zeros_like(tokens)
        return out.index_add(0, src[order], y)


class Block(nn.Module):
    def __init__(self, cfg: Config, idx: int):
        super().__init__()
        self.attention_norm = make_norm(cfg)
        self.attention = Attention(cfg)
        self.ffn_norm = make_norm(cfg)
        self.moe = cfg.is_moe_layer(idx)
        if self.moe:
            self.feed_forward = MoE(cfg)
        else:
            self.feed_forward = MLP(cfg, cfg.ffn_hidden)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """The whole decoder, or one pipeline stage of it (``layer_ids``, ``first``, ``last``)."""

    def __init__(self, cfg: Config, layer_ids=None, first: bool = True, last: bool = True):
        super().__init__()
        self.cfg = cfg
        self.par: Optional[Parallel] = None
        ids = range(cfg.layers) if layer_ids is None else layer_ids
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.hidden) if first else None
        self.pos_embeddings = (nn.Embedding(cfg.seq_len, cfg.hidden)
                               if first and cfg.position == "learned" else None)
        self.layers = nn.ModuleDict({str(i): Block(cfg, i) for i in ids})
        self.norm = make_norm(cfg) if last else None
        self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False) if last else None
        if first and last and cfg.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_weights(self, seed: int) -> None:
        """Deterministic initialisation: each parameter from its own generator, keyed by its name,
        so a pipeline stage initialises exactly as the same layers of the whole model do (a tied
        output head that is its stage's own copy starts equal to the embedding)."""
        std = self.cfg.init_std
        out_std = std / math.sqrt(2 * max(1, self.cfg.layers))
        for name, p in self.named_parameters():
            key = "tok_embeddings.weight" if name == "output.weight" and self.cfg.tied_embeddings else name
            module, leaf = key.rsplit(".", 1)
            with torch.no_grad():
                if "norm" in module:
                    p.fill_(1.0 if leaf == "weight" else 0.0)
                elif leaf == "bias" or leaf in ("b1", "b2", "b3"):
                    p.zero_()
                else:
                    g = torch.Generator().manual_seed((seed * 1_000_003 + _stable_hash(key)) % 2**63)
                    s = out_std if module.endswith((".wo", ".w2")) or key.endswith("experts.w2") else std
                    p.copy_(torch.randn(p.shape, generator=g) * s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(x)
            if self.pos_embeddings is not None:
                h = self._add_positions(h)
        else:
            h = x
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h)
        return h

    def _add_positions(self, h):
        par = self.par
        t = h.shape[1]
        if par is not None and par.sequence_parallel and par.tp > 1:
            # the embedding came out replicated; add positions, then enter the sequence-parallel region
            pos = cp_positions(t, par.cp, par.cp_rank, h.device)
            h = h + self.pos_embeddings(pos)[None]
            return C.scatter_dim(h, 1, par.tp_rank, par.tp_group, par.tp)
        pos = cp_positions(t, par.cp if par else 1, par.cp_rank if par else 0, h.device)
        return h + self.pos_embeddings(pos)[None]


def _stable_hash(s: str) -> int:
    h = 1469598103934665603
    for ch in s.encode():
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFF
    return h


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy (the per-microbatch mean the pipeline schedules expect)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def set_parallel(module: nn.Module, par: Parallel) -> None:
    for m in module.modules():
        if hasattr(m, "par"):
            m.par = par
