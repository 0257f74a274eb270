"""vLLM's own rules: the plans vLLM cannot serve, or serves otherwise than the spec says."""
from __future__ import annotations

from parc.model.targets import newest, span_text
from parc.model.targets import rank_order as imposed_order
from parc.rules import NOTE, WARNING, rule
from parc.rules.util import dims, divisors, join
from parc.targets.base import order_over, settings, target_span
from parc.targets.vllm import TARGET, replica
from parc.words import count


# ------------------------------------------------------------------------------------ P601

@rule("P601", "vllm-serves-only", targets=(TARGET,))
def vllm_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, "vllm", "train"),
                 "vLLM is an inference engine: it cannot run this training plan (the spec has a `train` block)",
                 help="compile training for `target megatron` or `target torchrun`, or replace `train` with "
                      "`serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


# ------------------------------------------------------------------------------------ P604

@rule("P604", "vllm-virtual-stages", targets=(TARGET,))
def vllm_virtual_stages(plan, c):
    if plan.mode != "serve" or plan.schedule.virtual_stages <= 1:
        return
    c.report(c.at("schedule.virtual_stages"),
             f"vLLM has no interleaved pipeline: each of the pp = {count(plan.mesh.pp, 'rank')} holds one contiguous block "
             f"of layers, so virtual_stages = {plan.schedule.virtual_stages} cannot be expressed",
             help="remove `virtual_stages` (serving takes no schedule)")


# ------------------------------------------------------------------------------------ P605

@rule("P605", "vllm-context-parallel-needs-mla", severity=WARNING, targets=(TARGET,))
def vllm_pcp_mla(plan, c):
    """vLLM 0.33 accepts prefill context parallel with any dp (ParallelConfig, create_engine_config);
    it runs it only in its V2 model runner and only for multi-head latent attention models
    (vllm/v1/worker/gpu/pcp_manager.py): quiet for a model with an MLA shape (`kv_lora_rank`),
    a warning for one without, whose block may simply leave the shape out."""
    m = plan.mesh
    if plan.mode != "serve" or m.cp <= 1 or plan.model.is_mla:
        return
    c.report(c.at("mesh.cp"),
             f"vLLM runs prefill context parallel (cp = {m.cp}) only for models with multi-head latent attention "
             f"(DeepSeek-V2/V3 style) in its V2 model runner: model `{plan.model.name}` gives no MLA shape "
             f"(`kv_lora_rank`), and with grouped-query or multi-head attention the engine refuses to start (\"MRV2 PCP currently supports MLA models only\"; "
             f"the V1 model runner refuses prefill context parallel at argument check)",
             help="if the model uses MLA, give its shape (`from = deepseek_v3`, or `kv_lora_rank` and the other MLA "
                  "keys); otherwise use cp = 1 and give the GPUs to tp or dp")


# ------------------------------------------------------------------------------------ P664

@rule("P664", "vllm-context-parallel-with-data-parallel", targets=(TARGET,))
def vllm_pcp_dp(plan, c):
    """Releases before 0.30 refuse prefill context parallel with data parallelism; rules.toml's
    `until` keeps this rule to them."""
    m = plan.mesh
    if plan.mode != "serve" or m.cp <= 1 or m.dp <= 1:
        return
    c.report(c.at("mesh.cp"),
             f"{c.release} refuses prefill context parallel (cp = {m.cp}) with data parallelism (dp = {m.dp}) "
             f"(\"PCP does not support data parallelism yet.\"); {span_text(TARGET, '0.30', None)} accept it",
             help=f"pin a release that accepts it (`version = \"{newest(TARGET)}\"` in `target vllm`), or use "
                  f"dp = 1 and serve the replicas as separate deployments",
             related=[(c.at("mesh.dp"), f"dp = {m.dp}")])


# ------------------------------------------------------------------------------------ P606

@rule("P606", "vllm-expert-parallel-size", targets=(TARGET,))
def vllm_ep(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or not md.is_moe or (m.ep <= 1 and m.etp <= 1):
        return
    region = dims(plan).region
    if m.etp > 1:
        c.report(c.at("mesh.etp"),
                 f"vLLM cannot split experts with etp = {m.etp}: with expert parallelism each expert lives whole "
                 f"on one GPU (etp = 1), and without it experts are split over tp",
                 help=f"remove `etp`; use ep = {region} (= dp · cp · tp) for expert parallelism, or no ep")
        return
    if m.ep != region:
        c.report(c.at("mesh.ep"),
                 f"vLLM's expert parallelism always spans all dp · cp · tp = {m.dp} · {m.cp} · {m.tp} = {region} "
                 f"GPUs of a pipeline stage (--enable-expert-parallel has no size); ep = {m.ep} cannot be expressed",
                 help=f"set ep = {region}, or remove `ep` to split experts over tp")


# ------------------------------------------------------------------------------------ P614

@rule("P614", "vllm-multinode-context-parallel", targets=(TARGET,))
def vllm_multinode_pcp(plan, c):
    m, cl = plan.mesh, plan.cluster
    if plan.mode != "serve" or m.cp <= 1 or cl.nodes <= 1:
        return
    w = m.dp * m.pp * m.tp
    if w % cl.nodes == 0:
        return
    ok = [n for n in divisors(w) if n > 1]
    c.report(c.at("mesh.cp"),
             f"vLLM splits its multi-node world over nodes as (dp · pp · tp) / nodes, leaving out cp: "
             f"{m.dp} · {m.pp} · {m.tp} = {w} is not divisible by {count(cl.nodes, 'node')} (vLLM: \"world_size={w} must be "
             f"divisible by nnodes={cl.nodes}\")",
             help=(f"use a node count that divides {w} ({join(ok)}), or keep cp inside one node"
                   if ok else "keep the context-parallel deployment inside one node"),
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}")])



# --- what vLLM cannot express ------------------------------------------------------------------
def rank_order(plan):
    """(message, help) when the mesh lists its axes in another order than the one vLLM uses."""
    order = imposed_order(TARGET, plan.mode)
    if order is None:
        return None
    big = order_over(plan)
    if big != [ax for ax in order if plan.mesh.size(ax) > 1]:
        return (f"vLLM lays ranks out in the order {', '.join(order)} (outermost first, tp on consecutive ranks) "
                f"whatever the mesh lists; this mesh lists {', '.join(big)}, so the topology and placement checks "
                f"judge the plan under vLLM's order, the one that runs",
                "list the mesh as `" + ", ".join(ax for ax in order if plan.mesh.size(ax) > 1)
                + "` to say what runs")
    return None


@rule("P652", "vllm-rank-order", severity=NOTE, targets=(TARGET,))
def rank_order_rule(plan, c):
    found = rank_order(plan)
    if found:
        c.report(c.at("mesh"), found[0], help=found[1])


@rule("P651", "vllm-replica-fills-nodes", targets=(TARGET,))
def multi_node(plan, c):
    if plan.mode != "serve":
        return  # P601 says it
    cl = plan.cluster
    if cl.nodes == 1 or settings(plan, TARGET).get("executor") == "ray" or plan.world_size != cl.world:
        return  # one node, Ray's own placement, or a mesh that does not fit (P101)
    r = replica(plan)
    if r > cl.gpus_per_node and r % cl.gpus_per_node:
        c.report(c.at("mesh"), f"a vLLM replica (tp·pp·cp = {count(r, 'GPU')}) must fill whole nodes of "
                 f"{count(cl.gpus_per_node, 'GPU')}: vLLM accepts the arguments but its executor refuses to start "
                 f"(\"nnodes ({cl.nodes}) must be divisible by the number of data parallel node groups\")",
                 help="choose tp·pp·cp that divides or is a multiple of gpus_per_node")
    elif r < cl.gpus_per_node and cl.gpus_per_node % r:
        c.report(c.at("mesh"), f"{count(cl.gpus_per_node, 'GPU')} per node do not hold a whole number of vLLM "
                 f"replicas of tp·pp·cp = {count(r, 'GPU')}", help="choose tp·pp·cp that divides gpus_per_node")


@rule("P658", "vllm-max-model-len-beyond-positions", targets=(TARGET,))
def max_model_len_beyond_positions(plan, c):
    """vLLM refuses a max_model_len above the model config's max_position_embeddings
    (ModelConfig's derived max_model_len) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    m, sv = plan.model, plan.serve
    if plan.mode != "serve" or sv is None or not m.max_positions or sv.max_model_len <= m.max_positions:
        return
    c.report(c.at("serve.max_model_len", "serve"),
             f"max_model_len = {sv.max_model_len:,} tokens is more than model `{m.name}` supports "
             f"({m.max_positions:,} positions): vLLM refuses it when it reads the model's config",
             help=f"set `max_model_len = {m.max_positions}` or less, or set the model's `max_positions` if "
                  "its config really allows longer sequences (RoPE scaling)",
             related=[(c.at("model.max_positions", "model"), f"the model has {m.max_positions:,} positions")])
