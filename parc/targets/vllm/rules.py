"""vLLM's own rules: the plans vLLM cannot serve, or serves otherwise than the spec says."""
from __future__ import annotations

from parc.model import targets as T
from parc.model.targets import newest, span_text
from parc.model.targets import rank_order as imposed_order
from parc.rules import NOTE, WARNING, rule
from parc.rules.util import context_help, dims, divisors, join, offer
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
                 help=("remove `etp`; use ep = {region} (= dp · cp · tp) for expert parallelism, or no ep"
                       if offer(plan, c, [{"mesh.etp": 1, "mesh.ep": region}])[0] else
                       "remove `etp` and `ep` to split the experts over tp").format(region=region))
        return
    if m.ep != region:
        c.report(c.at("mesh.ep"),
                 f"vLLM's expert parallelism always spans all dp · cp · tp = {m.dp} · {m.cp} · {m.tp} = {region} "
                 f"GPUs of a pipeline stage (--enable-expert-parallel has no size); ep = {m.ep} cannot be expressed",
                 help=(f"set ep = {region}, or r" if offer(plan, c, [{"mesh.ep": region}])[0] else "R")
                      + "emove `ep` to split experts over tp", fixes=offer(plan, c, [{"mesh.ep": region}])[1])


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
    """vLLM refuses a max_model_len above the context it derives from the model's config
    (max_position_embeddings, times the RoPE factor where vLLM applies it:
    :func:`parc.model.rope.context_limit`) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    from parc.model.rope import context_limit, context_words

    m, sv = plan.model, plan.serve
    limit = context_limit(m, TARGET)
    if plan.mode != "serve" or sv is None or not limit or sv.max_model_len is None \
            or sv.max_model_len <= limit:
        return
    c.report(c.at("serve.max_model_len", "serve"),
             f"max_model_len = {sv.max_model_len:,} tokens is more than model `{m.name}` supports in vLLM "
             f"({context_words(m, TARGET)}): vLLM refuses it when it reads the model's config",
             help=context_help(plan, c, limit), fixes=offer(plan, c, [{"serve.max_model_len": limit}])[1],
             related=[(c.at("model.max_positions", "model"), f"the model has {m.max_positions:,} positions")])


# --- decode context parallel, all-to-all, KV transfer (vllm/config/parallel.py, model.py, vllm.py) ---

@rule("P666", "vllm-dcp-with-prefill-cp", targets=(TARGET,), reads=("tp", "cp"))
def vllm_dcp_pcp(plan, c):
    m = plan.mesh
    if plan.mode != "serve" or m.cp <= 1 or m.dcp in (1, m.cp, m.tp * m.cp):
        return
    ok = sorted({1, m.cp, m.tp * m.cp})
    kept, fixes = offer(plan, c, [{"mesh.dcp": d} for d in ok])
    c.report(c.at("mesh.dcp", "mesh"),
             f"with prefill context parallel (cp = {m.cp}) vLLM takes decode context parallel only over the cp "
             f"axis or the whole tp · cp block: dcp = {m.dcp} is none of {join(ok)} (\"When PCP is enabled, DCP "
             f"must be disabled, span the PCP axis, or span the full TP x PCP axis.\")",
             help=f"use dcp = {join(o['mesh.dcp'] for o in kept)}" if kept else None, fixes=fixes)


@rule("P667", "vllm-dcp-kv-heads", targets=(TARGET,), reads=("tp",))
def vllm_dcp_heads(plan, c):
    """vLLM's ModelConfig.verify_with_parallel_config, for grouped-query and multi-query attention.
    It judges dcp against ``--tensor-parallel-size`` alone, also beside prefill context parallel,
    where ParallelConfig lets dcp span the whole tp · cp block (P666): dcp = tp · cp on such a
    model is refused here (it exceeds tp // kv_heads)."""
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or m.dcp <= 1 or md.is_mla or not md.kv_heads or (m.cp <= 1 and m.tp % m.dcp):
        return   # without prefill context parallel a dcp that does not divide tp is P121's
    kv, most = md.kv_heads, m.tp // md.kv_heads
    if m.tp <= kv:
        why = f"tp = {m.tp} is not greater than the model's {kv} KV heads"
        fix = f"raise tp above {kv}, or remove `dcp`"
    elif m.dcp > most:
        why = f"dcp = {m.dcp} exceeds tp // kv_heads = {m.tp} // {kv} = {most}" + (
            f" (vLLM judges it against tp alone, even where dcp spans the tp · cp = {m.tp * m.cp} block of prefill "
            f"context parallel)" if m.cp > 1 and m.dcp > m.tp else "")
        fix = f"use dcp = {most} or less"
    elif (md.heads // kv) % m.dcp:
        why = f"the {md.heads // kv} query heads per KV head do not divide by dcp = {m.dcp}"
        fix = "use a dcp that divides " + str(md.heads // kv)
    else:
        return
    c.report(c.at("mesh.dcp", "mesh"),
             f"vLLM refuses decode context parallel for model `{md.name}` (grouped-query attention): {why} "
             f"(vllm/config/model.py, when it reads the model's config)", help=fix)


def _dp_engine_note(plan, c):
    m, sv = plan.mesh, plan.serve
    if not plan.model.is_moe:
        c.report(c.at("serve.dp_attention", "serve"),
                 f"vLLM has no data-parallel attention for a dense model: its dp = {m.dp} ranks serve as independent "
                 f"replicas, each with its own tensor-parallel group, so `dp_attention` changes nothing",
                 help="remove `dp_attention`", severity=WARNING)
    elif not sv.dp_attention:
        c.report(c.at("mesh.dp", "mesh"),
                 f"vLLM runs the dp = {m.dp} ranks of mixture-of-experts model `{plan.model.name}` as one engine: "
                 f"attention is data-parallel but every rank steps its MoE layers together (idle ranks run dummy "
                 f"batches), as `dp_attention = true` says; the experts are "
                 + (f"whole, spread over all dp · cp · tp = {m.ep} GPUs" if m.ep > 1 else
                    f"split over all dp · tp = {m.dp * m.tp} GPUs"),
                 help="write `dp_attention = true` to say what runs", severity=NOTE)


@rule("P668", "vllm-data-parallel-engine", severity=WARNING, targets=(TARGET,), reads=("dp",))
def vllm_dp_engine(plan, c):
    """What vLLM makes of dp > 1: for an MoE model one engine of lock-stepped ranks
    (vllm/v1/engine/core.py DPEngineCoreProc), for a dense model independent replicas."""
    m, sv = plan.mesh, plan.serve
    if plan.mode != "serve" or sv is None or m.dp <= 1 or not (sv.dp_attention or plan.model.is_moe):
        return
    _dp_engine_note(plan, c)


def _all2all(plan) -> tuple[str, dict] | None:
    name = settings(plan, TARGET).get("all2all_backend")
    return (name, T.spec(TARGET)["all2all"][name]) if name else None


@rule("P669", "vllm-all2all-backend", targets=(TARGET,), reads=())
def vllm_all2all_release(plan, c):
    found = _all2all(plan)
    if plan.mode != "serve" or found is None:
        return
    name, facts = found
    span = c.at(f"target.{TARGET}.all2all_backend", f"target.{TARGET}")
    since = facts.get("since")
    if since and not T.holds(TARGET, c.version, since, None):
        c.report(span, f"{c.release} has no all-to-all backend `{name}` (vLLM {since} added it): its parser "
                       f"refuses --all2all-backend {name}",
                 help=f"pin `version = \"{since}\"` or later in `target vllm`, or choose another backend")
    elif facts.get("removed"):
        c.report(span, f"vLLM removed the all-to-all backend `{name}`: it still parses it but serves with "
                       f"allgather_reducescatter instead (\"The '{name}' all2all backend has been removed.\")",
                 help="choose deepep_high_throughput, deepep_low_latency or allgather_reducescatter",
                 severity=WARNING)
    elif facts.get("rocm") and not plan.cluster.gpu.name.startswith("mi3"):
        c.report(span, f"`{name}` is AMD's MoRI all-to-all, built for ROCm; GPU `{plan.cluster.gpu.name}` "
                       f"cannot run it", help="choose a deepep, nixl_ep or flashinfer backend")


@rule("P670", "vllm-all2all-unused", severity=WARNING, targets=(TARGET,), reads=("dp", "ep", "cp"))
def vllm_all2all_scope(plan, c):
    """vLLM's ParallelConfig.use_all2all: the backend dispatches tokens only with dp > 1, or
    expert parallelism with prefill context parallel."""
    found = _all2all(plan)
    if plan.mode != "serve" or found is None:
        return
    name, facts = found
    m, cl = plan.mesh, plan.cluster
    span = c.at(f"target.{TARGET}.all2all_backend", f"target.{TARGET}")
    if m.dp <= 1 and not (m.ep > 1 and m.cp > 1):
        c.report(span, f"vLLM uses no all-to-all with dp = 1 (ParallelConfig.use_all2all): "
                       f"--all2all-backend {name} changes nothing",
                 help="remove `all2all_backend`, or serve the experts over dp > 1 with expert parallelism")
    elif m.ep <= 1:
        c.report(span, f"`{name}` dispatches tokens to whole experts, but this plan has no expert parallelism: "
                       f"vLLM splits the experts over tp and gathers the dp ranks' tokens instead",
                 help="set ep = dp · cp · tp (--enable-expert-parallel), or remove `all2all_backend`")
    elif facts.get("nvlink") and m.ep > cl.gpus_per_node:
        c.report(span, f"`{name}` exchanges tokens over NVLink only, but the expert-parallel group of "
                       f"{count(m.ep, 'GPU')} spans {count(-(-m.ep // cl.gpus_per_node), 'node')} of "
                       f"{cl.gpus_per_node}", help="across nodes use deepep_high_throughput or deepep_low_latency")


def _kv(plan):
    return T.spec(TARGET)["kv_connectors"].get(plan.serve.kv_transfer) if plan.serve else None


@rule("P671", "vllm-kv-connector", targets=(TARGET,), reads=(), whole=True)
def vllm_kv_connector(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or not plan.pools or sv.kv_transfer is None or _kv(plan):
        return
    c.report(c.at("serve.kv_transfer", "serve"),
             f"{c.release} has no KV connector for `kv_transfer = {sv.kv_transfer}`: its KVConnectorFactory "
             f"registers NixlConnector, MooncakeConnector and LMCacheConnectorV1 among others, but no P2P NCCL "
             f"connector, and the engine refuses the unknown name when it starts",
             help="use `kv_transfer = nixl` (vLLM's NixlConnector), mooncake or lmcache")


@rule("P672", "vllm-nixl-dcp", targets=(TARGET,), reads=("tp", "cp"))
def vllm_nixl_dcp(plan, c):
    """VllmConfig.__post_init__ (0.29 and later; rules.toml's since): with NixlConnector a side
    is either whole or DCP-sharded over its whole transfer group, and only for MLA models."""
    sv, m = plan.serve, plan.mesh
    if plan.mode != "serve" or sv is None or sv.kv_transfer != "nixl" or m.dcp <= 1:
        return
    group = max(m.tp, m.cp)
    if m.dcp != group:
        why = f"dcp = {m.dcp} must be 1 or the whole transfer group max(tp, cp) = {group}"
    elif not plan.model.is_mla:
        why = f"decode context parallel with prefill/decode disaggregation is only for MLA models, not `{plan.model.name}`"
    else:
        return
    c.report(c.at("mesh.dcp", "mesh"), f"vLLM's NixlConnector refuses this pool: {why} "
                                       f"(vllm/config/vllm.py, as the engine starts)",
             help=("use dcp = 1" if offer(plan, c, [{"mesh.dcp": 1}])[0] else "remove `dcp`")
                  + (f", or dcp = {group} with an MLA model" if m.dcp != group or not plan.model.is_mla else ""))


@rule("P673", "vllm-nixl-tp-ratio", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_tp(plan, c):
    """NixlConnector's TransferTopology.tp_ratio, asserted when a decode instance first reads a
    prefill instance's blocks (vllm/distributed/kv_transfer/kv_connector/utils.py)."""
    sv = plan.serve
    if plan.mode != "serve" or sv is None or len(plan.pools) != 2 or sv.kv_transfer != "nixl":
        return
    p, d = plan.pools
    a, b = sorted((p.mesh.tp, d.mesh.tp))
    if b % a == 0:
        return
    c.report(c.at("decode.tp", "decode", "serve"),
             f"the prefill pool's tp = {p.mesh.tp} and the decode pool's tp = {d.mesh.tp} do not divide one "
             f"another: vLLM starts both, and the first KV transfer fails (NixlConnector maps each decode rank "
             f"to tp_ratio prefill ranks: \"Local tensor parallel size … is not divisible by remote tensor "
             f"parallel size …\")", help="give the pools tensor-parallel sizes of which one divides the other",
             related=[(c.at("prefill.tp", "prefill"), f"prefill tp = {p.mesh.tp}")])


@rule("P629", "vllm-nixl-pcp-role", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_pcp_role(plan, c):
    """NixlConnector.__init__ (kv_connector/v1/nixl/connector.py, 0.29 and later; rules.toml's
    since): prefill context parallelism only with kv_role kv_producer. The launch writes it for a
    prefill pool (target.toml [kv_connectors] prefill_cp); a decode pool has no role that passes."""
    from parc.model.pools import pool_plan
    from parc.targets.vllm import kv_transfer_config

    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.kv_transfer != "nixl" or len(plan.pools) != 2:
        return
    for pool in plan.pools:
        kv = kv_transfer_config(pool_plan(plan, pool), pool.name) if pool.mesh.cp > 1 else None
        if kv is None or kv["kv_role"] == "kv_producer":
            continue
        c.report(c.at(f"{pool.name}.cp", pool.name, "serve"),
                 f"vLLM's NixlConnector refuses the {pool.name} pool's cp = {pool.mesh.cp}: prefill context "
                 f"parallelism takes only kv_role kv_producer (\"NixlConnector PCP currently supports kv_producer "
                 f"only\"), which a {pool.name} instance cannot be",
                 help=f"give the {pool.name} pool cp = 1 (split its sequences with dcp instead)")


from parc.targets.vllm import known_defects  # noqa: E402,F401  (P7xx: the known defects of each release)
