"""The resolved, typed plan.

Plain slotted dataclasses keep ``parc check`` fast to start; pydantic validates them at
the boundaries where data comes from outside (a plan JSON read back by the runtime, the
JSON Schema printed by ``parc schema``) through :func:`plan_adapter`. Every value keeps
the span it came from in :attr:`Plan.spans`, keyed by its path (``"mesh.tp"``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal, Optional, Union

from parc.language.diagnostics import Span
from parc.model.dims import ParallelDims
from parc.model.topology import Topology


@dataclass(slots=True)
class Model:
    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    head_dim: Optional[int]
    vocab: int
    params: int
    dtype: str = "bf16"                   # how the served model's GEMMs run
    seq_len: int = 4096
    tied_embeddings: bool = False
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    position: str = "rope"
    bias: bool = False
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    moe_every: int = 1
    first_k_dense: int = 0                # the first k layers keep a dense MLP (DeepSeek first_k_dense_replace)
    # multi-head latent attention (DeepSeek-V2/V3), named as the Hugging Face config: MLA when kv_lora_rank > 0
    q_lora_rank: int = 0                  # 0: queries come from one h × heads·(nope + rope) projection
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0                   # multi-token-prediction modules (DeepSeek-V3 num_nextn_predict_layers)
    qkv_bias: bool = False                # biases on q, k and v only (Qwen2/2.5); ``bias`` puts them everywhere
    qk_norm: bool = False                 # an RMSNorm over each query and key head (Qwen3 q_norm, k_norm)
    attention_sinks: bool = False         # one learned sink logit per head and layer (gpt-oss)
    # local attention: a local layer attends to (and caches) at most the last attention_window tokens
    # (sliding window, gpt-oss) or its own chunk of that many (Llama 4 attention_chunk_size)
    attention_window: int = 0             # 0: every layer attends to the whole context
    global_every: int = 0                 # with a window: every n-th layer stays global (0: none does)
    local_attention: str = "sliding"      # sliding (a window of recent tokens) | chunked (its own chunk)
    # hybrid: some layers keep a fixed-size recurrent state (Mamba, Gated DeltaNet or other linear
    # attention) instead of a KV cache (vLLM's ModelConfig.is_hybrid); the engines size their KV
    # blocks by it. The memory model still counts every layer's KV cache as attention's.
    hybrid: bool = False
    rope_theta: int = 10000               # RoPE base frequency (Megatron-LM --rotary-base)
    max_positions: Optional[int] = None   # the longest sequence the model was built for, when known
    checkpoint_format: str = "bf16"       # how the checkpoint stores its weights (data/checkpoints.toml)
    rope_scaling: str = "none"            # RoPE scaling type (rope_scaling.rope_type): parc.model.rope
    rope_factor: float = 1.0              # its factor
    rope_original_positions: Optional[int] = None   # its original_max_position_embeddings
    rope_mscale: Optional[float] = None             # YaRN's mscale (rope_scaling.mscale), where stated
    rope_mscale_all_dim: Optional[float] = None     # YaRN's mscale_all_dim, where stated
    norm_eps: Optional[float] = None                # every norm's epsilon (rms_norm_eps), where stated
    # the MoE router (Hugging Face scoring_func, n_group, topk_group, topk_method noaux_tc,
    # routed_scaling_factor, norm_topk_prob): Megatron-LM's --moe-router-* arguments
    router_score: str = "softmax"                   # softmax | sigmoid
    router_groups: int = 0                          # group-limited routing: groups (0: none)
    router_group_topk: int = 0                      # and the groups kept per token
    router_expert_bias: bool = False                # auxiliary-loss-free balancing's per-expert bias
    router_scale: Optional[float] = None            # the routed experts' scaling factor, where stated
    router_pre_softmax: bool = False                # softmax over all experts before the top-k
    preset: Optional[str] = None

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def global_layers(self) -> int:
        """Layers that attend to (and cache) the whole context (:func:`parc.model.params.is_local_layer`)."""
        from parc.model.params import local_layers_between

        return self.layers - local_layers_between(self, 0, self.layers)

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (:func:`parc.model.params.is_moe_layer`)."""
        from parc.model.params import moe_layers_between

        return moe_layers_between(self, 0, self.layers)


# The fraction of the dense peak the largest GEMMs reach on a GPU no matmul benchmark measured:
# the H100 SXM's (794.5 of 989 TFLOPS), the median of the NVIDIA GPUs stas00/ml-engineering's
# "Maximum Achievable Matmul FLOPS comparison table" lists (A100 SXM 86.9%, GH200 83.8%, A100 PCIe
# 81.1%, H100 SXM 80.3%, B300 78.6%, B200 77.6%, GB200 72.9%).
DEFAULT_MATMUL_EFFICIENCY = 0.803


@dataclass(slots=True)
class GPU:
    name: str
    memory: int
    flops: float
    hbm_bandwidth: float = 0.0
    nvlink_bandwidth: float = 0.0
    pcie_bandwidth: float = 0.0
    fp8_flops: float = 0.0     # dense FP8 FLOP/s (0: no FP8 tensor cores; FP8 GEMMs run at ``flops``)
    nvls: bool = False         # NVLink SHARP: all-reduce inside a node reduces in the switch
    arch: str = ""             # ampere | hopper | blackwell | ada | cdna3 | cdna4 ("": not known)
    matmul_efficiency: float = 0.0       # measured max achievable matmul FLOP/s over the BF16 peak (0: none)
    fp8_matmul_efficiency: float = 0.0   # the same for FP8 (0: none; the BF16 fraction is taken)
    tdp: float = 0.0           # watts the datasheet's peaks hold at (0: not known)
    power_limit: float = 0.0   # watts the cluster caps the board at (0: none; ``flops`` is already the capped peak)

    @property
    def gemm_efficiency(self) -> float:
        """The fraction of the BF16 peak the largest GEMMs reach: the measured one, else
        :data:`DEFAULT_MATMUL_EFFICIENCY`."""
        return self.matmul_efficiency or DEFAULT_MATMUL_EFFICIENCY

    @property
    def fp8_gemm_efficiency(self) -> float:
        """The same for FP8 GEMMs against the FP8 peak."""
        return self.fp8_matmul_efficiency or self.gemm_efficiency

    def fp8_peak_on_bf16_scale(self, kernel_efficiency: float | None = None) -> float:
        """The FP8 peak scaled so that ``gemm_efficiency`` of it is what FP8 GEMMs reach: the FP8
        peak × (``kernel_efficiency``, else the GPU's FP8 matmul benchmark) / the BF16 one. A
        profile that scales BF16's efficiency scales FP8's alike."""
        return self.fp8_flops * (kernel_efficiency or self.fp8_gemm_efficiency) / self.gemm_efficiency

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s of the GEMMs of a plan trained in ``precision``: the FP8 peak for
        ``fp8`` where the GPU has one, else the BF16 peak (``flops``)."""
        return self.fp8_flops if (precision == "fp8" and self.fp8_flops > 0) else self.flops


@dataclass(slots=True)
class Link:
    kind: str          # nvlink | pcie | infiniband | ethernet | xgmi | roce | efa
    bandwidth: float   # bytes/s per GPU per direction


@dataclass(slots=True)
class NodeGroup:
    """Nodes of one kind in a heterogeneous cluster (``group "name" { ... }`` in a cluster)."""
    name: str
    nodes: int
    gpus_per_node: int
    gpu: GPU
    intra_node: Optional[Link] = None


@dataclass(slots=True)
class Cluster:
    name: str
    nodes: int
    gpus_per_node: int
    gpu: GPU
    intra_node: Optional[Link] = None
    inter_node: Optional[Link] = None
    socket_ifname: Optional[str] = None   # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    # framework overheads a run pays on every GPU; None takes parc/model/data/overheads.toml
    cuda_context: Optional[int] = None    # bytes: CUDA context, loaded kernels, library workspaces
    nccl_buffers: Optional[int] = None    # bytes per NCCL communicator the rank joins
    fragmentation: Optional[float] = None  # allocator fragmentation, a fraction of the activations
    nvlink_domain: Optional[int] = None   # GPUs sharing one NVLink fabric (GB200 NVL72: 72); None: a node
    topology: Optional[Topology] = None   # inside a node: NVLink islands, NUMA nodes, NICs (parc topo)
    # node groups of different kinds; the fields above then describe the slowest (parc.resolve.topology)
    groups: list[NodeGroup] = field(default_factory=list)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain, the group the intra-node link reaches: ``nvlink_domain`` where the
        cluster gives it (a GB200 NVL72 rack: 18 nodes of 4 GPUs on one NVLink fabric), else a node.
        The rank map (:class:`parc.model.rankmap.RankMap`) asks every "does this group stay on the
        fast link" question against it; a node stays a host (launch scripts, nnodes)."""
        return self.nvlink_domain or self.gpus_per_node


@dataclass(slots=True)
class Mesh:
    order: list[str]
    pp: int = 1
    dp: int = 1
    cp: int = 1
    tp: int = 1
    ep: int = 1
    etp: int = 1
    dcp: int = 1                 # decode context parallel: splits the KV cache inside tp, adds no GPUs
    auto: Optional[str] = None   # the axis that was `auto`, if any

    def size(self, axis: str) -> int:
        return getattr(self, axis)

    @property
    def product(self) -> int:
        """The GPUs the mesh spans (:attr:`ParallelDims.world`)."""
        return ParallelDims(pp=self.pp, dp=self.dp, cp=self.cp, tp=self.tp).world


@dataclass(slots=True)
class ModulePlacement:
    pattern: str
    style: str              # colwise | rowwise | sequence | experts | replicate
    axis: Optional[str]


@dataclass(slots=True)
class Placement:
    links: dict[str, str] = field(default_factory=dict)   # axis -> intra_node | inter_node
    layers_mode: str = "even"                              # even | balanced | explicit
    layers: Optional[list[int]] = None                     # per (virtual) stage, when known
    modules: list[ModulePlacement] = field(default_factory=list)


@dataclass(slots=True)
class Schedule:
    pipeline: str = "1f1b"
    virtual_stages: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    microbatches: Optional[int] = None   # None when global_batch is not divisible


@dataclass(slots=True)
class Train:
    optimizer: str = "adam"
    zero: int = 0
    sequence_parallel: bool = False
    recompute: str = "none"
    precision: str = "bf16"
    main_grads: str = "fp32"
    optimizer_state: str = "fp32"
    recompute_modules: list[str] = field(default_factory=list)   # Megatron-LM --recompute-modules
    offload_layers: int = 0               # layers whose activations go to host memory (--cpu-offloading-num-layers)
    fp8_weight_cache: bool = True         # FP8 training keeps FP8 weight copies across microbatches
    fp8_recipe: Optional[str] = None      # FP8 scaling recipe (None: the framework's default)
    fp8_param_gather: bool = False        # linear weights kept and gathered in FP8 (Megatron-LM --fp8-param-gather)
    # Which communication runs under compute (docs/language.md gives each framework's default):
    overlap_grad_reduce: bool = True     # DP gradient reduce-scatter under the last backward
    overlap_param_gather: bool = False   # DP parameter all-gather under the next forward
    tp_comm_overlap: bool = False        # TP collectives split and pipelined with their GEMMs
    ep_comm_overlap: bool = False        # EP all-to-all under another microbatch's compute
    flash_attention: bool = True         # false: the attention core materialises its scores (parc.cost.gemm)
    # How the run was implemented (parc/model/data/frameworks.toml): the resolver fills the defaults
    framework: Optional[str] = None      # megatron | torchtitan | deepspeed (None: from the targets)
    compile: bool = False                # torch.compile: an eager framework's elementwise kernels fused


@dataclass(slots=True)
class Serve:
    # None: left to the engine (parc.cost.engine.limits: its own default for the pinned release)
    max_model_len: Optional[int] = None
    gpu_memory_utilization: Optional[float] = None   # None: the engine's own (parc.cost.engine.memory_fraction)
    max_num_seqs: Optional[int] = None     # as the engine means it (SGLang: over all attention-DP ranks)
    max_num_batched_tokens: Optional[int] = None   # tokens one step schedules per dp rank (chunked prefill)
    kv_cache_dtype: str = "auto"
    dp_attention: bool = False             # dp ranks are one engine: data-parallel attention, experts over dp·tp
    eplb: bool = False                     # expert-parallel load balancing
    redundant_experts: int = 0             # extra expert copies EPLB places
    eplb_window: Optional[int] = None      # steps of routing statistics (engine default when None)
    eplb_interval: Optional[int] = None    # steps between re-placements (engine default when None)
    kv_transfer: Optional[str] = None      # prefill → decode KV connector of a disaggregated plan
    prompt_tokens: Optional[int] = None    # workload for explain's estimates (None: derived defaults)
    output_tokens: Optional[int] = None
    concurrency: Optional[int] = None
    request_rate: Optional[float] = None   # requests per second arriving at random (Poisson), instead of concurrency
    two_batch_overlap: bool = False        # two micro-batches overlap one's all-to-all with the other's compute
    speculative: Optional[str] = None      # mtp | eagle | eagle3: draft tokens verified in one step
    speculative_tokens: Optional[int] = None   # draft tokens per step (default 1 with `speculative`)
    acceptance_rate: Optional[float] = None    # the chance each draft token is accepted (stated, never assumed)
    draft_model: Optional[str] = None      # the EAGLE draft's Hugging Face id or path


@dataclass(slots=True)
class Pool:
    """One side of a prefill/decode-disaggregated serving plan: ``instances`` engines, each laid
    out as ``mesh`` (the `serve` block's `prefill { ... }` or `decode { ... }`)."""
    name: str                              # prefill | decode
    mesh: Mesh
    instances: int = 1
    max_num_seqs: Optional[int] = None     # the pool's own (else the serve block's)

    @property
    def gpus(self) -> int:
        """GPUs of every instance of the pool (:func:`parc.model.pools.instance_gpus` each)."""
        from parc.model.pools import instance_gpus

        return self.instances * instance_gpus(self.mesh)


@dataclass(slots=True)
class Profile:
    """How close a cluster comes to its datasheet: the efficiency factors the step-time model
    applies, fitted to measured runs by ``parc calibrate`` and kept in a `profile` block a cluster
    file can ``use``. These defaults stand for a cluster nobody has measured; docs/language.md
    gives each its source.

    ``gemm_efficiency`` and ``gemm_half_size`` (:mod:`parc.cost.gemm`): a GEMM whose smallest
    side is d runs at ``gemm_efficiency · d / (d + gemm_half_size)`` of peak. ``gemm_efficiency``
    left out (None) is the GPU's measured maximum achievable matmul rate
    (:attr:`GPU.gemm_efficiency`, a microbenchmark); the resolver fills it in. ``gemm_half_size``
    is fitted by ``bench/accuracy_fit.py`` on the fit rows of ``bench/accuracy_cases.toml`` and on
    nothing else (docs/accuracy.md).

    ``framework`` and ``gpu`` name what a calibrated profile was fitted on: the runs' framework and
    GPU preset (``parc calibrate`` writes them; P518 warns when a plan of another framework or GPU
    uses the profile)."""
    name: Optional[str] = None
    framework: Optional[str] = None       # the framework of the runs it was fitted on (parc calibrate)
    gpu: Optional[str] = None             # the GPU those runs ran on
    gemm_efficiency: Optional[float] = None   # fraction of peak FLOP/s the largest GEMMs sustain (None: the GPU's)
    gemm_half_size: float = 375.0         # smallest GEMM side (after sharding) that runs at half that
    hbm_efficiency: float = 0.6           # fraction of HBM bandwidth memory-bound kernels reach
    intra_node_efficiency: float = 1.0    # fraction of the intra-node link's bandwidth a collective reaches
    inter_node_efficiency: float = 1.0    # likewise between nodes
    overlap: float = 0.56                 # fraction of the communication the plan overlaps that is hidden


@dataclass(slots=True)
class Target:
    name: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Plan:
    file: str
    model: Model
    cluster: Cluster
    mesh: Mesh
    placement: Placement
    schedule: Schedule
    mode: Literal["train", "serve"]
    train: Optional[Train] = None
    serve: Optional[Serve] = None
    targets: dict[str, Target] = field(default_factory=dict)
    profile: Profile = field(default_factory=Profile)
    pools: list[Pool] = field(default_factory=list)   # prefill and decode, when disaggregated
    spans: dict[str, Span] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)   # the spec and every file it imports
    # the spec's path relative to the root, '/'-separated: the same however the path was spelled
    # and wherever parc ran (plan.json's `file`); empty where the plan did not come from a file
    source: str = ""
    # the side of a prefill/decode pair an instance of a pool serves (parc.model.pools.pool_plan
    # sets it): prefill | decode; empty for the spec's own plan
    role: str = ""

    @property
    def world_size(self) -> int:
        """The GPUs the plan uses: the mesh's, or every instance of every pool's."""
        return sum(p.gpus for p in self.pools) if self.pools else self.mesh.product

    def target_settings(self, name: str) -> dict[str, Any]:
        """A target block's settings, with the keys the target inherits (its target.toml's
        ``inherits``: slurm and kubernetes take the `target torchrun` block's entry point,
        arguments and restarts) where its own block leaves them out, so a spec names its
        script once."""
        from parc.model.targets import inherits

        own = dict(self.targets[name].settings) if name in self.targets else {}
        source = inherits(name)
        if source and source[0] in self.targets:
            other = self.targets[source[0]].settings
            own.update({k: other[k] for k in source[1] if k not in own and k in other})
        return own

    def span(self, *paths: str) -> Span:
        """The span of the first of ``paths`` that has one (falling back to the file's top)."""
        for p in paths:
            s = self.spans.get(p)
            if s is not None:
                return s
            # a field without its own span points at its block
            blk = p.split(".", 1)[0]
            s = self.spans.get(blk)
            if s is not None and p == paths[-1]:
                return s
        return Span.point(self.file)

    def to_dict(self) -> dict:
        """The plan as plain data (no spans): what ``--target json`` and the runtime read."""
        d = {k: v for k, v in asdict(self).items() if k not in ("spans", "files", "source", "role")}
        d["file"] = self.source or self.file
        d["world_size"] = self.world_size
        for k, empty in (("topology", None), ("groups", [])):   # present only where the spec says them
            if d["cluster"].get(k) == empty:
                del d["cluster"][k]
        return d


@lru_cache(maxsize=1)
def plan_adapter():
    """A pydantic TypeAdapter that validates plan data and gives its JSON Schema."""
    from pydantic import TypeAdapter

    return TypeAdapter(_PlanData)


# The shape of ``Plan.to_dict()`` for validation; the runtime reads plans through it.
@dataclass
class _PlanData:
    file: str
    model: Model
    cluster: Cluster
    mesh: Mesh
    placement: Placement
    schedule: Schedule
    mode: Literal["train", "serve"]
    world_size: int
    train: Optional[Train] = None
    serve: Optional[Serve] = None
    targets: dict[str, Target] = field(default_factory=dict)
    profile: Profile = field(default_factory=Profile)
    pools: list[Pool] = field(default_factory=list)


def plan_from_dict(data: dict) -> Plan:
    """Validate plan data (for example from a compiled ``plan.json``) and rebuild the plan."""
    p = plan_adapter().validate_python(data)
    plan = Plan(file=p.file, model=p.model, cluster=p.cluster, mesh=p.mesh, placement=p.placement,
                schedule=p.schedule, mode=p.mode, train=p.train, serve=p.serve, targets=p.targets,
                profile=p.profile, pools=p.pools)
    if plan.world_size != p.world_size:
        raise ValueError(f"world_size {p.world_size} does not match the mesh ({plan.world_size})")
    return plan


def plan_json_schema() -> dict:
    return plan_adapter().json_schema()

