"""Parameters one GPU holds: the pipeline layout (which layers each pipeline rank holds) and
the parameters under tensor, expert and ZeRO-3 sharding, over the model's counts
(:mod:`parc.model.params`)."""
from __future__ import annotations

from dataclasses import dataclass

from parc.model.dims import expert_dp_of
from parc.model.params import (  # noqa: F401 - the counts, re-exported for the cost model's users
    attention_core_dim, attention_params, balanced_split, embedding_params, expert_params, is_moe_layer,
    layer_params, local_layers_between, mla_params, mlp_params, moe_layer_mlp_params, moe_layers_between, mtp_params,
    norm_params, output_params, param_count)
from parc.model.plan import Model


# =============================================================================================
# Per-GPU parameters, memory, communication and time.
#
# Conventions (bytes are bytes, times seconds, FLOP/s and bytes/s per GPU per direction):
# * "stage" is a pipeline rank (pp coordinate); "chunk" a virtual stage, an entry of
#   ``placement.layers``. Loop placement gives stage i the chunks i, i+pp, i+2pp, ...; V placement
#   (``dualpipe_v``, and ``zero_bubble`` with two chunks per rank, as torch.distributed.pipelining
#   runs them) gives stage i the chunks i and 2·pp-1-i. ``dualpipe`` cuts the model into pp chunks and
#   gives stage i the chunks i and pp-1-i (two copies of the pipeline, one per direction: DeepSeek-V3,
#   arXiv:2412.19437 §3.2.1), so each rank holds two chunks' parameters and ranks 0 and pp-1 both
#   hold the embedding and the head.
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
PARTS = ("embedding", "attention", "mlp", "experts", "router", "norms", "output")   # + "mtp" where present


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (bf16 2, fp32 4, fp8 1)."""
    return DTYPE_BYTES.get(dtype, 2)


def activation_dtype(m: Model) -> str:
    """The dtype a served model's activations (and its KV cache under ``kv_cache_dtype = auto``)
    are in: the model's dtype, bf16 for an FP8 model (vLLM and SGLang run it with ``--dtype
    bfloat16``; only the GEMMs' weights and inputs are FP8)."""
    return "bf16" if m.dtype.startswith("fp8") else m.dtype


def kv_element_bytes(m: Model, kv_cache_dtype: str = "auto") -> int:
    """Bytes of one KV cache element: ``kv_cache_dtype``, or under ``auto`` the activations'."""
    return dtype_bytes(activation_dtype(m) if kv_cache_dtype == "auto" else kv_cache_dtype)


def part_weight_bytes(m: Model, part: str) -> float:
    """Bytes one parameter of ``part`` (:data:`PARTS`) takes in a serving engine's memory: as the
    checkpoint stores it (``checkpoint_format``, with its scales) or as the engine casts or
    quantizes it at load (``dtype``), from ``parc/model/data/checkpoints.toml``. DeepSeek-V3's
    FP8 checkpoint holds its layers' linear weights in 1 + 4/16384 bytes and its embedding, head,
    norms and router in 2; gpt-oss's MXFP4 experts take 0.5 + 1/32."""
    from parc.model.checkpoints import bytes_per_param, storage

    return bytes_per_param(storage(m), part, m.hidden)


def weight_bytes(m: Model, parts: dict, expert_pad: float = 1.0) -> float:
    """Bytes of the parameters ``parts`` (by part, as :func:`stage_parts` counts them) of a
    served model: :func:`part_weight_bytes` each, the routed experts grown by ``expert_pad``
    (:func:`serving_expert_pad`). Explain, the rules and the planner read the weight memory of a
    serving plan from here."""
    return sum(n * part_weight_bytes(m, part) * (expert_pad if part == "experts" else 1.0)
               for part, n in parts.items())


def serving_expert_pad(plan) -> float:
    """How much the serving engine's MoE kernels grow a routed expert of ``plan``'s checkpoint
    format: the expert's intermediate width per GPU (after :func:`serving_expert_split`) and its
    hidden width rounded up to the kernel's tiles (``checkpoints.toml`` [FORMAT.pad.ENGINE], by
    the GPU's family); 1 where the format is not padded. gpt-oss-20b's MXFP4 experts on an A100
    under vLLM: (2944 · 3072) / (2880 · 2880) = 1.090."""
    from parc.cost.engine import engine_of
    from parc.cost.startup import family
    from parc.model.checkpoints import expert_padding, storage

    m = plan.model
    if not m.is_moe or plan.serve is None:
        return 1.0
    align = expert_padding(storage(m), engine_of(plan)[0], family(plan.cluster.gpu))
    if align is None:
        return 1.0
    _, etp, _ = serving_expert_split(plan)
    inter = _cdiv(m.moe_ffn_hidden, etp)
    ai, ah = align
    return (_cdiv(inter, ai) * ai * _cdiv(m.hidden, ah) * ah) / (inter * m.hidden)


def model_weight_bytes(m: Model) -> float:
    """:func:`weight_bytes` of the whole model as a serving engine loads it (no MTP module)."""
    whole = StageLayout(0, [0], m.layers, moe_layers_between(m, 0, m.layers), True, True,
                        local_layers_between(m, 0, m.layers))
    return weight_bytes(m, stage_parts(m, whole, 1, 1, 1, 1, 1, mtp=False))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def head_dim(m: Model) -> int:
    return m.head_dim or m.hidden // m.heads


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads each TP rank stores: kv/tp, or one replicated head once tp > kv_heads
    (vLLM ``ModelConfig.get_num_kv_heads`` = max(1, kv // tp); Megatron-LM likewise). ``tp`` may
    be a numpy array."""
    k = kv_heads // tp
    return k + (k < 1) * (1 - k)


# --- pipeline layout ---------------------------------------------------------------------------

def uses_v_placement(pipeline: str, chunks_per_stage: int) -> bool:
    """V placement for DualPipeV and for zero-bubble with two chunks per rank (ZBV)."""
    return chunks_per_stage == 2 and pipeline in ("dualpipe_v", "zero_bubble")


def layer_split(plan) -> list[int]:
    """Layers per chunk: ``placement.layers``, or the most even split when it is not known."""
    return split_layers(plan.model.layers, plan.mesh.pp, plan.schedule.virtual_stages, plan.placement.layers)


def split_layers(layers: int, pp: int, virtual_stages: int, given=None) -> list[int]:
    """Layers per chunk: ``given`` when it covers ``layers`` in a multiple of ``pp`` chunks, else
    the most even split over pp·virtual_stages chunks (the later chunks one layer heavier)."""
    stages = max(1, pp * virtual_stages)
    if given and sum(given) == layers and len(given) % pp == 0:
        return list(given)
    base, extra = divmod(layers, stages)
    return [base + (1 if i >= stages - extra else 0) for i in range(stages)]


def stage_chunks(plan, stage: int, split: list[int] | None = None) -> list[int]:
    """The chunk indices pipeline rank ``stage`` holds (loop or V placement)."""
    split = split if split is not None else layer_split(plan)
    return chunks_of_rank(plan.schedule.pipeline, plan.mesh.pp, stage, len(split))


def chunks_of_rank(pipeline: str, pp: int, stage: int, chunks: int) -> list[int]:
    """The chunk indices pipeline rank ``stage`` holds when the model is cut into ``chunks``."""
    if pipeline == "dualpipe":
        return sorted({stage, pp - 1 - stage})
    per = max(1, chunks // pp)
    if uses_v_placement(pipeline, per):
        return [stage, 2 * pp - 1 - stage]
    return [stage + k * pp for k in range(per)]


def _chunk_ranges(split: list[int]) -> list[tuple[int, int]]:
    out, start = [], 0
    for n in split:
        out.append((start, start + n))
        start += n
    return out


def _moe_in_range(m: Model, a: int, b: int) -> int:
    """How many of layers a..b-1 are MoE layers (:func:`parc.model.params.is_moe_layer`)."""
    return moe_layers_between(m, a, b)


@dataclass(slots=True)
class StageLayout:
    stage: int
    chunks: list[int]
    layers: int            # transformer layers on this pipeline rank
    moe_layers: int
    embedding: bool        # holds the token embedding (chunk 0)
    head: bool             # holds the final norm and output head (last chunk)
    local_layers: int = 0  # layers with local attention (:func:`parc.model.params.is_local_layer`)


def stage_layouts(plan) -> list[StageLayout]:
    """What each pipeline rank holds, from ``placement.layers`` and the schedule's placement."""
    return layouts_of(plan.model, plan.schedule.pipeline, plan.mesh.pp, layer_split(plan))


def layouts_of(m: Model, pipeline: str, pp: int, split: list[int]) -> list[StageLayout]:
    """What each of ``pp`` pipeline ranks holds when ``m`` is cut into chunks of ``split`` layers."""
    ranges = _chunk_ranges(split)
    last = len(split) - 1
    out = []
    for s in range(pp):
        chunks = chunks_of_rank(pipeline, pp, s, len(split))
        layers = sum(split[c] for c in chunks)
        moe = sum(_moe_in_range(m, *ranges[c]) for c in chunks)
        local = sum(local_layers_between(m, *ranges[c]) for c in chunks)
        out.append(StageLayout(s, chunks, layers, moe, 0 in chunks, last in chunks, local))
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
    return layout_tensors(plan.model, layout, plan.mesh.tp, plan.mesh.ep, plan.mesh.etp)


def layout_tensors(m: Model, layout: StageLayout, tp: int, ep: int, etp: int, redundant: int = 0,
                   mtp: bool = True) -> list[tuple]:
    """:func:`stage_tensors` for model ``m`` under tensor, expert and expert-tensor degrees;
    ``redundant`` extra expert copies spread over ``ep`` with the experts (EPLB), ``mtp = False``
    leaves out the multi-token-prediction modules (a serving engine without speculative decoding
    does not load them)."""
    t, h, d = tp, m.hidden, head_dim(m)
    aq = _cdiv(m.heads, t) * d
    kvq = kv_heads_per_gpu(m.kv_heads, t) * d
    out: list[tuple] = []
    L, moe = layout.layers, layout.moe_layers
    dense = L - moe
    if L and m.is_mla:
        out += _mla_tensors(m, L, t)
        out += _norm_tensors(m, 2 * L)
    elif L:
        out += [("attention", False, L, aq, aq * h),            # q: [a/tp·d, h]
                ("attention", False, 2 * L, kvq, kvq * h),      # k, v: [kv/tp·d, h]
                ("attention", False, L, h, h * aq)]             # o: [h, a/tp·d]
        if m.bias or m.qkv_bias:
            out += [("attention", False, L, aq, aq), ("attention", False, 2 * L, kvq, kvq)]
        if m.bias:
            out.append(("attention", False, L, h, h))
        out += _norm_tensors(m, 2 * L)
    if L:
        out += _attention_extra_tensors(m, L, t)
    if dense:
        out += _mlp_tensors(m, _cdiv(m.ffn_hidden, t), "mlp", False, dense)
    if moe:
        out.append(("router", False, moe, m.experts, m.experts * h))                    # [E, h]
        local = _cdiv(m.experts + redundant, ep)
        out += _mlp_tensors(m, _cdiv(m.moe_ffn_hidden, etp), "experts", True, moe * local)
        if m.shared_experts:
            out += _mlp_tensors(m, _cdiv(m.moe_ffn_hidden, t), "mlp", False, moe * m.shared_experts)
    vrows = _cdiv(m.vocab, t)
    if layout.embedding:
        out.append(("embedding", False, 1, vrows, vrows * h))
        if m.position == "learned":
            out.append(("embedding", False, 1, m.seq_len, m.seq_len * h))
    if layout.head:
        out += _norm_tensors(m, 1)
        if mtp:
            out += _mtp_tensors(m, tp, ep, etp)
        # the output head is the embedding itself only when one rank holds both and they are tied
        if not (m.tied_embeddings and layout.embedding):
            out.append(("output", False, 1, vrows, vrows * h))
    return out


def _attention_extra_tensors(m: Model, L: int, t: int) -> list[tuple]:
    """:func:`parc.model.params.attention_extras` of ``L`` layers on one TP rank: the query and key
    norms [d] each, replicated; the sinks, one per head, split with the heads."""
    out = []
    if m.qk_norm:
        out.append(("norms", False, 2 * L, head_dim(m), head_dim(m)))
    if m.attention_sinks:
        out.append(("attention", False, L, _cdiv(m.heads, t), _cdiv(m.heads, t)))
    return out


def _mla_tensors(m: Model, L: int, t: int) -> list[tuple]:
    """Multi-head latent attention of ``L`` layers on one TP rank (:func:`parc.model.params.mla_params`),
    as Megatron-LM's ``MLASelfAttention`` splits it: the down-projections and their norms replicated,
    the up-projections column-parallel over the heads, the output row-parallel."""
    h, a = m.hidden, _cdiv(m.heads, t)
    dq, rq, rkv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.q_lora_rank, m.kv_lora_rank
    if rq:
        q = [("attention", False, L, rq, rq * h), ("norms", False, L, rq, rq),
             ("attention", False, L, a * dq, a * dq * rq)]
    else:
        q = [("attention", False, L, a * dq, a * dq * h)]
    kv_up = a * (m.qk_nope_head_dim + m.v_head_dim)
    return q + [("attention", False, L, rkv + m.qk_rope_head_dim, (rkv + m.qk_rope_head_dim) * h),
                ("norms", False, L, rkv, rkv), ("attention", False, L, kv_up, kv_up * rkv),
                ("attention", False, L, h, h * a * m.v_head_dim)]


def _mtp_tensors(m: Model, tp: int, ep: int, etp: int) -> list[tuple]:
    """The multi-token-prediction modules on the last pipeline stage, as Megatron-LM places them
    (:func:`parc.model.params.mtp_params`): per module one transformer layer, the 2h → h projection
    (column-parallel) and three norms; the embedding and head are the main model's."""
    out: list[tuple] = []
    for k in range(m.mtp_layers):
        moe = is_moe_layer(m, m.layers + k)
        out += layout_tensors(m, StageLayout(-1, [], 1, int(moe), False, False), tp, ep, etp)
        w = _cdiv(m.hidden, tp)
        out += [("mtp", False, 1, w, w * 2 * m.hidden)] + _norm_tensors(m, 3)
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
    mesh = plan.mesh
    return shard_groups(mesh.dp, mesh.cp, mesh.tp, mesh.ep, mesh.etp)


def shard_groups(dp, cp, tp, ep, etp):
    """(dense, expert) ZeRO sharding group sizes: dp·cp for dense parameters, the
    expert-data-parallel group dp·cp·tp/(ep·etp) (at least 1) for expert parameters. Scalars or
    numpy arrays.

    The context-parallel ranks of a model copy hold the same parameters and reduce the same
    gradients, so every trainer shards its ZeRO state over them too: torchtitan's FSDP mesh is
    ``fsdp = dp_shard * cp`` (torchtitan/distributed/parallel_dims.py), Megatron-LM's distributed
    optimizer shards over ``get_data_parallel_group(with_context_parallel=True)``
    (megatron/core/optimizer/__init__.py), and DeepSpeed's ZeRO partitions over the
    sequence-data-parallel group, dp × the Ulysses sequence-parallel size
    (deepspeed/runtime/engine.py ``seq_data_parallel_group``, deepspeed/utils/groups.py
    ``_get_sequence_data_parallel_group``: "the process group for zero sharding and gradient
    allreduce must be across both dimensions of data and sequence parallelism")."""
    return dense_shard_group(dp, cp), expert_dp_of(dp, cp, tp, ep, etp)


def dense_shard_group(dp, cp):
    """The GPUs a dense parameter's ZeRO state is sharded over: dp·cp (:func:`shard_groups`)."""
    return dp * cp


def dense_shard_index(mesh, dp_coord: int, cp_coord: int) -> int:
    """A rank's place in its dp·cp sharding group: the two coordinates flattened in the mesh's
    order (the outer axis first), as torch's ``DeviceMesh._flatten`` of the (dp, cp) submesh
    numbers them."""
    order = list(mesh.order)
    if "cp" in order and "dp" in order and order.index("cp") < order.index("dp"):
        return cp_coord * mesh.dp + dp_coord
    return dp_coord * mesh.cp + cp_coord


def _zero(plan) -> int:
    return plan.train.zero if plan.mode == "train" and plan.train else 0


def params_by_part(plan, rank: int = 0, *, sharded: bool = True) -> dict[str, int]:
    """Parameters ``rank`` holds, by part (see :func:`params_on_rank`); ``sharded=False`` gives
    the count before ZeRO-3 sharding."""
    from parc.model.rankmap import RankMap

    rm = RankMap(plan)
    c = rm.coords(rank)
    stage = int(c["pp"])
    k_dense = dense_shard_index(plan.mesh, int(c["dp"]), int(c["cp"]))
    k_exp = int(rm.expert_coords(rank)["edp"])
    return _stage_parts(plan, stage_layouts(plan)[stage], k_dense, k_exp, sharded)


def _stage_parts(plan, layout: StageLayout, k_dense: int = 0, k_exp: int = 0, sharded: bool = True
                 ) -> dict[str, int]:
    mesh = plan.mesh
    if plan.mode == "serve" and plan.serve is not None:
        ep, etp, extra = serving_expert_split(plan)
        # the engine loads the multi-token-prediction layers only to draft with them
        return stage_parts(plan.model, layout, mesh.dp, mesh.cp, mesh.tp, ep, etp, redundant=extra,
                           mtp=plan.serve.speculative == "mtp" and layout.head)
    return stage_parts(plan.model, layout, mesh.dp, mesh.cp, mesh.tp, mesh.ep, mesh.etp,
                       zero3=sharded and _zero(plan) >= 3, k_dense=k_dense, k_exp=k_exp)


def serving_expert_split(plan) -> tuple[int, int, int]:
    """(ep, etp, redundant) as a serving engine holds a MoE model's routed experts: the one place
    the estimate, the memory rules and the planner read it from.

    * ``ep > 1``: whole experts spread over the expert-parallel group, (experts +
      ``redundant_experts``) / ep per GPU (vLLM ``--enable-expert-parallel`` over dp·pcp·tp,
      ``FusedMoEParallelConfig.make``; SGLang ``--ep-size``; EPLB's redundant copies add to each
      GPU's share: vLLM ``eplb_config.num_redundant_experts``, SGLang ``--ep-num-redundant-experts``);
    * ``ep = 1``: every expert on every GPU, its width split over the engine's MoE tensor-parallel
      group: tp·cp, or dp·cp·tp where the dp ranks are one engine (``dp_attention``, and vLLM's data
      parallelism, whose ranks always run the MoE layers together: ``flatten_tp_across_dp``).

    Training keeps the mesh's own ep and etp. Not a MoE model: (1, 1, 0)."""
    m, mesh, srv = plan.model, plan.mesh, plan.serve
    if not m.is_moe:
        return 1, 1, 0
    if mesh.ep > 1:
        return mesh.ep, mesh.etp, srv.redundant_experts if srv else 0
    targets = plan.targets or {}
    sglang = targets["sglang"].settings if "sglang" in targets else {}
    engine_wide = bool(srv and srv.dp_attention) or bool(sglang.get("dp_attention")) or "vllm" in targets
    return 1, mesh.tp * mesh.cp * (mesh.dp if engine_wide else 1), 0


def stage_parts(m: Model, layout: StageLayout, dp: int, cp: int, tp: int, ep: int, etp: int, *,
                zero3: bool = False, k_dense: int = 0, k_exp: int = 0, redundant: int = 0,
                mtp: bool = True) -> dict[str, int]:
    """Parameters by part on one GPU of stage ``layout``: shard ``k_dense`` of the dense tensors and
    ``k_exp`` of the expert ones under ZeRO-3 (``zero3``), else everything it holds;
    ``redundant`` and ``mtp`` as :func:`layout_tensors`."""
    n_dense, n_exp = shard_groups(dp, cp, tp, ep, etp) if zero3 else (1, 1)
    return tensor_parts(m, layout_tensors(m, layout, tp, ep, etp, redundant, mtp), n_dense, n_exp,
                        k_dense, k_exp, mtp)


def fsdp_unit_params(plan, layout: StageLayout) -> int:
    """Parameters of the FSDP unit Megatron-FSDP's double buffer is sized for on one GPU of stage
    ``layout`` (Megatron-LM 0.19.2, megatron/core/distributed/fsdp/): each transformer layer is a
    unit (mcore_fsdp_adapter.py: TransformerLayer, MoETransformerLayer; a multi-token-prediction
    module's layer too), gathered whole on the GPU (its tp and ep share, before ZeRO-3's sharding):
    :func:`fsdp_unit_kinds` and :func:`one_layer_params`. 0 for a stage without layers."""
    me = plan.mesh
    return max((one_layer_params(plan.model, moe, me.tp, me.ep, me.etp)
                for moe in fsdp_unit_kinds(plan.model, layer_split(plan), layout.chunks)), default=0)


def fsdp_unit_kinds(m: Model, split: list[int], chunks: list[int]) -> set[bool]:
    """Whether the double-buffered unit of each of ``chunks`` (of a model cut into ``split``) is a
    MoE layer: FixedPoolAllocator double-buffers the largest group of units alike in size and dtype,
    dense or MoE (on a tie the first unit's), and leaves the others to allocate on use; its buffers
    are named by slot (GlobalMemoryBuffer.get_tensor), so the model chunks of an interleaved
    pipeline share them at the largest chunk's size."""
    ranges, last = _chunk_ranges(split), len(split) - 1
    out = set()
    for c in chunks:
        a, b = ranges[c]
        kinds = [is_moe_layer(m, i) for i in range(a, b)]
        if c == last:
            kinds += [is_moe_layer(m, m.layers + k) for k in range(m.mtp_layers or 0)]
        if kinds:
            moe = sum(kinds)
            out.add(2 * moe > len(kinds) or (2 * moe == len(kinds) and kinds[0]))
    return out


def one_layer_params(m: Model, moe: bool, tp: int, ep: int, etp: int) -> int:
    """Parameters of one transformer layer (MoE or dense) on one GPU under tensor and expert
    parallelism, before ZeRO-3's sharding."""
    one = StageLayout(0, [], 1, int(moe), False, False)
    return sum(tensor_parts(m, layout_tensors(m, one, tp, ep, etp), 1, 1).values())


def tensor_parts(m: Model, tensors: list[tuple], n_dense: int, n_exp: int, k_dense: int = 0, k_exp: int = 0,
                 mtp: bool = True) -> dict[str, int]:
    """Parameters by part of the tensors of :func:`layout_tensors` when dense tensors are sharded
    over ``n_dense`` ranks and expert ones over ``n_exp`` (ZeRO-3), on shard ``k_dense``/``k_exp``."""
    parts = dict.fromkeys(PARTS + (("mtp",) if m.mtp_layers and mtp else ()), 0)
    for part, expert, count, dim0, numel in tensors:
        n, k = (n_exp, k_exp) if expert else (n_dense, k_dense)
        parts[part] += count * _chunk_numel(dim0, numel, n, k)
    return parts


def params_on_rank(plan, rank: int) -> int:
    """Parameters held by global ``rank`` under parc's placement convention.

    The runtime builds exactly these tensors; the convention, tensor by tensor (h hidden,
    d head_dim, a heads, kv kv_heads, V vocab, s seq_len, f ffn_hidden, E experts):

    * Pipeline: rank with pp coordinate i holds the layers of its chunks of ``placement.layers``:
      chunks i, i+pp, i+2pp, ... (loop placement), or i and 2·pp-1-i for ``dualpipe_v`` and for
      ``zero_bubble`` with two chunks per rank (V placement, as torch.distributed.pipelining), or
      i and pp-1-i of pp chunks for ``dualpipe`` (both directions' copies of the pipeline).
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
      gate, up, fc1) split, row-parallel biases (o, down, fc2: [h]) replicated; ``qkv_bias``
      alone gives the q, k and v ones. ``qk_norm``: two norm weights [d], replicated;
      ``attention_sinks``: one logit per head [a/tp], split with the heads.
    * MoE layers replace the dense MLP with a router [E, h] (replicated, no bias), E/ep routed
      experts stored as separate MLPs of width moe_ffn_hidden/etp, and ``shared_experts``
      separate MLPs of width moe_ffn_hidden split over tp.
    * With ``zero = 3`` every tensor is further sharded along dim 0 as ``torch.chunk`` does
      (chunk k of ceil(dim0/n)-row chunks; late chunks may be short or empty): dense tensors over
      the dp·cp group (n = dp·cp, k = :func:`dense_shard_index`; :func:`shard_groups`
      says why cp is in it), routed-expert tensors over the
      expert-data-parallel group (n = dp·cp·tp/(ep·etp), k = the rank's edp coordinate on
      Megatron-LM's expert grid, see :mod:`parc.model.rankmap`).
    * Dimensions that the mesh does not divide are rounded up (such plans fail ``parc check``).
    """
    return sum(params_by_part(plan, rank).values())


def param_bytes_on_rank(plan, rank: int) -> int:
    """Bytes of the parameters ``rank`` holds: :func:`params_on_rank` × the bytes of the train
    block's ``precision`` (training), or :func:`weight_bytes` (serving: as the checkpoint or the
    engine stores them)."""
    if plan.mode != "train" or not plan.train:
        return int(weight_bytes(plan.model, params_by_part(plan, rank)))
    return params_on_rank(plan, rank) * dtype_bytes(_weight_dtype(plan))


def _weight_dtype(plan) -> str:
    if plan.mode == "train" and plan.train:
        return plan.train.precision
    return plan.model.dtype
