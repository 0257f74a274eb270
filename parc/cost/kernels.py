"""The memory-bound kernels of a training step, in bytes of HBM traffic: the layers' elementwise
kernels (norms, activation function, RoPE, residual adds), the casts of an FP8 recipe, and the
optimizer's update. :mod:`parc.cost.gemm` turns them into seconds at ``hbm · hbm_efficiency``.

Elementwise kernels, per token and layer, forward (16-bit activations, 2 bytes an element; h the
hidden size, q = heads·head_dim and kv = kv_heads·head_dim the attention widths, f the MLP's inner
width):

======================  ==============================  ==========================================
kernel                  fused (TE, Megatron, compile)   eager (one kernel per PyTorch op)
======================  ==============================  ==========================================
norm, each of 2         reads 2h, writes 2h             fp32 upcast, square, mean, rsqrt-scale,
                                                        downcast, weight: 20h (:data:`EAGER_NORM`)
RoPE on q and k         reads and writes 2 bytes each   upcast to complex, multiply, downcast:
                                                        20 bytes an element (:data:`EAGER_ROPE`)
residual add, each of 2 reads 4h, writes 2h             the same
SwiGLU                  reads 2·2f, writes 2f           SiLU, then the product: 10f
GELU (with its bias)    reads 2f, writes 2f             the same
======================  ==============================  ==========================================

The backward of each reads its saved input and the incoming gradient and writes the outgoing one:
a norm 6h fused (:data:`EAGER_NORM_BACKWARD` eager), the two residual branches' gradients summed
(reads 4h, writes 2h, each), RoPE as its forward, SwiGLU reads gate, up and the gradient and
writes two gradients (10f; eager 16f: the product's backward, then SiLU's), GELU 6f. A recomputed
layer (full recompute, torchtitan's per-op selective) runs the forward's kernels again.

Under tensor parallelism the norms and residual adds run on every TP rank over whole tokens (over
1/tp of them with sequence parallelism), the attention widths and the MLP over 1/tp of their
width. Each of these counts is the model's code read kernel by kernel (Megatron-LM's and Transformer
Engine's fused kernels; torchtitan's llama3 model in eager mode), not a measurement: what they
leave out (launch gaps, the odd copy) is what they miss.
"""
from __future__ import annotations

from parc.cost import xp as np

EAGER_NORM = 20.0           # bytes per element of h: RMSNorm's ops in fp32 (2 in, 4 + 4 + 4 out, 2 + 2 + 2)
EAGER_NORM_BACKWARD = 40.0  # autograd through the same ops, twice the forward's traffic
EAGER_ROPE = 20.0           # per element of q and k: upcast 2 + 4, complex multiply 4 + 4, downcast 4 + 2
ACTIVATION_BYTES = 2.0


def elementwise_bytes(m, tp, sp, fused: bool):
    """(forward, backward) bytes of HBM traffic one GPU's elementwise kernels move per token of a
    dense layer (the module's table). ``tp`` and ``sp`` may be numpy arrays; ``fused`` is the
    framework's (or ``train.compile``)."""
    h, q, kv, f = m.hidden, m.heads * _head(m), m.kv_heads * _head(m), m.ffn_hidden
    rep = h / np.where(sp, tp, 1)              # norms and residual adds: whole tokens unless SP
    rope = (q + kv) / tp if m.position == "rope" else 0.0
    swiglu = m.mlp == "swiglu"
    if fused:
        fwd = 2 * 4 * rep + 2 * 6 * rep + 4 * rope + (6 if swiglu else 4) * f / tp
        bwd = 2 * 6 * rep + 2 * 6 * rep + 4 * rope + (10 if swiglu else 6) * f / tp
    else:
        fwd = 2 * EAGER_NORM * rep + 2 * 6 * rep + EAGER_ROPE * rope + (10 if swiglu else 4) * f / tp
        bwd = 2 * EAGER_NORM_BACKWARD * rep + 2 * 6 * rep + EAGER_ROPE * rope + (16 if swiglu else 6) * f / tp
    return fwd, bwd


def moe_elementwise_bytes(m, tp, sp, fused: bool):
    """:func:`elementwise_bytes` for a MoE layer: the MLP's activation runs over each token's
    top_k routed rows and the shared experts (``f`` the expert width, over tp), and the dispatch
    and combine permutations copy each routed row (reads and writes 2h, twice) each way."""
    from dataclasses import replace

    width = ((m.top_k or 1) + m.shared_experts) * m.moe_ffn_hidden
    fwd, bwd = elementwise_bytes(replace(m, ffn_hidden=width), tp, sp, fused)
    permute = 2 * 4 * (m.top_k or 1) * m.hidden / tp
    return fwd + permute, bwd + permute


def fp8_cast_elements(m, tp, sp, moe: bool = False):
    """Elements per token of one layer's FP8 casts on one GPU: each linear layer's input and output
    gradient (QKV, output projection, MLP up and down; a MoE layer's experts over their top_k rows
    and its shared experts). Scalars or numpy arrays for ``tp`` and ``sp``."""
    h, q, kv = m.hidden, m.heads * _head(m), m.kv_heads * _head(m)
    rep = h / np.where(sp, tp, 1)
    up = 2 if m.mlp == "swiglu" else 1
    if moe:   # each routed row enters its expert whole (h) and leaves it whole; shared experts as a dense MLP
        k = m.top_k or 1
        f = (k + m.shared_experts) * m.moe_ffn_hidden
        mlp_in = mlp_out = k * h / tp + (rep if m.shared_experts else 0.0)
    else:
        f, mlp_in, mlp_out = m.ffn_hidden, rep, rep
    inputs = rep + q / tp + mlp_in + f / tp
    grads = (q + 2 * kv) / tp + rep + up * f / tp + mlp_out
    return inputs + grads


def fp8_weight_elements(m, tp, ep=1, etp=1, moe: bool = False) -> float:
    """Linear weights of one layer on one GPU, which an FP8 recipe casts (per microbatch, or once
    a step where the copies are cached): attention over tp, the MLP over tp (a MoE layer's local
    experts over ep and etp, its shared experts over tp)."""
    h, q, kv = m.hidden, m.heads * _head(m), m.kv_heads * _head(m)
    up = 3 if m.mlp == "swiglu" else 2
    attn = h * (q + 2 * kv) / tp + q * h / tp
    if not moe:
        return attn + up * h * m.ffn_hidden / tp
    return attn + up * h * m.moe_ffn_hidden * (m.experts / ep / etp + m.shared_experts / tp)


def ring_merge_bytes(m, tokens, tp, cp, layers, ring: dict, forward_passes=1.0):
    """HBM bytes one GPU's context-parallel ring moves per microbatch in the eager ops around its
    attention kernel (``ring`` from :func:`parc.model.frameworks.context_parallel`, its ``merge``
    bytes per element of a layer's local attention output, ``tokens`` · heads/tp · head_dim): each
    forward pass (``forward_passes``: 2 where the attention core is recomputed) a step's merge over
    cp-1 ring steps and its casts once, the backward the same. None without context parallelism.
    Example: torch's ring at cp 4 moves 40.5 · 3 + 12 = 133.5 bytes an element in a forward pass and
    58.5 · 3 + 76 = 251.5 in the backward. Scalars or numpy arrays for the sizes."""
    b = ring["merge"]
    per = (forward_passes * (b["forward_step"] * (cp - 1) + b["forward"])
           + b["backward_step"] * (cp - 1) + b["backward"])
    return (cp > 1) * per * tokens * (m.heads / tp) * _head(m) * layers


def grad_accumulation_bytes(fw: dict, pp, microbatches):
    """HBM bytes per gathered parameter of a stage that a microbatch's gradients cost beyond the
    weight-gradient GEMM, averaged over a step's ``microbatches``: the framework's
    ``grad_accumulation_bytes`` (``fw`` from :func:`parc.model.frameworks.framework`), and under a
    pipeline (``pp`` > 1) its ``pipeline_grad_accumulation_bytes`` [first microbatch, each later
    one]. Example: torchtitan at pp 2 with 4 microbatches, FSDP2 keeping the gradients of the
    gathered parameters in float32 until the last: (6 + 3 · 10) / 4 = 9. Scalars or numpy arrays
    for ``pp`` and ``microbatches``."""
    first, later = fw.get("pipeline_grad_accumulation_bytes", (0, 0))
    m = np.maximum(microbatches, 1)
    return fw["grad_accumulation_bytes"] + np.where(pp > 1, (first + later * (m - 1)) / m, 0.0)


def optimizer_bytes(owned_params, per) -> float:
    """HBM traffic of one optimizer step over the ``owned_params`` whose state this GPU keeps (a
    fused or foreach Adam): the master weights and moments read and written (``per.optimizer``
    bytes each way), the gradient read and the 16-bit weights written."""
    return owned_params * (2 * per.optimizer + per.grads + per.weights)


def _head(m) -> int:
    from parc.cost.params import head_dim

    return head_dim(m)
