"""The cost model: pure functions of the plan, each with the published formula it follows."""
from __future__ import annotations

from dataclasses import dataclass, field

from parc.model.plan import Model
from parc.model import schedules


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


# =============================================================================================
# Per-GPU parameters, memory, communication and time.
#
# Conventions (bytes are bytes, times seconds, FLOP/s and bytes/s per GPU per direction):
# * "stage" is a pipeline rank (pp coordinate); "chunk" a virtual stage, an entry of
#   ``placement.layers``. Loop placement gives stage i the chunks i, i+pp, i+2pp, ...; V placement
#   (``dualpipe_v``, and ``zero_bubble`` with two chunks per rank, as torch.distributed.pipelining
#   runs them) gives stage i the chunks i and 2·pp-1-i.
# * Chunk 0 holds the token embedding, the last chunk the final norm and the output head.
# =============================================================================================

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# A multi-node cluster that does not say what connects its nodes: 100 Gb/s ethernet.
ASSUMED_INTER_NODE_BW = 100e9 / 8
# Fraction of the datasheet's dense peak that large-model training kernels sustain. Measured
# hardware-FLOPs utilisation of well-tuned runs sits at 0.44-0.57 (Korthikanti et al. 2022 Table 5,
# Narayanan et al. 2021 Table 1) of which communication and bubbles take part; 0.6 for the
# kernels alone keeps parc's step times close to those runs. Pass ``efficiency`` to change it.
DEFAULT_EFFICIENCY = 0.6

AXES = ("tp", "cp", "dp", "pp", "ep")
PARTS = ("embedding", "attention", "mlp", "experts", "router", "norms", "output")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (bf16 2, fp32 4, fp8 1)."""
    return DTYPE_BYTES.get(dtype, 2)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def head_dim(m: Model) -> int:
    return m.head_dim or m.hidden // m.heads


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads each TP rank stores: kv/tp, or one replicated head once tp > kv_heads
    (vLLM ``ModelConfig.get_num_kv_heads`` = max(1, kv // tp); Megatron-LM likewise)."""
    return max(1, kv_heads // tp)


# --- pipeline layout ---------------------------------------------------------------------------

def uses_v_placement(pipeline: str, chunks_per_stage: int) -> bool:
    """V placement for DualPipeV and for zero-bubble with two chunks per rank (ZBV)."""
    return chunks_per_stage == 2 and pipeline in ("dualpipe_v", "zero_bubble")


def layer_split(plan) -> list[int]:
    """Layers per chunk: ``placement.layers``, or the most even split when it is not known."""
    pl = plan.placement
    stages = max(1, plan.mesh.pp * plan.schedule.virtual_stages)
    if pl.layers and sum(pl.layers) == plan.model.layers and len(pl.layers) % plan.mesh.pp == 0:
        return list(pl.layers)
    L = plan.model.layers
    base, extra = divmod(L, stages)
    return [base + (1 if i >= stages - extra else 0) for i in range(stages)]


def stage_chunks(plan, stage: int, split: list[int] | None = None) -> list[int]:
    """The chunk indices pipeline rank ``stage`` holds (loop or V placement)."""
    split = split if split is not None else layer_split(plan)
    pp = plan.mesh.pp
    per = max(1, len(split) // pp)
    if uses_v_placement(plan.schedule.pipeline, per):
        return [stage, 2 * pp - 1 - stage]
    return [stage + k * pp for k in range(per)]


def _chunk_ranges(split: list[int]) -> list[tuple[int, int]]:
    out, start = [], 0
    for n in split:
        out.append((start, start + n))
        start += n
    return out


def _moe_in_range(m: Model, a: int, b: int) -> int:
    """How many of layers a..b-1 are MoE layers ((i+1) % moe_every == 0)."""
    if not m.is_moe:
        return 0
    e = m.moe_every
    return b // e - a // e


@dataclass(slots=True)
class StageLayout:
    stage: int
    chunks: list[int]
    layers: int            # transformer layers on this pipeline rank
    moe_layers: int
    embedding: bool        # holds the token embedding (chunk 0)
    head: bool             # holds the final norm and output head (last chunk)


def stage_layouts(plan) -> list[StageLayout]:
    """What each pipeline rank holds, from ``placement.layers`` and the schedule's placement."""
    split = layer_split(plan)
    ranges = _chunk_ranges(split)
    last = len(split) - 1
    out = []
    for s in range(plan.mesh.pp):
        chunks = stage_chunks(plan, s, split)
        layers = sum(split[c] for c in chunks)
        moe = sum(_moe_in_range(plan.model, *ranges[c]) for c in chunks)
        out.append(StageLayout(s, chunks, layers, moe, 0 in chunks, last in chunks))
    return out


# --- parameters on one rank ---------------------------------------------------------------------

def _mlp_tensors(m: Model, width: int, part: str, expert: bool, count: int) -> list[tuple]:
    """Tensors of ``count`` MLPs of inner ``width`` (already split), as (part, expert, count, dim0, numel)."""
    h = m.hidden
    out = []
    mats = 3 if m.mlp == "swiglu" else 2
    out.append((part, expert, count * (mats - 1), width, width * h))     # gate/up (or fc1): [w, h]
    out.append((part, expert, count, h, h * width))                      # down (or fc2): [h, w]
    if m.bias:
        out.append((part, expert, count * (mats - 1), width, width))     # column-parallel biases: split
        out.append((part, expert, count, h, h))                          # row-parallel bias: replicated
    return out


def _norm_tensors(m: Model, count: int) -> list[tuple]:
    n = 1 if m.norm == "rmsnorm" else 2
    return [("norms", False, count * n, m.hidden, m.hidden)]


def stage_tensors(plan, layout: StageLayout) -> list[tuple]:
    """The tensors one rank of pipeline stage ``layout`` holds before ZeRO-3 sharding, grouped by
    shape: ``(part, is_expert, count, dim0, numel)``. See :func:`params_on_rank` for the convention."""
    m, mesh = plan.model, plan.mesh
    t, h, d = mesh.tp, m.hidden, head_dim(m)
    aq = _cdiv(m.heads, t) * d
    kvq = kv_heads_per_gpu(m.kv_heads, t) * d
    out: list[tuple] = []
    L, moe = layout.layers, layout.moe_layers
    dense = L - moe
    if L:
        out += [("attention", False, L, aq, aq * h),            # q: [a/tp·d, h]
                ("attention", False, 2 * L, kvq, kvq * h),      # k, v: [kv/tp·d, h]
                ("attention", False, L, h, h * aq)]             # o: [h, a/tp·d]
        if m.bias:
            out += [("attention", False, L, aq, aq), ("attention", False, 2 * L, kvq, kvq),
                    ("attention", False, L, h, h)]
        out += _norm_tensors(m, 2 * L)
    if dense:
        out += _mlp_tensors(m, _cdiv(m.ffn_hidden, t), "mlp", False, dense)
    if moe:
        out.append(("router", False, moe, m.experts, m.experts * h))                    # [E, h]
        local = _cdiv(m.experts, mesh.ep)
        out += _mlp_tensors(m, _cdiv(m.moe_ffn_hidden, mesh.etp), "experts", True, moe * local)
        if m.shared_experts:
            out += _mlp_tensors(m, _cdiv(m.moe_ffn_hidden, t), "mlp", False, moe * m.shared_experts)
    vrows = _cdiv(m.vocab, t)
    if layout.embedding:
        out.append(("embedding", False, 1, vrows, vrows * h))
        if m.position == "learned":
            out.append(("embedding", False, 1, m.seq_len, m.seq_len * h))
    if layout.head:
        out += _norm_tensors(m, 1)
        # the output head is the embedding itself only when one rank holds both and they are tied
        if not (m.tied_embeddings and layout.embedding):
            out.append(("output", False, 1, vrows, vrows * h))
    return out


def _chunk_numel(dim0: int, numel: int, n: int, k: int) -> int:
    """Elements in chunk ``k`` of ``torch.chunk(tensor, n, dim=0)``: ceil-sized chunks, the last
    ones short or absent."""
    if n <= 1:
        return numel
    c = _cdiv(dim0, n)
    rows = max(0, min(c, dim0 - k * c))
    return rows * (numel // dim0)


def _shard_groups(plan) -> tuple[int, int]:
    """(dense, expert) ZeRO sharding group sizes: dp for dense parameters, the expert-data-parallel
    group dp·cp·tp/(ep·etp) for expert parameters."""
    mesh = plan.mesh
    edp = max(1, (mesh.dp * mesh.cp * mesh.tp) // max(1, mesh.ep * mesh.etp))
    return mesh.dp, edp


def _zero(plan) -> int:
    return plan.train.zero if plan.mode == "train" and plan.train else 0


def params_by_part(plan, rank: int = 0, *, sharded: bool = True) -> dict[str, int]:
    """Parameters ``rank`` holds, by part (see :func:`params_on_rank`); ``sharded=False`` gives
    the count before ZeRO-3 sharding."""
    from parc.model.rankmap import RankMap

    rm = RankMap(plan)
    c = rm.coords(rank)
    stage = int(c["pp"])
    k_dense = int(c["dp"])
    k_exp = int(rm.expert_coords(rank)["edp"])
    return _stage_parts(plan, stage_layouts(plan)[stage], k_dense, k_exp, sharded)


def _stage_parts(plan, layout: StageLayout, k_dense: int = 0, k_exp: int = 0, sharded: bool = True
                 ) -> dict[str, int]:
    n_dense, n_exp = _shard_groups(plan) if (sharded and _zero(plan) >= 3) else (1, 1)
    parts = dict.fromkeys(PARTS, 0)
    for part, expert, count, dim0, numel in stage_tensors(plan, layout):
        n, k = (n_exp, k_exp) if expert else (n_dense, k_dense)
        parts[part] += count * _chunk_numel(dim0, numel, n, k)
    return parts


def params_on_rank(plan, rank: int) -> int:
    """Parameters held by global ``rank`` under parc's placement convention.

    The runtime builds exactly these tensors; the convention, tensor by tensor (h hidden,
    d head_dim, a heads, kv kv_heads, V vocab, s seq_len, f ffn_hidden, E experts):

    * Pipeline: rank with pp coordinate i holds the layers of its chunks of ``placement.layers``:
      chunks i, i+pp, i+2pp, ... (loop placement), or i and 2·pp-1-i for ``dualpipe_v`` and for
      ``zero_bubble`` with two chunks per rank (V placement, as torch.distributed.pipelining).
      Layer j (0-based) is MoE when the model has experts and (j+1) % moe_every == 0.
    * The rank holding chunk 0 holds the token embedding [ceil(V/tp), h] (vocab split over tp)
      and, for ``position = learned``, the positions [s, h] (replicated).
    * The rank holding the last chunk holds the final norm (replicated) and the output head
      [ceil(V/tp), h], unless embeddings are tied and the same rank holds the embedding (pp = 1,
      or V placement); with tied embeddings on another rank it keeps its own copy (Megatron-LM).
    * Per layer: q [a/tp·d, h]; k and v [kv'·d, h] each with kv' = kv/tp, or 1 replicated head
      once tp > kv; o [h, a/tp·d]; the MLP matrices split over tp (SwiGLU gate and up [f/tp, h],
      down [h, f/tp]; GELU fc1 [f/tp, h], fc2 [h, f/tp]); two norms (RMSNorm weight [h];
      LayerNorm weight and bias [h]), replicated. With ``bias``: column-parallel biases (q, k, v,
      gate, up, fc1) split, row-parallel biases (o, down, fc2: [h]) replicated.
    * MoE layers replace the dense MLP with a router [E, h] (replicated, no bias), E/ep routed
      experts stored as separate MLPs of width moe_ffn_hidden/etp, and ``shared_experts``
      separate MLPs of width moe_ffn_hidden split over tp.
    * With ``zero = 3`` every tensor is further sharded along dim 0 as ``torch.chunk`` does
      (chunk k of ceil(dim0/n)-row chunks; late chunks may be short or empty): dense tensors over
      the dp group (n = dp, k = the rank's dp coordinate), routed-expert tensors over the
      expert-data-parallel group (n = dp·cp·tp/(ep·etp), k = the rank's edp coordinate on
      Megatron-LM's expert grid, see :mod:`parc.model.rankmap`).
    * Dimensions that the mesh does not divide are rounded up (such plans fail ``parc check``).
    """
    return sum(params_by_part(plan, rank).values())


def param_bytes_on_rank(plan, rank: int) -> int:
    """Bytes of the parameters ``rank`` holds: :func:`params_on_rank` × the bytes of the train
    block's ``precision`` (training) or the model's ``dtype`` (serving)."""
    return params_on_rank(plan, rank) * dtype_bytes(_weight_dtype(plan))


def _weight_dtype(plan) -> str:
    if plan.mode == "train" and plan.train:
        return plan.train.precision
    return plan.model.dtype


# --- model state bytes (weights, grads, optimizer) ------------------------------------------------

@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each piece of model state, before any sharding."""
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def state_bytes_per_param(precision: str = "bf16", main_grads: str = "fp32", optimizer_state: str = "fp32",
                          optimizer: str = "adam") -> StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state.

    * ``main_grads = fp32`` is Megatron-LM's convention (``theoretical_memory_usage.py``: 18
      bytes/param without the distributed optimizer): 2 (bf16 weights) + 4 (fp32 main grads) +
      12 (fp32 master weights, Adam momentum and variance).
    * ``main_grads = bf16`` is the ZeRO paper's (Rajbhandari et al. 2020, §3): 2 + 2 + 12 = 16.
    * ``optimizer_state = bf16`` keeps Adam's moments in bf16 with fp32 master weights
      (DeepSeek-V3 §3.3.3): 4 + 2 + 2 = 8 optimizer bytes.
    * ``precision = fp32`` needs no master copy; SGD keeps one moment instead of two.
    """
    w = dtype_bytes(precision)
    g = 4 if main_grads == "fp32" else w
    moment = 4 if optimizer_state == "fp32" else 2
    moments = 1 if optimizer == "sgd" else 2
    master = 0 if w >= 4 else 4
    return StateBytes(w, g, master + moments * moment)


def zero_state_bytes(params: float, zero: int, n: int, per: StateBytes | None = None) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per GPU for ``params`` parameters data-parallel over ``n``
    GPUs under ZeRO stage ``zero`` (Rajbhandari et al. 2020, Figure 1):

    * 0: nothing sharded; 1 (P_os): optimizer / n; 2 (P_os+g): optimizer and grads / n;
      3 (P_os+g+p): everything / n.

    With the ZeRO paper's 16 bytes/param, Ψ = 7.5B and n = 64 this gives 120, 31.4, 16.6 and
    1.9 GB.
    """
    per = per or state_bytes_per_param()
    w, g, o = params * per.weights, params * per.grads, params * per.optimizer
    if zero >= 1:
        o /= n
    if zero >= 2:
        g /= n
    if zero >= 3:
        w /= n
    return w, g, o


def _train_state(plan) -> StateBytes:
    t = plan.train
    return state_bytes_per_param(t.precision, t.main_grads, t.optimizer_state, t.optimizer)


# --- activations -----------------------------------------------------------------------------------

def activation_bytes_per_layer(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
                               recompute: str = "none", cp: int = 1, ffn: int | None = None,
                               mlp: str = "gelu", kv_heads: int | None = None, head_dim: int | None = None,
                               moe: tuple[int, int, int, int] | None = None, flash: bool = False) -> float:
    """Activation bytes one transformer layer stores for one microbatch on one GPU, in 16-bit
    precision (Korthikanti et al. 2022, arXiv:2205.05198, §4 and Table 2):

    ================================= ===========================
    no parallelism                    sbh(34 + 5as/h)
    tensor parallel t                 sbh(10 + 24/t + 5as/(ht))
    TP + sequence parallel            sbh/t · (34 + 5as/h)
    TP + selective recompute          sbh(10 + 24/t)
    TP + SP + selective               34·sbh/t
    full recompute                    2sbh (2sbh/t with SP: the sharded layer input)
    ================================= ===========================

    The 34 splits into 10 that TP leaves replicated (norm inputs 4, QKV and MLP inputs 2+2,
    dropout masks 1+1) and 24 that TP splits: Q, K, V and the output projection's input (2 each)
    and the MLP's inner activations, 4·ffn/h for GELU (Megatron-LM's ``sbh(18 + 4·ffn/h)``
    generalisation). Beyond the paper: GQA shrinks K and V to kv_heads·head_dim, SwiGLU stores
    6·ffn/h (gate, up and their product), context parallelism divides s by cp, and a MoE layer
    (``moe = (top_k, moe_ffn, etp, shared)``) stores each token's routed copy (2h per top-k) and
    its experts' inner activations. ``flash = True`` drops the stored s×s scores (5as²b) as flash
    attention does, which never materialises them; selective recompute then saves nothing more.
    """
    s = s / cp
    d = head_dim or h // a
    kv = kv_heads or a
    ffn = ffn if ffn is not None else 4 * h
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    inner = 4 if mlp == "gelu" else 6
    replicated = 10 * s * b * h
    attn = 2 * s * b * (2 * a * d + 2 * kv * d)
    if moe:
        top_k, f_moe, etp, shared = moe
        mlp_part = (top_k * (inner * s * b * f_moe + 2 * s * b * h) * t / max(1, etp)
                    + shared * inner * s * b * f_moe)
    else:
        mlp_part = inner * s * b * ffn
    parallel = attn + mlp_part
    scores = 0.0 if (recompute == "selective" or flash) else 5 * a * s * s * b
    if sp:
        return (replicated + parallel + scores) / t
    return replicated + (parallel + scores) / t


def layer_activation_bytes(plan, moe: bool = False) -> float:
    """:func:`activation_bytes_per_layer` for the plan's model, micro_batch and train settings,
    with flash attention: every runtime parc targets (Megatron-LM with Transformer Engine,
    torch's scaled_dot_product_attention) uses it, and Megatron-LM's own estimator
    (``theoretical_memory_usage.py``) leaves the s² term out likewise."""
    m, mesh, tr = plan.model, plan.mesh, plan.train
    return activation_bytes_per_layer(
        m.seq_len, plan.schedule.micro_batch, m.hidden, m.heads, t=mesh.tp,
        sp=bool(tr and tr.sequence_parallel and mesh.tp > 1), recompute=tr.recompute if tr else "none",
        cp=mesh.cp, ffn=m.ffn_hidden, mlp=m.mlp, kv_heads=m.kv_heads, head_dim=head_dim(m),
        moe=(m.top_k or 1, m.moe_ffn_hidden, mesh.etp, m.shared_experts) if moe else None, flash=True)


BACKWARD_SHARE = 2 / 3  # of a microbatch's compute: the backward is twice the forward


# --- serving -----------------------------------------------------------------------------------------

def kv_bytes_per_token(layers: int, kv_heads: int, head_dim_: int, nbytes: int, tp: int = 1) -> int:
    """KV cache bytes per token on one GPU: 2 (K and V) · layers · kv_heads' · head_dim · bytes,
    with kv_heads' = max(1, kv_heads // tp): TP splits the KV heads and replicates them once
    tp > kv_heads (Kwon et al. 2023, the vLLM paper; vLLM ``get_num_kv_heads``). A 70B with 80
    layers and 8 KV heads of 128 in fp16 stores 327,680 B per token."""
    return 2 * layers * kv_heads_per_gpu(kv_heads, tp) * head_dim_ * nbytes


def kv_capacity_tokens(capacity: float, utilization: float, weights: float, per_token: float) -> int:
    """Tokens of KV cache that fit: (utilization · memory − weights) / bytes per token, as vLLM
    sizes its block pool (activation workspace and CUDA graphs are not counted)."""
    if per_token <= 0:
        return 0
    return max(0, int((utilization * capacity - weights) // per_token))


# --- communication -------------------------------------------------------------------------------------

def allreduce_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-reduce of ``nbytes`` over ``n`` GPUs: 2(n-1)/n · nbytes
    (a reduce-scatter and an all-gather; Patarasuk & Yuan 2009). One token's activation (hidden
    8192, 2 bytes) all-reduced over TP = 4 moves 24 KB per GPU."""
    return 2 * (n - 1) / n * nbytes if n > 1 else 0.0


def allgather_bytes(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-gather (or reduce-scatter) of ``nbytes``: (n-1)/n · nbytes."""
    return (n - 1) / n * nbytes if n > 1 else 0.0


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
    if cp <= 1:
        return 0.0
    return 3 * (cp - 1) * 2 * tokens_local * kv_width * nbytes


def ep_bytes_per_layer(tokens_local: float, h: int, top_k: int, ep: int, nbytes: int = 2) -> float:
    """Expert-parallel all-to-all per MoE layer: dispatch and combine in the forward and again in
    the backward, each moving tokens·top_k·h elements of which (ep-1)/ep leave the GPU
    (Lepikhin et al. 2020, GShard; DeepSeek-V3 §3.2.2)."""
    if ep <= 1:
        return 0.0
    return 4 * tokens_local * top_k * h * nbytes * (ep - 1) / ep


def dp_bytes(params: float, zero: int, n: int, grad_bytes: float, weight_bytes: float) -> float:
    """Data-parallel bytes per GPU per step for ``params`` parameters over ``n`` GPUs (ZeRO §7):
    zero 0: all-reduce of the gradients, 2(n-1)/n · Ψ·grad_bytes; zero 1-2: reduce-scatter of
    the gradients plus all-gather of the updated weights; zero 3: all-gather of the weights for
    the forward and again for the backward plus the gradients' reduce-scatter (3Ψ against 2Ψ).
    Gradients are reduced once per step (accumulated over microbatches first)."""
    if n <= 1:
        return 0.0
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


# --- FLOPs ---------------------------------------------------------------------------------------------

def active_matmul_params(m: Model) -> int:
    """Parameters one token passes through in matmuls: every layer's attention and MLP (top_k of
    the routed experts, all shared experts, the router) and the output head (tied or not)."""
    moe_layers = m.moe_layers
    dense = m.layers - moe_layers
    moe_mlp = ((m.top_k or 1) + m.shared_experts) * mlp_params(m, m.moe_ffn_hidden) + m.hidden * m.experts
    return (m.layers * attention_params(m) + dense * mlp_params(m, m.ffn_hidden)
            + moe_layers * moe_mlp + m.vocab * m.hidden)


def model_flops(m: Model, tokens: float) -> float:
    """Model FLOPs of a training step over ``tokens`` tokens: 6·N·tokens for the matmuls (forward
    2, backward 4; N from :func:`active_matmul_params`) plus attention's 12·L·s·a·d per token
    (QKᵀ and AV, no causal halving). For a GPT this is Korthikanti et al. eq. 7,
    72·B·L·s·h²·(1 + s/6h + V/12hL)."""
    return 6 * active_matmul_params(m) * tokens + 12 * m.layers * m.seq_len * m.heads * head_dim(m) * tokens


def recompute_flops(m: Model, tokens: float, recompute: str) -> float:
    """Extra FLOPs recomputation adds: full recompute repeats the layers' forward (2·N_layers +
    4·L·s·a·d per token; Narayanan eq. 3's 96 against 72); selective recompute repeats the
    attention core, counted as Korthikanti et al. eq. 8 does (s/3h in place of s/6h)."""
    attn = 12 * m.layers * m.seq_len * m.heads * head_dim(m) * tokens
    if recompute == "full":
        layers = active_matmul_params(m) - m.vocab * m.hidden
        return 2 * layers * tokens + attn / 3
    if recompute == "selective":
        return attn
    return 0.0


# --- the estimate ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class Memory:
    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0
    capacity: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.kv_cache

    def to_json(self) -> dict:
        return {"weights": int(self.weights), "grads": int(self.grads), "optimizer": int(self.optimizer),
                "activations": int(self.activations), "kv_cache": int(self.kv_cache),
                "total": int(self.total), "capacity": int(self.capacity)}


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
    kv_bytes_per_token: int = 0
    kv_capacity_tokens: int = 0
    max_concurrent_seqs: int = 0
    rank_map: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def memory(self) -> Memory:
        """Memory of the most loaded GPU."""
        return self.stages[self.most_loaded_stage].memory

    @property
    def params_most_loaded(self) -> int:
        return max(st.params for st in self.stages)

    def to_json(self) -> dict:
        """The ``parc explain --format json`` object (docs/json.md lists its keys). Serving
        plans give 0 for per-step quantities and add ``comm_per_token`` (bytes per GPU per decoded
        token) and ``comm_time_per_token``."""
        mem = self.memory
        train = self.mode == "train"
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
            ("comm_time" if train else "comm_time_per_token"): {ax: self.comm_time.get(ax, 0.0) for ax in AXES},
            "comm_link": {ax: self.comm_link.get(ax) for ax in AXES},
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
            out["comm_per_token"] = {ax: int(self.comm_bytes.get(ax, 0)) for ax in AXES}
        return out


def _links(plan) -> tuple[dict, dict, bool]:
    cl = plan.cluster
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
    elif cl.nodes > 1 or plan.world_size > cl.gpus_per_node:
        bw["inter_node"], kind["inter_node"] = ASSUMED_INTER_NODE_BW, "ethernet"
        assumed = True
    return bw, kind, assumed


_LAST: list = []   # (plan, efficiency, estimate) of the latest call: rules and explain share it


def estimate(plan, efficiency: float = DEFAULT_EFFICIENCY, cache: bool = True) -> Estimate:
    """Everything ``parc explain`` shows for a plan that checks; pure in the plan. With ``cache``
    the latest result is reused when called again with the same plan object (the P4 rules and
    ``parc explain`` share one estimate); the plan must not be changed in between."""
    if cache and _LAST and _LAST[0][0] is plan and _LAST[0][1] == efficiency:
        return _LAST[0][2]
    est = _estimate(plan, efficiency)
    if cache:
        _LAST[:] = [(plan, efficiency, est)]
    return est


def _estimate(plan, efficiency: float) -> Estimate:
    from parc.model.rankmap import RankMap

    m, mesh, cl, sch = plan.model, plan.mesh, plan.cluster, plan.schedule
    train = plan.mode == "train" and plan.train is not None
    tr = plan.train
    world = plan.world_size
    p, v, t, cp = mesh.pp, sch.virtual_stages, mesh.tp, mesh.cp
    mb = (sch.microbatches or 0) if train else 0
    rm = RankMap(plan)
    bw, kind, assumed = _links(plan)
    notes = []
    if assumed:
        notes.append("the cluster gives no inter_node link; assuming 100Gb/s ethernet "
                     f"({ASSUMED_INTER_NODE_BW / 1e9:.1f} GB/s per GPU)")
    layouts = stage_layouts(plan)
    capacity = float(cl.gpu.memory)
    wdtype = _weight_dtype(plan)
    wbytes = dtype_bytes(wdtype)
    per = _train_state(plan) if train else None
    n_dense, n_exp = _shard_groups(plan)
    zero = _zero(plan)
    act_dense = layer_activation_bytes(plan, moe=False) if train else 0.0
    act_moe = layer_activation_bytes(plan, moe=True) if (train and m.is_moe) else act_dense
    s_local = m.seq_len / cp
    tokens_mb = sch.micro_batch * m.seq_len                 # one microbatch of one dp replica
    d = head_dim(m)
    recompute = tr.recompute if train else "none"
    # hardware FLOPs per token of one layer (forward + backward + recompute), and the head's
    dense_lp = attention_params(m) + mlp_params(m, m.ffn_hidden)
    moe_lp = attention_params(m) + ((m.top_k or 1) + m.shared_experts) * mlp_params(m, m.moe_ffn_hidden) \
        + m.hidden * m.experts
    attn_tok = 12 * m.seq_len * m.heads * d
    rec_mult = 8 / 6 if recompute == "full" else 1.0
    rec_attn = 4 / 3 if recompute == "full" else (2.0 if recompute == "selective" else 1.0)

    stages: list[StageEstimate] = []
    kv_tok = 0
    kv_nbytes = dtype_bytes(plan.serve.kv_cache_dtype if (plan.serve and plan.serve.kv_cache_dtype != "auto")
                            else m.dtype)
    for lay in layouts:
        parts = _stage_parts(plan, lay)
        nparams = sum(parts.values())
        mem = Memory(capacity=capacity)
        inflight = 0.0
        flops_mb = 0.0
        if train:
            full = _stage_parts(plan, lay, sharded=False)
            expert = full["experts"]
            dense = sum(full.values()) - expert
            wd, gd, od = zero_state_bytes(dense, zero, n_dense, per)
            we, ge, oe = zero_state_bytes(expert, zero, n_exp, per)
            if zero >= 3:   # torch.chunk's first chunk is the largest: count it exactly
                wd = (nparams - parts["experts"]) * per.weights
                we = parts["experts"] * per.weights
                gd, od = wd / per.weights * per.grads, wd / per.weights * per.optimizer
                ge, oe = we / per.weights * per.grads, we / per.weights * per.optimizer
            mem.weights, mem.grads, mem.optimizer = wd + we, gd + ge, od + oe
            inflight = schedules.inflight(sch.pipeline, p, mb, v, lay.stage)
            dense_layers = lay.layers - lay.moe_layers
            act = (dense_layers * act_dense + lay.moe_layers * act_moe) * inflight
            if lay.embedding:   # embedding output (dropout input), sbhp/t: Korthikanti §4.3
                act += s_local * sch.micro_batch * m.hidden * inflight / t
            if lay.head:        # final norm, output-layer input and fp32 logits of one microbatch
                act += 4 * s_local * sch.micro_batch * m.hidden * (1 + m.vocab / m.hidden) / t
            mem.activations = act
            tok = tokens_mb / (t * cp)
            flops_mb = tok * (6 * rec_mult * (dense_layers * dense_lp + lay.moe_layers * moe_lp)
                              + lay.layers * attn_tok * rec_attn)
            if lay.head:
                flops_mb += 6 * m.vocab * m.hidden * tok
        else:
            mem.weights = nparams * wbytes
            kv_tok_s = kv_bytes_per_token(lay.layers, m.kv_heads, d, kv_nbytes, t)
        st = StageEstimate(lay.stage, lay.layers, lay.moe_layers, nparams, parts, mem, inflight, flops_mb)
        if not train:
            st.kv_bytes_per_token = kv_tok_s
        stages.append(st)

    kv_cap = 0
    max_seqs = 0
    if not train and plan.serve is not None:
        srv = plan.serve
        caps = [kv_capacity_tokens(capacity, srv.gpu_memory_utilization, st.memory.weights, st.kv_bytes_per_token)
                for st in stages]
        kv_cap = min(caps) if caps else 0
        for st, c in zip(stages, caps):
            st.kv_capacity_tokens = c
            st.memory.kv_cache = kv_cap * st.kv_bytes_per_token
        kv_tok = max(st.kv_bytes_per_token for st in stages)
        max_seqs = kv_cap // srv.max_model_len if srv.max_model_len else 0
    most = max(range(len(stages)), key=lambda i: (stages[i].memory.total, -i))

    # communication per GPU per step (training) or per decoded token (serving)
    comm, ctime, clink = dict.fromkeys(("tp", "cp", "dp", "pp", "ep"), 0.0), {}, {}
    crit = stages[most] if not train else max(stages, key=lambda s_: s_.flops_per_microbatch)
    L_s = crit.layers
    moe_s = crit.moe_layers
    sp = bool(train and tr.sequence_parallel and t > 1)
    if train:
        steps = max(1, mb)
        tok_local = sch.micro_batch * s_local
        comm["tp"] = tp_bytes_per_layer(tok_local, m.hidden, t, wbytes, recompute) * L_s * steps
        kv_width = kv_heads_per_gpu(m.kv_heads, t) * d
        comm["cp"] = cp_bytes_per_layer(tok_local, kv_width, cp, wbytes) * L_s * steps * (1.5 if recompute == "full" else 1)
        ep_tokens = tok_local / (t if sp else 1)
        comm["ep"] = ep_bytes_per_layer(ep_tokens, m.hidden, m.top_k or 1, mesh.ep, wbytes) * moe_s * steps
        comm["pp"] = pp_bytes_per_microbatch(tok_local, m.hidden, t, v, wbytes) * steps if p > 1 else 0.0
        full = _stage_parts(plan, layouts[most], sharded=False)
        comm["dp"] = (dp_bytes(sum(full.values()) - full["experts"], zero, mesh.dp * cp, per.grads, per.weights)
                      + dp_bytes(full["experts"], zero, n_exp, per.grads, per.weights))
    else:
        # one decoded token per sequence: two all-reduces of h per layer under TP
        comm["tp"] = 2 * allreduce_bytes(m.hidden * wbytes, t) * L_s
        comm["pp"] = m.hidden * wbytes / t if p > 1 else 0.0
        comm["ep"] = ep_bytes_per_layer(1, m.hidden, m.top_k or 1, mesh.ep, wbytes) / 2 * moe_s
    group_of = {"tp": "tp", "cp": "cp", "pp": "pp", "ep": "ep",
                "dp": ("dp", "cp") if cp > 1 else "dp"}
    sizes = {"tp": t, "cp": cp, "pp": p, "ep": mesh.ep, "dp": mesh.dp * cp}
    for ax, g in group_of.items():
        if sizes[ax] <= 1 or (ax == "ep" and not m.is_moe):
            clink[ax], ctime[ax] = None, 0.0
            continue
        ln = rm.link(g)
        clink[ax] = ln
        ctime[ax] = comm[ax] / bw.get(ln, bw["intra_node"])

    tokens = sch.global_batch * m.seq_len if train else 0
    mflops = model_flops(m, tokens) if train else 0.0
    hflops = mflops + recompute_flops(m, tokens, recompute) if train else 0.0
    peak = cl.gpu.flops * efficiency
    bub = schedules.bubble(sch.pipeline, p, mb, v) if train else 0.0
    compute = step = mfu = tps = 0.0
    if train and mb:
        compute = max(st.flops_per_microbatch for st in stages) * mb / peak
        exposed = ctime["tp"] + ctime["cp"] + ctime["ep"] + ctime["pp"]
        busy = compute + exposed
        step = busy / (1 - bub) if bub < 1 else busy
        # the gradient reduction overlaps the last microbatch's backward (Megatron-LM's
        # overlap_grad_reduce), two thirds of its compute; the rest of it is exposed
        step += max(0.0, ctime["dp"] - BACKWARD_SHARE * compute / mb)
        mfu = mflops / (step * world * cl.gpu.flops) if step else 0.0
        tps = tokens / step if step else 0.0
    act_layer = act_moe if (m.is_moe and m.moe_every == 1) else act_dense
    return Estimate(
        mode=plan.mode, world_size=world,
        mesh={"order": list(mesh.order), "pp": p, "dp": mesh.dp, "cp": cp, "tp": t, "ep": mesh.ep,
              "etp": mesh.etp},
        params_total=param_count(m), stages=stages, most_loaded_stage=most, microbatches=mb,
        bubble_fraction=bub, inflight_microbatches=stages[most].inflight if train else 0.0,
        activation_bytes_per_layer=act_layer, tokens_per_step=tokens, model_flops_per_step=mflops,
        hardware_flops_per_step=hflops, compute_time=compute, step_time=step, mfu=mfu,
        tokens_per_second=tps, comm_bytes=comm, comm_time=ctime, comm_link=clink, link_bandwidth=bw,
        link_kind=kind, assumed_inter_node=assumed, efficiency=efficiency, state_bytes=per,
        kv_bytes_per_token=kv_tok, kv_capacity_tokens=kv_cap, max_concurrent_seqs=max_seqs,
        rank_map=rm.summary(), notes=notes)
