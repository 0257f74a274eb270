"""The cost model of one plan: :func:`estimate` composes the public kernels of
:mod:`parc.cost.params`, :mod:`~parc.cost.memory`, :mod:`~parc.cost.comm`, :mod:`~parc.cost.flops`
and :mod:`~parc.cost.timing` (which the planner calls over numpy arrays) with the pipeline facts
of :mod:`parc.model.schedules`. The kernels are re-exported here, where callers have found them."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from parc.cost.comm import comm_dtype_bytes, cp_gathered_share, zero3_flat, zero3_passes
from parc.cost.comm import (ALGORITHMS, again, allgather_bytes, p2p_time, allreduce_bytes, axis_time, comm_calls,
                            cp_bytes_per_layer, dp_bytes, dp_bytes_parts, ep_bytes_per_layer, link_latency, link_params, serving_calls,
                            pp_bytes_per_microbatch, tp_bytes_per_layer)
from parc.cost.flops import (active_matmul_params, model_flops, recompute_factors, recompute_flops,
                             stage_flops_parts, stage_flops_per_microbatch)
from parc.cost.memory import (Memory, StateBytes, fsdp_double_buffer_bytes, fsdp_double_buffered, activation_bytes_per_layer, caches_fp8_weights, fp8_weight_cache_bytes,
                              fp8_weight_terms, kv_bytes_per_token,
                              kv_capacity_tokens, layer_activation_bytes, linear_params, model_activation_options,
                              model_kv_bytes_per_token,
                              model_state_bytes, nccl_communicators, overhead_bytes, pipeline_gathered,
                              sampler_bytes, serving_activation_bytes, stage_activation_bytes,
                              state_bytes_per_param, zero_state_bytes, _train_state)
from parc.cost.params import (ASSUMED_INTER_NODE_BW, AXES, DEFAULT_EFFICIENCY, DTYPE_BYTES, PARTS,
                              StageLayout, attention_params, balanced_split, chunks_of_rank, dtype_bytes,
                              embedding_params, expert_params, head_dim, is_moe_layer, kv_element_bytes,
                              kv_heads_per_gpu, part_weight_bytes, weight_bytes,
                              layer_params, layer_split, layout_tensors, layouts_of, mlp_params,
                              moe_layer_mlp_params, norm_params, output_params, param_bytes_on_rank,
                              param_count, params_by_part, params_on_rank, serving_expert_pad, serving_expert_split, shard_groups,
                              split_layers,
                              stage_chunks, stage_layouts, stage_parts, stage_tensors, tensor_parts, uses_v_placement,
                              fsdp_unit_params, _shard_groups, _stage_parts, _zero)
from parc.cost import engine
from parc.cost import xp as np
from parc.cost.gemm import gemm_ceilings, stage_compute_time, stage_rates
from parc.cost.kernels import grad_accumulation_bytes, optimizer_bytes, ring_merge_bytes
from parc.cost.timing import BACKWARD_SHARE, exposed_comm, step_time
from parc.model import schedules
from parc.model.frameworks import context_parallel, framework

__all__ = [  # the kernels, re-exported where callers have found them, and the estimate
    "allgather_bytes", "allreduce_bytes", "cp_bytes_per_layer", "dp_bytes", "ep_bytes_per_layer",
    "pp_bytes_per_microbatch", "tp_bytes_per_layer", "active_matmul_params", "model_flops",
    "recompute_factors", "recompute_flops", "stage_flops_parts", "stage_flops_per_microbatch", "StateBytes",
    "activation_bytes_per_layer", "kv_bytes_per_token", "kv_capacity_tokens", "layer_activation_bytes",
    "model_state_bytes", "stage_activation_bytes", "state_bytes_per_param", "zero_state_bytes",
    "caches_fp8_weights", "fp8_weight_cache_bytes", "fp8_weight_terms", "linear_params", "model_activation_options", "model_kv_bytes_per_token", "nccl_communicators", "overhead_bytes",
    "ASSUMED_INTER_NODE_BW", "AXES", "DEFAULT_EFFICIENCY", "DTYPE_BYTES", "PARTS",
    "StageLayout", "attention_params", "balanced_split", "chunks_of_rank", "dtype_bytes", "embedding_params",
    "expert_params", "head_dim", "is_moe_layer", "kv_heads_per_gpu", "layer_params", "layer_split",
    "layout_tensors", "layouts_of", "mlp_params", "moe_layer_mlp_params", "norm_params", "output_params",
    "param_bytes_on_rank", "part_weight_bytes", "weight_bytes", "kv_element_bytes", "param_count", "params_by_part", "params_on_rank", "shard_groups", "split_layers",
    "stage_chunks", "stage_layouts", "stage_parts", "stage_tensors", "tensor_parts", "uses_v_placement",
    "BACKWARD_SHARE", "step_time", "exposed_comm", "stage_compute_time", "stage_rates", "axis_time", "comm_calls",
    "dp_bytes_parts", "link_latency", "ALGORITHMS", "Memory", "fsdp_double_buffered", "StageEstimate", "optimizer_bytes", "zero3_passes",
    "zero3_flat", "comm_dtype_bytes", "nvls_allreduce",
    "Estimate", "estimate", "links", "link_params", "members_per_node", "serving_calls", "axis_groups", "train_comm_bytes",
]


@dataclass(slots=True)
class StageEstimate:
    stage: int
    layers: int
    moe_layers: int
    params: int                  # on one GPU of the stage (the most loaded one under ZeRO-3)
    parts: dict
    memory: Memory
    inflight: float
    flops_per_microbatch: float  # hardware FLOPs per GPU per microbatch
    kv_bytes_per_token: int = 0
    kv_capacity_tokens: int = 0
    gemm_flops_per_microbatch: float = 0.0      # of flops_per_microbatch: the GEMMs' (not attention's core)
    gemm_time_per_microbatch: float = 0.0       # seconds of its GEMMs (:mod:`parc.cost.gemm`)
    attention_time_per_microbatch: float = 0.0  # seconds of attention's core
    memory_time_per_microbatch: float = 0.0     # seconds of its memory-bound kernels (:mod:`parc.cost.kernels`)
    startup: object = None                      # serving: the engine's start-up (parc.cost.startup.Startup)

    @property
    def time_per_microbatch(self) -> float:
        return self.gemm_time_per_microbatch + self.attention_time_per_microbatch + self.memory_time_per_microbatch


@dataclass(slots=True)
class Estimate:
    """What ``parc explain`` shows; see :func:`estimate`."""
    mode: str
    world_size: int
    mesh: dict
    params_total: int
    stages: list[StageEstimate]
    most_loaded_stage: int
    microbatches: int
    bubble_fraction: float
    inflight_microbatches: float
    activation_bytes_per_layer: float
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    compute_time: float
    step_time: float
    mfu: float
    tokens_per_second: float
    comm_bytes: dict            # axis -> bytes per GPU per step (serving: per decoded token)
    comm_time: dict             # axis -> seconds
    comm_link: dict             # axis -> "intra_node" | "inter_node" | None
    link_bandwidth: dict        # "intra_node"/"inter_node" -> bytes/s
    link_kind: dict             # "intra_node"/"inter_node" -> link kind
    assumed_inter_node: bool
    efficiency: float
    state_bytes: StateBytes | None = None
    comm_algorithm: dict = field(default_factory=dict)   # axis -> ring | tree | nvls | all_to_all | p2p
    comm_exposed: dict = field(default_factory=dict)     # axis -> seconds compute does not hide
    comm_local: dict = field(default_factory=dict)       # axis -> members of one group in a node
    gemm_peak: float = 0.0                               # FLOP/s the GEMMs' rate is a fraction of
    gemm_ceilings: dict = field(default_factory=dict)    # "bf16"/"fp8" -> the fraction of that precision's
                                                         # peak its largest GEMMs reach (training)
    optimizer_time: float = 0.0                          # seconds of the optimizer's step (in step_time)
    kv_bytes_per_token: int = 0
    kv_capacity_tokens: int = 0
    max_concurrent_seqs: int = 0
    rank_map: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    plan: object = None         # the plan estimated (serving numbers are worked out from it on demand)
    _serving: object = None

    @property
    def serving(self):
        """A serving plan's speed at its workload (:func:`parc.cost.serving.serve_numbers`),
        worked out on first use so that searches that need only memory do not pay for it."""
        if self._serving is None and self.mode == "serve" and self.plan is not None \
                and getattr(self.plan, "serve", None) is not None:
            from parc.cost.serving import serve_numbers

            self._serving = serve_numbers(self.plan, self, self.efficiency)
        return self._serving

    @property
    def memory(self) -> Memory:
        """Memory of the most loaded GPU."""
        return self.stages[self.most_loaded_stage].memory

    def compute_split(self) -> dict:
        """Seconds per step of the slowest stage's GEMMs, attention core and memory-bound kernels
        (elementwise, FP8 casts, the loss), of the optimizer's step, and the fraction of
        ``gemm_peak`` its GEMMs reach for their shapes (0s for serving plans)."""
        st = max(self.stages, key=lambda s_: (s_.time_per_microbatch, s_.flops_per_microbatch))
        mb, gemm = self.microbatches, st.gemm_time_per_microbatch
        return {"gemm": gemm * mb, "attention": st.attention_time_per_microbatch * mb,
                "memory_bound": st.memory_time_per_microbatch * mb, "optimizer": self.optimizer_time,
                "gemm_efficiency": st.gemm_flops_per_microbatch / (gemm * self.gemm_peak) if gemm else 0.0}

    @property
    def params_most_loaded(self) -> int:
        return max(st.params for st in self.stages)

    def to_json(self) -> dict:
        """The ``parc explain --format json`` object (docs/json.md lists its keys). Serving
        plans give 0 for per-step quantities and add ``comm_per_token`` (bytes per GPU per decoded
        token) and ``comm_time_per_token``, with decode context parallel's ``dcp`` beside the axes,
        and ``serving``."""
        mem = self.memory
        train = self.mode == "train"
        axes = AXES if train else AXES + ("dcp",)
        out = {
            "mode": self.mode,
            "world_size": self.world_size,
            "mesh": self.mesh,
            "params": {"total": self.params_total, "most_loaded_gpu": self.params_most_loaded,
                       "by_part": self.stages[self.most_loaded_stage].parts},
            "microbatches": self.microbatches,
            "bubble_fraction": self.bubble_fraction,
            "inflight_microbatches": self.inflight_microbatches,
            "memory_per_gpu": mem.to_json(),
            "most_loaded_stage": self.most_loaded_stage,
            "activation_bytes_per_layer": int(self.activation_bytes_per_layer),
            "kv_cache": {"bytes_per_token_per_gpu": self.kv_bytes_per_token,
                         "capacity_tokens": self.kv_capacity_tokens,
                         "max_concurrent_seqs": self.max_concurrent_seqs},
            "comm_per_step": {ax: int(self.comm_bytes.get(ax, 0)) if train else 0 for ax in AXES},
            ("comm_time" if train else "comm_time_per_token"): {ax: self.comm_time.get(ax, 0.0) for ax in axes},
            "comm_link": {ax: self.comm_link.get(ax) for ax in axes},
            "comm_algorithm": {ax: self.comm_algorithm.get(ax) for ax in axes},
            "comm_exposed": {ax: self.comm_exposed.get(ax, 0.0) for ax in AXES},
            "gemm_peak": self.gemm_peak,
            "compute_split": self.compute_split(),
            "links": {k: {"kind": self.link_kind.get(k), "bandwidth": self.link_bandwidth.get(k)}
                      for k in ("intra_node", "inter_node") if k in self.link_bandwidth},
            "assumed_inter_node": self.assumed_inter_node,
            "tokens_per_step": self.tokens_per_step,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "compute_time": self.compute_time,
            "step_time": self.step_time,
            "mfu": self.mfu,
            "tokens_per_second": self.tokens_per_second,
            "efficiency": self.efficiency,
            "bytes_per_param": ({"weights": self.state_bytes.weights, "grads": self.state_bytes.grads,
                                 "optimizer": self.state_bytes.optimizer} if self.state_bytes else None),
            "stages": [{"stage": st.stage, "layers": st.layers, "params": st.params,
                        "inflight_microbatches": st.inflight, "memory": st.memory.to_json()}
                       for st in self.stages],
            "rank_map": self.rank_map,
            "notes": list(self.notes),
        }
        if not train:
            out["comm_per_token"] = {ax: int(self.comm_bytes.get(ax, 0)) for ax in AXES + ("dcp",)}
            if self.serving is not None:
                out["serving"] = self.serving.to_json()
        return out


def links(cluster, world_size: int) -> tuple[dict, dict, bool]:
    """(bandwidth, kind) per link (``intra_node``, ``inter_node``) of ``cluster`` and whether the
    inter-node link is assumed (a multi-node cluster that does not name one: 100 Gb/s ethernet)."""
    cl = cluster
    bw, kind = {}, {}
    if cl.intra_node is not None:
        bw["intra_node"], kind["intra_node"] = cl.intra_node.bandwidth, cl.intra_node.kind
    elif cl.gpu.nvlink_bandwidth:
        bw["intra_node"], kind["intra_node"] = cl.gpu.nvlink_bandwidth, "nvlink"
    else:
        bw["intra_node"], kind["intra_node"] = cl.gpu.pcie_bandwidth or 32e9, "pcie"
    assumed = False
    if cl.inter_node is not None:
        bw["inter_node"], kind["inter_node"] = cl.inter_node.bandwidth, cl.inter_node.kind
    elif cl.nodes > 1 or world_size > cl.gpus_per_node:
        bw["inter_node"], kind["inter_node"] = ASSUMED_INTER_NODE_BW, "ethernet"
        assumed = True
    return bw, kind, assumed


class _Same:
    """A plan compared by identity, so the latest estimate of that very object is reused."""

    __slots__ = ("plan",)

    def __init__(self, plan):
        self.plan = plan

    def __hash__(self) -> int:
        return id(self.plan)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.plan is self.plan


@lru_cache(maxsize=1)
def _latest(key: _Same, efficiency: float) -> "Estimate":
    return _estimate(key.plan, efficiency)


def estimate(plan, efficiency: float | None = None, cache: bool = True) -> Estimate:
    """Everything ``parc explain`` shows for a plan that checks; pure in the plan. ``efficiency``
    (the sustained fraction of peak FLOP/s) defaults to the plan's profile. With ``cache``
    the latest result is reused when called again with the same plan object (the P4 rules and
    ``parc explain`` share one estimate); the plan must not be changed in between."""
    if efficiency is None:
        efficiency = plan.profile.gemm_efficiency or plan.cluster.gpu.gemm_efficiency
    return _latest(_Same(plan), efficiency) if cache else _estimate(plan, efficiency)


def _stage(plan, lay: StageLayout, train: bool, per, act, kv_nbytes: int, rates) -> StageEstimate:
    """One pipeline stage's parameters, memory, microbatches in flight and FLOPs per microbatch."""
    m, mesh, sch = plan.model, plan.mesh, plan.schedule
    parts = _stage_parts(plan, lay)
    nparams = sum(parts.values())
    mem = Memory(capacity=float(plan.cluster.gpu.memory))
    st = StageEstimate(lay.stage, lay.layers, lay.moe_layers, nparams, parts, mem, 0.0, 0.0)
    if not train:
        mem.weights = weight_bytes(m, parts, expert_pad=serving_expert_pad(plan))
        st.kv_bytes_per_token = model_kv_bytes_per_token(m, lay.layers, kv_nbytes, mesh.tp,
                                                         engine.max_model_len(plan) if plan.serve else None,
                                                         lay.local_layers, dcp=mesh.dcp)
        st.startup = _serving_overheads(plan, lay, mem)
        return st
    full = _stage_parts(plan, lay, sharded=False)
    n_dense, n_exp = _shard_groups(plan)
    mem.weights, mem.grads, mem.optimizer = model_state_bytes(
        sum(full.values()) - full["experts"], full["experts"], nparams - parts["experts"], parts["experts"],
        _zero(plan), n_dense, n_exp, per, pipeline_gathered(framework(plan.train.framework), mesh.pp))
    p, mb, v = mesh.pp, sch.microbatches or 0, sch.virtual_stages
    st.inflight = schedules.inflight(sch.pipeline, p, mb, v, lay.stage)
    dense_layers = lay.layers - lay.moe_layers
    mem.activations = stage_activation_bytes(dense_layers, lay.moe_layers, act[0], act[1], st.inflight,
                                             lay.embedding, lay.head, m.seq_len / mesh.cp, sch.micro_batch, m,
                                             mesh.tp, plan.train.offload_layers)
    delta, mem.fp8_weights = fp8_weight_terms(plan.train, linear_params(parts))
    mem.weights += delta
    if fsdp_double_buffered(plan):
        mem.fsdp_buffers = fsdp_double_buffer_bytes(fsdp_unit_params(plan, lay), per)
    comms = nccl_communicators(mesh.pp, mesh.dp, mesh.cp, mesh.tp, mesh.ep, mesh.etp, m.is_moe)
    mem.cuda_context, mem.nccl_buffers, mem.fragmentation = overhead_bytes(plan.cluster, comms, mem.activations)
    rec_mult, rec_attn, rec_elem = recompute_factors(plan.train.recompute)
    tokens = sch.micro_batch * m.seq_len / mesh.cp
    # a DualPipe microbatch passes one of the rank's two stages: half its layers (and heads) on average
    share = schedules.microbatch_share(sch.pipeline)
    work = stage_flops_parts(m, tokens / mesh.tp, dense_layers, lay.moe_layers, lay.head, rec_mult, rec_attn)
    st.flops_per_microbatch = share * sum(work)   # stage_flops_per_microbatch
    st.gemm_flops_per_microbatch = share * (work[0] + work[1] + work[3])
    casts = 1.0 / max(mb, 1) if caches_fp8_weights(plan.train) else 1.0   # cached FP8 weights: cast once a step
    accumulate = grad_accumulation_bytes(framework(plan.train.framework), mesh.pp, mb) * sum(full.values())
    # the context-parallel ring's eager ops around the attention kernel, its forward's again when recomputed
    if mesh.cp > 1:
        accumulate += ring_merge_bytes(m, tokens, mesh.tp, mesh.cp, lay.layers, context_parallel(plan.train.framework),
                                       1 + (rec_attn > 1))
    gemm, attn, memb = stage_compute_time(m, tokens, mesh.tp, rates, dense_layers, lay.moe_layers, lay.head,
                                          rec_mult, rec_attn, rec_elem, casts, accumulate)
    st.gemm_time_per_microbatch, st.attention_time_per_microbatch = share * gemm, share * attn
    st.memory_time_per_microbatch = share * memb
    return st


def _serving_overheads(plan, lay: StageLayout, mem: Memory):
    """What a serving engine holds beside weights and KV cache, as it computes it when it starts
    (:mod:`parc.cost.startup`): the peak activations of its profiling forward pass, on the last
    stage what the sampler adds to it, the CUDA graphs it captures, and outside its budget the
    CUDA context and NCCL buffers (none for a one-GPU instance)."""
    from parc.cost.params import activation_dtype
    from parc.cost.startup import startup

    m, mesh = plan.model, plan.mesh
    ep, etp, _ = serving_expert_split(plan)
    moe_dp = max(1, ep * etp // (mesh.tp * mesh.cp))          # dp ranks whose MoE layers this GPU shares

    def forward(tokens):
        return serving_activation_bytes(m, tokens, mesh.tp, ep, etp, moe_dp)

    comms = nccl_communicators(mesh.pp, moe_dp, mesh.cp, mesh.tp, ep, 1, m.is_moe)
    if mesh.pp * mesh.cp * mesh.tp * moe_dp == 1:
        comms = 0                                               # one GPU: the engine opens no NCCL group
    mem.cuda_context, mem.nccl_buffers, _ = overhead_bytes(plan.cluster, comms, 0.0)
    sampler = sampler_bytes(m, engine.limits(plan).max_num_seqs) if lay.head else 0.0
    hidden = engine.batched_tokens(plan) * m.hidden * dtype_bytes(activation_dtype(m))
    s = startup(plan, mem.weights, forward, sampler, hidden, mem.cuda_context + mem.nccl_buffers, lay.layers)
    mem.activations, mem.sampler, mem.cuda_graphs = s.activations, s.sampler, s.graphs
    return s


def _serving_kv(plan, stages: list[StageEstimate]) -> tuple[int, int, int]:
    """(KV bytes per token of the fullest stage, tokens of KV cache, concurrent sequences): each
    stage's KV memory (:attr:`parc.cost.startup.Startup.kv`) over its bytes per token."""
    srv = plan.serve
    if srv is None:
        return 0, 0, 0
    caps = [max(0, int(st.startup.kv // st.kv_bytes_per_token)) if st.kv_bytes_per_token > 0 else 0
            for st in stages]
    # a stage with no layers keeps no KV cache and bounds nothing (P127 names it)
    held = [c for st, c in zip(stages, caps) if st.kv_bytes_per_token > 0]
    kv_cap = min(held) if held else 0
    for st, c in zip(stages, caps):
        st.kv_capacity_tokens = c
        st.memory.kv_cache = kv_cap * st.kv_bytes_per_token
    kv_tok = max(st.kv_bytes_per_token for st in stages)
    return kv_tok, kv_cap, kv_cap // engine.max_model_len(plan)


def train_comm_bytes(m, tokens_local, layers, moe_layers, *, pp, tp, cp, ep, v, microbatches, wbytes,
                     recompute: str, sp, dense_params, expert_params_, zero: int, n_dp, n_exp, per,
                     passes=1, fp8=False, axes=AXES, ring: dict | None = None) -> dict:
    """Bytes per GPU per training step on each axis for a stage of ``layers`` (``moe_layers`` of
    them MoE) over ``tokens_local`` tokens per microbatch, activations in ``wbytes``
    (:func:`comm_dtype_bytes`); ``n_dp`` is the dense gradients' group (dp·cp); the data-parallel
    traffic runs ``passes`` times (:func:`zero3_passes`). Under ``fp8`` with sequence parallelism the
    forward all-gathers of the linear layers' inputs move FP8 copies (Transformer Engine's and
    torchao's FP8 all-gather), one of the four TP collectives at half the bytes. Only ``axes`` are
    computed (``dp`` brings ``dp_gather``). ``ring`` is the framework's context-parallel ring
    (:func:`parc.model.frameworks.context_parallel`): the heads its K and V carry and the bytes of
    their gradients (None: the model's KV heads, gradients in ``wbytes``). Scalars or numpy arrays
    for the sizes, single ``recompute`` and ``zero``."""
    steps = microbatches + (microbatches < 1) * (1 - microbatches)
    out = {}
    if "tp" in axes:
        out["tp"] = (tp_bytes_per_layer(tokens_local, m.hidden, tp, wbytes, recompute) * layers * steps
                     * (np.where(sp, 7 / 8, 1.0) if fp8 else 1.0))
    if "cp" in axes:
        query = ring is not None and ring["kv_heads"] == "query"
        kv_width = (m.heads / tp if query else kv_heads_per_gpu(m.kv_heads, tp)) * head_dim(m)
        out["cp"] = (cp_bytes_per_layer(tokens_local, kv_width, cp, wbytes, ring["grad_bytes"] if ring else 0)
                     * layers * steps * again(recompute))
    if "dp" in axes:
        _, gather = dp_bytes_parts(dense_params, zero, n_dp, per.grads, per.weights)
        _, gather_e = dp_bytes_parts(expert_params_, zero, n_exp, per.grads, per.weights)
        out["dp"] = (dp_bytes(dense_params, zero, n_dp, per.grads, per.weights)
                     + dp_bytes(expert_params_, zero, n_exp, per.grads, per.weights)) * passes
        out["dp_gather"] = (gather + gather_e) * passes   # of "dp": the parameters' all-gather
    if "pp" in axes:
        out["pp"] = pp_bytes_per_microbatch(tokens_local, m.hidden, tp, v, wbytes) * steps * (pp > 1)
    if "ep" in axes:
        ep_tokens = tokens_local / (1 + sp * (tp > 1) * (tp - 1))
        out["ep"] = ep_bytes_per_layer(ep_tokens, m.hidden, m.top_k or 1, ep, wbytes) * moe_layers * steps
    return out


def _comm(plan, stages, most: int, train: bool, per) -> dict:
    m, mesh, sch = plan.model, plan.mesh, plan.schedule
    t, cp = mesh.tp, mesh.cp
    crit = stages[most] if not train else _critical(stages)
    if not train:   # per decoded token of one sequence
        from parc.cost.serving import activation_bytes, decode_comm_bytes

        return {"cp": 0.0, "dp": 0.0, **decode_comm_bytes(m, crit.layers, crit.moe_layers, t, mesh.ep, mesh.pp,
                                                          activation_bytes(m), dcp=mesh.dcp)}
    tr = plan.train
    full = _stage_parts(plan, stage_layouts(plan)[most], sharded=False)
    _, n_exp = _shard_groups(plan)
    share = schedules.microbatch_share(sch.pipeline)          # the layers each microbatch passes
    return train_comm_bytes(
        m, sch.micro_batch * (m.seq_len / cp), crit.layers * share, crit.moe_layers * share, pp=mesh.pp, tp=t,
        cp=cp, ep=mesh.ep,
        v=sch.virtual_stages, microbatches=sch.microbatches or 0, wbytes=comm_dtype_bytes(tr.precision),
        recompute=tr.recompute, fp8=tr.precision == "fp8",
        sp=bool(tr.sequence_parallel), dense_params=sum(full.values()) - full["experts"],
        expert_params_=full["experts"], zero=tr.zero, n_dp=mesh.dp * cp, n_exp=n_exp, per=per,
        passes=zero3_passes(tr.zero, mesh.pp, sch.microbatches or 0, framework(tr.framework)),
        ring=context_parallel(tr.framework))


def nvls_allreduce(gpu, axis: str, sp, zero):
    """Whether an axis's collectives can reduce in the NVSwitch (NVLS): only a real all-reduce
    (TP without sequence parallelism, data parallelism without ZeRO), on a GPU whose switch
    reduces; a reduce-scatter + all-gather pair cannot gain from it (:func:`parc.cost.comm.allreduce_times`).
    ``sp`` may be an array."""
    if not gpu.nvls:
        return False
    if axis == "tp":
        return np.where(sp, False, True)
    if axis == "dp":
        return np.where(zero == 0, True, False)
    return False


def _sp(plan) -> bool:
    return bool(plan.train and plan.train.sequence_parallel and plan.mesh.tp > 1)


def axis_groups(cp: int) -> dict:
    """The rank-map group each axis's collectives run over (the dp reduction spans dp × cp)."""
    return {"tp": "tp", "cp": "cp", "dp": ("dp", "cp") if cp > 1 else "dp", "pp": "pp", "ep": "ep"}


def _critical(stages):
    """The stage whose microbatch takes longest: it sets the pipeline's pace."""
    return max(stages, key=lambda s_: (s_.time_per_microbatch, s_.flops_per_microbatch))


def _comm_times(plan, comm: dict, rm, bw: dict, kind: dict, calls: dict, local: dict) -> tuple[dict, dict, dict]:
    """Seconds, link and algorithm of each axis's communication (:func:`parc.cost.comm.axis_time`);
    fills ``local`` with the members of each axis's group in one node."""
    mesh, cp = plan.mesh, plan.mesh.cp
    sizes = {"tp": mesh.tp, "cp": cp, "pp": mesh.pp, "ep": mesh.ep, "dp": mesh.dp * cp}
    axis_sizes = {**sizes, "dp": mesh.dp}
    lp = link_params(plan.profile, bw, kind)
    ctime, clink, algo = {}, {}, {}
    for ax, g in axis_groups(cp).items():
        n = sizes[ax]
        if n <= 1 or (ax == "ep" and not plan.model.is_moe):
            clink[ax], ctime[ax], algo[ax] = None, 0.0, None
            continue
        clink[ax] = rm.link(g)
        local[ax] = 1 if (ax == "dp" and zero3_flat(plan)) else members_per_node(g, axis_sizes, rm.domains_spanned)
        t, a = axis_time(ax, comm[ax], n, calls[ax], local[ax], lp["intra_node"], lp.get("inter_node"),
                         nvls_allreduce(plan.cluster.gpu, ax, _sp(plan), _zero(plan)))
        ctime[ax], algo[ax] = float(t), ALGORITHMS[int(a)]
    return ctime, clink, algo


def members_per_node(group, sizes: dict, spanned) -> int:
    """How many members of a group of ``group`` (an axis, or a tuple of axes) one node, or one
    NVLink domain where it spans nodes, holds: size // domains it spans, per axis, multiplied over
    a tuple's axes (each axis's members in a domain combine with the others'). ``spanned(axis)``
    gives the domains an axis's groups touch (:meth:`parc.model.rankmap.RankMap.domains_spanned`)."""
    out = 1
    for ax in ((group,) if isinstance(group, str) else group):
        out *= max(1, sizes[ax] // spanned(ax))
    return out


def _calls(plan, stage, train: bool) -> dict:
    """Collectives per step (training) or per decoded token (serving) on each axis."""
    if train:
        sch = plan.schedule
        share = schedules.microbatch_share(sch.pipeline)          # the layers each microbatch passes
        calls = comm_calls(stage.layers * share, stage.moe_layers * share, sch.microbatches or 0, sch.virtual_stages,
                           plan.mesh.cp, plan.train.recompute)
        if _zero(plan) >= 3:   # a gather for the forward, one for the backward and a reduce-scatter, per layer
            calls["dp"] = 3 * stage.layers * share * zero3_passes(3, plan.mesh.pp, sch.microbatches or 0,
                                                                  framework(plan.train.framework))
        return calls
    return serving_calls(stage.layers, stage.moe_layers)


def _estimate(plan, efficiency: float) -> Estimate:
    from parc.model.rankmap import RankMap

    m, mesh, cl, sch = plan.model, plan.mesh, plan.cluster, plan.schedule
    train = plan.mode == "train" and plan.train is not None
    p, v = mesh.pp, sch.virtual_stages
    mb = (sch.microbatches or 0) if train else 0
    rm = RankMap(plan)
    bw, kind, assumed = links(cl, plan.world_size)
    notes = []
    if assumed:
        notes.append("the cluster gives no inter_node link; assuming 100Gb/s ethernet "
                     f"({ASSUMED_INTER_NODE_BW / 1e9:.1f} GB/s per GPU)")
    per = _train_state(plan) if train else None
    act_dense = layer_activation_bytes(plan, moe=False) if train else 0.0
    act_moe = layer_activation_bytes(plan, moe=True) if (train and m.is_moe) else act_dense
    kv_nbytes = kv_element_bytes(m, plan.serve.kv_cache_dtype if plan.serve else "auto")
    rates = stage_rates(m, sch.micro_batch * m.seq_len / mesh.cp, mesh.tp, mesh.etp, mesh.ep, cl.gpu, plan.train,
                        plan.profile, efficiency, bool(plan.train.sequence_parallel) and mesh.tp > 1) if train else None
    stages = [_stage(plan, lay, train, per, (act_dense, act_moe), kv_nbytes, rates) for lay in stage_layouts(plan)]
    kv_tok, kv_cap, max_seqs = _serving_kv(plan, stages) if not train else (0, 0, 0)
    most = max(range(len(stages)), key=lambda i: (stages[i].memory.total, -i))
    comm = _comm(plan, stages, most, train, per)
    crit = _critical(stages) if train else stages[most]
    local = {}
    ctime, clink, algo = _comm_times(plan, comm, rm, bw, kind, _calls(plan, crit, train), local)
    if not train and mesh.dcp > 1:   # decode context parallel: inside the tp group, on its link
        lp = link_params(plan.profile, bw, kind)
        clink["dcp"], algo["dcp"] = clink.get("tp") or "intra_node", "ring"
        ctime["dcp"] = float(p2p_time(comm["dcp"], 2 * crit.layers, lp[clink["dcp"]]))
    tokens = sch.global_batch * m.seq_len if train else 0
    mflops = model_flops(m, tokens) if train else 0.0
    hflops = mflops + recompute_flops(m, tokens, plan.train.recompute) if train else 0.0
    bub = schedules.bubble(sch.pipeline, p, mb, v) if train else 0.0
    compute = step = mfu = tps = opt = 0.0
    exposed = {}
    if train and mb:
        gemm, attn = crit.gemm_time_per_microbatch * mb, crit.attention_time_per_microbatch * mb
        memb = crit.memory_time_per_microbatch * mb
        compute = gemm + attn + memb
        gather = ctime["dp"] * comm["dp_gather"] / comm["dp"] if comm["dp"] else 0.0
        exposed = exposed_comm(ctime, gemm, attn, ctime["dp"] - gather, gather, mb, plan.train, plan.profile.overlap,
                               memory=memb, zero3=_zero(plan) >= 3, cp=mesh.cp,
                               cp_gathered=cp_gathered_share(context_parallel(plan.train.framework), plan.train.precision))
        exposed = {ax: float(t) for ax, t in exposed.items()}
        owned = stages[most].memory.optimizer / per.optimizer if per.optimizer else 0.0
        opt = float(optimizer_bytes(owned, per) * rates["per_hbm_byte"])
        step = float(step_time(compute, exposed, bub)) + opt
        mfu = mflops / (step * plan.world_size * cl.gpu.flops) if step else 0.0   # on the BF16 peak
        tps = tokens / step if step else 0.0
    est = Estimate(
        mode=plan.mode, world_size=plan.world_size,
        mesh={"order": list(mesh.order), "pp": p, "dp": mesh.dp, "cp": mesh.cp, "tp": mesh.tp, "ep": mesh.ep,
              "etp": mesh.etp},
        params_total=param_count(m), stages=stages, most_loaded_stage=most, microbatches=mb,
        bubble_fraction=bub, inflight_microbatches=stages[most].inflight if train else 0.0,
        activation_bytes_per_layer=act_moe if (m.is_moe and m.moe_every == 1) else act_dense,
        tokens_per_step=tokens, model_flops_per_step=mflops,
        hardware_flops_per_step=hflops, compute_time=compute, step_time=step, mfu=mfu,
        tokens_per_second=tps, comm_bytes=comm, comm_time=ctime, comm_link=clink, link_bandwidth=bw,
        link_kind=kind, assumed_inter_node=assumed, efficiency=efficiency, state_bytes=per,
        comm_algorithm=algo, comm_exposed=exposed, comm_local=local, optimizer_time=opt,
        gemm_peak=cl.gpu.peak(plan.train.precision) if train else cl.gpu.flops,
        gemm_ceilings={k: peak * e / cl.gpu.peak(k) for k, (peak, e)
                       in gemm_ceilings(cl.gpu, plan.train, plan.profile, efficiency).items()} if train else {},
        kv_bytes_per_token=kv_tok, kv_capacity_tokens=kv_cap, max_concurrent_seqs=max_seqs,
        rank_map=_rank_map(plan, rm), notes=notes, plan=plan)
    return est


def _rank_map(plan, rm) -> dict:
    """The rank map's summary; with a cluster topology also ``physical_gpu``, the GPU each local
    rank runs on under the launch's device order (:func:`parc.model.topology.physical_gpus`)."""
    from parc.model.topology import physical_gpus

    out = rm.summary()
    if plan.cluster.topology is not None:
        out["physical_gpu"] = physical_gpus(plan)
    return out
