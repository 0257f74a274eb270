"""One forward step of one serving engine instance: the one owner of what a step costs, which
explain, ``parc draw --what timeline``, the rules and ``parc plan --serve`` all read.

A step of a data-parallel rank runs ``d`` decode requests (one token each, or ``k + 1`` when
``k`` draft tokens are verified) and ``p`` prefill tokens (chunks of prompts) together, as vLLM's
and SGLang's continuous batching with chunked prefill schedule them (:mod:`parc.cost.scheduler`
decides ``d`` and ``p``). With pipeline parallelism the rank's requests form ``pp`` micro-batches
that keep every stage busy (vLLM's virtual engines), so a request's next token comes every
``pp · T`` seconds, ``T`` the slowest stage's time for its micro-batch: the step time is
``pp · max_s t_s(d / pp, p / pp)``.

A stage's time is the roofline of each kernel class of its pass (Williams et al. 2009; for
transformer inference Pope et al. 2022, §2), one after the other: the GEMMs (the weights it holds,
of a MoE layer only the experts the step's tokens reach, read at the profile's ``hbm_efficiency``,
or their FLOPs at ``gemm_efficiency`` of the peak, whichever is longer), attention (the decode
requests' KV cache read, or its FLOPs, at the attention kernels' measured rates,
``serve_kernels.toml``), the memory-bound kernels (norms, residual adds, RoPE, the activation, an
FP8 model's input casts: :func:`elementwise_per_token`, at ``hbm_efficiency``), plus the
communication it waits for (TP all-reduces, the expert all-to-all, the send to the next stage,
decode context parallelism's exchange):

* GEMMs run at the peak of the weights' precision (FP8 weights: the FP8 tensor cores, as vLLM's
  and SGLang's FP8 kernels and DeepGEMM's grouped GEMMs run them), attention's core at BF16:
  prompts at the forward rate of the engine's prompt kernel (FlashAttention-3 on Hopper), decode
  at a decode kernel's (FlashMLA's published memory- and compute-bound rates);
* attention FLOPs per token and attended token: 2 · heads/tp · (query/key width + value width)
  per layer, MLA absorbed in decode (kv_lora_rank + qk_rope_head_dim against kv_lora_rank) and
  expanded in prefill (qk_nope + qk_rope against v_head_dim), as vLLM's and SGLang's MLA
  backends run them;
* of ``E`` routed experts a GPU holding ``e`` reads ``e·(1 − (1 − 1/e)^n)`` for ``n`` routed
  copies reaching it (uniform routing);
* the expert all-to-all is priced by the engine's backend: the default all-to-all over the
  links (α-β), or DeepEP's kernels at the rates their authors measured (``deepep.toml``): normal
  kernels for steps with prefill, low-latency ones for decode-only steps under SGLang's
  ``--deepep-mode auto``; dispatch in FP8, combine in BF16;
* ``two_batch_overlap``: the step runs as two micro-batches whose expert all-to-all hides under
  the other's compute, each reading the weights again: ``max(HBM with the weights twice,
  compute, all-to-all) +`` the other communication. SGLang's decode steps under DeepEP's
  low-latency kernels run a fixed staged schedule instead (:func:`staged_exposure`): each
  transfer hides only under the stages that run while it is in flight, and what it outlasts them
  by adds to the step;
* speculative decoding: each decode request verifies ``k + 1`` tokens in the step (compute and
  communication ×(k + 1), the weights and KV cache read once), after ``k`` sequential passes of
  the draft (one layer of the model's shape and the LM head, on the last stage).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from parc.cost.comm import allreduce_times, alltoall_time, axis_time, link_params, p2p_time, serving_calls
from parc.cost.params import attention_params, head_dim, mlp_params, part_weight_bytes, serving_expert_split
from parc.cost.serving import activation_bytes, decode_comm_bytes

HERE = Path(__file__).resolve().parent


@dataclass(slots=True)
class Phase:
    """One pass of one pipeline stage by roofline term: seconds of HBM reads (weights, KV cache),
    of compute, and of communication per axis."""
    tokens: float                 # tokens the stage processes in the pass
    weights: float = 0.0          # seconds reading weights
    kv: float = 0.0               # seconds reading the KV cache
    compute: float = 0.0          # seconds of FLOPs (GEMMs at the profile's efficiency, attention at its kernel's)
    elementwise: float = 0.0      # seconds of the memory-bound kernels (norms, RoPE, activation, FP8 casts)
    comm: dict = field(default_factory=dict)   # axis -> seconds
    time: float = 0.0             # the stage's time for the pass
    draft: float = 0.0            # seconds of the speculative drafts (in ``time``)
    overlapped: bool = False      # two-batch overlap: the all-to-all ran under the compute
    staged: float = 0.0           # of it, seconds SGLang's staged decode schedule leaves unhidden (in ``time``)

    @property
    def bound(self) -> str:
        mem = self.weights + self.kv + self.elementwise
        return "compute" if self.compute >= mem else "memory"

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "time": self.time, "bound": self.bound, "hbm_weights": self.weights,
                "hbm_kv": self.kv, "compute": self.compute, "elementwise": self.elementwise,
                "comm": dict(self.comm), "draft": self.draft, "two_batch_overlap": self.overlapped}


@dataclass(frozen=True, slots=True)
class Stage:
    """What one GPU of a pipeline stage costs per step, as coefficients (see the module doc)."""
    index: int
    layers: int
    moe_layers: int
    dense: float          # weight bytes read whatever the routing
    experts: float        # weight bytes of the routed experts it holds
    local: float          # routed experts it holds (with redundant copies)
    copies: float         # routed copies reaching its experts per token of its dp rank
    kv: float             # KV bytes per token
    gemm: float           # GEMM FLOPs per token (attention projections, dense MLPs, shared experts)
    gemm_expert: float    # of the routed experts, per token
    head: float           # LM-head FLOPs per sampled token (the last stage)
    attn_decode: float    # attention FLOPs per token per cached token (decode)
    attn_prefill: float   # attention FLOPs per token per attended token (prefill)
    elementwise: float = 0.0   # HBM bytes per token of the memory-bound kernels (:func:`elementwise_per_token`)
    attn_in: float = 0.0  # one layer's attention input projections, parameters per GPU (:func:`attention_sides`)
    attn_out: float = 0.0  # one layer's attention output side, parameters per GPU
    shared: float = 0.0   # one MoE layer's shared experts, parameters per GPU


@lru_cache(maxsize=1)
def deepep() -> dict:
    """deepep.toml: DeepEP's measured all-to-all rates."""
    with open(HERE / "deepep.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def serve_kernels() -> dict:
    """serve_kernels.toml: the attention kernels' measured rates in a serving step."""
    with open(HERE / "serve_kernels.toml", "rb") as f:
        return tomllib.load(f)


def attention_rates(gpu) -> tuple[float, float, float]:
    """(prompt attention FLOP/s, decode attention FLOP/s, KV-cache read bytes/s) of ``gpu``: the
    prompt kernel's forward share of the BF16 peak (serve_kernels.toml's kernel for the
    architecture, at parc/model/data/kernels.toml's rate), the decode kernel's shares of the peak
    and of the HBM bandwidth."""
    from parc.model.frameworks import attention_kernel_rates

    tab = serve_kernels()
    fwd = attention_kernel_rates(tab["prefill_attention"].get(gpu.arch, tab["prefill_attention"]["default"]),
                                 gpu.arch)[0]
    dec = tab["decode_attention"]
    return gpu.flops * fwd, gpu.flops * dec["compute"], gpu.hbm_bandwidth * dec["bandwidth"]


def elementwise_per_token(m, layers: int, moe_layers: int, tp: int, copies: float, etp: int) -> float:
    """HBM bytes one GPU's memory-bound kernels move per token of its dp rank over ``layers``
    layers, fused as the engines run them (:mod:`parc.cost.kernels`' fused forward counts): two
    norms (reads 2h, writes 2h) and two residual adds (reads 4h, writes 2h) on whole tokens, RoPE
    over tp (reads and writes 2 bytes an element of the rotated widths: q and k, or MLA's
    qk_rope_head_dim of each query head and of the shared key), the MLP's activation (SwiGLU
    reads 2·2f, writes 2f; GELU 4f): a dense layer's over tp, a MoE layer's over its shared
    experts (over tp) and the ``copies`` routed rows reaching this GPU (each 1/etp of an expert),
    with the dispatch's permutation of each row (8h); an FP8 model's GEMMs each read their input
    cast to FP8 first (2 bytes read, 1 written an element: QKV's and the MLP's input of h (and of
    each routed row), the output projection's heads·value width over tp, the down projection's
    inner width)."""
    h = m.hidden
    if m.is_mla:
        rope, out = (m.heads + 1) * m.qk_rope_head_dim, m.heads * m.v_head_dim
    else:
        out = m.heads * head_dim(m)
        rope = (out + m.kv_heads * head_dim(m)) if m.position == "rope" else 0
    act = 6 if m.mlp == "swiglu" else 4
    base = 20 * h + 4 * rope / tp
    dense_f = m.ffn_hidden / tp
    moe_f = m.moe_ffn_hidden * (m.shared_experts / tp + copies / etp) if moe_layers else 0.0
    dense = base + act * dense_f
    moe = base + act * moe_f + 8 * h * copies
    if m.dtype.startswith("fp8"):
        dense += 3 * (2 * h + out / tp + dense_f)
        moe += 3 * (h * (1 + (m.shared_experts > 0) + copies) + out / tp + moe_f)
    return (layers - moe_layers) * dense + moe_layers * moe


def _shape(m, half: float):
    """The share of its rate a GEMM of ``m`` rows reaches: m / (m + half) (at least a tiny one)."""
    return np.maximum(m, 1e-9) / (np.maximum(m, 1e-9) + half)


def experts_touched(experts, copies):
    """Expected share of ``experts`` that ``copies`` uniformly routed token copies reach:
    1 − (1 − 1/E)^n. Scalars or arrays."""
    e = np.maximum(experts, 1.0)
    return np.where(np.asarray(experts) > 0, 1.0 - (1.0 - 1.0 / e) ** np.maximum(copies, 0.0), 1.0)


def gemm_flops_per_token(m, layers: int, moe_layers: int, tp: int, etp: int, share: float | None = None
                         ) -> tuple[float, float]:
    """(GEMM FLOPs one GPU spends on one token over ``layers`` layers outside the routed experts,
    and in them): 2 per matmul parameter it holds that the token passes (attention projections,
    the dense MLP or the shared experts split over tp; top_k routed experts). ``share``: the part
    of a routed expert's work per token this GPU does (1/etp by default; :func:`expert_share`)."""
    dense = layers - moe_layers
    s = 1 / etp if share is None else share
    per = dense * mlp_params(m, m.ffn_hidden) / tp + layers * attention_params(m) / tp
    routed = 0.0
    if moe_layers:
        per += moe_layers * m.shared_experts * mlp_params(m, m.moe_ffn_hidden) / tp
        routed = moe_layers * (m.top_k or 1) * mlp_params(m, m.moe_ffn_hidden) * s
    return 2 * per, 2 * routed


def attention_widths(m) -> tuple[tuple[int, int], tuple[int, int]]:
    """((query/key, value) width per head in decode, the same in prefill)."""
    if m.is_mla:
        return ((m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank),
                (m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim))
    d = head_dim(m)
    return (d, d), (d, d)


def attention_sides(m, tp: int) -> tuple[float, float]:
    """(parameters per GPU of one layer's attention before its core, after it): the output side is
    the output projection (heads · value width · hidden) and, for MLA run absorbed in decode, the
    value half of the key/value up-projection (kv_lora_rank · heads · v_head_dim), which SGLang's
    DeepseekV2AttentionMLA applies after the attention kernel (forward_absorb_core: the ``w_vc``
    bmm, then ``o_proj``); the input side is the rest (the query and key/value projections and
    the key half of the up-projection, ``forward_absorb_prepare``)."""
    if m.is_mla:
        out = m.heads * m.v_head_dim * (m.hidden + m.kv_lora_rank)
    else:
        out = m.heads * head_dim(m) * m.hidden
    return (attention_params(m) - out) / tp, out / tp


def staged_exposure(dispatch, combine, cover_dispatch, cover_combine, moe_layers):
    """Seconds the expert all-to-all adds to a step of SGLang's two-batch overlap in decode, for
    one micro-batch's ``dispatch`` and ``combine`` time per layer and the compute that runs while
    each is in flight (scalars or arrays).

    SGLang splits a decode layer into five stages at its yield points (DeepSeek's
    ``_compute_moe_deepseek_blog_decode``, Qwen3's ``_compute_moe_qwen3_decode``:
    sgl-project/sglang python/sglang/srt/batch_overlap/operations_strategy.py at dec8155f):
    S0 the attention's input side (after the last layer's output), S1 the attention kernel and
    its output side with the router, S2 the dispatch's send and the shared experts, S3 the
    dispatch's receive, the routed experts and the combine's send, S4 the combine's receive. The
    second micro-batch runs two stages behind the first and the two alternate on one stream
    (operations.py execute_overlapped_operations at 04bb08ae: A2 B0 A3 B1 A4 B2 A0' B3 A1' B4);
    DeepEP's low-latency kernels post their traffic and return, a hook waiting for it later
    (SGLang's DeepEP dispatcher is built with ``return_recv_hook=True``), using no SMs
    meanwhile. So a micro-batch's dispatch is in flight under its own shared experts and the
    other micro-batch's S0 (``cover_dispatch``), its combine under the other's S1
    (``cover_combine``), and each waits for what its transfer outlasts them by: per MoE layer
    ``2 · (max(0, dispatch − cover_dispatch) + max(0, combine − cover_combine))``."""
    wait = np.maximum(dispatch - cover_dispatch, 0.0) + np.maximum(combine - cover_combine, 0.0)
    return 2 * moe_layers * wait


def gemm_rate(plan, efficiency: float) -> float:
    """FLOP/s a serving engine's GEMMs sustain: ``efficiency`` of the BF16 peak, and with FP8
    weights that of the FP8 peak as the GPU's FP8 matmul benchmark scales it
    (:meth:`parc.model.plan.GPU.fp8_peak_on_bf16_scale`, as training's FP8 GEMMs)."""
    gpu = plan.cluster.gpu
    if plan.model.dtype.startswith("fp8") and gpu.fp8_flops > 0:
        return gpu.fp8_peak_on_bf16_scale() * efficiency
    return gpu.flops * efficiency


def moe_dp(plan) -> int:
    """How many dp ranks' tokens one GPU's MoE layers serve (the dp ranks of one engine)."""
    ep, etp, _ = serving_expert_split(plan)
    return max(1, ep * etp // (plan.mesh.tp * plan.mesh.cp))


def expert_share(plan) -> float:
    """The part of one routed expert's work per token that one GPU of the engine does, with every
    dp rank equally loaded: the MoE group's tokens (``moe_dp`` ranks' worth) over ep GPUs that
    each compute 1/etp of an expert's width."""
    ep, etp, _ = serving_expert_split(plan)
    return moe_dp(plan) / (ep * etp)


def a2a_backend(plan) -> tuple[str, str]:
    """(backend, mode) of the expert all-to-all: ("deepep", "auto" | "normal" | "low_latency")
    where the engine runs DeepEP (SGLang ``moe_a2a_backend`` deepep with ``deepep_mode``, vLLM
    ``all2all_backend`` deepep_*), else ("all_to_all", "")."""
    sg, vl = plan.target_settings("sglang"), plan.target_settings("vllm")
    from parc.cost.engine import engine_of

    eng = engine_of(plan)[0]
    if eng == "sglang" and sg.get("moe_a2a_backend") in ("deepep", "deepep_v2"):
        return "deepep", sg.get("deepep_mode", "auto")
    backend = vl.get("all2all_backend", "") if eng == "vllm" else ""
    if backend in ("deepep_low_latency", "deepep_high_throughput", "deepep_v2"):
        return "deepep", "low_latency" if backend == "deepep_low_latency" else "normal"
    return "all_to_all", ""


def _stage(plan, st) -> Stage:
    """The coefficients of estimate stage ``st`` (its expert and MTP weights in the bytes the
    checkpoint's format gives them: :func:`parc.cost.params.part_weight_bytes`)."""
    m, mesh = plan.model, plan.mesh
    ep, etp, extra = serving_expert_split(plan)
    experts = st.parts.get("experts", 0) * part_weight_bytes(m, "experts")
    mtp = st.parts.get("mtp", 0) * part_weight_bytes(m, "mtp")
    local = -(-(m.experts + extra) // ep) if m.is_moe else 0
    copies = moe_dp(plan) * (m.top_k or 1) * local / max(1, m.experts + extra)
    (dq, dv), (pq, pv) = attention_widths(m)
    heads = m.heads / mesh.tp * st.layers
    head = 2 * m.hidden * m.vocab / mesh.tp if st.parts.get("output", 0) else 0.0
    g, ge = gemm_flops_per_token(m, st.layers, st.moe_layers, mesh.tp, etp, expert_share(plan))
    a_in, a_out = attention_sides(m, mesh.tp)
    shared = m.shared_experts * mlp_params(m, m.moe_ffn_hidden) / mesh.tp if m.is_moe else 0.0
    return Stage(st.stage, st.layers, st.moe_layers, st.memory.weights - experts - mtp, experts, local, copies,
                 float(st.kv_bytes_per_token), g, ge, head, 2 * heads * (dq + dv) / mesh.dcp, 2 * heads * (pq + pv),
                 elementwise_per_token(m, st.layers, st.moe_layers, mesh.tp, copies, etp), a_in, a_out, shared)


def _draft(last: Stage) -> Stage:
    """One draft pass: one layer of the model's shape (the average of the last stage's) and the
    LM head."""
    n = max(1, last.layers)
    share = 1 / n
    moe = 1 if last.moe_layers else 0
    return Stage(-1, 1, moe, last.dense * share, last.experts / max(1, last.moe_layers) * moe, last.local,
                 last.copies, last.kv * share, last.gemm * share, last.gemm_expert / max(1, last.moe_layers) * moe,
                 last.head, last.attn_decode * share, last.attn_prefill * share, last.elementwise * share,
                 last.attn_in, last.attn_out, last.shared)


class StepModel:
    """The step time of one data-parallel rank of an engine instance (see the module doc), over
    numbers or numpy arrays of decode requests ``d`` and prefill tokens ``p``."""

    def __init__(self, plan, est, efficiency: float | None = None):
        m, mesh, cl, prof, srv = plan.model, plan.mesh, plan.cluster, plan.profile, plan.serve
        eff = prof.gemm_efficiency if efficiency is None else efficiency
        self.plan, self.est, self.model, self.pp = plan, est, m, mesh.pp
        # a GPU without an HBM bandwidth reads nothing in time: its steps are compute-bound
        self.hbm = cl.gpu.hbm_bandwidth * prof.hbm_efficiency or float("inf")
        self.gemm_rate = gemm_rate(plan, eff)
        self.attn_prefill, self.attn_decode, kv_read = attention_rates(cl.gpu)
        self.kv_rate = kv_read or float("inf")
        self.half = float(prof.gemm_half_size)
        self.stages = [_stage(plan, st) for st in est.stages]
        keys, self.distinct = {}, []
        for s in self.stages:
            k = (s.layers, s.moe_layers, s.dense, s.experts, s.kv, s.head)
            if k not in keys:
                keys[k] = len(self.distinct)
                self.distinct.append(s)
        self.slot = [keys[(s.layers, s.moe_layers, s.dense, s.experts, s.kv, s.head)] for s in self.stages]
        self._distinct = tuple(self.distinct)
        spec = srv.speculative if srv is not None else None
        self.drafts = (srv.speculative_tokens or 1) if spec else 0
        self.verify = self.drafts + 1
        a = (srv.acceptance_rate or 0.0) if spec else 0.0
        # tokens a step yields per decode request: (1 − a^(k+1)) / (1 − a) (Leviathan et al. 2023)
        self.accepted = float(self.verify if a >= 1 else (1 - a ** self.verify) / (1 - a)) if spec else 1.0
        self.draft = _draft(self.stages[-1]) if spec else None
        self.tbo = bool(srv is not None and srv.two_batch_overlap) and m.is_moe
        self.backend, self.mode = a2a_backend(plan) if m.is_moe else ("all_to_all", "")
        self.ep = serving_expert_split(plan)[0]
        self.abytes = activation_bytes(m)
        self.lp = link_params(prof, est.link_bandwidth, est.link_kind)
        self._line_cache = {}
        from parc.cost.engine import engine_of

        # SGLang's decode steps under DeepEP's low-latency kernels: the staged schedule
        self.staged = self.tbo and self.backend == "deepep" and engine_of(plan)[0] == "sglang" \
            and self.mode != "normal" and est.comm_link.get("ep") is not None
        self.wbytes = (part_weight_bytes(m, "attention"), part_weight_bytes(m, "mlp"))

    # --- one stage -------------------------------------------------------------------------------

    def _ep_times(self, st: Stage, n) -> dict:
        """Seconds of one pass's expert dispatch and combine for ``n`` tokens of this GPU, by the
        kernels that may run them: {"ep": ...} or DeepEP's {"normal": ..., "low_latency": ...}."""
        m, est = self.model, self.est
        ep, k, h = self.ep, m.top_k or 1, m.hidden
        inter, intra = self.lp.get("inter_node"), self.lp["intra_node"]
        if self.backend != "deepep":
            nbytes = 2 * n * k * h * self.abytes * (ep - 1) / ep * st.moe_layers
            return {"ep": alltoall_time(nbytes, ep, 2 * st.moe_layers, est.comm_local["ep"], intra, inter)}
        tab = deepep()
        out = {"normal": 0.0, "low_latency": 0.0}
        norm = tab["normal"]
        for key, width in (("dispatch", 1), ("combine", 2)):
            rate = lambda ln, ref: (ln[0] * float(np.interp(ep, norm["ep"], norm[key])) / ref, ln[1])  # noqa: E731
            nbytes = n * k * h * width * (ep - 1) / ep * st.moe_layers
            out["normal"] += alltoall_time(nbytes, ep, st.moe_layers, est.comm_local["ep"], rate(intra, tab["nvlink"]),
                                           rate(inter, tab["rdma"]) if inter else None)
            slope, alpha = self._low_latency(key)
            out["low_latency"] += (n * slope + alpha) * st.moe_layers
        return out

    def _low_latency(self, key: str) -> tuple[float, float]:
        """(seconds per token, seconds per call) of one layer's DeepEP low-latency ``key``
        ("dispatch": FP8, "combine": BF16) at the engine's ep: the bytes of a token's top-k copies
        at DeepEP's measured rate, scaled to the cluster's link, and the link's latency."""
        tab, m = deepep(), self.model
        inter, intra = self.lp.get("inter_node"), self.lp["intra_node"]
        link = inter or intra
        scale = link[0] / (tab["rdma"] if inter else tab["nvlink"])
        ll = tab["low_latency"]
        bw = float(np.interp(self.ep, ll["ep"], ll[key])) * scale
        width = 1 if key == "dispatch" else 2
        return (m.top_k or 1) * m.hidden * width / bw, link[1]

    def _lines(self, st: Stage) -> dict:
        """Per axis the (intercept, slope) in tokens of each algorithm the collective may take
        (each is affine in the bytes, the bytes in the tokens; the fastest runs): the time of
        ``n`` tokens is ``min(a + b·n)``."""
        key = id(st)
        if key in self._line_cache:
            return self._line_cache[key]
        est, mesh = self.est, self.plan.mesh
        calls = serving_calls(st.layers, st.moe_layers)
        per = decode_comm_bytes(self.model, st.layers, st.moe_layers, mesh.tp, self.ep, mesh.pp, self.abytes, 1.0,
                                mesh.dcp)
        intra, inter = self.lp["intra_node"], self.lp.get("inter_node")
        fns = {}
        if est.comm_link.get("tp") is not None:
            fns["tp"] = lambda x: allreduce_times(per["tp"] * x, mesh.tp, calls["tp"], est.comm_local["tp"], intra,
                                                  inter, self.plan.cluster.gpu.nvls)
        if est.comm_link.get("ep") is not None and st.moe_layers:
            for name in self._ep_times(st, 1.0):
                fns[name] = lambda x, name=name: (self._ep_times(st, x)[name],)
        if est.comm_link.get("pp") is not None and mesh.pp > 1:
            fns["pp"] = lambda x: (axis_time("pp", per["pp"] * x, mesh.pp, calls["pp"], est.comm_local["pp"], intra,
                                             inter, False)[0],)
        if mesh.dcp > 1:
            fns["dcp"] = lambda x: (p2p_time(per["dcp"] * x, 2 * st.layers, intra),)
        out = {}
        for ax, fn in fns.items():
            pairs = [(float(a), float(b)) for a, b in zip(fn(0.0), fn(1.0)) if np.isfinite(float(a))]
            out[ax] = [(a, b - a) for a, b in pairs]
        self._line_cache[key] = out
        return out

    def _stack(self, stages: tuple) -> dict:
        """The coefficients of ``stages`` as columns (one row per stage) and, per axis, the lines
        of each stage's collective (rows × algorithms), for :meth:`_terms` over arrays."""
        key = tuple(id(st) for st in stages)
        got = self._line_cache.get(key)
        if got is not None:
            return got
        out = {f: np.array([[getattr(st, f)] for st in stages], dtype=float) for f in
               ("layers", "moe_layers", "dense", "experts", "local", "copies", "kv", "gemm", "gemm_expert", "head",
                "attn_decode", "attn_prefill", "elementwise", "attn_in", "attn_out", "shared")}
        lines = [self._lines(st) for st in stages]
        axes = list(dict.fromkeys(ax for ln in lines for ax in ln))
        out["lines"] = {}
        for ax in axes:
            width = max(len(ln.get(ax, ())) for ln in lines) or 1
            a = np.full((len(stages), width, 1), np.inf)
            b = np.zeros((len(stages), width, 1))
            for r, ln in enumerate(lines):
                got_ax = ln.get(ax) or [(0.0, 0.0)]
                for c, (x0, x1) in enumerate(got_ax):
                    a[r, c, 0], b[r, c, 0] = x0, x1
            out["lines"][ax] = (a, b)
        self._line_cache[key] = out
        return out

    def _terms(self, stages: tuple, d, p, cd, cp) -> dict:
        """The roofline terms (seconds, one row per stage, one column per load) of ``stages`` for
        ``d`` decode requests and ``p`` prefill tokens of a micro-batch, the requests ``cd``
        tokens deep, prompts attending to ``cp`` tokens on average."""
        c = self._stack(stages)
        d = np.atleast_1d(np.asarray(d, dtype=float))[None, :]
        p = np.broadcast_to(np.atleast_1d(np.asarray(p, dtype=float))[None, :], d.shape)
        dec = d * (self.verify if self.draft is not None else 1)
        n = dec + p
        w = c["dense"] + c["experts"] * experts_touched(c["local"], n * c["copies"])
        out = {"weights": w / self.hbm, "kv": d * cd * c["kv"] / self.kv_rate, "elementwise": n * c["elementwise"] / self.hbm}
        # a GEMM of M rows reaches M / (M + gemm_half_size) of its rate (parc.cost.gemm): the step's
        # tokens for the dense ones, each expert's routed tokens for the grouped ones
        per_expert = n * c["copies"] / np.maximum(c["local"], 1.0)
        out["gemm"] = (n * c["gemm"] + dec * c["head"]) / (self.gemm_rate * _shape(n, self.half)) \
            + n * c["gemm_expert"] / (self.gemm_rate * _shape(per_expert, self.half))
        if self.tbo:    # each micro-batch's layers run on half the rows (the LM head on the whole batch)
            out["gemm_tbo"] = (n * c["gemm"] / _shape(n / 2, self.half) + dec * c["head"] / _shape(n, self.half)
                               + n * c["gemm_expert"] / _shape(per_expert / 2, self.half)) / self.gemm_rate
        out["attention"] = dec * cd * c["attn_decode"] / self.attn_decode + p * cp * c["attn_prefill"] / self.attn_prefill
        out["compute"] = out["gemm"] + out["attention"]
        out["comm"] = self._comm(c["lines"], n, dec, p)
        out["tokens"] = n
        if self.staged:     # SGLang picks the strategy by the forward mode: decode steps only
            out["staged"] = np.where((p <= 0) & (n >= 2), self._exposure(c, n / 2, dec / 2, cd), np.nan)
        return out

    def _exposure(self, c: dict, half, dec, cd):
        """:func:`staged_exposure` of a step whose micro-batches carry ``half`` tokens, ``dec``
        decode requests ``cd`` tokens deep: each stage's GEMMs at their roofline (weights read
        or FLOPs at the rate of ``half`` rows), the attention kernel at its own. The memory-bound
        kernels of S0 and S1 (norms, RoPE, casts) are not credited as cover."""
        wa, wm = self.wbytes

        def gemm(params, wb):
            return np.maximum(params * wb / self.hbm, 2 * params * half / (self.gemm_rate * _shape(half, self.half)))

        layers = np.maximum(c["layers"], 1.0)
        core = np.maximum(dec * cd * c["kv"] / layers / self.kv_rate,
                          dec * cd * c["attn_decode"] / layers / self.attn_decode)
        (sd, ad), (sc, ac) = self._low_latency("dispatch"), self._low_latency("combine")
        return staged_exposure(half * sd + ad, half * sc + ac, gemm(c["attn_in"], wa) + gemm(c["shared"], wm),
                               core + gemm(c["attn_out"], wa), c["moe_layers"])

    def _comm(self, lines: dict, n, dec, p) -> dict:
        """Seconds of each axis's communication for ``n`` tokens, ``dec`` of them decode tokens,
        ``p`` prefill tokens: the fastest of its algorithms' lines (DeepEP's mode follows the step:
        normal kernels with prefill, else low-latency ones, under ``--deepep-mode auto``)."""
        out = {}
        for ax, (a, b) in lines.items():
            x = dec if ax == "dcp" else n
            t = (a + b * x[:, None, :]).min(axis=1)
            out[ax] = t * (dec > 0) if ax == "dcp" else t
        if "normal" in out:
            normal, low = out.pop("normal"), out.pop("low_latency")
            out["ep"] = normal if self.mode == "normal" else low if self.mode == "low_latency" else \
                np.where(p > 0, normal, low)
        return out

    def _time(self, t: dict):
        """Each stage's time: each kernel class at its own roofline, one after the other (the GEMMs
        read the weights, attention the KV cache), then the communication; with two-batch
        overlap the expert all-to-all under the rest, the weights read by both halves."""
        comm = sum(t["comm"].values()) if t["comm"] else 0.0
        attn = np.maximum(t["kv"], t["attention"]) + t["elementwise"]
        plain = np.maximum(t["weights"], t["gemm"]) + attn + comm
        if not self.tbo:
            return plain
        ep = t["comm"].get("ep", 0.0)
        work = np.maximum(2 * t["weights"], t["gemm_tbo"]) + attn
        tbo = np.where(t["tokens"] >= 2, np.maximum(work, ep) + (comm - ep), plain)
        staged = t.get("staged")
        return tbo if staged is None else np.where(np.isnan(staged), tbo, work + np.nan_to_num(staged) + (comm - ep))

    # --- the step --------------------------------------------------------------------------------

    def stage_times(self, d, p=0.0, cd=0.0, cp=0.0):
        """Each distinct stage's time (rows) for ``d`` decode requests and ``p`` prefill tokens of
        the rank (columns; each micro-batch a pp-th of them)."""
        b, q = np.asarray(d, dtype=float) / self.pp, np.asarray(p, dtype=float) / self.pp
        times = self._time(self._terms(self._distinct, b, q, cd, cp))
        if self.draft is not None:
            times[self.slot[-1]] = times[self.slot[-1]] + self._draft_time(b, cd)
        return times

    def _draft_time(self, b, cd):
        t = self._time(self._terms((self.draft,), b, 0.0, cd, 0.0))[0]
        return self.drafts * t * (np.atleast_1d(b) > 0)

    def step(self, d, p=0.0, cd=0.0, cp=0.0):
        """Seconds between two steps of the same request: ``pp ×`` the slowest stage's time
        (a number for numbers, an array for arrays)."""
        worst = self.pp * self.stage_times(d, p, cd, cp).max(axis=0)
        return float(worst[0]) if np.ndim(d) == 0 and np.ndim(p) == 0 else worst.reshape(np.broadcast(
            np.asarray(d), np.asarray(p)).shape)

    def phases(self, d: float, p: float = 0.0, cd: float = 0.0, cp: float = 0.0) -> list[Phase]:
        """Every pipeline stage's pass for ``d`` decode requests and ``p`` prefill tokens of the
        rank, by roofline term (numbers, for explain and the timeline)."""
        b, q = d / self.pp, p / self.pp
        t = self._terms(tuple(self.stages), b, q, cd, cp)
        times = self._time(t)
        out = []
        for i in range(len(self.stages)):
            n = float(t["tokens"][0, 0])
            ph = Phase(n, float(t["weights"][i, 0]), float(t["kv"][i, 0]), float(t["compute"][i, 0]),
                       float(t["elementwise"][i, 0]), {ax: float(v[i, 0]) for ax, v in t["comm"].items()},
                       float(times[i, 0]))
            ph.overlapped = self.tbo and n >= 2
            if ph.overlapped:     # the compute the micro-batches run: their GEMMs on half the rows
                ph.compute = float(t["gemm_tbo"][i, 0] + t["attention"][i, 0])
            staged = t.get("staged")
            if staged is not None and np.isfinite(staged[i, 0]):
                ph.staged = float(staged[i, 0])
            if i == len(self.stages) - 1 and self.draft is not None:
                ph.draft = float(self._draft_time(b, cd)[0])
                ph.time += ph.draft
            out.append(ph)
        return out
