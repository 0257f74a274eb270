"""The MoE router, the token dispatcher and the norm epsilon as Megatron-LM spells them
(TransformerConfig's moe_router_*, moe_token_dispatcher_type, moe_flex_dispatcher_backend and
layernorm_epsilon, Megatron-LM 0.19.2). A model fact is written only where the model states it:
Megatron-LM's defaults are a softmax router without groups, expert bias or scaling, the top-k taken
before the softmax, and a norm epsilon of 1e-5. The dispatcher and the router's dtype are how
Megatron-LM runs the model, so they are `target megatron` keys, as is the benchmarks' forced even
expert load."""
from __future__ import annotations

from parc.targets.base import settings


def router_lines(m, F) -> list[list]:
    """The model's router (flags.toml). ``--moe-router-pre-softmax`` only with softmax scores:
    with sigmoid scores Megatron-LM scores every expert before the top-k and renormalises the
    chosen whatever the switch says (moe_utils.py topk_routing_with_score_function)."""
    out: list[list] = []
    if m.router_score != "softmax":
        out.append([F("moe_router_score_function"), m.router_score])
    if m.router_groups > 1:
        out.append([F("moe_router_num_groups"), m.router_groups])
        out.append([F("moe_router_group_topk"), m.router_group_topk or m.router_groups])
    if m.router_expert_bias:
        out.append([F("moe_router_enable_expert_bias")])
    if m.router_scale is not None and m.router_scale != 1.0:
        out.append([F("moe_router_topk_scaling_factor"), f"{m.router_scale:g}"])
    if m.router_pre_softmax and m.router_score == "softmax":
        out.append([F("moe_router_pre_softmax")])
    return out


def dispatcher_lines(plan, F) -> list[list]:
    """The token dispatcher: the target's `token_dispatcher` (flex where only a flex backend is
    given), else alltoall with ep > 1 and Megatron-LM's allgather otherwise; the router's dtype
    where given, and the benchmarks' forced even load (``force_load_balancing``: random logits)."""
    s = settings(plan, "megatron")
    kind = s.get("token_dispatcher") or ("flex" if s.get("flex_dispatcher_backend") else None)
    if kind is None and plan.mesh.ep > 1:
        kind = "alltoall"
    out: list[list] = [[F("moe_token_dispatcher_type"), kind]] if kind else []
    if s.get("flex_dispatcher_backend") and kind == "flex":
        out.append([F("moe_flex_dispatcher_backend"), s["flex_dispatcher_backend"]])
    if s.get("router_dtype"):
        out.append([F("moe_router_dtype"), s["router_dtype"]])
    if s.get("force_load_balancing"):
        out.append([F("moe_router_force_load_balancing")])
    return out


def norm_lines(m, F) -> list[list]:
    """``--norm-epsilon`` where the model states its epsilon (Megatron-LM's default 1e-5)."""
    return [] if m.norm_eps is None else [[F("norm_epsilon"), f"{m.norm_eps:g}"]]
