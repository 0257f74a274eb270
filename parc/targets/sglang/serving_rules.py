"""SGLang's rules for the serving keys of 2026: attention data parallelism's spelling, decode
context parallelism, the DeepEP mode, EPLB and prefill/decode disaggregation. Each follows
SGLang's own source (named in parc/targets/sglang/rules.toml); where SGLang's argument check
accepts a plan that then fails when the model loads or serves wrong results, the message says so."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import divisors, join
from parc.targets.base import settings
from parc.targets.sglang import DEEPEP_MODE_BACKENDS, KV_TRANSFER, TARGET, dp_attention, server_ep
from parc.words import count


def _serving(plan) -> bool:
    return plan.mode == "serve" and plan.serve is not None


@rule("P623", "sglang-dp-attention-target-key", severity=WARNING, targets=(TARGET,), reads=())
def sglang_dp_attention_key(plan, c):
    if not _serving(plan) or "dp_attention" not in settings(plan, TARGET):
        return
    c.report(c.at(f"target.{TARGET}.dp_attention", f"target.{TARGET}"),
             "`dp_attention` in `target sglang` is the older spelling of `serve { dp_attention = true }`: "
             "parc still reads it, but explain, the planner and the vllm target read only the serve block's",
             help="move `dp_attention` into the `serve` block")


@rule("P624", "sglang-dcp-divides-tp", targets=(TARGET,), reads=("tp",))
def sglang_dcp_divides_tp(plan, c):
    m = plan.mesh
    if not _serving(plan) or m.dcp <= 1 or m.tp % m.dcp == 0:
        return
    ok = [d for d in divisors(m.tp) if d > 1]
    c.report(c.at("mesh.dcp", "mesh"),
             f"SGLang accepts --dcp-size {m.dcp} with an attention tensor-parallel group of tp = {m.tp}, but the "
             f"model fails to start: it cuts each TP group into decode context-parallel groups of {m.dcp} consecutive "
             f"ranks (sglang/srt/distributed/parallel_state.py initialize_model_parallel: \"Must be a divisor of "
             f"tp_size\"), and {m.tp} ranks leave a group short" + (" or one that straddles two attention "
                                                                  "data-parallel groups" if dp_attention(plan) else ""),
             help=(f"use dcp = one of {join(ok)}" if ok else "remove `dcp`: tp = 1 has no KV cache to split"),
             related=[(c.at("mesh.tp", "mesh"), f"tp = {m.tp}")])


@rule("P625", "sglang-dcp-kv-heads", targets=(TARGET,), reads=("tp",))
def sglang_dcp_kv_heads(plan, c):
    m, md = plan.mesh, plan.model
    if not _serving(plan) or m.dcp <= 1 or m.tp % m.dcp or md.kv_lora_rank:
        return  # no dcp, P624's, or MLA: every rank holds the one latent KV head
    # SGLang's ModelConfig.get_num_kv_heads(tp, dcp) = max(1, kv_heads // (tp // dcp))
    held, plain = max(1, md.kv_heads // (m.tp // m.dcp)), max(1, md.kv_heads // m.tp)
    if held == plain:
        return
    ok = [d for d in divisors(m.tp) if 1 < d and md.kv_heads * d <= m.tp]
    c.report(c.at("mesh.dcp", "mesh"),
             f"SGLang serves dcp = {m.dcp} at tp = {m.tp} with wrong results for a model of {md.kv_heads} KV heads: "
             f"the ranks of a decode context-parallel group must hold the same KV heads, which they do only while "
             f"kv_heads · dcp ≤ tp ({md.kv_heads} · {m.dcp} > {m.tp}); each rank would hold {held} of its group's "
             "heads instead of all, and the KV cache is silently corrupted (SGLang checks it only on Intel XPU, "
             "arg_groups/attention_hook.py _check_xpu_dcp)",
             help=(f"use dcp = one of {join(ok)}" if ok else
                   f"remove `dcp`, or raise tp to {md.kv_heads * m.dcp} so that each KV head has {m.dcp} copies to split"),
             related=[(c.at("model", "model"), f"{md.kv_heads} KV heads")])


@rule("P626", "sglang-deepep-mode-without-deepep", severity=WARNING, targets=(TARGET,), reads=())
def sglang_deepep_mode(plan, c):
    s = settings(plan, TARGET)
    if not _serving(plan) or not s.get("deepep_mode") or s.get("moe_a2a_backend") in DEEPEP_MODE_BACKENDS:
        return
    c.report(c.at(f"target.{TARGET}.deepep_mode", f"target.{TARGET}"),
             f"deepep_mode = {s['deepep_mode']} does nothing without a DeepEP or MoRI all-to-all backend: SGLang "
             f"reads --deepep-mode only for moe_a2a_backend {join(DEEPEP_MODE_BACKENDS)}"
             + ("" if plan.model.is_moe else f" (and model `{plan.model.name}` has no experts)"),
             help="set `moe_a2a_backend = deepep` or remove `deepep_mode`")


@rule("P627", "sglang-eplb-needs-ep", targets=(TARGET,), reads=("ep", "dp", "tp"))
def sglang_eplb_needs_ep(plan, c):
    if not _serving(plan) or not plan.serve.eplb or server_ep(plan) > 1:
        return
    why = (f"model `{plan.model.name}` has no experts" if not plan.model.is_moe else
           "the spec's ep is 1, so every rank holds every expert and there is nothing to re-place")
    c.report(c.at("serve.eplb", "serve"),
             f"SGLang refuses --enable-eplb without expert parallelism (\"assert ep_size > 1\", "
             f"arg_groups/parallel_hook.py handle_eplb_and_dispatch): {why}",
             help="set ep > 1 (with dp_attention, ep = dp · tp) or remove `eplb`")


@rule("P628", "sglang-redundant-experts-divide", targets=(TARGET,), reads=("ep", "dp", "tp"))
def sglang_redundant_experts(plan, c):
    if not _serving(plan) or not plan.model.is_moe or not plan.serve.redundant_experts:
        return
    ep, n, r = server_ep(plan), plan.model.experts, plan.serve.redundant_experts
    if ep <= 1 or (n + r) % ep == 0:
        return
    up = ep - (n + r) % ep
    c.report(c.at("serve.redundant_experts", "serve"),
             f"SGLang accepts --ep-num-redundant-experts {r} but the model fails to load: its {n} + {r} = {n + r} "
             f"physical expert slots must split evenly over ep = {ep} ranks (sglang/srt/eplb/expert_location.py "
             "ExpertLocationMetadata.num_local_physical_experts asserts the remainder is 0)",
             help=f"use redundant_experts = {r + up}" + (f" or {r - (ep - up)}" if r - (ep - up) >= 0 else "")
                  + f" (a multiple of {ep} in all)")


def _disaggregated(plan) -> bool:
    return bool(plan.pools) or bool(settings(plan, TARGET).get("disaggregation"))


@rule("P639", "sglang-kv-transfer", targets=(TARGET,), reads=(), whole=True)
def sglang_kv_transfer(plan, c):
    kv = plan.serve.kv_transfer if _serving(plan) else None
    if not kv or kv in KV_TRANSFER or not _disaggregated(plan):
        return
    c.report(c.at("serve.kv_transfer", "serve"),
             f"SGLang has no {kv} KV transfer: --disaggregation-transfer-backend takes mooncake, nixl, mooncake_tcp, "
             "mori, ascend and fake (arg_groups/choices.py DISAGG_TRANSFER_BACKEND_CHOICES); "
             f"{kv} is a vLLM KV connector",
             help="use kv_transfer = nixl or mooncake")


@rule("P640", "sglang-transfer-backend-disagrees", targets=(TARGET,), reads=(), whole=True)
def sglang_transfer_conflict(plan, c):
    kv = plan.serve.kv_transfer if _serving(plan) else None
    tb = settings(plan, TARGET).get("transfer_backend")
    if not kv or not tb or KV_TRANSFER.get(kv, kv) == tb:
        return
    c.report(c.at(f"target.{TARGET}.transfer_backend", f"target.{TARGET}"),
             f"two KV transfers: serve.kv_transfer = {kv} and the sglang block's transfer_backend = {tb}; "
             "SGLang runs one --disaggregation-transfer-backend",
             help="remove `transfer_backend` (serve.kv_transfer says it for every engine), or make them agree",
             related=[(c.at("serve.kv_transfer", "serve"), f"kv_transfer = {kv}")])


@rule("P645", "sglang-disaggregation-with-pools", targets=(TARGET,), reads=(), whole=True)
def sglang_disaggregation_with_pools(plan, c):
    side = settings(plan, TARGET).get("disaggregation")
    if not plan.pools or not side:
        return
    c.report(c.at(f"target.{TARGET}.disaggregation", f"target.{TARGET}"),
             f"`disaggregation = {side}` compiles one side of a pair from its own spec, but this spec has both "
             "pools: each pool's servers get their own --disaggregation-mode (prefill.sh and decode.sh)",
             help="remove `disaggregation`")


@rule("P649", "sglang-pd-decode-dcp-needs-mla", targets=(TARGET,), reads=(), whole=True)
def sglang_pd_decode_dcp(plan, c):
    """A decode server with decode context parallelism checks, when it first fetches its prefill
    server's parallel info, that its KV pool is MLA or hybrid-MLA (disaggregation/common/conn.py
    try_ensure_parallel_info, 0.5.20 and later)."""
    if not _serving(plan) or plan.model.is_mla:
        return
    side = settings(plan, TARGET).get("disaggregation")
    decode = next((p for p in plan.pools if p.name == "decode"), None)
    if decode is not None and decode.mesh.dcp > 1:
        dcp, at = decode.mesh.dcp, c.at("decode.dcp", "decode", "serve")
    elif side == "decode" and not plan.pools and plan.mesh.dcp > 1:
        dcp, at = plan.mesh.dcp, c.at("mesh.dcp", "mesh")
    else:
        return
    c.report(at, f"SGLang's decode server with dcp = {dcp} refuses the KV of `{plan.model.name}`, which has no "
                 f"multi-head latent attention: \"PD decode DCP requires an MLA or hybrid-MLA KV pool\", raised when "
                 f"it first fetches the prefill server's parallel info, so no request is served",
             help="remove `dcp` from the decode pool (raise its tp instead), or serve an MLA model")
