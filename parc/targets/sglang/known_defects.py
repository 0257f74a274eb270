"""SGLang's known defects (P7xx): plans that meet a bug of the release they pin, each bounded in
rules.toml by the releases that have it (`since`) and the one that fixed it (`until`), with the
public issues that reported it. The checks never test a version: the registry runs each only for
the releases its entry names."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.base import settings
from parc.targets.sglang import TARGET, transfer_backend

# the transfer backends whose KV managers (disaggregation/{mooncake,nixl}/conn.py) send the
# sliding-window state of a hybrid model
SWA_SENDERS = ("mooncake", "mooncake_tcp", "nixl")
NO_HYBRID_SWA = "--disable-hybrid-swa-memory"
REFUSAL = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models"


def swa_pools(plan):
    """(prefill, decode) of a disaggregated plan whose model keeps a sliding-window KV pool of its
    own in SGLang (a model without MLA whose layers attend locally, gpt-oss and Llama 4 among
    them: configs/model_config.py is_hybrid_swa_model) and whose pools' attention tensor
    parallelism differs; None otherwise. With dp_attention a server's attention groups have the
    mesh's tp ranks, as without it, so the pools' tp is the attn_tp_size SGLang compares."""
    sv, md = plan.serve, plan.model
    if plan.mode != "serve" or sv is None or len(plan.pools) != 2 or not md.attention_window or md.is_mla:
        return None
    if transfer_backend(plan) not in SWA_SENDERS or NO_HYBRID_SWA in (settings(plan, TARGET).get("extra_args") or []):
        return None
    p, d = plan.pools
    return (p, d) if p.mesh.tp != d.mesh.tp else None


def _report(plan, c, what: str, said: str) -> None:
    p, d = plan.pools
    fixed, words = c.fixed_by()
    pin = f"pin `version = \"{fixed}\"` in `target sglang`, " if fixed else ""
    c.report(c.at("decode.tp", "decode", "serve"),
             f"{c.release} cannot move the sliding-window KV cache of `{plan.model.name}` {what} (prefill tp = "
             f"{p.mesh.tp}, decode tp = {d.mesh.tp}): the servers start, and the first request fails in the "
             f"prefill's transfer worker (\"{said}\") while the client waits for an answer ({c.reports()}); "
             f"{words}",
             help=f"{pin}give both pools the same tp, or add `{NO_HYBRID_SWA}` to `extra_args` (one KV pool for "
                  "every layer: the sliding-window layers then hold the whole context)",
             related=[(c.at("prefill.tp", "prefill"), f"prefill tp = {p.mesh.tp}")])


@rule("P702", "sglang-swa-hybrid-heterogeneous-tp", targets=(TARGET,), reads=(), whole=True)
def sglang_swa_hetero_tp(plan, c):
    """SGLang 0.5.21 (and the releases before it) raise in the KV sender for the sliding-window
    state of a model without MLA between pools of different attention tp; 0.5.22 sends it in
    head slices (disaggregation/{mooncake,nixl}/conn.py _send_swa_state_slice)."""
    if swa_pools(plan) is not None:
        _report(plan, c, "between pools of different tensor parallelism", REFUSAL + " yet.")


@rule("P703", "sglang-swa-hybrid-heterogeneous-tp-pipeline", targets=(TARGET,), reads=(), whole=True)
def sglang_swa_hetero_tp_pp(plan, c):
    """From 0.5.22 SGLang slices the sliding-window state by KV heads between pools of different
    attention tp, but not out of a prefill server with pipeline parallelism, whose SWA pool starts
    every stage at layer 0 (disaggregation/common/conn.py _get_mha_head_slice_blocks)."""
    pools = swa_pools(plan)
    if pools is not None and pools[0].mesh.pp > 1:
        _report(plan, c, f"out of a prefill pool with pipeline parallelism (pp = {pools[0].mesh.pp}) into a "
                         "decode pool of another tensor parallelism", REFUSAL + " with pipeline parallelism yet.")
