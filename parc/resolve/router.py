"""P027: an MoE router whose keys contradict each other, or a Megatron-LM token dispatcher whose
backend is not the flex one's. Megatron-LM refuses each (TransformerConfig.__post_init__ in
megatron/core/transformer/transformer_config.py, 0.19.2); Hugging Face's DeepSeek gate
(modeling_deepseek.py MoEGate) computes the same groups."""
from __future__ import annotations


def router_faults(r, m, head) -> None:
    """P027 for model ``m``'s router: the expert bias without sigmoid scores, groups that do not
    split the experts evenly, more groups kept than there are."""
    def span(key):
        return r.spans.get(f"model.{key}", head)
    if not m.is_moe:
        return
    if m.router_expert_bias and m.router_score != "sigmoid":
        r.err("P027", f"`router_expert_bias = true` with `router_score = {m.router_score}`: the expert bias of "
                      "auxiliary-loss-free balancing is added to sigmoid scores, and Megatron-LM refuses it otherwise",
              span("router_expert_bias"), help="set `router_score = sigmoid`, or remove `router_expert_bias`")
    if m.router_groups > 1 and m.experts % m.router_groups:
        r.err("P027", f"`router_groups = {m.router_groups}` does not split the {m.experts} experts evenly: "
                      "group-limited routing views the scores as groups of equal size",
              span("router_groups"), help="use a number of groups that divides `experts`")
    if m.router_group_topk and m.router_group_topk > max(m.router_groups, 1):
        r.err("P027", f"`router_group_topk = {m.router_group_topk}` keeps more groups than the "
                      f"{max(m.router_groups, 1)} there are", span("router_group_topk"),
              help=f"use `router_group_topk` of at most {max(m.router_groups, 1)}")


def dispatcher_fault(r, targets: dict) -> None:
    """P027 where target megatron names a flex backend beside another dispatcher: Megatron-LM reads
    the backend only for the flex dispatcher (and refuses ncclep without it)."""
    t = targets.get("megatron") if targets else None
    s = t.settings if t else {}
    kind = s.get("token_dispatcher")
    if s.get("flex_dispatcher_backend") and kind and kind != "flex":
        r.err("P027", f"`flex_dispatcher_backend = {s['flex_dispatcher_backend']}` with `token_dispatcher = "
                      f"{kind}`: the backend is the flex dispatcher's, and Megatron-LM would not use it",
              r.spans["target.megatron.flex_dispatcher_backend"],
              help="set `token_dispatcher = flex`, or remove `flex_dispatcher_backend`")
