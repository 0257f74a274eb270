"""What a serving engine keeps when it starts, and what it leaves for the KV cache: the one place
:func:`parc.cost.estimate.estimate` (and through it explain, the memory rules and the planner)
reads a serving GPU's memory from. The engines' numbers and the two fitted constants are in
``startup.toml`` beside this module, each with its source.

**vLLM** (v1/worker/gpu_worker.py ``Worker.determine_available_memory``, 0.33.0) takes a snapshot
of the GPU once its CUDA context and NCCL communicators exist, and requests
``ceil(total × gpu_memory_utilization)`` of it (v1/worker/utils.py ``request_memory``, which
refuses to start when the snapshot has less free: "Free memory on device ... is less than desired
GPU memory utilization"). It loads the weights, runs ``profile_run`` (a dummy forward pass of
``max_num_batched_tokens`` tokens, then the sampler over ``max_num_seqs`` sequences while that
pass's hidden states are alive), estimates the CUDA graphs it will capture
(``profile_cudagraph_memory``, subtracted by default since 0.21) and logs what is left::

    Available KV cache memory = requested − weights − peak activation − CUDA graphs

(less the memory outside torch allocated since the snapshot, which parc does not model: vLLM logs
about 0.1 GiB). With nothing left it refuses ("No available memory for the cache blocks"). The
CUDA context and NCCL buffers are outside the request: they use the memory
``gpu_memory_utilization`` leaves.

**SGLang** (mem_cache/kv_cache_configurator.py ``_profile_available_bytes``, 0.5.23) measures
what is free after its distributed init (``pre_model_load_memory``), loads the weights and gives
the KV pool what is free less ``pre_model_load_memory × (1 − mem_fraction_static)`` (parc's launch
writes ``gpu_memory_utilization`` as ``--mem-fraction-static``; left out, the fraction SGLang
derives, :func:`parc.cost.engine.memory_fraction`): activations and the CUDA graphs
it captures after allocating the pool must fit in that slack.

**TensorRT-LLM** (tensorrt_llm/_torch/pyexecutor/_util.py ``KvCacheCreator``, PyTorch backend)
loads the weights, runs a profiling forward pass of ``max_num_tokens`` tokens and gives the KV
cache ``free_gpu_memory_fraction`` (trtllm-serve's ``--kv_cache_free_gpu_memory_fraction``, parc's
``gpu_memory_utilization``) of what the profile's peak leaves of the GPU, the memory outside torch
(the CUDA context, NCCL) counted in the peak::

    KV cache = (total − weights − peak activation − context and NCCL) × fraction

parc counts no CUDA graphs for it: whatever its graphs hold comes out of what the fraction
leaves (or, captured before the profile, out of the profile's peak, which parc does not model)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "startup.toml"
MIB = 1 << 20


@lru_cache(maxsize=1)
def table() -> dict:
    import tomllib

    with open(DATA, "rb") as f:
        return tomllib.load(f)


def family(gpu) -> str:
    """``sm90``, ``sm100`` or ``default``: the compute-capability family the engines pick kernels
    for, by the GPU preset's name (startup.toml [family]); a GPU parc has no preset for is
    ``default``."""
    for fam, names in table()["family"].items():
        if gpu.name in names:
            return fam
    return "default"


def _grid(small: list, grid: list, largest: int) -> list[int]:
    out = list(small)
    for start, stop, step in grid:
        out += range(start, (largest + 1) if stop == 0 else min(stop, largest + 1), step)
    return [s for s in out if s <= largest]


@dataclass(frozen=True, slots=True)
class Capture:
    """The CUDA graphs an engine captures at start-up. vLLM: ``piecewise`` token counts (every
    batch, mixed prefill and decode) and ``full`` decode sizes (uniform decode batches of
    max_num_seqs or fewer requests); SGLang: ``full`` decode batch sizes up to its
    cuda_graph_max_bs and ``piecewise`` prefill token buckets (breakable graphs)."""
    piecewise: tuple[int, ...] = ()
    full: tuple[int, ...] = ()

    @property
    def graphs(self) -> int:
        return len(self.piecewise) + len(self.full)


def vllm_capture(plan, seqs: int, tokens: int) -> Capture:
    """vLLM 0.33's capture sizes (config/vllm.py ``_set_cudagraph_sizes``) for ``seqs``
    max_num_seqs and ``tokens`` max_num_batched_tokens, one token per decode request (with
    speculative decoding a decode request's query is 1 + the draft tokens, and vLLM captures the
    request counts times it)."""
    t = table()["vllm"]
    q = 1 + (plan.serve.speculative_tokens or 1 if plan.serve and plan.serve.speculative else 0)
    ceiling = t["max_capture_sm100"] if family(plan.cluster.gpu) == "sm100" else t["max_capture"]
    largest = min(seqs * q * 2, ceiling, tokens)
    sizes = set(_grid(t["small"], t["grid"], largest))
    if tokens <= largest:
        sizes.add(tokens)
    counts = _grid(t["small"], t["grid"], min(seqs, ceiling)) + [min(seqs, ceiling)]
    decode = sorted({n * q for n in counts if n * q <= min(ceiling, tokens)} if q > 1 else
                    ({seqs} if seqs <= min(ceiling, tokens) else set()))
    sizes.update(decode)
    pw = tuple(sorted(sizes))
    full = tuple(s for s in pw if s % q == 0 and s // q <= seqs)
    return Capture(pw, full)


def sglang_capture(plan) -> Capture:
    """The CUDA graphs SGLang 0.5.23's memory settings count (handle_cuda_graph_config runs before
    handle_gpu_memory_settings): decode batch sizes up to its cuda_graph_max_bs (by the GPU's
    memory and tp, at most the spec's max_num_seqs) and breakable prefill token buckets up to the
    server's chunked prefill size (memory_hook.py, cuda_graph_hook.py). A prefill server
    (``--disaggregation-mode prefill``, :func:`parc.cost.engine.server_role`) captures no decode
    graph and a decode server no prefill graph (cuda_graph_hook.py
    ``apply_cuda_graph_disaggregation_roles``); the breakable prefill graph is off under pipeline
    parallelism and two-batch overlap (``apply_cuda_graph_compatibility``)."""
    from parc.cost.engine import attn_dp, server_role, sglang_chunk

    t = table()["sglang"]
    role = server_role(plan)
    decode: list[int] = []
    if role != "prefill":
        gib = plan.cluster.gpu.memory / (1 << 30)
        row = next(r for r in t["decode_max_bs"] if gib < r[0])
        # SGLang's tp_size: with attention data parallelism its --tp-size spans the dp ranks too
        max_bs = row[1] if plan.mesh.tp * attn_dp(plan) < 4 else row[2]
        if plan.serve is not None and plan.serve.max_num_seqs is not None:
            max_bs = min(max_bs, plan.serve.max_num_seqs)
        decode = _grid(t["decode_small"], t["decode_grid"], max_bs)
        if max_bs not in decode:
            decode.append(max_bs)
    tbo = plan.serve is not None and plan.serve.two_batch_overlap
    prefill = role != "decode" and plan.mesh.pp == 1 and not tbo
    return Capture(tuple(_grid([], t["prefill_grid"], sglang_chunk(plan))) if prefill else (),
                   tuple(sorted(set(decode))))


def sglang_captured(plan, cap: Capture) -> Capture:
    """What SGLang captures of ``cap`` once its MoE settings resolve, after the memory settings:
    nothing under DeepEP's normal mode (moe_hook.py ``_handle_a2a_moe``: "Cuda graph is disabled
    because deepep_mode=`normal`")."""
    s = plan.target_settings("sglang")
    return Capture() if s.get("moe_a2a_backend") == "deepep" and s.get("deepep_mode") == "normal" else cap


def vllm_graph_bytes(cap: Capture, layers: int, activation) -> float:
    """vLLM's "Estimated CUDA graph memory" (gpu_model_runner.py ``profile_cudagraph_memory``):
    the larger of the two modes' first captures, each the activations of its largest size
    (``activation(tokens)``) and a fixed part, then per further graph what a capture adds: a
    piecewise capture one piece per attention layer and one more, a full one vLLM's floor of
    1 MiB (startup.toml)."""
    if not cap.graphs:
        return 0.0
    t = table()["vllm"]
    floor = t["per_graph_floor"]
    first = max(activation(max(s)) + t["first_capture_fixed"] for s in (cap.piecewise, cap.full) if s)
    piece = max(floor, t["piece_bytes"] * (layers + 1))
    return first + max(0, len(cap.piecewise) - 1) * piece + max(0, len(cap.full) - 1) * floor


def sglang_graph_bytes(plan, cap: Capture) -> float:
    """SGLang's own estimate for its CUDA graphs (memory_hook.py ``reserve_for_graph_mb``): 2 MiB
    per batch size of its largest decode graph (more with attention data parallelism; none on a
    prefill server, which has no decode graph) and 8 MiB per prefill bucket (1.5 GiB with an MLA
    model).

    SGLang 0.5.23 subtracts it only where it derives mem_fraction_static itself (its one call,
    under ``cfg.mem_fraction_static is None`` in ``_handle_gpu_memory_settings``; that default
    reads it from here, :func:`parc.cost.engine.memory_fraction`); a stated fraction reserves
    nothing. parc still counts it as what the graphs hold (the memory total, P418): the source
    gives no figure to compute instead. Its DP term is padding for "torch allocator /
    implementation inefficiencies", not a buffer; the one buffer a decode graph captures by
    tokens × attention-DP ranks, the gathered hidden states (layers/dp_attention.py
    ``get_global_dp_buffer``, 512 × 72 × 7168 × 2 B = 504 MiB for DeepSeek-V3 at dp 72), exists
    only where utils/common.py ``require_mlp_tp_gather`` holds (not under DeepEP with
    --moe-dense-tp-size 1 and --enable-dp-lm-head, flags parc does not write)."""
    from parc.cost.engine import attn_dp

    t = table()["sglang"]
    mib = 0.0
    if cap.full:
        bs, dp = max(cap.full), attn_dp(plan)
        mib += bs * t["decode_mib_per_bs"]
        if dp > 1:
            mib += bs * dp * (t["dp_attention_mib_per_bs"] + (t["dp_attention_large_mib_per_bs"] if bs > 300 else 0))
    if cap.piecewise:
        mib += t["prefill_mla_mib"] if plan.model.is_mla else len(cap.piecewise) * t["prefill_mib_per_bucket"]
    return mib * MIB


@dataclass(frozen=True, slots=True)
class Startup:
    """One serving GPU at start-up (see the module doc); bytes."""
    engine: str
    total: float          # the GPU's memory
    outside: float        # CUDA context and NCCL buffers: held before the engine's budget
    budget: float         # vLLM: ceil(total × gpu_memory_utilization); SGLang: (total − outside) × mem_fraction_static;
                          # TensorRT-LLM: (total − outside − weights − activations) × free_gpu_memory_fraction
    weights: float
    activations: float    # peak of the profiling forward pass (vLLM) / of a chunked prefill (SGLang)
    sampler: float        # what the sampler adds to the profile's peak (vLLM)
    graphs: float         # the CUDA graphs: vLLM's estimate, SGLang's (reserve_for_graph_mb)
    capture: Capture
    tokens: int = 0       # the tokens of the forward pass whose peak ``activations`` is (every role's)

    @property
    def kv(self) -> float:
        """Memory for the KV cache: vLLM's "Available KV cache memory" (the budget less the weights,
        the profile's peak and the graphs); SGLang's pool (the budget less the weights);
        TensorRT-LLM's, its budget."""
        if self.engine == "trtllm":
            return self.budget
        if self.engine == "sglang":
            return self.budget - self.weights
        return self.budget - self.weights - self.activations - self.sampler - self.graphs

    def logged_kv(self, release: str) -> float:
        """vLLM's "Available KV cache memory" at ``release`` (``0.19.0``): :attr:`kv`, with the CUDA
        graphs' estimate left in before the release that began subtracting it (startup.toml)."""
        since = tuple(int(x) for x in table()["vllm"]["graphs_subtracted_since"].split("."))
        held = tuple(int(x) for x in release.split(".")[:2]) >= since
        return self.kv if held else self.kv + self.graphs

    @property
    def free_at_start(self) -> float:
        """What the engine finds free when it starts: the GPU less its CUDA context and NCCL."""
        return self.total - self.outside

    @property
    def slack(self) -> float:
        """SGLang: what the pool leaves for activations and graphs; vLLM: what its budget leaves
        beside the context and NCCL buffers."""
        return self.free_at_start - self.budget


def startup(plan, weights: float, forward, sampler: float, hidden: float, outside: float, layers: int) -> Startup:
    """The start-up of one GPU of ``plan`` holding ``weights`` bytes and ``layers`` layers;
    ``forward(tokens)`` is its peak activation bytes of a forward pass over ``tokens`` tokens,
    ``sampler`` its sampler's bytes (0 off the last stage), ``hidden`` the hidden states of the
    profiling pass kept while the sampler runs, ``outside`` its CUDA context and NCCL buffers."""
    from parc.cost.engine import batched_tokens, engine_of, limits, memory_fraction

    eng, _ = engine_of(plan)
    total, util = float(plan.cluster.gpu.memory), memory_fraction(plan)
    tokens = batched_tokens(plan)
    act = forward(tokens)
    if eng == "trtllm":
        free = total - outside - weights - act
        return Startup(eng, total, outside, free * util if free > 0 else free, weights, act, 0.0, 0.0,
                       Capture(), tokens)
    if eng == "sglang":
        cap = sglang_captured(plan, sglang_capture(plan))
        return Startup(eng, total, outside, (total - outside) * util, weights, act, 0.0,
                       sglang_graph_bytes(plan, cap), cap, tokens)
    cap = vllm_capture(plan, limits(plan).max_num_seqs, tokens)
    extra = max(0.0, hidden + sampler - act) if sampler else 0.0
    return Startup(eng, total, outside, float(math.ceil(total * util)), weights, act, extra,
                   vllm_graph_bytes(cap, layers, forward), cap, tokens)
