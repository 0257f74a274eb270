"""Communication: bytes each GPU sends per collective and per axis of the mesh. Every function
takes scalars or numpy arrays for its sizes (a degree of 1 sends nothing); ``zero`` and
``recompute`` are single values.

Time (bottom of the module): each collective is priced per algorithm with Hockney's α-β model,
steps · latency + bytes / bandwidth, and the fastest algorithm wins, as NCCL's tuner picks one
(NVIDIA/nccl ``src/graph/tuning.cc``)."""
from __future__ import annotations

from functools import lru_cache

from parc.cost import xp as np
from parc.cost.params import _zero, dtype_bytes
from parc.model.frameworks import framework


def allreduce_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-reduce of ``nbytes`` over ``n`` GPUs: 2(n-1)/n · nbytes
    (a reduce-scatter and an all-gather; Patarasuk & Yuan 2009). One token's activation (hidden
    8192, 2 bytes) all-reduced over TP = 4 moves 24 KB per GPU."""
    return 2 * (n - 1) / n * nbytes


def allgather_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-gather (or reduce-scatter) of ``nbytes``: (n-1)/n · nbytes."""
    return (n - 1) / n * nbytes


def again(recompute):
    """How many times a layer's forward collectives run: 1.5 under full recompute (the forward's
    half of them once more), else 1. ``recompute`` is a setting's name, or a numpy array of booleans
    (full recompute or not) for the planner's rows."""
    if isinstance(recompute, str):
        return 1.5 if recompute == "full" else 1.0
    return np.where(recompute, 1.5, 1.0)


def tp_bytes_per_layer(tokens: float, h: int, t: int, nbytes: int = 2, recompute: str = "none") -> float:
    """Tensor-parallel bytes per GPU for one layer over ``tokens`` tokens, forward and backward:
    four all-reduces of tokens·h (two forward, two backward), or with sequence parallelism the
    same volume as four all-gathers plus four reduce-scatters: 8·tokens·h·(t-1)/t elements
    (Narayanan et al. 2021 §4.1; Korthikanti et al. 2022 §4.2.2). Full recompute repeats the
    forward's two (×1.5)."""
    vol = 2 * allreduce_bytes(tokens * h * nbytes, t) * 2
    return vol * again(recompute)


def cp_bytes_per_layer(tokens_local: float, kv_width: int, cp: int, nbytes: int = 2, grad_bytes: int = 0) -> float:
    """Context-parallel ring attention (Liu et al. 2023; Megatron-LM's CP) per layer: the forward
    passes each rank's K and V chunk (tokens_local · kv_width each) around the ring in cp-1 steps,
    the backward passes K, V and their gradients: 3 × the forward volume, the gradients in
    ``grad_bytes`` an element where the ring keeps them wider than the activations (torch's ring
    passes them in float32; 0: ``nbytes``)."""
    return (cp - 1) * 2 * tokens_local * kv_width * (2 * nbytes + (grad_bytes or nbytes))


def cp_gathered_share(ring: dict | None, precision: str) -> float:
    """The share of :func:`cp_bytes_per_layer` that a ring gathers at once instead of passing step
    by step: K and V (:func:`comm_dtype_bytes` of ``precision`` each) where the ring's ``rotate`` is
    "allgather" (torch's ring under torchtitan's default), against their gradients (``grad_bytes``,
    else the same), which still go one step at a time; 0 for a p2p ring. Example: bf16 K and V with
    float32 gradients, 4 / (4 + 4) = 0.5."""
    if not ring or ring.get("rotate") != "allgather":
        return 0.0
    nbytes = comm_dtype_bytes(precision)
    return 2 * nbytes / (2 * nbytes + (ring["grad_bytes"] or nbytes))


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
    reduce, gather = dp_bytes_parts(params, zero, n, grad_bytes, weight_bytes)
    return reduce + gather


def dp_bytes_parts(params: float, zero: int, n: int, grad_bytes: float, weight_bytes: float) -> tuple:
    """:func:`dp_bytes` as (gradient reduction, parameter all-gather): the first can run under the
    backward (``overlap_grad_reduce``), the second under the forward (``overlap_param_gather``)."""
    if zero == 0:
        return allreduce_bytes(params * grad_bytes, n), 0.0 * params
    g = allgather_bytes(params * grad_bytes, n)
    w = allgather_bytes(params * weight_bytes, n)
    return g, (w if zero in (1, 2) else 2 * w)


def pp_bytes_per_microbatch(tokens: float, h: int, t: int, v: int = 1, nbytes: int = 2) -> float:
    """Pipeline point-to-point bytes a middle stage sends per microbatch: its activations forward
    and their gradients backward, tokens·h each, split over tp by the scatter/gather optimisation
    (or sequence parallelism), ×v for the interleaved schedule (Narayanan et al. 2021 §4.1)."""
    return 2 * tokens * h * nbytes / t * v


# --- time: α-β per algorithm ------------------------------------------------------------------

ALGORITHMS = ("ring", "tree", "nvls", "all_to_all", "p2p")   # what axis_time's index names


@lru_cache(maxsize=None)
def link_latency(kind: str) -> float:
    """Seconds per step of a collective on a link of ``kind`` (``parc/model/data/links.toml``)."""
    from parc.resolve.catalog import presets

    table = presets("links")
    return float(table.get(kind, table["ethernet"])["latency"])


def link_params(profile, bw: dict, kind: dict) -> dict:
    """(bytes/s a collective reaches, seconds per step) of each link (``intra_node``,
    ``inter_node``): the datasheet's bandwidth times the profile's link efficiency, and the
    latency of the link's kind (``links.toml``)."""
    eff = {"intra_node": profile.intra_node_efficiency, "inter_node": profile.inter_node_efficiency}
    return {ln: (bw[ln] * eff[ln], link_latency(kind[ln])) for ln in bw}


def allreduce_times(ring_bytes, n, calls, local, intra: tuple, inter: tuple | None, nvls: bool):
    """Seconds of ``calls`` all-reduces over groups of ``n`` GPUs, ``local`` of them in each node,
    that move ``ring_bytes`` per GPU in all as a ring would (2(n−1)/n of the data, so the data
    itself is S = ring_bytes · n / 2(n−1)), by algorithm (ring, tree, NVLS); ``intra`` and
    ``inter`` are (bytes/s, seconds per step) of the two links. Inside a node:

    * ring: ring_bytes / bw + calls · 2(n−1) · α (Patarasuk & Yuan 2009);
    * tree (NCCL's double binary tree): 2S / bw + calls · 2⌈log2 n⌉ · α;
    * NVLS, on GPUs whose NVSwitch reduces (NVLink SHARP): S / bw + calls · 2α (the data goes up
      to the switch once and comes back multicast); ``inf`` where the GPU has none.

    A group over k = n/local nodes runs hierarchically, as NCCL does: the node's ``local`` members
    reduce-scatter and all-gather over NVLink (ring, or NVLS) around a ring or tree over the nodes
    of S/local per GPU on the inter-node link. A reduce-scatter + all-gather pair (ZeRO, sequence
    parallelism) moves what one all-reduce does and is priced the same by ring and tree, but not
    by NVLS: the switch reduces an all-reduce's data once on its way through, where a
    reduce-scatter sends all of it up and an all-gather brings all of it down, 2S in all; the
    caller passes ``nvls`` false (or an array of flags) for pairs. Scalars or arrays."""
    n = np.maximum(n, 2)
    local = np.minimum(np.maximum(local, 1), n)
    S = ring_bytes * n / (2 * (n - 1))
    bw_i, a_i = intra
    ring_i = 2 * (local - 1) / local * S / bw_i + calls * 2 * (local - 1) * a_i
    nvls_i = np.where(nvls, np.where(local > 1, S / bw_i + calls * 2 * a_i, 0.0), np.inf)
    if inter is None:
        tree = 2 * S / bw_i + calls * 2 * np.ceil(np.log2(n)) * a_i
        return ring_i, np.where(n > 2, tree, np.inf), nvls_i
    bw_x, a_x = inter
    k = np.maximum(n / local, 1)
    multi = k > 1
    ring_x = np.where(multi, 2 * (k - 1) / k * S / local / bw_x + calls * 2 * (k - 1) * a_x, 0.0)
    tree_x = np.where(multi, 2 * S / local / bw_x + calls * 2 * np.ceil(np.log2(k)) * a_x, 0.0)
    tree_i = 2 * S / bw_i + calls * 2 * np.ceil(np.log2(n)) * a_i
    return (ring_i + ring_x, np.where(multi, ring_i + tree_x, np.where(n > 2, tree_i, np.inf)),
            nvls_i + np.minimum(ring_x, tree_x))


def alltoall_time(nbytes, n, calls, local, intra: tuple, inter: tuple | None):
    """Seconds of ``calls`` all-to-alls over ``n`` GPUs, ``local`` per node, moving ``nbytes`` per
    GPU in all: the share bound for the node's other members, (local−1)/(n−1), goes over the
    intra-node link while the rest crosses the inter-node link at the same time; each call takes
    n−1 steps of the slower link's latency. Scalars or arrays."""
    n = np.maximum(n, 2)
    local = np.minimum(np.maximum(local, 1), n)
    bw_i, a_i = intra
    if inter is None:
        return nbytes / bw_i + calls * (n - 1) * a_i
    bw_x, a_x = inter
    near = (local - 1) / (n - 1)
    return np.maximum(nbytes * near / bw_i, nbytes * (1 - near) / bw_x) \
        + calls * (n - 1) * np.where(local < n, a_x, a_i)


def p2p_time(nbytes, calls, link: tuple):
    """Seconds of ``calls`` point-to-point messages moving ``nbytes`` in all over ``link``."""
    bw, a = link
    return nbytes / bw + calls * a


def comm_calls(layers, moe_layers, microbatches, v, cp, recompute: str):
    """How many collectives of each axis a stage runs per step (what the latency term counts):
    per layer and microbatch 4 all-reduces (or all-gather + reduce-scatter pairs) under tp, the
    ring's 3(cp−1) sends under cp, 4 all-to-alls per MoE layer under ep (dispatch and combine,
    forward and backward), 2v pipeline sends per microbatch, and one gradient reduction and one
    parameter gather per step (Megatron-LM buckets them; the bytes, not the count, dominate).
    Full recompute repeats the forward's (×1.5)."""
    again_ = again(recompute)
    return {"tp": 4 * layers * microbatches * again_, "cp": 3 * (cp - 1) * layers * microbatches * again_,
            "ep": 4 * moe_layers * microbatches * again_, "pp": 2 * v * microbatches, "dp": 2}


def serving_calls(layers, moe_layers) -> dict:
    """Collectives per decode step of a stage: two all-reduces per layer under tp, dispatch and
    combine per MoE layer under ep, one send to the next stage."""
    return {"tp": 2 * layers, "cp": 0, "ep": 2 * moe_layers, "pp": 1, "dp": 0}


def axis_time(axis: str, nbytes, n, calls, local, intra: tuple, inter: tuple | None, nvls: bool):
    """(seconds, index into :data:`ALGORITHMS`) of one axis's communication per step: tp and dp
    all-reduce (or reduce-scatter + all-gather) by the fastest of ring, tree and NVLS; ep
    all-to-all; pp and cp point-to-point sends, over the inter-node link when the group spans
    nodes (fewer than ``n`` of its members in a node). Scalars or arrays for the sizes."""
    if axis in ("tp", "dp"):
        return np.fastest(allreduce_times(nbytes, n, calls, local, intra, inter, nvls))
    if axis == "ep":
        return alltoall_time(nbytes, n, calls, local, intra, inter), 3
    if inter is None:
        return p2p_time(nbytes, calls, intra), 4
    return np.where(local < n, p2p_time(nbytes, calls, inter), p2p_time(nbytes, calls, intra)), 4


def zero3_passes(zero: int, pp, microbatches, fw: dict):
    """How many times a step's ZeRO-3 traffic (the parameters' gathers, the gradients'
    reduce-scatter) runs: once per microbatch without a pipeline where the framework gathers again
    for each (FSDP2, DeepSpeed: ``zero3_regather``), else once. Scalars or numpy arrays."""
    if zero < 3 or fw.get("zero3_regather") != "microbatch":
        return 1
    return np.where(pp <= 1, np.maximum(microbatches, 1), 1)


def zero3_flat(plan) -> bool:
    """Whether the plan's ZeRO-3 collectives run as flat rings across nodes (the framework's
    ``zero3_collectives``, parc/model/data/frameworks.toml)."""
    return _zero(plan) >= 3 and framework(plan.train.framework)["zero3_collectives"] == "flat"


def comm_dtype_bytes(precision: str) -> int:
    """Bytes an activation element crosses a link in: 16-bit for BF16, FP16 and FP8 training (FP8
    recipes cast inside the layers; what travels between them stays BF16), 4 for FP32."""
    return max(2, dtype_bytes(precision))
