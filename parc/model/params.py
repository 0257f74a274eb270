"""The model's parameter counts by published formula, and the layer split of each pipeline stage:
parc's balanced split and the split each engine makes by itself (:func:`engine_split`).

These are facts of the model alone (the resolver fills ``Model.params`` and ``placement.layers``
from them); what one GPU holds under a plan is in :mod:`parc.cost.params`."""
from __future__ import annotations

from parc.model.plan import Model


def attention_params(m: Model) -> int:
    """Q, K, V and output projections of one layer: h·d·(2a + 2·kv) (+ biases).

    GQA shrinks K and V to ``kv_heads`` heads (Ainslie et al. 2023); multi-head latent attention
    is :func:`mla_params`. FLOPs count these matmuls (:mod:`parc.cost.flops`).
    """
    if m.is_mla:
        return mla_params(m) + attention_extras(m)
    d = m.head_dim or m.hidden // m.heads
    p = m.hidden * d * (2 * m.heads + 2 * m.kv_heads)
    if m.bias or m.qkv_bias:
        p += d * (m.heads + 2 * m.kv_heads)
    if m.bias:
        p += m.hidden
    return p + attention_extras(m)


def attention_extras(m: Model) -> int:
    """What an attention layer holds besides its projections: the query and key norms of Qwen3
    (``qk_norm``: two RMSNorm weights of head_dim, Hugging Face ``Qwen3Attention.q_norm/k_norm``)
    and gpt-oss's sinks (``attention_sinks``: one logit per head, ``GptOssAttention.sinks``)."""
    d = m.head_dim or m.hidden // m.heads
    return (2 * d if m.qk_norm else 0) + (m.heads if m.attention_sinks else 0)


def mla_params(m: Model) -> int:
    """Multi-head latent attention of one layer (DeepSeek-V2, arXiv:2405.04434 §2.1; the
    Hugging Face ``modeling_deepseek.py`` tensors), with h hidden, a heads, r_q = q_lora_rank,
    r_kv = kv_lora_rank, d_r = qk_rope_head_dim, d_n = qk_nope_head_dim, d_v = v_head_dim:

    * queries: down h·r_q, its RMSNorm r_q, up r_q·a·(d_n + d_r); without q_lora_rank one
      projection h·a·(d_n + d_r) (DeepSeek-V2-Lite);
    * keys and values: down h·(r_kv + d_r) (the latent and the shared rotary key), its RMSNorm
      r_kv, up r_kv·a·(d_n + d_v) (the no-rotary keys and the values);
    * output a·d_v·h.

    DeepSeek-V3 (h 7168, a 128, r_q 1536, r_kv 512, d_r 64, d_n 128, d_v 128): 11,010,048 +
    1,536 + 37,748,736 + 4,128,768 + 512 + 16,777,216 + 117,440,512 = 187,107,328 per layer.
    """
    h, a = m.hidden, m.heads
    dq = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * dq) if m.q_lora_rank else h * a * dq
    kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank \
        + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv + a * m.v_head_dim * h


def attention_core_dim(m: Model) -> float:
    """The mean of the query/key and the value head widths, so that attention's QKᵀ and AV
    cost 2·2·s·a·this FLOPs per token each pass: the head dim, or for MLA (d_n + d_r + d_v)/2
    (QKᵀ over d_n + d_r, AV over d_v)."""
    if m.is_mla:
        return (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2
    return m.head_dim or m.hidden // m.heads


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
    """Layer ``i`` (0-based) is MoE when the model has experts, it is not one of the first
    ``first_k_dense`` (DeepSeek's ``first_k_dense_replace``) and (i+1) % moe_every == 0. Counts,
    stage layouts, FLOPs and memory all go through this (:func:`moe_layers_between`)."""
    return m.experts > 0 and i >= m.first_k_dense and (i + 1) % m.moe_every == 0


def moe_layers_between(m: Model, a: int, b: int) -> int:
    """How many of layers a..b-1 are MoE (:func:`is_moe_layer`), in closed form."""
    if m.experts <= 0:
        return 0
    a = max(a, m.first_k_dense)
    e = m.moe_every
    return max(0, b // e - a // e) if b > a else 0


def mtp_params(m: Model) -> int:
    """One multi-token-prediction module (DeepSeek-V3, arXiv:2412.19437 §2.2; Megatron-LM
    ``multi_token_prediction.py``): a transformer layer (MoE when :func:`is_moe_layer` says so for
    its index after the main layers), the projection of the two normalised inputs 2h → h, and
    three RMSNorms (the embedding's, the hidden state's and the final one); the embedding and
    output head are shared with the main model and not counted again."""
    extra = 2 * m.hidden * m.hidden + 3 * norm_params(m)
    return sum(layer_params(m, is_moe_layer(m, m.layers + k)) + extra for k in range(m.mtp_layers))


def param_count(m: Model, mtp: bool = True) -> int:
    """Total parameters. For GPT-3-style models this is Narayanan et al. 2021 (arXiv:2104.04473)
    eq. P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) plus the final norm. DeepSeek-V3 comes out
    at 671B without its MTP module and 685B with it (the report and its model card).
    ``mtp = False`` leaves the multi-token-prediction modules out."""
    moe_layers = moe_layers_between(m, 0, m.layers)
    dense_layers = m.layers - moe_layers
    return (dense_layers * layer_params(m) + moe_layers * layer_params(m, moe=True)
            + embedding_params(m) + output_params(m) + (mtp_params(m) if mtp else 0))


def active_params(m: Model, embedding: bool = True) -> int:
    """Parameters one token uses: :func:`param_count` without the MTP modules, less the routed
    experts the router does not pick (experts − top_k per MoE layer). ``embedding = False`` leaves
    the token embedding out, a table lookup rather than a matmul, as OpenAI counts gpt-oss's 5.1B
    (the gpt-oss model card); DeepSeek, Moonshot, Qwen and Meta count it in their active figures."""
    unused = m.moe_layers * max(0, m.experts - (m.top_k or 1)) * mlp_params(m, m.moe_ffn_hidden)
    return param_count(m, mtp=False) - unused - (0 if embedding else m.vocab * m.hidden)


def is_local_layer(m: Model, i: int) -> bool:
    """Layer ``i`` (0-based) attends locally (and caches at most ``attention_window`` tokens)
    when the model has a window and it is not one of every ``global_every``-th layers: gpt-oss
    (window 128, global_every 2) alternates local layers 0, 2, ... with global 1, 3, ... (its
    config's layer_types); Llama 4 (chunk 8192, global_every 4) keeps layers 3, 7, ... global (the
    zeros of no_rope_layers)."""
    return m.attention_window > 0 and not (m.global_every > 0 and (i + 1) % m.global_every == 0)


def local_layers_between(m: Model, a: int, b: int) -> int:
    """How many of layers a..b-1 attend locally (:func:`is_local_layer`), in closed form."""
    if m.attention_window <= 0 or b <= a:
        return 0
    e = m.global_every
    return (b - a) - ((b // e - a // e) if e > 0 else 0)


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


# --- the split each engine makes by itself ----------------------------------------------------
#
# An engine that splits an uneven layer count over its pipeline stages by itself declares how in
# its target.toml (``layer_split``); :func:`engine_split` is the one place that computes it, and
# the resolver fills ``placement.layers`` with it (:func:`resolve_split`), so memory, explain, the
# rank map and the drawings all show the split that runs.

def engine_split(rule: str | None, layers: int, stages: int) -> list[int] | None:
    """Layers per (virtual) stage when an engine whose ``layer_split`` is ``rule`` cuts ``layers``
    into ``stages`` stages without being told how; None where it refuses (or has no rule and the
    count is uneven). An even count is split evenly by every engine.

    * ``before_last`` (vLLM, ``vllm/distributed/utils.py`` ``get_pp_indices``): the remaining
      layers go one each to the stages before the last, from the last but one backwards (the last
      stage holds the norm and the head); 61 layers on 4 stages: [15, 15, 16, 15].
    * ``last`` (SGLang, ``sglang/srt/distributed/utils.py`` ``get_pp_indices``): the last
      ``remainder`` stages take one layer more; 61 on 4: [15, 15, 15, 16].
    * ``first`` (TensorRT-LLM, ``tensorrt_llm/mapping.py`` ``Mapping.pp_layers``, torch's
      ``tensor_split``): the first ``remainder`` stages take one layer more; 61 on 4: [16, 15, 15, 15].
    * ``torchtitan`` (``torchtitan/distributed/pipeline_parallel.py``
      ``_generate_llm_fqn_per_model_part`` with its default ``first/last_stage_less_layers`` of 1):
      the embedding and the head count as one layer each, the layers + 2 are spread with the
      first ``remainder`` stages one heavier, and the first and last stage give one back; 30
      layers on 4 stages: [7, 8, 8, 7]. Refused (ValueError) when a stage would get less than one
      of the layers + 2.
    """
    if stages <= 0 or layers < 0:
        return None
    base, rest = divmod(layers, stages)
    if rest == 0:
        return [base] * stages
    if rule == "before_last":
        parts = [base] * stages
        for i in range(2, rest + 2):
            parts[-i] += 1
        return parts
    if rule == "last":
        return [base + (1 if i >= stages - rest else 0) for i in range(stages)]
    if rule == "first":
        return [base + (1 if i < rest else 0) for i in range(stages)]
    if rule == "torchtitan":
        return _torchtitan_split(layers, stages)
    return None


def _torchtitan_split(layers: int, stages: int, first_less: int = 1, last_less: int = 1) -> list[int] | None:
    """torchtitan's ``_generate_llm_fqn_per_model_part`` (0.3.0) as layer counts."""
    if stages == 1:
        return [layers]
    effective = layers + first_less + last_less
    base, extra = divmod(effective, stages)
    if stages > effective or base == 0 or first_less > base or last_less > base:
        return None
    parts = [base + (1 if i < extra else 0) for i in range(stages)]
    parts[0] -= first_less
    parts[-1] -= last_less
    return parts


def stage_layers(rule: str | None, layers: int, stages: int, stage: int) -> int | None:
    """The layers of (virtual) stage ``stage`` under :func:`engine_split`."""
    split = engine_split(rule, layers, stages)
    return split[stage] if split is not None else None


def split_engine(plan, extra=()) -> str | None:
    """The target or family whose own split the plan runs: the first (in message order) of the
    spec's targets, ``extra`` ones and the families they bring that declares a ``layer_split``."""
    from parc.model import targets as T

    named = list(plan.targets) + [t for t in extra if t not in plan.targets]
    active = T.implied(named, plan.mode, plan.target_settings)
    return next((t for t in T.audit_order(active) if T.layer_split(t)), None) if active else None


def resolve_split(plan, extra=()) -> None:
    """Fill ``placement.layers`` (explicit lists stay as given): the balanced split, the even one,
    or, where layers do not divide the stages, the split of the engine that runs the plan
    (:func:`split_engine`, with the targets of ``extra`` beyond the spec's), else None."""
    from parc.model import targets as T

    p = plan.placement
    stages = plan.mesh.pp * plan.schedule.virtual_stages
    if p.layers_mode == "explicit" or stages <= 0:
        return
    L = plan.model.layers
    if p.layers_mode == "balanced":
        p.layers = balanced_split(plan.model, stages)
        return
    engine = split_engine(plan, extra) if L % stages else None
    p.layers = engine_split(T.layer_split(engine) if engine else None, L, stages)
