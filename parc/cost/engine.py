"""The serving engine's own limits for a plan: which engine serves it, how long a request may be,
how many requests one data-parallel rank runs at once and how many tokens one step schedules,
as the pinned release applies them.

A `serve` block that leaves ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens`` or
``gpu_memory_utilization`` out leaves them to the engine: the launch does not write them, and explain, the rules and the
planner compute with the engine's own default (its target folder's ``defaults.toml``, read from
the release's source) and say it is the engine's. A value the spec gives means what that engine
means by it: vLLM's ``--max-num-seqs`` is per data-parallel rank (each is an EngineCore with its
own scheduler), SGLang's ``--max-running-requests`` is the whole server's, divided over its
attention-DP ranks (``max(1, N // attn_dp_size)``, sglang 0.5.23 kv_cache_configurator.py), and
so is its chunked prefill size.

TensorRT-LLM (``target trtllm``) means its own by each: ``max_num_seqs`` is trtllm-serve's
``--max_batch_size`` and ``max_num_batched_tokens`` its ``--max_num_tokens``, per rank of
attention data parallelism; ``gpu_memory_utilization`` is its
``--kv_cache_free_gpu_memory_fraction``, a share of the memory free after the weights and a
profiling pass (:mod:`parc.cost.startup`); its capacity scheduler (the target's
``capacity_scheduler_policy``, default GUARANTEED_NO_EVICT) reserves each admitted request's
outputs to come (:attr:`Limits.reserved_output`).

The engine of a plan is the first of its targets that is vLLM, SGLang or TensorRT-LLM, directly or
as the engine a wrapper (lws, slurm, ...) runs; a plan that names none is costed as vLLM's newest.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("vllm", "sglang", "trtllm")
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Limits:
    """What one data-parallel rank of the engine runs at once (see the module doc)."""
    engine: str                   # vllm | sglang
    release: str                  # the pinned release
    max_model_len: int            # tokens of the longest request
    max_num_seqs: int             # requests per dp rank
    max_num_batched_tokens: int   # tokens one step schedules per dp rank
    attn_dp: int = 1              # the dp ranks one engine's limits are shared over (SGLang's attention DP)
    mixed: bool = True            # decode tokens ride in the prompt chunks' steps (vLLM); else apart (SGLang)
    reserved_output: int = 0      # of a running request's outputs to come, the most its KV admission reserves (SGLang)
    stated: tuple = ()            # which of the three the spec gave
    notes: tuple = field(default=())   # how each default was found, in words

    def to_json(self) -> dict:
        return {"engine": self.engine, "release": self.release, "max_model_len": self.max_model_len,
                "max_num_seqs_per_rank": self.max_num_seqs,
                "max_num_batched_tokens_per_rank": self.max_num_batched_tokens, "mixed_steps": self.mixed,
                "reserved_output_tokens": self.reserved_output,
                "stated": list(self.stated), "notes": list(self.notes)}


def engine_of(plan) -> tuple[str, str]:
    """(engine, release) that serves ``plan`` (see the module doc)."""
    from parc.model import targets as T

    for name, tgt in (plan.targets or {}).items():
        eng = name if name in ENGINES else T.engine(name, tgt.settings)
        if eng in ENGINES:
            return eng, T.pinned(plan, eng)
    return "vllm", T.newest("vllm")


def server_role(plan) -> str | None:
    """``prefill`` or ``decode``: the side of a disaggregated pair one engine serves (an instance
    of a pool, :func:`parc.model.pools.pool_plan`; or a one-side spec's ``disaggregation`` key of
    its SGLang block, SGLang's ``--disaggregation-mode``); None for a server that does both."""
    role = getattr(plan, "role", "")
    if role:
        return role
    if engine_of(plan)[0] == "sglang" and hasattr(plan, "target_settings"):
        return plan.target_settings("sglang").get("disaggregation") or None
    return None


def _table(engine: str) -> dict:
    from parc.model.targets import defaults

    return defaults(engine)


def attn_dp(plan) -> int:
    """The dp ranks an engine's limits are divided over: SGLang's attention data parallelism
    (``dp_attention`` with dp > 1), else 1."""
    srv = plan.serve
    dp_att = bool(srv is not None and srv.dp_attention) or bool(plan.target_settings("sglang").get("dp_attention"))
    return plan.mesh.dp if dp_att and plan.mesh.dp > 1 else 1


def _tier(engine: str, gpu) -> dict:
    """The row of ``engine``'s defaults.toml for ``gpu`` (by its total memory and name)."""
    gib = gpu.memory / GIB
    for t in _table(engine).get("tiers", []):
        if "below_gib" in t and gib < t["below_gib"]:
            return t
        if "min_gib" in t and gib >= t["min_gib"] and t.get("unless_name", "\0") not in gpu.name.lower():
            return t
    raise LookupError(f"{engine}/defaults.toml has no tier for {gpu.name}")


def batched_tokens(plan) -> int:
    """Tokens one step schedules on one dp rank: the spec's ``max_num_batched_tokens`` (SGLang:
    divided over its attention-DP ranks), else the engine's default for the GPU (vLLM: at most
    ``max_num_seqs × max_model_len`` where both are the spec's or its defaults)."""
    eng, _ = engine_of(plan)
    srv = plan.serve
    share = attn_dp(plan) if eng == "sglang" else 1
    given = srv.max_num_batched_tokens if srv is not None else None
    if given is not None:
        return max(1, given // share)
    row = _tier(eng, plan.cluster.gpu)
    tokens = row["max_num_batched_tokens"]
    if eng == "vllm":
        seqs = srv.max_num_seqs if srv is not None and srv.max_num_seqs is not None else row["max_num_seqs"]
        tokens = min(tokens, seqs * max_model_len(plan))
    return max(1, tokens // share)


def max_model_len(plan) -> int:
    """The longest request the engine takes: the spec's ``max_model_len``, else the engine's own
    default, the context it derives for the model from its positions and RoPE scaling
    (:func:`parc.model.rope.context_limit`; the model's ``seq_len`` where it states no positions)."""
    from parc.model.rope import context_limit

    srv = plan.serve
    if srv is not None and srv.max_model_len is not None:
        return srv.max_model_len
    return context_limit(plan.model, engine_of(plan)[0]) or plan.model.seq_len


def limits(plan, kv_tokens: int | None = None) -> Limits:
    """The engine's limits for ``plan``; ``kv_tokens`` (one dp rank's KV cache, in tokens) sizes
    SGLang's derived ``max_running_requests`` and caps its stated one (omitted: uncapped)."""
    eng, rel = engine_of(plan)
    srv = plan.serve
    share = attn_dp(plan) if eng == "sglang" else 1
    stated = tuple(k for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
                   if srv is not None and getattr(srv, k) is not None)
    notes = []
    mlen = max_model_len(plan)
    if "max_model_len" not in stated:
        notes.append(f"max_model_len {mlen:,}: the engine's default, the model's context")
    tokens = batched_tokens(plan)
    if "max_num_batched_tokens" not in stated:
        notes.append(f"max_num_batched_tokens {tokens:,} per rank: {_NAMES[eng]} {rel}'s default on "
                     f"{plan.cluster.gpu.name}" + (f", ÷ {share} attention-DP ranks" if share > 1 else ""))
    seqs = (_sglang_seqs if eng == "sglang" else _vllm_seqs)(plan, share, kv_tokens, mlen, tokens, notes)
    tab = _table(eng)
    reserve = int(tab.get("reserved_output_clip", 0))
    if eng == "trtllm":
        policy = capacity_policy(plan)
        reserve = int(mlen) if tab["reserves_outputs"][policy] else 0
        notes.append(f"capacity scheduler {policy.upper()}" + ("" if policy != tab["capacity_scheduler_policy"] else
                                                               f": TensorRT-LLM {rel}'s default")
                     + (": a request is admitted only while the KV cache holds its prompt and all its outputs"
                        if reserve else ": KV blocks are taken as tokens come"))
    return Limits(eng, rel or "", int(mlen), int(seqs), int(tokens), share, bool(tab.get("mixed_steps", True)),
                  reserve, stated, tuple(notes))


def capacity_policy(plan) -> str:
    """TensorRT-LLM's capacity scheduler policy for ``plan``: the target's
    ``capacity_scheduler_policy``, else the engine's default (trtllm/defaults.toml)."""
    return plan.target_settings("trtllm").get("capacity_scheduler_policy") or _table("trtllm")["capacity_scheduler_policy"]


def _vllm_seqs(plan, share, kv_tokens, mlen, tokens, notes) -> int:
    """vLLM's max_num_seqs per dp rank (TensorRT-LLM's max_batch_size per rank): the spec's, else
    its default for the GPU (vLLM's at most the step's tokens)."""
    srv = plan.serve
    if srv is not None and srv.max_num_seqs is not None:
        return srv.max_num_seqs
    eng, rel = engine_of(plan)
    seqs = _tier(eng, plan.cluster.gpu)["max_num_seqs"]
    seqs = min(seqs, tokens) if eng == "vllm" else seqs
    notes.append(f"max_num_seqs {seqs:,} per rank: {_NAMES[eng]} {rel}'s default on {plan.cluster.gpu.name}")
    return seqs


def _sglang_seqs(plan, share, kv_tokens, mlen, tokens, notes) -> int:
    """SGLang's running requests per attention-DP rank: the spec's total divided over the ranks,
    else derived from the KV cache; at most the KV tokens // 2 either way."""
    tab, srv = _table("sglang"), plan.serve
    cap = max(1, kv_tokens // tab["tokens_per_request"]) if kv_tokens else None
    given = srv.max_num_seqs if srv is not None else None
    if given is not None:
        seqs = max(1, given // share)
        if share > 1:
            notes.append(f"max_num_seqs {given:,} is SGLang's whole server: {seqs:,} per attention-DP rank "
                         f"(÷ {share})")
        return min(seqs, cap) if cap else seqs
    if not kv_tokens:
        return tab["seqs_most"]
    derived = max(min(int(kv_tokens / mlen * tab["seqs_per_context"]), tab["seqs_most"]), tab["seqs_least"])
    seqs = min(derived, cap)
    notes.append(f"max_num_seqs {seqs:,} per rank: SGLang {engine_of(plan)[1]}'s default from its KV cache, "
                 f"min(clamp({kv_tokens:,} / {mlen:,} × {tab['seqs_per_context']}, {tab['seqs_least']}, "
                 f"{tab['seqs_most']}), {kv_tokens:,} // {tab['tokens_per_request']})")
    return seqs


_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def display(engine: str) -> str:
    """The engine's name as messages write it (``vLLM``)."""
    return _NAMES[engine]


def memory_fraction(plan) -> float:
    """The share of a GPU's memory the engine takes for weights and KV cache: the spec's
    ``gpu_memory_utilization``, else the engine's own default (vLLM: CacheConfig's; SGLang: the
    mem_fraction_static it derives, :func:`_sglang_fraction`). ``plan`` may be a planner problem
    without a mesh: SGLang's fraction is then its largest, at tp = pp = 1."""
    srv = plan.serve
    if srv is not None and srv.gpu_memory_utilization is not None:
        return srv.gpu_memory_utilization
    eng, _ = engine_of(plan)
    if eng == "sglang":
        return _sglang_fraction(plan)
    return float(_table(eng)["gpu_memory_utilization"])


def memory_fraction_note(plan) -> str | None:
    """Whose the fraction is and how it was found, in words (``vLLM 0.33's default: ...``); None
    where the spec gives it."""
    srv = plan.serve
    if srv is not None and srv.gpu_memory_utilization is not None:
        return None
    eng, rel = engine_of(plan)
    how = {"sglang": "its mem_fraction_static from the GPU's memory, the chunked prefill size, tp·pp and its "
                     "CUDA graphs",
           "trtllm": "kv_cache_free_gpu_memory_fraction, of the memory free after the weights and a profiling pass"
           }.get(eng, "CacheConfig.gpu_memory_utilization")
    return f"{_NAMES[eng]} {rel}'s default: {how}"


def sglang_chunk(plan) -> int:
    """SGLang's ``--chunked-prefill-size``: the whole server's, the spec's
    ``max_num_batched_tokens`` or its default for the GPU."""
    srv = plan.serve
    given = srv.max_num_batched_tokens if srv is not None else None
    return given if given is not None else _tier("sglang", plan.cluster.gpu)["max_num_batched_tokens"]


def _sglang_fraction(plan) -> float:
    """SGLang's mem_fraction_static left out (the formula and its source: sglang/defaults.toml
    [mem_fraction]; its CUDA graphs as :mod:`parc.cost.startup` counts them), as the server
    derives it: a prefill server (:func:`server_role`) reserves no decode graph nor DeepEP's
    decode buffers, a decode server's activations scale with its running requests (times the
    tokens each verifies) instead of the chunk. A planner problem without a mesh gets the
    fraction before the graphs and the floor: SGLang's largest."""
    from parc.cost.startup import MIB, sglang_capture, sglang_graph_bytes, table as startup_table

    k = _table("sglang")["mem_fraction"]
    mib = plan.cluster.gpu.memory / MIB
    srv, mesh = plan.serve, getattr(plan, "mesh", None)
    tokens = sglang_chunk(plan)
    cap = sglang_capture(plan) if mesh is not None else None
    if server_role(plan) == "decode" and cap is not None:
        running = srv.max_num_seqs if srv is not None and srv.max_num_seqs else max(cap.full, default=1)
        tokens = running * (1 + (srv.speculative_tokens or 1) if srv.speculative else 1)
    tp, pp = (mesh.tp * attn_dp(plan), mesh.pp) if mesh is not None else (1, 1)
    reserve = (startup_table()["sglang"]["metadata_mib"] + max(tokens, k["least_activation_tokens"])
               * k["mib_per_activation_token"] + tp * pp / 8 * k["mib_per_8_gpus"])
    if mesh is None:
        return round((mib - reserve) / mib, 3)
    deepep = plan.target_settings("sglang").get("moe_a2a_backend") == "deepep"
    reserve += sglang_graph_bytes(plan, cap) / MIB
    if deepep and cap.piecewise:
        reserve += k["deepep_prefill_graph_mib"]
    if mib > k["least_reserve_above_gib"] * 1024:
        reserve = max(reserve, k["least_reserve_mib"])
    if deepep and cap.full:   # reserve_for_deepep_a2a_mb: the buffers its decode graph captures
        reserve += k["deepep_mib"]
    return round((mib - reserve) / mib, 3)
