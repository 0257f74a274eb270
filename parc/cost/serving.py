"""A serving plan's speed at its workload: what ``parc explain``, ``parc draw --what timeline``
and ``parc plan --serve`` report, composed from two owners:

* :mod:`parc.cost.serve_step`: what one step of an engine instance's data-parallel rank costs
  (the roofline of each pipeline stage, the expert all-to-all, two-batch overlap, speculative
  decoding);
* :mod:`parc.cost.scheduler`: how the engine's scheduler fills steps with decode tokens and
  prompt chunks under its limits (:mod:`parc.cost.engine`: the spec's, or the engine's own
  defaults), and what that gives a closed loop of users or a request rate.

One mesh serves prefill and decode on the same GPUs: each of its ``dp`` ranks gets an equal
share of the load. A disaggregated plan (``prefill`` and ``decode`` pools) is costed pool by pool
on the plan one instance runs (:func:`parc.model.pools.pool_plans`): the prefill ranks prefill
only, the decode ranks decode only, and each request's KV cache crosses between them
(:func:`kv_transfer`); its TTFT is the queue for a prefill rank, the prefill, the KV transfer and
the first decode step, each named where it is shown.

Definitions, shared with docs/language.md and docs/planner.md: TTFT is the time from a request's
arrival to its first output token; TPOT the mean time per output token after the first,
(E2E − TTFT) / (output_tokens − 1); ITL the time between two streamed outputs; throughput the
output tokens per second of the whole plan (``vllm bench serve`` reports the same).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from parc.cost.comm import allreduce_bytes, ep_bytes_per_layer
from parc.cost.memory import model_kv_bytes_per_token
from parc.cost.params import activation_dtype, dtype_bytes, head_dim, kv_element_bytes

# The workload explain assumes where the serve block gives none: vLLM's serving benchmark's random
# dataset (vllm/benchmarks/datasets/datasets.py RandomDataset: DEFAULT_INPUT_LEN 1024,
# DEFAULT_OUTPUT_LEN 128).
DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 128
TTFT_TERMS = {"wait": "the step in progress", "queue": "queue", "prefill": "prefill",
              "kv_transfer": "KV transfer", "first_decode": "first decode step"}


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


@dataclass(slots=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    concurrency: int | None       # requests in flight over the whole plan (a closed loop)
    request_rate: float | None = None   # or requests per second arriving at random
    stated: tuple = ()            # the serve keys the spec gave


def workload(plan, est, limits, replicas: int) -> Workload:
    """The requests explain's estimates assume: ``serve.prompt_tokens`` and ``output_tokens``
    (by default vLLM's benchmark's 1024 and 128, shortened in proportion to fit max_model_len),
    and ``concurrency`` or ``request_rate`` over the whole plan (by default as many requests as
    both max_num_seqs and the KV cache hold per replica, times the ``replicas``)."""
    srv = plan.serve
    stated = tuple(k for k in ("prompt_tokens", "output_tokens", "concurrency", "request_rate")
                   if getattr(srv, k) is not None)
    p, o = srv.prompt_tokens, srv.output_tokens
    if p is None or o is None:
        scale = min(1.0, limits.max_model_len / (DEFAULT_PROMPT_TOKENS + DEFAULT_OUTPUT_TOKENS))
        p = p if p is not None else max(1, int(DEFAULT_PROMPT_TOKENS * scale))
        o = o if o is not None else max(1, int(DEFAULT_OUTPUT_TOKENS * scale))
    c = srv.concurrency
    if c is None and srv.request_rate is None:
        c = replicas * max(1, min(limits.max_num_seqs, est.kv_capacity_tokens // max(1, p + o)))
    return Workload(int(p), int(o), None if c is None else int(c), srv.request_rate, stated)


@dataclass(slots=True)
class ServeNumbers:
    """What ``parc explain`` shows of a serving plan's speed at its workload (see the module
    doc). For a disaggregated plan ``prefill`` is the prefill pool's, ``decode`` the decode
    pool's; ``mixed`` is a step that carries a prompt chunk beside the decode requests (one mesh)."""
    workload: Workload
    limits: object                # parc.cost.engine.Limits of the decode side's instance
    replicas: int                 # data-parallel ranks serving requests side by side (decode side)
    batch: float                  # decode requests per step per replica
    fits: int                     # requests of prompt + output tokens the KV cache holds per replica
    prefill: list                 # Phase per stage: a step of one prompt's chunk (prefill side)
    decode: list                  # Phase per stage: a decode-only step at the batch
    mixed: list                   # Phase per stage: a decode step with a prompt chunk (one mesh)
    prefill_steps: float          # steps one prompt takes alone
    prefill_time: float           # one prompt, alone, through its steps
    prefill_tokens_per_s: float   # prompt tokens per second the prefill side sustains at full load
    ttft: float
    ttft_terms: dict              # name -> seconds, in order; they sum to ttft
    tpot: float
    tpot_p99: float
    itl_p99: float
    step: float                   # the mean step of a decode rank (between two tokens of a request)
    mixed_share: float            # share of steps carrying prompt chunks
    output_tokens_per_s: float
    decode_tokens_per_s: float    # what the decode side sustains at the batch without prompt chunks
    limit: str                    # what caps the batch: users | rate | budget | seqs | kv | prefill | unstable
    accepted: float = 1.0         # tokens a decode step yields per request (speculative decoding)
    kv_transfer_bytes: float = 0.0
    kv_transfer_time: float = 0.0
    pools: dict = field(default_factory=dict)   # pool name -> {"instances", "gpus_per_instance", "gpus", ...}

    @property
    def decode_step(self) -> float:
        """A decode-only step at the batch."""
        return max(ph.time for ph in self.decode) * len(self.decode)

    def to_json(self) -> dict:
        w = self.workload
        return {"workload": {"prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                             "concurrency": w.concurrency, "request_rate": w.request_rate, "stated": list(w.stated)},
                "engine": self.limits.to_json(), "replicas": self.replicas, "batch_per_replica": self.batch,
                "requests_fit_per_replica": self.fits, "limit": self.limit,
                "ttft": _finite(self.ttft), "ttft_terms": {k: _finite(v) for k, v in self.ttft_terms.items()},
                "tpot": self.tpot,
                "tpot_p99": self.tpot_p99, "itl_p99": self.itl_p99, "step": self.step,
                "mixed_share": self.mixed_share, "accepted_tokens_per_step": self.accepted,
                "prefill_steps": self.prefill_steps, "prefill_time": self.prefill_time,
                "prefill_tokens_per_s": self.prefill_tokens_per_s, "output_tokens_per_s": self.output_tokens_per_s,
                "decode_step": self.decode_step, "decode_tokens_per_s": self.decode_tokens_per_s,
                "prefill_stages": [p.to_json() for p in self.prefill],
                "decode_stages": [p.to_json() for p in self.decode],
                "mixed_stages": [p.to_json() for p in self.mixed],
                "kv_transfer": {"bytes_per_request": int(self.kv_transfer_bytes), "time": self.kv_transfer_time},
                "pools": {name: _pool_json(p) for name, p in self.pools.items()}}


def _finite(x: float):
    """``x``, or None where it is infinite (a request rate the plan never drains: JSON has no
    infinity)."""
    return x if x < float("inf") else None


def _pool_json(p: dict) -> dict:
    """One pool of a disaggregated plan in explain's JSON: its instances, their GPUs and mesh, and
    one instance's memory, KV cache, rank map, communication per decoded token and limits."""
    e = p["estimate"]
    axes = ("tp", "cp", "dp", "pp", "ep", "dcp")
    return {"instances": p["instances"], "gpus_per_instance": p["gpus_per_instance"], "gpus": p["gpus"],
            "mesh": p["mesh"], "memory_per_gpu": e.memory.to_json(),
            "stages": [{"stage": st.stage, "layers": st.layers, "params": st.params, "memory": st.memory.to_json()}
                       for st in e.stages],
            "kv_bytes_per_token_per_gpu": int(e.kv_bytes_per_token), "kv_capacity_tokens": int(e.kv_capacity_tokens),
            "rank_map": e.rank_map, "comm_per_token": {ax: int(e.comm_bytes.get(ax, 0)) for ax in axes},
            "comm_time_per_token": {ax: e.comm_time.get(ax, 0.0) for ax in axes},
            "comm_link": {ax: e.comm_link.get(ax) for ax in axes}, "most_loaded_stage": e.most_loaded_stage,
            "links": {k: {"kind": e.link_kind.get(k), "bandwidth": e.link_bandwidth.get(k)}
                      for k in ("intra_node", "inter_node") if k in e.link_bandwidth},
            "engine": p["limits"].to_json()}


@dataclass
class Instance:
    """One engine instance as the serving numbers see it: its plan, estimate, limits and step."""
    name: str
    plan: object
    est: object
    instances: int
    limits: object = None
    model: object = None          # parc.cost.serve_step.StepModel

    @property
    def ranks(self) -> int:
        """Data-parallel ranks over all instances."""
        return self.instances * self.plan.mesh.dp


def instances_of(plan, est, efficiency: float, steps: bool = True) -> dict[str, Instance]:
    """{"serve": one mesh} or {"prefill": ..., "decode": ...}, each with its limits and (with
    ``steps``) its step model."""
    from parc.cost.engine import limits

    if plan.pools:
        from parc.cost.estimate import estimate
        from parc.model.pools import pool_plans

        out = {p.name: Instance(p.name, pp_, estimate(pp_, efficiency, cache=False), p.instances)
               for p, pp_ in pool_plans(plan)}
    else:
        out = {"serve": Instance("serve", plan, est, 1)}
    for inst in out.values():
        inst.limits = limits(inst.plan, inst.est.kv_capacity_tokens)
    if steps:
        from parc.cost.serve_step import StepModel

        for inst in out.values():
            inst.model = StepModel(inst.plan, inst.est, efficiency)
    return out


def serve_load(plan, est, insts: dict | None = None) -> tuple[Workload, Instance]:
    """The workload and the decode side's instance (its plan, estimate and limits): what the
    memory rules read, without the scheduler's step model."""
    insts = insts or instances_of(plan, est, plan.profile.gemm_efficiency or plan.cluster.gpu.gemm_efficiency,
                                  steps=False)
    dec = insts.get("decode") or insts["serve"]
    w = workload(plan, dec.est, dec.limits, dec.ranks)
    return w, dec


def batcher(inst: Instance, prompt: int, output: int):
    """The scheduler of one dp rank of ``inst`` at the workload's request."""
    from parc.cost.scheduler import Batcher

    sm, lim = inst.model, inst.limits
    cd, cp = prompt + output / 2, prompt / 2
    return Batcher(lambda d, p: sm.step(d, p, cd, cp), prompt, output, lim.max_num_batched_tokens,
                   lim.max_num_seqs, int(inst.est.kv_capacity_tokens), sm.verify, sm.accepted, lim.mixed,
                   lockstep(inst.plan), lim.reserved_output)


def lockstep(plan) -> int:
    """Data-parallel ranks of one engine that run every step together: an MoE model's, whose
    experts every rank's tokens reach through each layer's all-to-all (vLLM's data parallelism for
    MoE runs dummy steps on idle ranks, docs/serving/data_parallel_deployment.md; SGLang's
    attention data parallelism runs one forward mode on all ranks); a dense model's ranks are
    independent engines."""
    return plan.mesh.dp if plan.model.is_moe and plan.mesh.dp > 1 else 1


def serve_numbers(plan, est, efficiency: float | None = None) -> ServeNumbers:
    """Prefill, TTFT, TPOT and tokens/s of ``plan`` at its :func:`workload` (see the module doc).
    Long because: one result assembled from the instances, the scheduler and the workload."""
    eff = (plan.profile.gemm_efficiency or plan.cluster.gpu.gemm_efficiency) if efficiency is None else efficiency
    insts = instances_of(plan, est, eff)
    w, dec = serve_load(plan, est, insts)
    pre = insts.get("prefill") or dec
    P, O = w.prompt_tokens, w.output_tokens
    fits = int(dec.est.kv_capacity_tokens // max(1, P + O))
    cd, cp = P + O / 2, P / 2
    pb = batcher(pre, P, O)
    from parc.cost.scheduler import prefill_rank

    alone = prefill_rank(pb.step, P, pb.budget)
    prefill_rate = pre.ranks * alone["capacity"] * P
    decode_only = only_decodes(plan)
    if plan.pools:
        s, xfer_bytes, xfer = _pooled(plan, pre, dec, w, alone)
    elif decode_only:
        s, xfer_bytes, xfer = _decode_server(dec, w), 0.0, 0.0
    else:
        s, xfer_bytes, xfer = _colocated(dec, w), 0.0, 0.0
    b = s["batch"]
    decode = dec.model.phases(b, 0.0, cd, cp)
    mixed = dec.model.phases(b if dec.limits.mixed else 0.0, s["chunk"], cd, cp) \
        if not (plan.pools or decode_only) else []
    prefill = pre.model.phases(0.0, alone["chunk"], cd, cp)
    from parc.model.pools import instance_gpus

    pools = {k: {"instances": v.instances, "gpus_per_instance": instance_gpus(v.plan.mesh),
                 "gpus": v.instances * instance_gpus(v.plan.mesh), "estimate": v.est, "limits": v.limits,
                 "plan": v.plan, "mesh": {a: v.plan.mesh.size(a) for a in ("pp", "dp", "cp", "tp")}
                 | {"ep": v.plan.mesh.ep, "dcp": v.plan.mesh.dcp}}
             for k, v in insts.items() if plan.pools}
    td = dec.model.step(b, 0.0, cd, cp)
    return ServeNumbers(w, dec.limits, dec.ranks, b, fits, prefill, decode, mixed, alone["steps"], alone["alone"],
                        prefill_rate, s["ttft"], s["terms"], s["tpot"], s["tpot_p99"], s["itl_p99"], s["step"],
                        s["mixed"], s["output_tokens_per_s"], float(dec.ranks * b * dec.model.accepted / td) if b else 0.0,
                        s["limit"], dec.model.accepted, xfer_bytes, xfer, pools)


def only_decodes(plan) -> bool:
    """Whether the plan is a server that only decodes (SGLang ``--disaggregation-mode decode`` on
    its own, :func:`_decode_server`): no prompt step runs on it."""
    from parc.cost.engine import server_role

    return not plan.pools and server_role(plan) == "decode"


def _colocated(inst: Instance, w: Workload) -> dict:
    """One mesh: the scheduler of each dp rank at its share of the load."""
    from parc.cost.scheduler import closed_loop, open_loop

    b = batcher(inst, w.prompt_tokens, w.output_tokens)
    if w.request_rate is not None:
        st = open_loop(b, w.request_rate / inst.ranks).item()
    else:
        st = closed_loop(b, w.concurrency / inst.ranks).item()
    terms = {k: st[k] for k in ("wait", "queue", "prefill")}
    return {"batch": st["batch"], "chunk": st["chunk"], "ttft": sum(terms.values()), "terms": terms,
            "tpot": st["tpot"], "tpot_p99": st["tpot_p99"], "itl_p99": st["itl_p99"], "step": st["step_mean"],
            "mixed": st["mixed"], "output_tokens_per_s": st["output_tokens_per_s"] * inst.ranks,
            "limit": st["limit"]}


def _decode_server(inst: Instance, w: Workload) -> dict:
    """A server that only decodes (SGLang ``--disaggregation-mode decode`` on its own: a spec of
    the decode side alone): its requests arrive with their KV cache from prefill servers that
    the spec leaves out, so its ranks run decode steps only, as a decode pool's do, behind a
    prefill side that keeps up (no prefill and no KV transfer here). TTFT is what this server
    adds: the queue for a decode slot and the first decode step."""
    from parc.cost.scheduler import pooled

    b = batcher(inst, w.prompt_tokens, w.output_tokens)
    keeps_up = {"capacity": float("inf"), "alone": 0.0}
    st = pooled(b, inst.ranks, keeps_up, 1, 0.0, users=w.concurrency if w.request_rate is None else None,
                rate=w.request_rate).item()
    return _decode_side(st, ("queue", "first_decode"))


def _decode_side(st: dict, names: tuple) -> dict:
    """The numbers of ranks that only decode (a :func:`parc.cost.scheduler.pooled` state), TTFT
    by the terms ``names``."""
    terms = {k: st[k] for k in names}
    return {"batch": st["batch"], "chunk": 0.0, "ttft": sum(terms.values()), "terms": terms, "tpot": st["tpot"],
            "tpot_p99": st["tpot_p99"], "itl_p99": st["itl_p99"], "step": st["step_decode"], "mixed": 0.0,
            "output_tokens_per_s": st["output_tokens_per_s"], "limit": st["limit"]}


def _pooled(plan, pre: Instance, dec: Instance, w: Workload, alone: dict) -> tuple[dict, float, float]:
    """Two pools: prefill ranks feeding decode ranks over the KV transfer."""
    from parc.cost.scheduler import pooled

    xfer_bytes, xfer = kv_transfer(plan, pre.est, w.prompt_tokens)
    b = batcher(dec, w.prompt_tokens, w.output_tokens)
    st = pooled(b, dec.ranks, alone, pre.ranks, xfer, users=w.concurrency, rate=w.request_rate).item()
    return _decode_side(st, ("queue", "prefill", "kv_transfer", "first_decode")), xfer_bytes, xfer


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


@dataclass(slots=True)
class ServePerf:
    batch: int            # sequences per replica at the memory limit
    step_time: float      # seconds per step (between two tokens of a sequence)
    latency: float        # the same: a sequence's inter-token latency
    throughput: float     # output tokens per second of the whole plan (all dp replicas)


def serve_perf(plan, est, efficiency: float | None = None) -> ServePerf:
    """Decode throughput of a serving ``plan`` at its memory limit (``parc plan`` of a serving
    spec without ``--serve``): as many requests of ``max_model_len`` tokens per replica as the
    KV cache and the engine's ``max_num_seqs`` allow, decoding only."""
    from parc.cost.engine import limits
    from parc.cost.serve_step import StepModel

    lim = limits(plan, est.kv_capacity_tokens)
    B = min(est.max_concurrent_seqs, lim.max_num_seqs)
    if B <= 0:
        return ServePerf(0, 0.0, 0.0, 0.0)
    sm = StepModel(plan, est, efficiency)
    T = float(sm.step(B, 0.0, lim.max_model_len, 0.0))
    return ServePerf(B, T, T, plan.mesh.dp * B * sm.accepted / T)

