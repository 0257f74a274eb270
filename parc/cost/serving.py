"""Throughput and latency of a serving plan: prefill, decode, and the KV transfer of a
disaggregated plan, at the plan's workload (:func:`workload`) or at its memory limit
(:func:`serve_perf`, the planner's).

The memory side (weights per GPU, KV bytes per token, KV capacity, concurrent sequences) is
:func:`parc.cost.estimate.estimate`'s. On top of it, a decode step is the roofline of each
pipeline stage (Williams et al. 2009; for transformer decoding Pope et al. 2022, "Efficiently
Scaling Transformer Inference", §2): a stage streams its weights and the KV cache of the
sequences it serves from HBM, or computes, whichever takes longer, then runs its tensor-parallel
all-reduces and hands the activations to the next stage.

* At the memory limit a replica (one dp rank: pp · tp GPUs) holds ``B`` sequences of
  ``max_model_len`` tokens (``estimate(...).max_concurrent_seqs``, or ``max_num_seqs`` when that
  is lower), and every step reads their whole KV cache.
* With pipeline parallelism the ``B`` sequences are split into ``pp`` microbatches that keep
  every stage busy (vLLM's virtual engines): a step of stage ``s`` serves ``b = B / pp`` sequences
  and takes ``t_s(b)``; the pipeline advances every ``T = max_s t_s(b)``.
* Throughput of the replica is ``B / (pp · T)`` tokens/s; one sequence gets its next token every
  ``pp · T`` seconds (its inter-token latency). So pipeline stages add latency: each stage
  reads only its share of the weights, but a token still passes all of them one after another,
  while tensor parallelism splits every stage's reads over more GPUs. No rule of thumb is
  needed: the formulas give it.
* Compute uses the same sustained fraction of peak FLOP/s (``efficiency``, the profile's
  ``gemm_efficiency``) as training; the memory-bound reads reach the profile's
  ``hbm_efficiency`` of the HBM bandwidth. A GPU without an ``hbm_bandwidth`` is treated as
  compute-bound.
* A prefill of ``P`` prompt tokens is the same roofline over P tokens at once: compute-bound
  (2 FLOPs per parameter a token passes, plus causal attention over P/2 tokens on average) or
  the weights' one read, whichever is longer, plus the TP all-reduces and EP all-to-alls of P
  tokens; the request passes every stage in turn (its TTFT), the prefill throughput is P over
  the slowest stage's time.
* A MoE layer reads only the experts the step's tokens are routed to: of ``E`` experts, ``n``
  routed token copies touch ``E·(1 − (1 − 1/E)^n)`` on average (uniform routing), so a small
  decode batch reads a small share of the expert weights.
* Decode context parallelism (``dcp``) adds, per layer, the all-gather of the queries and the
  reduce-scatter of the partial attention outputs over the dcp ranks.
* Requests over time (:func:`colocated_latency`, :func:`disaggregated_latency`; explain and
  ``parc plan --serve`` both read them): on one mesh a new request's prefill runs between the
  decode steps of the others, so it waits ``t_prefill + t_step`` for its first token and each of
  its tokens also waits for its neighbours' prefills, spread over its output; with prefill and
  decode pools the prefill pool may queue requests (Little's law over the requests in flight).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from parc.cost import xp
from parc.cost.comm import (allreduce_bytes, axis_time, ep_bytes_per_layer, link_params, p2p_time,
                            serving_calls)
from parc.cost.memory import model_kv_bytes_per_token
from parc.cost.params import (activation_dtype, attention_params, dtype_bytes, head_dim, kv_element_bytes, mlp_params,
                              part_weight_bytes, serving_expert_split)

# The workload explain assumes where the serve block gives none: vLLM's serving benchmark's random
# dataset (vllm/benchmarks/datasets/datasets.py RandomDataset: DEFAULT_INPUT_LEN 1024,
# DEFAULT_OUTPUT_LEN 128).
DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 128


@dataclass(slots=True)
class ServePerf:
    batch: int            # sequences per replica at the memory limit
    step_time: float      # seconds per pipeline step (T)
    latency: float        # seconds between two tokens of one sequence (pp · T)
    throughput: float     # output tokens per second of the whole plan (all dp replicas)
    stage_times: list     # t_s per pipeline stage


@dataclass(slots=True)
class Phase:
    """One forward pass (a prefill or a decode step) of the slowest pipeline stage, by roofline
    term: seconds of HBM reads (weights, KV cache), of compute, and of communication per axis."""
    tokens: float                 # tokens the stage processes in the pass
    weights: float = 0.0          # seconds reading weights
    kv: float = 0.0               # seconds reading the KV cache
    compute: float = 0.0          # seconds of FLOPs at the profile's efficiency
    comm: dict = field(default_factory=dict)   # axis -> seconds
    time: float = 0.0             # max(weights + kv, compute) + comm

    @property
    def bound(self) -> str:
        mem = self.weights + self.kv
        return "compute" if self.compute >= mem else "memory"

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "time": self.time, "bound": self.bound, "hbm_weights": self.weights,
                "hbm_kv": self.kv, "compute": self.compute, "comm": dict(self.comm)}


@dataclass(slots=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    concurrency: int              # requests in flight over the whole plan
    stated: tuple = ()            # the serve keys the spec gave


def stage_step_time(weight_bytes: float, kv_bytes: float, flops: float, comm_time: float,
                    hbm_bandwidth: float, peak_flops: float, efficiency: float,
                    hbm_efficiency: float | None = None) -> float:
    """One decode step of one pipeline stage: max(HBM time, compute time) + communication; the
    HBM reads at ``hbm_efficiency`` of the bandwidth (``efficiency`` when not given)."""
    hbm_eff = efficiency if hbm_efficiency is None else hbm_efficiency
    mem = (weight_bytes + kv_bytes) / (hbm_bandwidth * hbm_eff) if hbm_bandwidth > 0 else 0.0
    return max(mem, flops / (peak_flops * efficiency)) + comm_time


def decode_flops_per_token(m, layers: int, moe_layers: int, tp: int, etp: int, context: int,
                           expert_share: float | None = None) -> float:
    """FLOPs one GPU spends on one decoded token over ``layers`` layers: 2 per matmul parameter it
    holds that the token passes (attention, dense MLP or top_k routed plus shared experts, split
    over tp or etp), plus attention over ``context`` cached tokens (4 · context · heads/tp · head_dim
    per layer: QKᵀ and AV). ``expert_share``: the part of a routed expert's work per token this GPU
    does (1/etp by default; :func:`expert_share`)."""
    d = head_dim(m)
    dense = layers - moe_layers
    share = 1 / etp if expert_share is None else expert_share
    per = dense * mlp_params(m, m.ffn_hidden) / tp
    if moe_layers:
        per += moe_layers * ((m.top_k or 1) * mlp_params(m, m.moe_ffn_hidden) * share
                             + m.shared_experts * mlp_params(m, m.moe_ffn_hidden) / tp)
    per += layers * attention_params(m) / tp
    attn = 4 * context * (m.heads / tp) * d * layers
    return 2 * per + attn


def decode_comm_bytes(m, layers: int, moe_layers: int, tp: int, ep: int, pp: int, wbytes: int,
                      tokens: float = 1, dcp: int = 1) -> dict:
    """Bytes one GPU sends per decode step for ``tokens`` sequences, by axis: two all-reduces of h
    per layer under TP, the MoE dispatch and combine (forward only: half the training volume),
    the hidden state handed to the next pipeline stage, and under dcp per layer the queries'
    all-gather and the partial outputs' reduce-scatter, (dcp − 1) · heads/tp · (query + output
    width) (MLA attends in the latent space: a query of kv_lora_rank + qk_rope_head_dim, an output
    of kv_lora_rank per head, as vLLM's MLA backends run it; else head_dim each)."""
    dq, do = (m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank) if m.is_mla else (head_dim(m), head_dim(m))
    return {"tp": 2 * allreduce_bytes(m.hidden * wbytes, tp) * layers * tokens,
            "ep": ep_bytes_per_layer(tokens, m.hidden, m.top_k or 1, ep, wbytes) / 2 * moe_layers,
            "pp": tokens * m.hidden * wbytes / tp * (pp > 1),
            "dcp": (dcp - 1) * (m.heads / tp) * (dq + do) * wbytes * layers * tokens}


def activation_bytes(m) -> int:
    """Bytes of an activation element a serving engine sends: the model's dtype, 16-bit for an
    FP8 model (its GEMMs take FP8 weights; the hidden states stay in bf16)."""
    return dtype_bytes(activation_dtype(m))


def expert_share(plan) -> float:
    """The part of one routed expert's work per token that one GPU of the engine does, with every
    dp rank equally loaded: the MoE group's tokens (``moe_dp`` ranks' worth) spread over ep GPUs
    that each compute 1/etp of an expert's width."""
    ep, etp, _ = serving_expert_split(plan)
    return moe_dp(plan) / (ep * etp)


def moe_dp(plan) -> int:
    """How many dp ranks' tokens one GPU's MoE layers serve (the dp ranks of one engine)."""
    ep, etp, _ = serving_expert_split(plan)
    return max(1, ep * etp // (plan.mesh.tp * plan.mesh.cp))


def experts_touched(experts: int, copies: float) -> float:
    """Expected share of ``experts`` that ``copies`` uniformly routed token copies reach:
    1 − (1 − 1/E)^n."""
    if experts <= 0:
        return 1.0
    return 1.0 - (1.0 - 1.0 / experts) ** max(0.0, copies)


def _phase(plan, est, st, tokens: float, context: float, kv_tokens: float, efficiency: float) -> Phase:
    """One pass of pipeline stage ``st`` over ``tokens`` tokens attending to ``context`` tokens
    each, reading ``kv_tokens`` tokens of KV cache: the roofline terms of :class:`Phase`."""
    m, mesh, cl, prof = plan.model, plan.mesh, plan.cluster, plan.profile
    ep, etp, extra = serving_expert_split(plan)
    ph = Phase(tokens)
    hbm = cl.gpu.hbm_bandwidth * prof.hbm_efficiency
    experts = st.parts.get("experts", 0) * part_weight_bytes(m, "experts")
    local = -(-(m.experts + extra) // ep) if m.is_moe else 0
    copies = tokens * moe_dp(plan) * (m.top_k or 1) * local / max(1, m.experts + extra)
    read = st.memory.weights - experts + experts * experts_touched(local, copies)
    ph.weights = read / hbm if hbm > 0 else 0.0
    ph.kv = kv_tokens * st.kv_bytes_per_token / hbm if hbm > 0 else 0.0
    flops = tokens * decode_flops_per_token(m, st.layers, st.moe_layers, mesh.tp, etp, context, expert_share(plan))
    ph.compute = flops / (cl.gpu.flops * efficiency)
    lp = link_params(prof, est.link_bandwidth, est.link_kind)
    comm = decode_comm_bytes(m, st.layers, st.moe_layers, mesh.tp, ep, mesh.pp, activation_bytes(m), tokens,
                             mesh.dcp)
    calls = serving_calls(st.layers, st.moe_layers)
    sizes = {"tp": mesh.tp, "ep": ep, "pp": mesh.pp}
    for ax in ("tp", "ep", "pp"):
        if est.comm_link.get(ax) is not None:
            ph.comm[ax] = float(axis_time(ax, comm[ax], sizes[ax], calls[ax], est.comm_local[ax], lp["intra_node"],
                                          lp.get("inter_node"), cl.gpu.nvls)[0])
    if mesh.dcp > 1 and kv_tokens:     # decode attention over the KV cache split by dcp
        ph.comm["dcp"] = float(p2p_time(comm["dcp"], 2 * st.layers, lp["intra_node"]))
    ph.time = max(ph.weights + ph.kv, ph.compute) + sum(ph.comm.values())
    return ph


def decode_phases(plan, est, batch: float, context: float, efficiency: float) -> list[Phase]:
    """A decode step of each pipeline stage for ``batch`` sequences per replica of ``context``
    tokens each: the replica's batch is split into pp microbatches (vLLM's virtual engines)."""
    b = batch / plan.mesh.pp
    return [_phase(plan, est, st, b, context, b * context, efficiency) for st in est.stages]


def prefill_phases(plan, est, prompt: int, efficiency: float) -> list[Phase]:
    """A prefill of one ``prompt``-token request on each stage: causal attention over P/2 tokens
    on average, the KV cache written, not read."""
    return [_phase(plan, est, st, prompt, prompt / 2, 0.0, efficiency) for st in est.stages]


def serve_perf(plan, est, efficiency: float | None = None) -> ServePerf:
    """Throughput and latency of a serving ``plan`` at its memory limit, from its ``estimate``:
    ``min(max_concurrent_seqs, max_num_seqs)`` sequences per replica of ``max_model_len`` tokens.
    ``efficiency`` (of peak FLOP/s) defaults to the plan's profile's ``gemm_efficiency``; the HBM
    reads always use its ``hbm_efficiency``."""
    if efficiency is None:
        efficiency = plan.profile.gemm_efficiency
    B = min(est.max_concurrent_seqs, plan.serve.max_num_seqs)
    if B <= 0:
        return ServePerf(0, 0.0, 0.0, 0.0, [])
    times = [ph.time for ph in decode_phases(plan, est, B, plan.serve.max_model_len, efficiency)]
    p, T = plan.mesh.pp, max(times)
    return ServePerf(B, T, p * T, plan.mesh.dp * B / (p * T), times)


def workload(plan, est) -> Workload:
    """The requests explain's estimates assume: ``serve.prompt_tokens`` and ``output_tokens``
    (by default vLLM's benchmark's 1024 and 128, shortened in proportion to fit max_model_len),
    and ``concurrency`` over the whole plan (by default as many requests as both max_num_seqs and
    the KV cache hold per replica, times dp)."""
    srv = plan.serve
    stated = tuple(k for k in ("prompt_tokens", "output_tokens", "concurrency") if getattr(srv, k) is not None)
    p, o = srv.prompt_tokens, srv.output_tokens
    if p is None or o is None:
        scale = min(1.0, srv.max_model_len / (DEFAULT_PROMPT_TOKENS + DEFAULT_OUTPUT_TOKENS))
        p = p if p is not None else max(1, int(DEFAULT_PROMPT_TOKENS * scale))
        o = o if o is not None else max(1, int(DEFAULT_OUTPUT_TOKENS * scale))
    c = srv.concurrency
    if c is None:
        c = plan.mesh.dp * max(1, min(srv.max_num_seqs, est.kv_capacity_tokens // max(1, p + o)))
    return Workload(int(p), int(o), int(c), stated)


@dataclass(slots=True)
class ServeNumbers:
    """What ``parc explain`` shows of a serving plan's speed at its workload (see the module doc).
    For a disaggregated plan ``prefill`` is the prefill pool's, ``decode`` the decode pool's, and
    the KV cache of every request crosses between them."""
    workload: Workload
    replicas: int                 # engines' dp ranks serving requests side by side (decode side)
    batch: float                  # requests per replica
    fits: int                     # requests of prompt + output tokens the KV cache holds per replica
    prefill: list                 # Phase per pipeline stage: one prompt
    decode: list                  # Phase per pipeline stage: one step at the workload's batch
    prefill_time: float           # one prompt through every stage
    prefill_tokens_per_s: float   # prompt tokens per second of the whole plan
    tpot: float                   # seconds between two output tokens of one request (pp · step)
    output_tokens_per_s: float
    ttft: float
    decode_step: float = 0.0          # pp decode steps: a request's token cadence between prefills
    decode_tokens_per_s: float = 0.0  # what the decode side sustains between prefills (a decode pool's rate)
    kv_transfer_bytes: float = 0.0    # per request, prefill pool → decode pool
    kv_transfer_time: float = 0.0
    pools: dict = field(default_factory=dict)   # pool name -> {"instances", "gpus", "estimate"}

    def to_json(self) -> dict:
        w = self.workload
        return {"workload": {"prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                             "concurrency": w.concurrency, "stated": list(w.stated)},
                "replicas": self.replicas, "batch_per_replica": self.batch, "requests_fit_per_replica": self.fits,
                "ttft": self.ttft, "tpot": self.tpot, "prefill_time": self.prefill_time,
                "prefill_tokens_per_s": self.prefill_tokens_per_s, "output_tokens_per_s": self.output_tokens_per_s,
                "decode_step": self.decode_step, "decode_tokens_per_s": self.decode_tokens_per_s,
                "prefill_stages": [p.to_json() for p in self.prefill],
                "decode_stages": [p.to_json() for p in self.decode],
                "kv_transfer": {"bytes_per_request": int(self.kv_transfer_bytes), "time": self.kv_transfer_time},
                "pools": {name: {"instances": p["instances"], "gpus": p["gpus"],
                                 "memory_per_gpu": p["estimate"].memory.to_json(),
                                 "kv_bytes_per_token_per_gpu": int(p["estimate"].kv_bytes_per_token),
                                 "kv_capacity_tokens": int(p["estimate"].kv_capacity_tokens)}
                          for name, p in self.pools.items()}}


def serve_numbers(plan, est, efficiency: float | None = None) -> ServeNumbers:
    """Prefill, TTFT, TPOT and tokens/s of ``plan`` at its :func:`workload`. A disaggregated plan
    is costed pool by pool on the plan one instance runs (:func:`parc.model.pools.pool_plans`):
    TTFT = the prefill + the KV transfer + the first decode step."""
    from parc.model.pools import pool_plans

    eff = plan.profile.gemm_efficiency if efficiency is None else efficiency
    pools = {}
    if plan.pools:
        from parc.cost.estimate import estimate

        for pool, pp_ in pool_plans(plan):
            pools[pool.name] = {"instances": pool.instances, "gpus": pool.gpus, "plan": pp_,
                                "estimate": estimate(pp_, eff, cache=False)}
        pre, dec = pools["prefill"], pools["decode"]
    else:
        pre = dec = {"instances": 1, "plan": plan, "estimate": est}
    dplan, dest = dec["plan"], dec["estimate"]
    replicas = dec["instances"] * dplan.mesh.dp
    w = workload(dplan, dest)
    if plan.pools and plan.serve.concurrency is None:
        w.concurrency *= dec["instances"]
    w.stated = tuple(k for k in ("prompt_tokens", "output_tokens", "concurrency")
                     if getattr(plan.serve, k) is not None)
    fits = dest.kv_capacity_tokens // max(1, w.prompt_tokens + w.output_tokens)
    batch = max(1.0, w.concurrency / replicas)
    pplan, pest = pre["plan"], pre["estimate"]
    prefill = prefill_phases(pplan, pest, w.prompt_tokens, eff)
    decode = decode_phases(dplan, dest, batch, w.prompt_tokens + w.output_tokens / 2, eff)
    step = max(ph.time for ph in decode)
    tpot = dplan.mesh.pp * step
    prefill_time = sum(ph.time for ph in prefill)
    prefill_rate = pre["instances"] * pplan.mesh.dp * w.prompt_tokens / max(ph.time for ph in prefill)
    O = w.output_tokens
    decode_step, decode_rate = tpot, replicas * batch / tpot
    if plan.pools:
        xfer_bytes, xfer = kv_transfer(plan, pest, w.prompt_tokens)
        ttft, rnd = disaggregated_latency(prefill_time, xfer, tpot, O, w.concurrency,
                                          pre["instances"] * pplan.mesh.dp)
        rate = w.concurrency * O / rnd
    else:
        xfer_bytes = xfer = 0.0
        ttft, tpot, turn = colocated_latency(prefill_time, tpot, batch, O)
        rate = replicas * batch * O / turn
    return ServeNumbers(w, replicas, batch, int(fits), prefill, decode, prefill_time, prefill_rate, tpot,
                        rate, ttft, decode_step, decode_rate, xfer_bytes, xfer,
                        pools={k: {kk: v[kk] for kk in ("instances", "gpus", "estimate")} for k, v in pools.items()})


def colocated_latency(prefill, step, batch, output_tokens):
    """(TTFT, TPOT, seconds one turn of a rank's ``batch`` requests takes) where prefill and decode
    share the GPUs (vLLM's and SGLang's default scheduling): a request waits ``prefill + step``
    for its first token; each of its ``output_tokens`` also waits for the prefills of its
    ``batch − 1`` neighbours, spread over its output, so TPOT is ``step + (batch − 1) · prefill /
    output_tokens``; the rank serves ``batch`` requests every ``batch · prefill + output_tokens ·
    step`` seconds. Scalars or numpy arrays."""
    return (prefill + step, step + (batch - 1) * prefill / output_tokens,
            batch * prefill + output_tokens * step)


def disaggregated_latency(prefill, transfer, step, output_tokens, concurrency, prefill_ranks):
    """(TTFT, seconds per request round) of a prefill pool of ``prefill_ranks`` engines' ranks
    feeding a decode pool whose step is ``step``, with ``concurrency`` requests in flight: a
    request comes round every ``R = max(prefill + transfer + step + output_tokens · step,
    concurrency · prefill / prefill_ranks)`` seconds (the second when the prefill pool cannot keep
    up: requests queue for it and TTFT grows to ``R − output_tokens · step``). Scalars or arrays."""
    ttft0 = prefill + transfer + step
    rnd = xp.maximum(ttft0 + output_tokens * step, concurrency * prefill / prefill_ranks)
    return rnd - output_tokens * step, rnd


def kv_transfer(plan, prefill_est, prompt: int) -> tuple[float, float]:
    """(bytes, seconds) of one request's KV cache moving from its prefill instance to its decode
    instance: ``prompt`` × the whole model's KV bytes per token, each prefill GPU sending its own
    share (its KV bytes per token × prompt) over its inter-node link at the same time."""
    from parc.cost.estimate import links

    m, srv = plan.model, plan.serve
    nbytes = kv_element_bytes(m, srv.kv_cache_dtype)
    total = prompt * model_kv_bytes_per_token(m, m.layers, nbytes, 1, prompt)   # local layers: their window
    bw, kind, _ = links(plan.cluster, plan.world_size)
    link = "inter_node" if "inter_node" in bw else "intra_node"
    eff = plan.profile.inter_node_efficiency if link == "inter_node" else plan.profile.intra_node_efficiency
    per_gpu = prompt * prefill_est.kv_bytes_per_token
    return float(total), per_gpu / (bw[link] * eff)
