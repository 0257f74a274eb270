"""The serving parts of ``parc explain``: the engine's memory rows, the KV cache per token and per
sequence, what fits, and the speed at the workload (prefill, TTFT, TPOT, output tokens/s) with
the roofline each number comes from; for a disaggregated plan each pool and the KV transfer.
Every number is :attr:`parc.cost.estimate.Estimate.serving`'s or the estimate's own."""
from __future__ import annotations

from parc.report.term import indent, rows as aligned, table
from parc.units import nbytes, percent, seconds
from parc.words import count


def memory_rows(plan, est, st) -> list[list]:
    """The rows between weights and total of a serving GPU: KV cache, the profiling pass's
    activations and the engine's overheads."""
    from parc.cost.memory import prefill_chunk_tokens

    mem = st.memory
    rows = [["kv cache", nbytes(mem.kv_cache),
             f"{count(st.kv_capacity_tokens or est.kv_capacity_tokens, 'token', sep=True)} × "
             f"{_bytes_per_token(st.kv_bytes_per_token)} B/token"],
            ["activations", nbytes(mem.activations),
             f"peak of a {prefill_chunk_tokens(plan.cluster.gpu):,}-token forward pass (max_num_batched_tokens)"],
            ["cuda context", nbytes(mem.cuda_context), "context, kernels and library workspaces"],
            ["nccl buffers", nbytes(mem.nccl_buffers), "per communicator the engine opens"],
            ["cuda graphs", nbytes(mem.cuda_graphs), "the decode CUDA graphs"]]
    if mem.sampler:
        rows.append(["sampler", nbytes(mem.sampler),
                     f"fp32 logits and probabilities of {plan.serve.max_num_seqs} sequences"])
    return rows


def _bytes_per_token(b) -> str:
    return f"{b:,}" if float(b).is_integer() else f"{b:,.1f}"


def kv_lines(plan, est) -> list[str]:
    """KV cache per token (how it is made up), per sequence and per request, and what fits."""
    m, mesh, srv = plan.model, plan.mesh, plan.serve
    per = est.kv_bytes_per_token
    if m.is_mla:
        how = (f"MLA: (kv_lora_rank {m.kv_lora_rank} + qk_rope_head_dim {m.qk_rope_head_dim}) × "
               f"{count(m.layers, 'layer')}, the same on every tp rank")
    else:
        how = f"2 (K, V) × {count(m.layers, 'layer')} × {m.kv_heads} KV heads over tp = {mesh.tp} × head_dim"
    how += f", ÷ dcp {mesh.dcp}" if mesh.dcp > 1 else ""
    out = [f"KV cache: {_bytes_per_token(per)} bytes per token per GPU ({how}); "
           f"{nbytes(per * srv.max_model_len)} per max_model_len = {srv.max_model_len:,} sequence"]
    out.append(f"  {count(est.kv_capacity_tokens, 'token', sep=True)} fit at gpu_memory_utilization = "
               f"{srv.gpu_memory_utilization:g} after the weights, activations and engine overheads: "
               f"{count(est.max_concurrent_seqs, 'concurrent sequence')} of max_model_len"
               + (f", {count(est.serving.fits, 'request', sep=True)} of the workload's "
                  f"{est.serving.workload.prompt_tokens + est.serving.workload.output_tokens:,} tokens"
                  if est.serving else "") + " per replica")
    return out + context_lines(plan)


def context_lines(plan) -> list[str]:
    """The longest context each serving engine the spec names derives for the model, from its
    positions and RoPE scaling (:func:`parc.model.rope.context_limit`), against max_model_len."""
    from parc.model import targets as T
    from parc.model.rope import context_limit, context_words

    m, srv = plan.model, plan.serve
    engines = [t for t in T.audit_order(plan.targets) if T.context_rule(t)] or [None]
    out = []
    for e in engines:
        limit = context_limit(m, e)
        if limit:
            who = f"{T.display(e)} derives" if e else "the model states"
            out.append(f"  context: max_model_len = {srv.max_model_len:,} of the {limit:,} tokens {who} "
                       f"({context_words(m, e)})")
    return out


def _phase_text(ph, what: str) -> str:
    terms = [f"compute {seconds(ph.compute)}", f"weights {seconds(ph.weights)}"]
    if ph.kv:
        terms.append(f"KV {seconds(ph.kv)}")
    comm = ", ".join(f"{_AXIS.get(ax, ax)} {seconds(t)}" for ax, t in ph.comm.items() if t)
    bound = "compute-bound" if ph.bound == "compute" else "memory-bound"
    return (f"{seconds(ph.time)} {what}: {bound} ({', '.join(terms)})"
            + (f" + {comm}" if comm else ""))


_AXIS = {"tp": "TP all-reduce", "ep": "EP all-to-all", "pp": "PP send", "dcp": "DCP all-gather + reduce-scatter"}


def speed_lines(plan, est) -> list[str]:
    """Prefill, TTFT, TPOT and output tokens/s at the workload, each with its roofline."""
    sv = est.serving
    if sv is None:
        return []
    w = sv.workload
    given = (f"stated: {', '.join(w.stated)}" if w.stated
             else "defaults: vLLM's benchmark's 1024 + 128 tokens, as many requests as fit")
    slow_p = max(sv.prefill, key=lambda p: p.time)
    slow_d = max(sv.decode, key=lambda p: p.time)
    stages = f" (the slowest of {len(sv.decode)} stages)" if len(sv.decode) > 1 else ""
    cells = [
        ["prefill", _phase_text(slow_p, f"per {w.prompt_tokens:,}-token prompt" + stages)],
        ["", f"{sv.prefill_tokens_per_s:,.0f} prompt tokens/s over the plan"],
        ["decode step", _phase_text(slow_d, f"at {sv.batch:,.4g} requests per replica" + stages)],
        ["TTFT", seconds(sv.ttft) + (" = prefill + KV transfer + first decode step" if sv.kv_transfer_time else
                                      " (the prompt's prefill, without queueing)")],
        ["TPOT", f"{seconds(sv.tpot)} between output tokens ({1 / sv.tpot:,.1f} tokens/s per request)"
                 if sv.tpot else "-"],
        ["output", f"{sv.output_tokens_per_s:,.0f} tokens/s ({sv.output_tokens_per_s / plan.world_size:,.0f} per GPU)"],
    ]
    if sv.kv_transfer_bytes:
        kt = plan.serve.kv_transfer or "the connector"
        cells.insert(4, ["KV transfer", f"{nbytes(sv.kv_transfer_bytes)} per request ({w.prompt_tokens:,} tokens × "
                                        f"the whole model's KV per token) over {kt}: {seconds(sv.kv_transfer_time)}"])
    head = (f"Serving at the workload: {w.prompt_tokens:,} prompt + {w.output_tokens:,} output tokens, "
            f"{count(w.concurrency, 'request')} at once over {count(sv.replicas, 'replica')} ({given})")
    return [head, indent(aligned(cells, "ll")), ""]


def pool_lines(plan, est) -> list[str]:
    """One row per pool of a disaggregated plan: its instances and one GPU's memory."""
    sv = est.serving
    if sv is None or not sv.pools:
        return []
    cells = []
    for name, p in sv.pools.items():
        e = p["estimate"]
        mem = e.memory
        me = e.mesh
        mesh = ", ".join(f"{a} {me[a]}" for a in ("pp", "dp", "tp", "ep") if me.get(a, 1) > 1) or "1 GPU"
        cells.append([name, p["instances"], p["gpus"], mesh, nbytes(mem.weights), nbytes(mem.kv_cache),
                      nbytes(mem.total - mem.weights - mem.kv_cache), f"{e.kv_capacity_tokens:,}",
                      percent(mem.total / mem.capacity)])
    return ["Pools (each instance is its own serving plan; memory of one GPU)",
            indent(table(["pool", "instances", "GPUs", "mesh", "weights", "kv cache", "other", "KV tokens", "used"],
                         cells, "lrrlrrrrr")), ""]


def html_rows(sv: dict) -> list[list[str]]:
    """The speed table of the HTML page, from the estimate's JSON ``serving`` object."""
    w = sv["workload"]
    pre = max(sv["prefill_stages"], key=lambda p: p["time"])
    dec = max(sv["decode_stages"], key=lambda p: p["time"])
    rows = [["workload", f"{w['prompt_tokens']:,} prompt + {w['output_tokens']:,} output tokens, "
                         f"{w['concurrency']:,} requests at once"],
            ["prefill", f"{seconds(pre['time'])} per prompt, {pre['bound']}-bound; "
                        f"{sv['prefill_tokens_per_s']:,.0f} prompt tokens/s"],
            ["decode step", f"{seconds(dec['time'])} at {sv['batch_per_replica']:,.4g} requests per replica, "
                            f"{dec['bound']}-bound"],
            ["TTFT", seconds(sv["ttft"])], ["TPOT", seconds(sv["tpot"])],
            ["output tokens/s", f"{sv['output_tokens_per_s']:,.0f}"]]
    kt = sv.get("kv_transfer") or {}
    if kt.get("bytes_per_request"):
        rows.insert(5, ["KV transfer", f"{nbytes(kt['bytes_per_request'])} per request, {seconds(kt['time'])}"])
    return rows
