"""The serving parts of ``parc explain``: the engine's memory rows, the KV cache per token and per
sequence, what fits, the engine's limits (the spec's, or the engine's own defaults), and the
speed at the workload (prefill, the decode and mixed steps, TTFT by term, TPOT, ITL, output
tokens/s) with the roofline each number comes from; for a disaggregated plan every pool and the
KV transfer. Every number is :attr:`parc.cost.estimate.Estimate.serving`'s or the estimate's own.
TTFT, TPOT and ITL are as :mod:`parc.cost.serving` defines them (docs/language.md)."""
from __future__ import annotations

import math

from parc.report.term import indent, rows as aligned, table
from parc.units import nbytes, percent, seconds
from parc.words import count

DEFINITIONS = ("TTFT: from a request's arrival to its first token; TPOT: (E2E − TTFT) / (output tokens − 1); "
               "ITL: between two streamed outputs (as vllm bench serve reports them)")
TERMS = {"wait": "the step in progress", "queue": "queue", "prefill": "prefill", "kv_transfer": "KV transfer",
         "first_decode": "first decode step"}
LIMITS = {"users": "the users in flight", "rate": "the request rate", "budget": "max_num_batched_tokens",
          "seqs": "max_num_seqs", "kv": "the KV cache", "prefill": "the prefill pool",
          "unstable": "the engine's capacity, which the requests arrive faster than"}
NO_PREFILL = ("none on this server: a decode server (SGLang --disaggregation-mode decode) takes its requests "
              "prefilled, with their KV cache, from prefill servers the spec leaves out (parc takes them to keep "
              "up), so its TTFT is the queue for a decode slot and the first decode step")
ITL_WHY = {True: "a step with a prompt chunk", False: "a decode step and the prompt step after it"}


def memory_rows(plan, est, st) -> list[list]:
    """The rows between weights and total of a serving GPU: KV cache, and what the engine keeps
    as it starts (:mod:`parc.cost.startup`): inside its budget the profiling pass's activations,
    what the sampler adds to them and the CUDA graphs; outside it the CUDA context and NCCL."""
    from parc.cost.engine import limits

    mem, lim, su = st.memory, limits(plan), st.startup
    cap = su.capture
    sglang = su.engine == "sglang"
    graphs = (f"SGLang's estimate (reserve_for_graph_mb) for {count(len(cap.full), 'decode batch size')} up to {max(cap.full, default=0):,}"
              f" and {count(len(cap.piecewise), 'prefill bucket')}" if sglang else
              f"vLLM's estimate for {count(len(cap.piecewise), 'piecewise size')} up to "
              f"{max(cap.piecewise, default=0):,} tokens and {count(len(cap.full), 'full decode size')} up to "
              f"{max(cap.full, default=0):,}")
    if su.engine == "trtllm":
        graphs = "TensorRT-LLM's CUDA graphs: not counted (parc.cost.startup: the KV fraction leaves room beside the cache)"
    rows = [["kv cache", nbytes(mem.kv_cache),
             f"{count(st.kv_capacity_tokens or est.kv_capacity_tokens, 'token', sep=True)} × "
             f"{_bytes_per_token(st.kv_bytes_per_token)} B/token"],
            ["activations", nbytes(mem.activations),
             f"peak of a {lim.max_num_batched_tokens:,}-token forward pass (max_num_batched_tokens"
             + ("" if "max_num_batched_tokens" in lim.stated else ", the engine's default") + ")"
             + (", in the memory mem_fraction_static leaves" if sglang else "")],
            ["cuda graphs", nbytes(mem.cuda_graphs), graphs],
            ["cuda context", nbytes(mem.cuda_context), "context, kernels and library workspaces, outside the budget"],
            ["nccl buffers", nbytes(mem.nccl_buffers), "per communicator the engine opens, outside the budget"]]
    if mem.sampler:
        rows.insert(2, ["sampler", nbytes(mem.sampler), f"what the fp32 logits and probabilities of "
                        f"{lim.max_num_seqs:,} sequences add to that peak"])
    return rows


def budget_line(plan, st) -> str:
    """How the engine sized its KV cache, in its own arithmetic (:class:`parc.cost.startup.Startup`)."""
    from parc.cost.engine import memory_fraction, memory_fraction_note

    su, note = st.startup, memory_fraction_note(plan)
    u = f"{memory_fraction(plan):g}" + (f" ({note})" if note else "")
    if su.engine == "trtllm":
        return (f"  TensorRT-LLM's KV cache: (memory {nbytes(su.total)} − weights {nbytes(su.weights)} − activations "
                f"{nbytes(su.activations)} − context and NCCL {nbytes(su.outside)}) × free_gpu_memory_fraction {u} = "
                f"{nbytes(su.kv)}")
    if su.engine == "sglang":
        return (f"  SGLang's pool: (memory {nbytes(su.total)} − context and NCCL {nbytes(su.outside)}) × "
                f"mem_fraction_static {u} − weights {nbytes(su.weights)} = {nbytes(su.kv)}; activations and "
                f"graphs ({nbytes(su.activations + su.graphs)}) use the {nbytes(su.slack)} it leaves")
    return (f"  vLLM's \"Available KV cache memory\": ceil({u} × {nbytes(su.total)}) = {nbytes(su.budget)} − "
            f"weights {nbytes(su.weights)} − activations {nbytes(su.activations + su.sampler)} − CUDA graphs "
            f"{nbytes(su.graphs)} = {nbytes(su.kv)}; the context and NCCL ({nbytes(su.outside)}) use the "
            f"{nbytes(su.total - su.budget)} the utilization leaves")


def _bytes_per_token(b) -> str:
    return f"{b:,}" if float(b).is_integer() else f"{b:,.1f}"


def kv_lines(plan, est, sv=None) -> list[str]:
    """KV cache per token (how it is made up), per sequence and per request (``sv``: the plan's
    serving numbers, where it is one mesh), and what fits."""
    from parc.cost.engine import limits

    m, mesh = plan.model, plan.mesh
    lim = limits(plan, est.kv_capacity_tokens)
    per = est.kv_bytes_per_token
    if m.is_mla:
        how = (f"MLA: (kv_lora_rank {m.kv_lora_rank} + qk_rope_head_dim {m.qk_rope_head_dim}) × "
               f"{count(m.layers, 'layer')}, the same on every tp rank")
    else:
        how = f"2 (K, V) × {count(m.layers, 'layer')} × {m.kv_heads} KV heads over tp = {mesh.tp} × head_dim"
    how += f", ÷ dcp {mesh.dcp}" if mesh.dcp > 1 else ""
    whose = "" if "max_model_len" in lim.stated else " (the engine's default: the model's context)"
    out = [f"KV cache: {_bytes_per_token(per)} bytes per token per GPU ({how}); "
           f"{nbytes(per * lim.max_model_len)} per max_model_len = {lim.max_model_len:,} sequence{whose}"]
    out.append(budget_line(plan, est.stages[est.most_loaded_stage]))
    out.append(f"  {count(est.kv_capacity_tokens, 'token', sep=True)} fit in it: "
               f"{count(est.max_concurrent_seqs, 'concurrent sequence')} of max_model_len"
               + (f", {count(sv.fits, 'request', sep=True)} of the workload's "
                  f"{sv.workload.prompt_tokens + sv.workload.output_tokens:,} tokens" if sv else "") + " per replica")
    return out + context_lines(plan)


def context_lines(plan) -> list[str]:
    """The longest context each serving engine the spec names derives for the model, from its
    positions and RoPE scaling (:func:`parc.model.rope.context_limit`), against max_model_len."""
    from parc.model import targets as T
    from parc.cost.engine import max_model_len
    from parc.model.rope import context_limit, context_words

    m, srv = plan.model, plan.serve
    engines = [t for t in T.audit_order(plan.targets) if T.context_rule(t)] or [None]
    out = []
    for e in engines:
        limit = context_limit(m, e)
        if limit:
            who = f"{T.display(e)} derives" if e else "the model states"
            out.append(f"  context: max_model_len = {max_model_len(plan):,} of the {limit:,} tokens {who} "
                       f"({context_words(m, e)})")
    return out


def engine_line(lim) -> str:
    """The engine's limits and whose each is."""
    from parc.cost.engine import display

    name = display(lim.engine)

    def whose(key: str) -> str:
        return "the spec's" if key in lim.stated else f"{name}'s default"

    share = f" (the spec's {lim.attn_dp} attention-DP ranks share SGLang's limits)" if lim.attn_dp > 1 else ""
    if lim.engine == "trtllm":
        share = ("; admits a request only while the KV cache holds its prompt and all its outputs "
                 "(GUARANTEED_NO_EVICT)" if lim.reserved_output else "; takes KV blocks as tokens come (MAX_UTILIZATION)")
    return (f"{name} {lim.release}: max_num_seqs {lim.max_num_seqs:,} per rank ({whose('max_num_seqs')}), "
            f"max_num_batched_tokens {lim.max_num_batched_tokens:,} per rank ({whose('max_num_batched_tokens')}), "
            f"max_model_len {lim.max_model_len:,} ({whose('max_model_len')}){share}")


def _phase_text(ph, what: str) -> str:
    terms = [f"compute {seconds(ph.compute)}", f"weights {seconds(ph.weights)}"]
    if ph.kv:
        terms.append(f"KV {seconds(ph.kv)}")
    if ph.elementwise:
        terms.append(f"norms, activation and casts {seconds(ph.elementwise)}")
    comm = ", ".join(f"{_AXIS.get(ax, ax)} {seconds(t)}" for ax, t in ph.comm.items() if t)
    bound = "compute-bound" if ph.bound == "compute" else "memory-bound"
    extra = ""
    if ph.overlapped and ph.staged:
        extra += (f"; two-batch overlap in SGLang's staged decode schedule: each micro-batch's EP all-to-all under "
                  f"the other's stages, {seconds(ph.staged)} of it not hidden; the weights read twice, the GEMMs "
                  "on half the rows")
    elif ph.overlapped:
        extra += "; two-batch overlap: the EP all-to-all under the compute, the weights read twice, the GEMMs on half the rows"
    if ph.draft:
        extra += f"; drafts {seconds(ph.draft)}"
    return (f"{seconds(ph.time)} {what}: {bound} ({', '.join(terms)})" + (f" + {comm}" if comm else "") + extra)


_AXIS = {"tp": "TP all-reduce", "ep": "EP all-to-all", "pp": "PP send", "dcp": "DCP all-gather + reduce-scatter"}


def _time(t) -> str:
    return seconds(t) if t is not None and math.isfinite(t) else "unbounded"


def ttft_text(sv) -> str:
    """``TTFT = term + term ...``, every term named."""
    if not math.isfinite(sv.ttft):
        return "unbounded: the requests arrive faster than the plan serves them"
    parts = " + ".join(f"{TERMS[k]} {seconds(v)}" for k, v in sv.ttft_terms.items())
    return f"{seconds(sv.ttft)} = {parts}"


def speed_lines(plan, est) -> list[str]:
    """The engine's limits, prefill, the steps, TTFT by term, TPOT, ITL and output tokens/s at the
    workload, each with its roofline."""
    sv = est.serving
    if sv is None:
        return []
    w = sv.workload
    given = (f"stated: {', '.join(w.stated)}" if w.stated
             else "defaults: vLLM's benchmark's 1024 + 128 tokens, as many requests as fit")
    load = (f"{w.request_rate:g} requests/s arriving at random" if w.request_rate is not None
            else f"{count(w.concurrency, 'user')} in a closed loop")
    slow_p = max(sv.prefill, key=lambda p: p.time)
    slow_d = max(sv.decode, key=lambda p: p.time)
    stages = f" (the slowest of {len(sv.decode)} stages)" if len(sv.decode) > 1 else ""
    steps = f"{sv.prefill_steps:g} step{'s' if sv.prefill_steps != 1 else ''} of {slow_p.tokens * len(sv.prefill):,.0f} tokens"
    from parc.cost.serving import only_decodes

    prefill = [["prefill", NO_PREFILL]] if only_decodes(plan) else [
        ["prefill", _phase_text(slow_p, "a step of a prompt's chunk" + stages)],
        ["", f"{seconds(sv.prefill_time)} per {w.prompt_tokens:,}-token prompt alone ({steps}); "
             f"{sv.prefill_tokens_per_s:,.0f} prompt tokens/s over the plan at full load"]]
    cells = [["engine", engine_line(sv.limits)], *prefill,
             ["decode step", _phase_text(slow_d, f"at {sv.batch:,.4g} requests per replica" + stages)]]
    if sv.mixed and sv.mixed_share > 0:
        slow_m = max(sv.mixed, key=lambda p: p.time)
        if sv.limits.mixed:
            cells.append(["mixed step", _phase_text(slow_m, "with a prompt chunk beside them")
                          + f"; {percent(sv.mixed_share)} of the steps"])
        else:
            cells.append(["prompt step", _phase_text(slow_m, "apart from the decode steps, run first")
                          + f"; after {percent(sv.mixed_share)} of the decode steps"])
    if sv.kv_transfer_bytes:
        kt = plan.serve.kv_transfer or "the connector"
        cells.append(["KV transfer", f"{nbytes(sv.kv_transfer_bytes)} per request ({w.prompt_tokens:,} tokens × "
                                     f"the whole model's KV per token) over {kt}: {seconds(sv.kv_transfer_time)}"])
    spec = f", {sv.accepted:.3g} tokens per decode step (speculative decoding)" if sv.accepted != 1 else ""
    cells += [["TTFT", ttft_text(sv)],
              ["TPOT", (f"{_time(sv.tpot)} mean, {_time(sv.tpot_p99)} p99 ({1 / sv.tpot:,.1f} tokens/s per "
                        f"request{spec})") if sv.tpot else "-"],
              ["ITL", f"{_time(sv.itl_p99)} p99 ({ITL_WHY[sv.limits.mixed]})" if sv.mixed_share > 0.01
               else f"{_time(sv.itl_p99)} p99"],
              ["output", f"{sv.output_tokens_per_s:,.0f} tokens/s ({sv.output_tokens_per_s / plan.world_size:,.0f} "
                         f"per GPU); the batch is set by {LIMITS.get(sv.limit, sv.limit)}"]]
    head = (f"Serving at the workload: {w.prompt_tokens:,} prompt + {w.output_tokens:,} output tokens, "
            f"{load} over {count(sv.replicas, 'replica')} ({given})")
    return [head, indent(aligned(cells, "ll")), f"  ({DEFINITIONS})", ""]


def pool_lines(plan, est) -> list[str]:
    """One row per pool of a disaggregated plan: its instances, their GPUs, one GPU's memory."""
    sv = est.serving
    if sv is None or not sv.pools:
        return []
    cells = []
    for name, p in sv.pools.items():
        e = p["estimate"]
        mem = e.memory
        mesh = mesh_text(p["mesh"])
        cells.append([name, p["instances"], p["gpus_per_instance"], p["gpus"], mesh, nbytes(mem.weights),
                      nbytes(mem.kv_cache), nbytes(mem.total - mem.weights - mem.kv_cache),
                      f"{e.kv_capacity_tokens:,}", percent(mem.total / mem.capacity)])
    total = sum(p["gpus"] for p in sv.pools.values())
    return [f"Pools ({count(total, 'GPU')} in all; each instance is its own serving plan; memory of one GPU)",
            indent(table(["pool", "instances", "GPUs each", "GPUs", "mesh", "weights", "kv cache", "other",
                          "KV tokens", "used"], cells, "lrrrlrrrrr")), ""]


def mesh_text(mesh: dict) -> str:
    """``dp 2, tp 8, ep 16`` (the degrees above 1), or ``1 GPU``."""
    return ", ".join(f"{a} {mesh[a]}" for a in ("pp", "dp", "cp", "tp", "ep", "dcp") if mesh.get(a, 1) > 1) or "1 GPU"


def html_rows(sv: dict, decode_only: bool = False) -> list[list[str]]:
    """The speed table of the HTML page, from the estimate's JSON ``serving`` object: the same
    rows as the text (``decode_only``: a server that only decodes, no prefill time)."""
    w = sv["workload"]
    pre = max(sv["prefill_stages"], key=lambda p: p["time"])
    dec = max(sv["decode_stages"], key=lambda p: p["time"])
    load = (f"{w['request_rate']:g} requests/s at random" if w.get("request_rate") is not None
            else f"{w['concurrency']:,} users in a closed loop")
    eng = sv["engine"]
    rows = [["workload", f"{w['prompt_tokens']:,} prompt + {w['output_tokens']:,} output tokens, {load}"],
            ["engine", f"{eng['engine']} {eng['release']}: max_num_seqs {eng['max_num_seqs_per_rank']:,}, "
                       f"max_num_batched_tokens {eng['max_num_batched_tokens_per_rank']:,} per rank, "
                       f"max_model_len {eng['max_model_len']:,}"],
            ["prefill", NO_PREFILL if decode_only else
                        f"{seconds(sv['prefill_time'])} per prompt alone, {pre['bound']}-bound; "
                        f"{sv['prefill_tokens_per_s']:,.0f} prompt tokens/s at full load"],
            ["decode step", f"{seconds(dec['time'] * len(sv['decode_stages']))} at {sv['batch_per_replica']:,.4g} "
                            f"requests per replica, {dec['bound']}-bound"]]
    kt = sv.get("kv_transfer") or {}
    if kt.get("bytes_per_request"):
        rows.append(["KV transfer", f"{nbytes(kt['bytes_per_request'])} per request, {seconds(kt['time'])}"])
    terms = " + ".join(f"{TERMS[k]} {_time(v)}" for k, v in sv["ttft_terms"].items())
    rows += [["TTFT", f"{_time(sv['ttft'])} = {terms}"],
             ["TPOT", f"{_time(sv['tpot'])} mean, {_time(sv['tpot_p99'])} p99"],
             ["ITL", f"{_time(sv['itl_p99'])} p99"],
             ["output tokens/s", f"{sv['output_tokens_per_s']:,.0f}"]]
    return rows
