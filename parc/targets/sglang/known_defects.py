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


def nixl_pools(plan):
    """(prefill, decode) of a disaggregated plan whose KV cache of a model without MLA moves over
    SGLang's NIXL sender between pools of different attention tp (the pools' tp: see
    :func:`swa_pools`); None otherwise."""
    sv, md = plan.serve, plan.model
    if plan.mode != "serve" or sv is None or len(plan.pools) != 2 or md.is_mla or transfer_backend(plan) != "nixl":
        return None
    p, d = plan.pools
    return (p, d) if p.mesh.tp != d.mesh.tp else None


def _nixl_report(plan, c, what: str, said: str, help: str) -> None:
    p, d = plan.pools
    fixed, words = c.fixed_by()
    cited = c.reports()
    c.report(c.at("decode.tp", "decode", "serve"),
             f"{c.release} over NIXL {what} (prefill tp = {p.mesh.tp}, decode tp = {d.mesh.tp}, "
             f"{plan.model.kv_heads} KV heads): {said}{' (' + cited + ')' if cited else ''}; {words}",
             help=(f"pin `version = \"{fixed}\"` in `target sglang`, " if fixed else "") + help,
             related=[(c.at("prefill.tp", "prefill"), f"prefill tp = {p.mesh.tp}")])


@rule("P708", "sglang-nixl-heterogeneous-tp-hang", targets=(TARGET,), reads=(), whole=True)
def sglang_nixl_hetero_tp_hang(plan, c):
    """Up to 0.5.11 SGLang's NIXL sender tags a KV chunk with its pipeline rank: a decode rank
    that gathers a model's KV heads from several prefill ranks (prefill tp > decode tp) counts
    one sender and waits for ever (sglang PR #22145, 0.5.12: the engine rank)."""
    pools = nixl_pools(plan)
    if pools is not None and pools[0].mesh.tp > pools[1].mesh.tp:
        _nixl_report(plan, c, "cannot hand a model without MLA from a prefill pool of larger tp to the decode pool",
                     f"each decode rank waits for the KV heads of {pools[0].mesh.tp // pools[1].mesh.tp} prefill ranks, "
                     "whose chunks all carry pipeline rank 0, so it counts one: the servers start and the first "
                     "request never finishes",
                     "give the decode pool the prefill's tp or more, or use `kv_transfer = mooncake`")


@rule("P709", "sglang-nixl-decode-tp-beyond-kv-heads", targets=(TARGET,), reads=(), whole=True)
def sglang_nixl_decode_beyond_kv_heads(plan, c):
    """0.5.13 to 0.5.16 interleave decode_tp / prefill_tp head groups in the prefill's NIXL source
    descriptors, more than a prefill rank holds where decode ranks replicate KV heads (decode tp
    above the KV heads): NIXL_ERR_NOT_FOUND on the first request (sglang PR #31968, 0.5.17)."""
    pools = nixl_pools(plan)
    heads = plan.model.kv_heads
    if pools is not None and pools[0].mesh.tp < pools[1].mesh.tp and pools[1].mesh.tp > heads:
        _nixl_report(plan, c, "cannot hand a model's KV cache to a decode pool of larger tp than the prefill's "
                              "and than its KV heads",
                     "the prefill's transfer descriptors address past its KV cache and the first request fails "
                     "(\"NIXL_ERR_NOT_FOUND\")",
                     f"keep the decode tp at {heads} or less, or give both pools the same tp")
