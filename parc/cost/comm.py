"""Communication: bytes each GPU sends per collective and per axis of the mesh. Every function
takes scalars or numpy arrays for its sizes (a degree of 1 sends nothing); ``zero`` and
``recompute`` are single values."""
from __future__ import annotations


def allreduce_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-reduce of ``nbytes`` over ``n`` GPUs: 2(n-1)/n · nbytes
    (a reduce-scatter and an all-gather; Patarasuk & Yuan 2009). One token's activation (hidden
    8192, 2 bytes) all-reduced over TP = 4 moves 24 KB per GPU."""
    return 2 * (n - 1) / n * nbytes


def allgather_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-gather (or reduce-scatter) of ``nbytes``: (n-1)/n · nbytes."""
    return (n - 1) / n * nbytes


def tp_bytes_per_layer(tokens: float, h: int, t: int, nbytes: int = 2, recompute: str = "none") -> float:
    """Tensor-parallel bytes per GPU for one layer over ``tokens`` tokens, forward and backward:
    four all-reduces of tokens·h (two forward, two backward), or with sequence parallelism the
    same volume as four all-gathers plus four reduce-scatters: 8·tokens·h·(t-1)/t elements
    (Narayanan et al. 2021 §4.1; Korthikanti et al. 2022 §4.2.2). Full recompute repeats the
    forward's two (×1.5)."""
    vol = 2 * allreduce_bytes(tokens * h * nbytes, t) * 2
    return vol * (1.5 if recompute == "full" else 1.0)


def cp_bytes_per_layer(tokens_local: float, kv_width: int, cp: int, nbytes: int = 2) -> float:
    """Context-parallel ring attention (Liu et al. 2023; Megatron-LM's CP) per layer: the forward
    passes each rank's K and V chunk (tokens_local · kv_width each) around the ring in cp-1 steps,
    the backward passes K, V and their gradients: 3 × the forward volume."""
    return 3 * (cp - 1) * 2 * tokens_local * kv_width * nbytes


def ep_bytes_per_layer(tokens_local: float, h: int, top_k: int, ep: int, nbytes: int = 2) -> float:
    """Expert-parallel all-to-all per MoE layer: dispatch and combine in the forward and again in
    the backward, each moving tokens·top_k·h elements of which (ep-1)/ep leave the GPU
    (Lepikhin et al. 2020, GShard; DeepSeek-V3 §3.2.2)."""
    return 4 * tokens_local * top_k * h * nbytes * (ep - 1) / ep


def dp_bytes(params: float, zero: int, n: int, grad_bytes: float, weight_bytes: float) -> float:
    """Data-parallel bytes per GPU per step for ``params`` parameters over ``n`` GPUs (ZeRO §7):
    zero 0: all-reduce of the gradients, 2(n-1)/n · Ψ·grad_bytes; zero 1-2: reduce-scatter of
    the gradients plus all-gather of the updated weights; zero 3: all-gather of the weights for
    the forward and again for the backward plus the gradients' reduce-scatter (3Ψ against 2Ψ).
    Gradients are reduced once per step (accumulated over microbatches first)."""
    g = allgather_bytes(params * grad_bytes, n)
    w = allgather_bytes(params * weight_bytes, n)
    if zero == 0:
        return allreduce_bytes(params * grad_bytes, n)
    if zero in (1, 2):
        return g + w
    return g + 2 * w


def pp_bytes_per_microbatch(tokens: float, h: int, t: int, v: int = 1, nbytes: int = 2) -> float:
    """Pipeline point-to-point bytes a middle stage sends per microbatch: its activations forward
    and their gradients backward, tokens·h each, split over tp by the scatter/gather optimisation
    (or sequence parallelism), ×v for the interleaved schedule (Narayanan et al. 2021 §4.1)."""
    return 2 * tokens * h * nbytes / t * v
