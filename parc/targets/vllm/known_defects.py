"""vLLM's known defects (P7xx): plans that meet a bug of the release they pin, each bounded in
rules.toml by the releases that have it (`since`) and the one that fixed it (`until`), with the
public issue that reported it. The check itself never tests a version: the registry runs it only
for the releases its entry names."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.vllm import TARGET


def _nixl_pools(plan):
    """(prefill, decode) of a disaggregated plan whose KV cache moves over NixlConnector."""
    sv = plan.serve
    if plan.mode != "serve" or sv is None or sv.kv_transfer != "nixl" or len(plan.pools) != 2:
        return None
    return plan.pools


@rule("P701", "vllm-nixl-prefill-replicates-kv", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_replicated_kv(plan, c):
    """NixlConnector's handshake (nixl/base_worker.py _validate_remote_agent_handshake) asserts
    that a decode instance of smaller tp never reads from a prefill instance whose tp exceeds the
    model's KV heads, for a model without MLA: such a prefill rank holds a copy of a head, not a
    slice, and the decode side has no mapping for it."""
    pools = _nixl_pools(plan)
    md = plan.model
    if pools is None or md.is_mla or not md.kv_heads:
        return
    p, d = pools
    pt, dt = p.mesh.tp, d.mesh.tp
    if not (dt < pt and pt % dt == 0 and pt > md.kv_heads):   # P673 says it where neither divides
        return
    _, words = c.fixed_by()
    c.report(c.at("decode.tp", "decode", "serve"),
             f"{c.release} cannot pull the KV cache of a prefill instance whose tp = {pt} exceeds the "
             f"{md.kv_heads} KV heads of `{md.name}` into a decode instance of smaller tp = {dt}: each prefill rank "
             f"holds a copy of a KV head, not a slice, and NixlConnector's handshake asserts against it "
             f"(\"num_kv_heads > tp_size with P_TP > D_TP not supported\"), so every request's KV transfer fails "
             f"and the decode instances recompute or drop it ({c.reports()}); {words}",
             help=f"give the decode pool tp = {pt} or more, or the prefill pool a tp of at most "
                  f"{md.kv_heads} (the model's KV heads) that the decode tp divides",
             related=[(c.at("prefill.tp", "prefill"), f"prefill tp = {pt}")])
