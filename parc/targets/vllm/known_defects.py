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
    slice, and the decode side has no mapping for it. A hybrid model (Mamba or linear-attention
    layers) is exempt: vLLM maps its replicated heads ("Mamba models can have replicated FA KV
    with tp_ratio < 0")."""
    pools = _nixl_pools(plan)
    md = plan.model
    if pools is None or md.is_mla or md.hybrid or not md.kv_heads:
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


def hybrid_block_shares(plan):
    """(prefill, decode) of a disaggregated plan over NixlConnector whose model is hybrid, each the
    share of the model's recurrent state one of its GPUs holds per share of a token's KV, as the
    whole model's (state / KV) × this number; None for another plan. vLLM sizes a hybrid model's
    attention block so that one block's KV holds one GPU's recurrent state (platforms/interface.py
    _align_hybrid_block_size): the state splits over tp, the KV heads only down to one a GPU
    (ModelConfig.get_num_kv_heads: max(1, kv_heads // tp); an MLA latent head is never split), so
    a GPU's block holds ``1 / max(tp, kv_heads)`` of the state's tokens, ``1 / tp`` with MLA, and
    two pools whose numbers differ start with KV blocks of different sizes. parc compares these,
    not the block sizes, which vLLM rounds up to its attention kernel's alignment."""
    pools = _nixl_pools(plan)
    if pools is None or not plan.model.hybrid:
        return None
    md = plan.model
    return tuple(p.mesh.tp if md.is_mla else max(p.mesh.tp, md.kv_heads or 1) for p in pools)


def _block_report(plan, c, what: str, said: str, help: str) -> None:
    p, d = plan.pools
    md = plan.model
    heads = ("its latent KV head is never split" if md.is_mla else
             f"its {md.kv_heads} KV heads stop splitting past tp = {md.kv_heads}")
    c.report(c.at("decode.tp", "decode", "serve"),
             f"{c.release} {what}: `{md.name}` is hybrid, and vLLM sizes its KV blocks by the recurrent "
             f"state one GPU holds, which splits over tp while {heads}, so prefill tp = {p.mesh.tp} and "
             f"decode tp = {d.mesh.tp} start with "
             f"KV blocks of different sizes and NixlConnector's handshake asserts against them (\"{said}\"): every "
             f"request's KV transfer fails ({c.reports()}); {c.fixed_by()[1]}; parc compares the state each GPU "
             f"holds, not the block sizes vLLM rounds them to, and is stricter where both round alike",
             help=help, related=[(c.at("prefill.tp", "prefill"), f"prefill tp = {p.mesh.tp}")])


@rule("P704", "vllm-nixl-hybrid-block-size", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_hybrid_block_size(plan, c):
    """vLLM 0.26's NixlConnector asserts in the handshake that a hybrid model's (hybrid KV cache
    manager's) remote block size equals its own (nixl/base_worker.py _validate_remote_agent_handshake,
    "HMA does not support different remote block size yet"); 0.27 maps the blocks by their ratio
    where the decode instance's block is a multiple of the prefill's: the decode pool's share is
    the smaller one (P705 says the other way round)."""
    shares = hybrid_block_shares(plan)
    if shares is None or not shares[1] < shares[0]:
        return
    _block_report(plan, c, "cannot move the KV cache between pools whose KV block sizes differ",
                  "HMA does not support different remote block size yet", _pin_or(c, "give both pools the same tp"))


@rule("P705", "vllm-nixl-hybrid-decode-block-smaller", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_hybrid_decode_block_smaller(plan, c):
    """Every vLLM release parc knows pulls a prefilled request's blocks only into decode blocks of
    the same size or a multiple of it (kv_connector/utils.py TransferTopology.block_size_ratio,
    "Local block size ... is not divisible by remote block size"; nixl/base_worker.py "Only nP < nD
    supported currently"): a hybrid model's decode pool whose GPUs hold a smaller share of the
    recurrent state than the prefill's has smaller blocks."""
    shares = hybrid_block_shares(plan)
    if shares is None or not shares[1] > shares[0]:
        return
    _block_report(plan, c, "cannot pull the KV cache into decode blocks smaller than the prefill's",
                  "Local block size ... is not divisible by remote block size",
                  f"give both pools the same tp (prefill tp = {plan.pools[1].mesh.tp})")


@rule("P706", "vllm-nixl-prefill-context-parallel", targets=(TARGET,), reads=(), whole=True)
def vllm_nixl_prefill_cp(plan, c):
    """NixlConnector with prefill context parallelism on the prefill (kv_producer) pool: 0.26 to
    0.28's connector names its workers by tp rank alone (nixl/base_worker.py: tp_rank, world_size
    of the tp group), so the cp ranks of one tp rank, which hold the same KV, publish and count as
    one; 0.29's VllmConfig.__post_init__ asserts prefill_context_parallel_size == 1 for any
    NixlConnector; 0.30 runs it. P629 says the decode pool's case, which no release runs."""
    pools = _nixl_pools(plan)
    if pools is None or pools[0].mesh.cp <= 1:
        return
    cp = pools[0].mesh.cp
    why = (f"up to 0.28 the connector names its workers by tp rank alone, so the {cp} prefill-context-parallel "
           f"ranks that hold the same KV heads publish one handshake and one completion between them (the defect "
           f"vLLM PR #52779 fixed), and 0.29's configuration refuses it outright (\"NIXL does not support prefill "
           f"context parallelism.\")")
    c.report(c.at("prefill.cp", "prefill", "serve"),
             f"{c.release} cannot serve the prefill pool's cp = {cp} under NixlConnector: {why}; {c.fixed_by()[1]}",
             help=_pin_or(c, "give the prefill pool cp = 1"))


def _pin_or(c, other: str) -> str:
    """A known defect's help: pin the release that fixed it (where one did), or ``other``."""
    fixed, _ = c.fixed_by()
    return f"pin `version = \"{fixed}\"` in `target vllm`, or {other}" if fixed else other
