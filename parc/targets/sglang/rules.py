"""SGLang's own rules: the plans SGLang refuses, runs otherwise than the spec says, or that parc's
sglang target cannot lay out (each message says which)."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import context_help, divisors, join, offer, value_fixes
from parc.targets.base import settings, target_span
from parc.targets.sglang import TARGET, dp_attention, dp_attention_asked, layout, replica
from parc.words import count


@rule("P691", "sglang-serves-only", targets=(TARGET,), reads=())
def sglang_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, TARGET, "train"),
                 "SGLang's launch_server is an inference server: it cannot run this training plan "
                 "(the spec has a `train` block)",
                 help="compile training for `target megatron` or `target torchrun`, or replace `train` with "
                      "`serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


@rule("P692", "sglang-context-parallel", targets=(TARGET,), reads=("cp",))
def sglang_cp(plan, c):
    if plan.mode != "serve" or plan.mesh.cp <= 1:
        return
    c.report(c.at("mesh.cp"),
             f"parc's sglang target does not lay out context parallelism (cp = {plan.mesh.cp}): SGLang's prefill "
             "context parallelism (--attn-cp-size with --enable-prefill-cp and a --cp-strategy) runs inside the "
             "tensor-parallel group and only for the model families that implement it, which the spec's model "
             "block cannot say",
             help="use cp = 1 and give the GPUs to tp or dp, or launch SGLang's prefill CP by hand through "
                  "`extra_args`")


def _server_tp(plan) -> int:
    return layout(plan).tp_size


@rule("P693", "sglang-expert-grid", targets=(TARGET,), reads=("dp", "tp", "ep", "etp"))
def sglang_expert_grid(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or not md.is_moe or (m.ep <= 1 and m.etp <= 1):
        return
    t = _server_tp(plan)
    if m.ep * m.etp == t:
        return
    where = "dp · tp" if dp_attention(plan) else "tp"
    ok, _ = offer(plan, c, [{"mesh.ep": e, "mesh.etp": t // e} for e in divisors(t)
                            if e > 1 and md.experts % e == 0])
    neither, _ = offer(plan, c, [{"mesh.ep": 1, "mesh.etp": 1}])
    helps = ([f"use ep = one of {join(o['mesh.ep'] for o in ok)} with etp = {t} / ep"] if ok else []) + \
        (["remove `ep` and `etp` to split the experts over tp"] if neither else [])
    c.report(c.at("mesh.ep" if m.ep > 1 else "mesh.etp"),
             f"SGLang's expert layers span one server's tp_size ({where} = {t}): ep experts groups, each "
             f"expert split over tp_size / ep ranks, so ep · etp must be {t}, not {m.ep} · {m.etp} = {m.ep * m.etp}"
             f" (SGLang's moe_tp_size = tp_size / ep_size, sglang/srt/runtime_context.py derive_parallel_widths)",
             help=", or ".join(helps) or f"make ep · etp = {t}", fixes=value_fixes(plan, ok))


@rule("P694", "sglang-a2a-expert-size", targets=(TARGET,), reads=("dp", "tp", "ep"))
def sglang_a2a_ep(plan, c):
    backend = settings(plan, TARGET).get("moe_a2a_backend")
    if plan.mode != "serve" or not backend or not plan.model.is_moe:
        return
    t = _server_tp(plan)
    if plan.mesh.ep == t:
        return
    c.report(c.at(f"target.{TARGET}.moe_a2a_backend", f"target.{TARGET}"),
             f"the all-to-all backend {backend} spreads the experts over the whole server: SGLang sets ep to "
             f"tp_size = {t} whatever --ep-size says (\"The expert parallel size is adjusted from {plan.mesh.ep} "
             f"to the tensor parallel size\"), so it would serve ep = {t}, not the spec's ep = {plan.mesh.ep}",
             help=(f"set ep = {t} (etp = 1), or r" if offer(plan, c, [{"mesh.ep": t, "mesh.etp": 1}])[0] else "R")
                  + "emove `moe_a2a_backend`",
             related=[(c.at("mesh.ep", "mesh"), f"ep = {plan.mesh.ep}")])


@rule("P695", "sglang-kv-cache-fp16", targets=(TARGET,), reads=("serve",))
def sglang_kv_fp16(plan, c):
    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.kv_cache_dtype != "fp16" or plan.model.dtype == "fp16":
        return
    c.report(c.at("serve.kv_cache_dtype", "serve"),
             f"SGLang has no fp16 KV cache for a {plan.model.dtype} model: --kv-cache-dtype takes auto (the "
             "model's dtype), bf16, fp8_e4m3, fp8_e5m2 and the fp4 formats",
             help="use kv_cache_dtype = \"auto\", \"bf16\" or \"fp8\"")


@rule("P696", "sglang-node-layout", targets=(TARGET,), reads=("world", "dp", "tp", "pp", "cp"))
def sglang_node_layout(plan, c):
    m, cl = plan.mesh, plan.cluster
    if plan.mode != "serve" or cl.nodes <= 1 or plan.world_size != cl.world or m.cp > 1:
        return  # one node, a mesh that does not fill the cluster (P101, P302), or cp (P692)
    lay = layout(plan)
    r = replica(plan)
    if lay.servers == 1:
        return  # one server over every node: tp_size · pp_size is the cluster's GPUs, which the nodes divide
    if r > cl.gpus_per_node and r % cl.gpus_per_node:
        c.report(c.at("mesh"),
                 f"across nodes each SGLang replica (tp · pp = {count(r, 'GPU')}) is a server of its own and must "
                 f"fill whole nodes of {count(cl.gpus_per_node, 'GPU')}: SGLang refuses --dp-size with --nnodes "
                 "(\"multi-node data-parallel replicas are not supported\"), and parc cannot give one node to two "
                 "servers",
                 help="choose tp · pp that divides or is a multiple of gpus_per_node, or `dp_attention = true`")
    elif r < cl.gpus_per_node and cl.gpus_per_node % r:
        c.report(c.at("mesh"),
                 f"across nodes each node runs one SGLang server with its replicas: {count(cl.gpus_per_node, 'GPU')} "
                 f"per node do not hold a whole number of replicas of tp · pp = {count(r, 'GPU')}, and SGLang refuses "
                 "--dp-size with --nnodes (\"multi-node data-parallel replicas are not supported\")",
                 help="choose tp · pp that divides gpus_per_node, or `dp_attention = true`")


@rule("P697", "sglang-dp-attention-without-dp", severity=WARNING, targets=(TARGET,), reads=("dp",))
def sglang_dp_attention_dp1(plan, c):
    if plan.mode != "serve" or not dp_attention_asked(plan) or plan.mesh.dp > 1:
        return
    key = "serve.dp_attention" if plan.serve is not None and plan.serve.dp_attention else f"target.{TARGET}.dp_attention"
    c.report(c.at(key, f"target.{TARGET}"),
             "dp_attention = true does nothing with dp = 1: attention data parallelism needs more than one "
             "attention group (SGLang runs --attn-dp-size 1 as plain tensor parallelism)",
             help="set dp > 1 (the attention groups, tp GPUs each) or remove `dp_attention`")


@rule("P683", "sglang-context-length-beyond-positions", targets=(TARGET,), reads=("serve",))
def sglang_context_length(plan, c):
    from parc.model.rope import context_limit, context_words

    m, sv = plan.model, plan.serve
    limit = context_limit(m, TARGET)
    if plan.mode != "serve" or sv is None or not limit or sv.max_model_len is None \
            or sv.max_model_len <= limit:
        return
    c.report(c.at("serve.max_model_len", "serve"),
             f"SGLang refuses --context-length {sv.max_model_len} for model `{m.name}` ({context_words(m, TARGET)}) "
             "when it reads the model's config (\"User-specified context_length ... is greater than the derived "
             "context_length\") unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set",
             help=context_help(plan, c, limit), fixes=offer(plan, c, [{"serve.max_model_len": limit}])[1],
             related=[(c.at("model.max_positions", "model"), f"the model has {m.max_positions:,} positions")])


# the rules of the 2026 serving keys live beside these; importing registers them
from parc.targets.sglang import serving_rules  # noqa: E402,F401

from parc.targets.sglang import known_defects  # noqa: E402,F401  (P7xx: the known defects of each release)
