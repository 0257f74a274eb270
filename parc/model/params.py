"""The model's parameter counts by published formula, and the balanced layer split.

These are facts of the model alone (the resolver fills ``Model.params`` and balanced
``placement.layers`` from them); what one GPU holds under a plan is in :mod:`parc.cost.params`."""
from __future__ import annotations

from parc.model.plan import Model


def attention_params(m: Model) -> int:
    """Q, K, V and output projections of one layer: h·d·(2a + 2·kv) (+ biases).

    GQA shrinks K and V to ``kv_heads`` heads (Ainslie et al. 2023).
    """
    d = m.head_dim or m.hidden // m.heads
    p = m.hidden * d * (2 * m.heads + 2 * m.kv_heads)
    if m.bias:
        p += d * (m.heads + 2 * m.kv_heads) + m.hidden
    return p


def mlp_params(m: Model, width: int) -> int:
    """One MLP of inner ``width``: SwiGLU has three matrices, GELU two (+ biases)."""
    mats = 3 if m.mlp == "swiglu" else 2
    p = mats * m.hidden * width
    if m.bias:
        p += (mats - 1) * width + m.hidden
    return p


def norm_params(m: Model) -> int:
    """One norm: RMSNorm keeps a weight (h), LayerNorm a weight and a bias (2h)."""
    return m.hidden if m.norm == "rmsnorm" else 2 * m.hidden


def expert_params(m: Model) -> int:
    """All routed experts of one MoE layer."""
    return m.experts * mlp_params(m, m.moe_ffn_hidden)


def moe_layer_mlp_params(m: Model) -> int:
    """A MoE layer's MLP: routed experts, shared experts and the router (h·E)."""
    return (expert_params(m) + m.shared_experts * mlp_params(m, m.moe_ffn_hidden)
            + m.hidden * m.experts)


def layer_params(m: Model, moe: bool = False) -> int:
    """One transformer layer: attention, MLP (dense or MoE) and two norms."""
    mlp = moe_layer_mlp_params(m) if moe else mlp_params(m, m.ffn_hidden)
    return attention_params(m) + mlp + 2 * norm_params(m)


def embedding_params(m: Model) -> int:
    """Token embedding V·h, plus s·h for learned positions."""
    return m.vocab * m.hidden + (m.seq_len * m.hidden if m.position == "learned" else 0)


def output_params(m: Model) -> int:
    """Output head V·h unless tied to the embedding, plus the final norm."""
    return (0 if m.tied_embeddings else m.vocab * m.hidden) + norm_params(m)


def is_moe_layer(m: Model, i: int) -> bool:
    """Layer ``i`` (0-based) is MoE when the model has experts and (i+1) % moe_every == 0."""
    return m.experts > 0 and (i + 1) % m.moe_every == 0


def param_count(m: Model) -> int:
    """Total parameters. For GPT-3-style models this is Narayanan et al. 2021 (arXiv:2104.04473)
    eq. P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) plus the final norm."""
    moe_layers = m.layers // m.moe_every if m.experts else 0
    dense_layers = m.layers - moe_layers
    return (dense_layers * layer_params(m) + moe_layers * layer_params(m, moe=True)
            + embedding_params(m) + output_params(m))


def balanced_split(m: Model, stages: int) -> list[int] | None:
    """An uneven layer split lighter on the first and last stage.

    The first stage also holds the embedding and the last the output head and loss; each is
    charged as the layers' worth of compute its matrices cost (at least one layer), then
    layers are water-filled onto the least loaded stage, which minimises the largest stage.
    """
    if stages <= 0 or m.layers < stages:
        return None
    per_layer = max(1, layer_params(m))
    extra = [0.0] * stages
    head = max(1.0, round(m.vocab * m.hidden / per_layer, 2))
    extra[0] += 1.0
    extra[-1] += head if stages > 1 else 0.0
    counts = [0] * stages
    for _ in range(m.layers):
        i = min(range(stages), key=lambda j: (counts[j] + extra[j], j in (0, stages - 1), j))
        counts[i] += 1
    return counts
