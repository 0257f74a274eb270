"""P4xx: does the plan fit in GPU memory.

Every number comes from :func:`parc.cost.estimate.estimate` (the most loaded GPU), and
every fix the messages offer is computed on a changed copy of the plan, never guessed.
"""
from __future__ import annotations

from dataclasses import replace

from parc.rules import WARNING, rule
from parc.rules.suggest import accepted, checking, variant
from parc.model.dims import auto_degree, grid_fits
from parc.rules.util import dims, divisors, gb, join
from parc.words import count

# The headroom rule: of 454 published 4D runs (Fujii et al. 2024, arXiv:2411.06465), none whose
# estimate stayed under 80% of capacity ran out of memory. Above capacity P401 is an error; between
# 80% and 100% P405 warns, once, with the change that brings the plan back under 80%. The estimate
# includes the CUDA context, NCCL buffers and fragmentation (parc/model/data/overheads.toml).
HEADROOM = 0.20


def _est(plan):
    from parc.cost.estimate import estimate

    return estimate(plan)


def _given(plan, path: str) -> bool:
    """Whether the spec itself wrote ``path`` (a left-out field points at its block's header)."""
    s = plan.spans.get(path)
    blk = plan.spans.get(path.split(".", 1)[0])
    return s is not None and not (blk is not None and (s.line, s.column) == (blk.line, blk.column))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


# --- training ------------------------------------------------------------------------------------

def _train_total(plan) -> float:
    from parc.cost.estimate import estimate

    return estimate(plan, cache=False).memory.total


_MESH_FACTS = ("heads_tp", "kv_tp", "width_tp", "expert_grid")


def _mesh_ok(plan, m) -> bool:
    """Whether mesh ``m`` splits the model's widths, layers (over pp) and expert grid."""
    d = dims(plan, m)
    if m.pp > 1 and plan.model.layers % m.pp or not grid_fits(d.region, m.ep, m.etp):
        return False       # the expert grid is carved from a stage's ranks even where no layer uses it
    return not any(f.code in _MESH_FACTS for f in d.violations(plan.model, plan.mode))


def training_fixes(plan, limit: float, c=None, n: int = 3) -> list[tuple[str, str, float]]:
    """Changes that bring the most loaded GPU's training memory to at most ``limit`` bytes, as
    ``(path of the key to change, how, resulting bytes)``: a higher ZeRO stage, more
    recomputation, sequence parallelism, or a larger tp or pp on the same GPUs (dp shrinks).
    With the rule's check ``c``, each is offered only when the whole rule set accepts the
    changed plan (:func:`parc.rules.suggest.accepted`: a tp P306 refuses is not offered)."""
    if checking():
        return []   # judging another suggestion: no help is shown
    tr, mesh, world = plan.train, plan.mesh, plan.world_size
    out: list[tuple[str, str, float]] = []

    def attempt(path, text, p):
        if p is None or len(out) >= n:
            return
        total = _train_total(p)
        if total <= limit and (c is None or accepted(plan, p, c.rule.code, c.active)):
            out.append((path, text, total))

    for z in range(tr.zero + 1, 4):
        before = len(out)
        attempt("train.zero", f"`zero = {z}`", variant(plan, train=replace(tr, zero=z)))
        if len(out) > before:
            break
    # torchtitan recomputes selectively per op; every other target by Megatron-LM's modules
    order = ["none", "selective_op" if "torchtitan" in plan.targets else "selective", "full"]
    level = 1 if tr.recompute in ("selective", "selective_op") else order.index(tr.recompute)
    for rc in order[level + 1:]:
        before = len(out)
        attempt("train.recompute", f"`recompute = {rc}`", variant(plan, train=replace(tr, recompute=rc)))
        if len(out) > before:
            break
    if mesh.tp > 1 and not tr.sequence_parallel:
        attempt("train.sequence_parallel", "`sequence_parallel = true`",
                variant(plan, train=replace(tr, sequence_parallel=True)))
    g = plan.cluster.domain    # tp stays on NVLink
    for ax in ("tp", "pp"):
        cur = mesh.size(ax)
        for d in divisors(world):
            if d <= cur or (ax == "tp" and d > g):
                continue
            rest = auto_degree(world, d * mesh.cp * (mesh.pp if ax == "tp" else mesh.tp))   # dp = auto
            if rest < 1:
                continue
            m2 = replace(mesh, **{ax: d, "dp": rest})
            if not _mesh_ok(plan, m2):
                continue
            before = len(out)
            attempt(f"mesh.{ax}", f"`{ax} = {d}` with dp = {rest}", variant(plan, mesh=m2))
            if len(out) > before:
                break
    return out


def _scale_out(plan, limit: float, c) -> tuple[int, float] | None:
    """The fewest nodes (the cluster grown by powers of two, dp with it) on which the plan fits
    with ZeRO-3 and full recompute, in ``limit`` bytes and as the whole rule set accepts it."""
    if checking():
        return None
    cl, mesh = plan.cluster, plan.mesh
    tr = replace(plan.train, zero=3, recompute="full")
    for k in (2 ** i for i in range(1, 15)):
        m2 = replace(mesh, dp=mesh.dp * k)
        p2 = replace(plan, cluster=replace(cl, nodes=cl.nodes * k), mesh=m2, train=tr,
                     schedule=replace(plan.schedule, global_batch=plan.schedule.global_batch * k))
        p2 = variant(p2)
        if p2 is not None and _train_total(p2) <= limit and accepted(plan, p2, c.rule.code, c.active):
            return cl.nodes * k, _train_total(p2)
    return None


def _breakdown(mem) -> str:
    fp8 = f" + fp8 weights {gb(mem.fp8_weights)}" if mem.fp8_weights else ""
    fp8 += f" + Megatron-FSDP's double buffers {gb(mem.fsdp_buffers)}" if mem.fsdp_buffers else ""
    over = (f" + CUDA context, NCCL buffers and fragmentation {gb(mem.overheads)}" if mem.overheads else "")
    return (f"weights {gb(mem.weights)} + grads {gb(mem.grads)} + optimizer {gb(mem.optimizer)} + "
            f"activations {gb(mem.activations)}{fp8}{over} = {gb(mem.total)}")


def _where(plan, e) -> str:
    if plan.mesh.pp <= 1:
        return "per GPU"
    st = e.stages[e.most_loaded_stage]
    return (f"per GPU on pipeline stage {st.stage} ({count(st.layers, 'layer')}, "
            f"{st.inflight:g} microbatches in flight)")


def _fix_help(fixes) -> str:
    return "fits with " + join([f"{how} ({gb(total)})" for _, how, total in fixes])


def _training_declared(plan) -> bool:
    """Training memory is judged only for a spec that declares its `train` block: without one the
    workload (optimizer, ZeRO stage, recompute) is unknown and the spec describes a layout."""
    return (plan.mode == "train" and plan.train is not None and "train" in plan.spans
            and bool(plan.schedule.microbatches))


@rule("P401", "training-memory-fits")
def training_memory(plan, c):
    if not _training_declared(plan):
        return
    e = _est(plan)
    mem, cap = e.memory, e.memory.capacity
    if mem.total <= cap:
        return
    name = plan.cluster.gpu.name
    gpu = f"an {name}" if name and name != "custom" else "each GPU"
    # only changes that also leave the headroom P405 asks for, and that the other rules accept
    fixes = training_fixes(plan, (1 - HEADROOM) * cap, c)
    msg = f"training needs {gb(mem.total)} {_where(plan, e)} but {gpu} has {gb(cap)}: {_breakdown(mem)}"
    if fixes:
        path = fixes[0][0]
        help_ = _fix_help(fixes)
    else:
        grown = _scale_out(plan, (1 - HEADROOM) * cap, c)
        path = "cluster.nodes"
        if grown:
            g = plan.cluster.gpus_per_node
            help_ = (f"no ZeRO stage, recompute setting, tp or pp fits on {count(plan.world_size, 'GPU')}; with "
                     f"`zero = 3` and `recompute = full` it fits on {count(grown[0], 'node')} of {g} "
                     f"({count(grown[0] * g, 'GPU')}, {gb(grown[1])} per GPU)")
        else:
            help_ = ("no ZeRO stage, recompute setting or mesh on up to 16384× the nodes fits; "
                     "lower micro_batch or seq_len, or add context parallelism")
    c.report(c.at(path, "train"), msg, help=help_,
             related=[(c.at("mesh"), f"mesh: {' · '.join(f'{a}={plan.mesh.size(a)}' for a in plan.mesh.order)}")])


@rule("P405", "memory-headroom", severity=WARNING)
def memory_headroom(plan, c):
    if not _training_declared(plan):
        return
    e = _est(plan)
    mem, cap = e.memory, e.memory.capacity
    if mem.total > cap or mem.total <= (1 - HEADROOM) * cap:
        return
    free = 1 - mem.total / cap
    fixes = training_fixes(plan, (1 - HEADROOM) * cap, c)
    c.report(c.at("train"),
             f"training uses {gb(mem.total)} of {gb(cap)} {_where(plan, e)}, leaving {_pct(free)} free "
             f"({_breakdown(mem)}); runs estimated above {_pct(1 - HEADROOM)} of memory have run out, "
             f"none below",
             help=(_fix_help(fixes) + f", under {_pct(1 - HEADROOM)} of memory") if fixes else
             "lower micro_batch, or add GPUs")


# --- serving ---------------------------------------------------------------------------------------

def _serve_fit(plan, tp: int, pp: int | None = None):
    """(weights per GPU, KV tokens that fit) with another tp (and pp)."""
    from parc.cost.estimate import estimate

    # one replica; an expert-parallel plan keeps its experts spread over all of the replica's GPUs
    ep = plan.mesh.cp * tp if plan.mesh.ep > 1 else 1
    m2 = replace(plan.mesh, tp=tp, pp=pp or plan.mesh.pp, dp=1, ep=ep, etp=1)
    p2 = replace(plan, mesh=m2, placement=replace(plan.placement, layers=None))
    e = estimate(p2, cache=False)
    return e.memory.weights, e.kv_capacity_tokens


def _tp_candidates(plan) -> list[int]:
    """Tensor-parallel degrees above 1 that split every width of the model."""
    return [t for t, _ in dims(plan).tp_degrees(plan.model) if t > 1]


def _serving_mesh_accepted(plan, c, tp: int, pp: int) -> bool:
    """Whether the rule set accepts ``plan`` with tensor and pipeline degrees ``tp`` and ``pp``
    (dp as `auto` makes it on the cluster); a mesh beyond the cluster is offered as a count of
    GPUs to get, not a change to make, and is not judged here."""
    world, rest = plan.world_size, tp * pp * plan.mesh.cp
    if c is None or rest > world or world % rest:
        return True
    ep = world // pp if plan.mesh.ep > 1 else 1
    changed = variant(plan, mesh=replace(plan.mesh, tp=tp, pp=pp, dp=world // rest, ep=ep, etp=1))
    return accepted(plan, changed, c.rule.code, c.active)


def smallest_serving_mesh(plan, c=None) -> tuple[int, int] | None:
    """The smallest (tp, pp) in which the weights and one max_model_len sequence fit: tp first
    (up to a node's GPUs), then pp across nodes; with the rule's check ``c``, one the whole rule
    set accepts."""
    if checking():
        return None
    need = _limits(plan).max_model_len
    most = max(plan.cluster.domain, 8)   # one NVLink domain
    tps = [t for t in _tp_candidates(plan) if plan.mesh.tp < t <= most]
    for t in tps:
        if _serve_fit(plan, t)[1] >= need and _serving_mesh_accepted(plan, c, t, plan.mesh.pp):
            return t, plan.mesh.pp
    top = max([t for t in _tp_candidates(plan) if t <= most] or [plan.mesh.tp])
    for pp in (d for d in range(plan.mesh.pp + 1, plan.model.layers + 1)):
        if _serve_fit(plan, top, pp)[1] >= need and _serving_mesh_accepted(plan, c, top, pp):
            return top, pp
        if pp > 64:
            break
    return None


def _mesh_help(plan, found) -> str:
    if not found:
        return "no tensor or pipeline split of this model fits; use GPUs with more memory"
    t, pp = found
    gpus = t * pp
    where = "" if gpus <= plan.world_size else (
        f"; that needs {count(gpus, 'GPU')} and the cluster has {plan.world_size}")
    return (f"the smallest mesh that holds the weights and one {_limits(plan).max_model_len}-token "
            f"sequence is `tp = {t}`" + (f" with `pp = {pp}`" if pp > 1 else "") + where)


@rule("P402", "serving-weights-fit")
def serving_weights(plan, c):
    if plan.mode != "serve" or plan.serve is None:
        return
    from parc.cost.engine import memory_fraction

    e = _est(plan)
    frac = memory_fraction(plan)
    budget = _weight_room(plan, e)
    w = e.memory.weights
    if w <= budget:
        return
    room = (f"gpu_memory_utilization × memory = {frac:g}{_whose(plan, 'gpu_memory_utilization')} × "
            f"{gb(e.memory.capacity)} = {gb(budget)}" if _trtllm_room(e) is None else
            f"the GPU has {gb(budget)} beside its CUDA context and NCCL buffers (TensorRT-LLM's fraction is of "
            f"what the weights leave)")
    c.report(c.at("mesh.tp"),
             f"the weights alone need {gb(w)} per GPU (tp = {plan.mesh.tp}, pp = {plan.mesh.pp}) but {room}",
             help=_mesh_help(plan, smallest_serving_mesh(plan, c)),
             related=[(c.at("model"), f"{e.params_total / 1e9:.1f}B parameters in {plan.model.dtype}")])


@rule("P403", "kv-cache-holds-one-sequence")
def kv_cache_one_sequence(plan, c):
    if plan.mode != "serve" or plan.serve is None:
        return
    from parc.cost.engine import engine_of
    from parc.rules.util import refusers, target_name

    e = _est(plan)
    mlen = _limits(plan).max_model_len
    if e.memory.weights > _weight_room(plan, e) or e.kv_capacity_tokens >= mlen or _no_kv_memory(e):
        return     # P402 and P416 say those
    who = refusers(plan, c, "P403")
    per = e.kv_bytes_per_token
    fixes = []
    if e.kv_capacity_tokens > 0 and _serve_offered(plan, c, max_model_len=e.kv_capacity_tokens):
        fixes.append(f"`max_model_len = {e.kv_capacity_tokens}` fits")
    util = _util_for(e, mlen)
    if util <= _util_ceiling(e) and _serve_offered(plan, c, gpu_memory_utilization=util):
        fixes.append(f"`gpu_memory_utilization = {util:.2f}` fits one full sequence")
    fixes.append(_mesh_help(plan, smallest_serving_mesh(plan, c)))
    su = e.stages[e.most_loaded_stage].startup
    # who refuses it at start (vLLM); an engine that caps the request instead (SGLang) runs it
    outcome = (f": {join([target_name(t) for t in who], 'and')} refuse{'s' if len(who) == 1 else ''} to start"
               if who else f": {target_name(engine_of(plan)[0])} starts and caps a request at "
               f"{max(0, e.kv_capacity_tokens - 1):,} tokens" if who == [] else "")
    c.report(c.at("serve.max_model_len", "serve"),
             f"the KV cache holds {e.kv_capacity_tokens:,} tokens per GPU, fewer than one "
             f"max_model_len = {mlen:,} sequence{_whose(plan, 'max_model_len')}: {_kept(su)}, "
             f"{gb(max(0.0, su.kv))} is left at {per:,} bytes per token" + outcome,
             help="; or ".join(fixes), severity=WARNING if who == [] else None)


def _trtllm_room(e) -> float | None:
    """TensorRT-LLM's room for the weights: the GPU less its CUDA context and NCCL buffers (its KV
    fraction is of what the weights and its profiling pass leave, parc.cost.startup); None for
    another engine."""
    su = e.stages[e.most_loaded_stage].startup
    return su.free_at_start if su is not None and su.engine == "trtllm" else None


def _weight_room(plan, e) -> float:
    """What the weights of a serving GPU must fit in: gpu_memory_utilization × memory (vLLM's
    budget, SGLang's static memory), or TensorRT-LLM's :func:`_trtllm_room`."""
    from parc.cost.engine import memory_fraction

    room = _trtllm_room(e)
    return memory_fraction(plan) * e.memory.capacity if room is None else room


def _overflow(plan, what: str = "preempts") -> str:
    """What the engine does with the requests its KV cache does not hold: an engine that reserves
    a request's outputs at admission (TensorRT-LLM's GUARANTEED_NO_EVICT) admits no more and keeps
    the rest waiting; the others ``what`` (vLLM preempts the newest running request)."""
    return "keeps the rest waiting (it admits a request only while the cache holds all its outputs)" \
        if _limits(plan).engine == "trtllm" and _limits(plan).reserved_output else f"{what} the rest"


def _no_kv_memory(e) -> bool:
    """Whether some GPU of a serving estimate keeps no memory for the KV cache (P416)."""
    return any(st.startup is not None and st.kv_bytes_per_token > 0 and st.startup.kv <= 0 for st in e.stages)


def _kept(su) -> str:
    """What the engine takes from its budget before the KV cache, in its own words."""
    if su.engine == "trtllm":
        return (f"of the GPU's {gb(su.total)} the weights take {gb(su.weights)}, TensorRT-LLM's profiling pass "
                f"{gb(su.activations)} and its context and NCCL {gb(su.outside)}; the KV cache takes "
                f"kv_cache_free_gpu_memory_fraction of the rest")
    if su.engine == "sglang":
        return (f"of SGLang's {gb(su.budget)} ((memory − context and NCCL) × mem_fraction_static) the weights "
                f"take {gb(su.weights)}")
    return (f"of vLLM's {gb(su.budget)} (gpu_memory_utilization × {gb(su.total)}) the weights take "
            f"{gb(su.weights)}, its profiling pass {gb(su.activations + su.sampler)} and its CUDA graphs "
            f"{gb(su.graphs)} ({count(su.capture.graphs, 'captured size')})")


def _serve_offered(plan, c, **serve) -> bool:
    """Whether the whole rule set accepts the plan with ``serve``'s settings changed (a fix offered)."""
    return accepted(plan, variant(plan, serve=replace(plan.serve, **serve)), c.rule.code, c.active)


def _util_for(e, tokens: int) -> float:
    """The smallest gpu_memory_utilization (two decimals) whose budget holds, on every GPU of the
    estimate, what the engine keeps and ``tokens`` of KV cache (:mod:`parc.cost.startup`)."""
    need = 0.0
    for st in e.stages:
        su = st.startup
        if su is None or st.kv_bytes_per_token <= 0:
            continue
        kept = su.budget - su.kv            # weights, and vLLM's activations and graphs
        share = {"sglang": su.total - su.outside,   # TensorRT-LLM: a fraction of what the profile leaves
                 "trtllm": su.total - su.outside - su.weights - su.activations}.get(su.engine, su.total)
        need = max(need, (kept + tokens * st.kv_bytes_per_token) / max(share, 1.0))
    return int(need * 100 + 1) / 100


def _util_ceiling(e) -> float:
    """The largest gpu_memory_utilization (two decimals, at most 0.98) vLLM takes: the memory free
    when it starts, past its CUDA context and NCCL buffers (P417)."""
    su = e.stages[e.most_loaded_stage].startup
    return min(0.98, int(su.free_at_start / su.total * 100) / 100)


@rule("P416", "engine-keeps-no-kv-memory")
def engine_keeps_no_kv_memory(plan, c):
    """vLLM's determine_available_memory leaves nothing for the KV cache once its profiling pass
    and CUDA graph estimate are subtracted (kv_cache_planning.py: "No available memory for the
    cache blocks"), nor TensorRT-LLM's KvCacheCreator once its profile's peak is (_util.py
    _cal_max_tokens: no tokens); P402 says where the weights alone exceed the budget."""
    if plan.mode != "serve" or plan.serve is None:
        return
    e = _est(plan)
    from parc.cost.engine import display

    if e.memory.weights > _weight_room(plan, e) or not _no_kv_memory(e):
        return
    st = min(e.stages, key=lambda s: s.startup.kv)
    su, mlen = st.startup, _limits(plan).max_model_len
    fixes = []
    util = _util_for(e, mlen)
    if util <= _util_ceiling(e) and _serve_offered(plan, c, gpu_memory_utilization=util):
        fixes.append(f"`gpu_memory_utilization = {util:.2f}` leaves one max_model_len = {mlen:,} sequence")
    fixes.append(_mesh_help(plan, smallest_serving_mesh(plan, c)))
    where = f" on pipeline stage {st.stage}" if plan.mesh.pp > 1 else ""
    c.report(c.at("serve.gpu_memory_utilization", "serve"),
             f"{display(su.engine)} stops as it starts{where}: {_kept(su)}, which leaves {gb(su.kv)} for the KV cache "
             f"(\"No available memory for the cache blocks\")",
             help="; or ".join(fixes))


@rule("P417", "engine-budget-exceeds-free-memory", severity=WARNING)
def engine_budget_exceeds_free(plan, c):
    """vLLM requests gpu_memory_utilization of the GPU after its CUDA context and NCCL buffers
    exist, and refuses to start when less is free (v1/worker/utils.py request_memory). A warning:
    the context is the cluster's `cuda_context` (a training measurement by default), and a GPU
    whose context is smaller starts (vLLM 0.21 runs Qwen3-8B at 0.9764 of an RTX A5000)."""
    su = _startup_of(plan, "vllm")
    if su is None or su.budget <= su.free_at_start:
        return
    _at_most(c, plan, _util_ceiling(_est(plan)),
             f"vLLM may refuse to start: gpu_memory_utilization = {_fraction(plan)} asks for "
             f"{gb(su.budget)} of {gb(su.total)}, but its CUDA context and NCCL buffers "
             f"({gb(su.outside)}: the cluster's cuda_context and nccl_buffers) leave {gb(su.free_at_start)} free "
             f"(\"Free memory on device ... is less than desired GPU memory utilization\"); state the cluster's "
             f"cuda_context where its context is smaller")


def _startup_of(plan, engine: str):
    """The start-up of the most loaded GPU of a serving plan ``engine`` serves, else None."""
    if plan.mode != "serve" or plan.serve is None:
        return None
    e = _est(plan)
    su = e.stages[e.most_loaded_stage].startup
    return su if su is not None and su.engine == engine else None


def _at_most(c, plan, util: float, message: str, offered: bool | None = None) -> None:
    """Report ``message`` at gpu_memory_utilization, with ``util`` as the fix where it is one."""
    if offered is None:
        offered = _util_offered(plan, c, util)
    c.report(c.at("serve.gpu_memory_utilization", "serve"), message,
             help=f"`gpu_memory_utilization = {util:.2f}` or less" if offered else None)


def _util_offered(plan, c, util: float) -> bool:
    """Whether ``gpu_memory_utilization = util`` is a fix the whole rule set accepts."""
    return 0 < util <= 1 and _serve_offered(plan, c, gpu_memory_utilization=util)


@rule("P418", "sglang-slack-holds-graphs", severity=WARNING)
def sglang_slack_holds_graphs(plan, c):
    """SGLang leaves (free memory) × (1 − mem_fraction_static) beside its KV pool for activations
    and graphs (kv_cache_configurator.py _profile_available_bytes); parc judges it by SGLang's own
    estimate for its graphs (memory_hook.py reserve_for_graph_mb) and the start-up's activations."""
    from parc.cost.serving import only_decodes

    su = _startup_of(plan, "sglang")
    if su is None or su.slack >= su.activations + su.graphs:
        return
    need = su.activations + su.graphs
    util = int((1 - need / su.free_at_start) * 100) / 100
    offered = _util_offered(plan, c, util)
    none = "" if offered else (
        f"; mem_fraction_static = {util:.2f} would leave room for them, but parc's other checks refuse the plan "
        f"at that fraction" if util > 0 else
        f"; no mem_fraction_static leaves room: the activations and the graphs need {gb(need)} of the "
        f"{gb(su.free_at_start)} SGLang finds free, so only fewer captured decode sizes (SGLang's "
        f"--cuda-graph-max-bs, which parc does not write) or fewer attention-DP ranks would")
    act = (f"{gb(su.activations)} of activations of a {su.tokens:,}-token forward pass (max_num_batched_tokens a "
           f"rank, which parc counts on a decode server too)" if only_decodes(plan)
           else f"{gb(su.activations)} of a chunked prefill's activations")
    _at_most(c, plan, util,
             f"SGLang may run out of memory capturing its CUDA graphs: mem_fraction_static = "
             f"{_fraction(plan)} leaves {gb(su.slack)} beside its KV pool, less than the {act} and the "
             f"{gb(su.graphs)} SGLang's own estimate gives its graphs ({count(su.capture.graphs, 'captured size')}: "
             f"reserve_for_graph_mb, which SGLang subtracts only when it derives the fraction itself); parc judges by "
             f"that estimate{none}", offered)


@rule("P404", "kv-cache-holds-max-num-seqs", severity=WARNING)
def kv_cache_max_num_seqs(plan, c):
    if plan.mode != "serve" or plan.serve is None or not _given(plan, "serve.max_num_seqs"):
        return
    e = _est(plan)
    srv = plan.serve
    lim = _limits(plan)
    seqs, mlen = lim.max_num_seqs, lim.max_model_len
    need = seqs * mlen
    if e.kv_capacity_tokens < mlen or need <= e.kv_capacity_tokens:
        return
    fit = e.kv_capacity_tokens // mlen
    share = lim.attn_dp if lim.engine == "sglang" else 1
    per = f" ({seqs} per attention-DP rank: SGLang divides it over {share})" if share > 1 else ""
    c.report(c.at("serve.max_num_seqs"),
             f"max_num_seqs = {srv.max_num_seqs}{per} sequences of max_model_len = {mlen:,} tokens "
             f"need {need:,} tokens of KV cache but {e.kv_capacity_tokens:,} fit; at most {fit} full-length "
             f"sequences run at once and the engine {_overflow(plan)}",
             help=f"set `max_num_seqs = {fit * share}`, or lower max_model_len to "
                  f"{e.kv_capacity_tokens // seqs:,} to keep {srv.max_num_seqs} sequences")


def _limits(plan):
    """The serving engine's limits for ``plan`` (:func:`parc.cost.engine.limits`), with the KV
    cache the estimate finds per rank."""
    from parc.cost.engine import limits

    return limits(plan, _est(plan).kv_capacity_tokens)


def _fraction(plan) -> str:
    """The engine's memory fraction as a message says it: ``0.9``, or ``0.92 (the engine's default)``."""
    from parc.cost.engine import memory_fraction

    return f"{memory_fraction(plan):g}{_whose(plan, 'gpu_memory_utilization')}"


def _whose(plan, key: str) -> str:
    """`` (the engine's default: the model's context)`` where the spec leaves ``key`` out."""
    if getattr(plan.serve, key) is not None:
        return ""
    return " (the engine's default: the model's context)" if key == "max_model_len" else " (the engine's default)"


# --- the serving workload --------------------------------------------------------------------------

def _workload(plan):
    """(workload, replicas, KV tokens per replica, requests per replica) of a serving plan whose
    `serve` block states a concurrency: of its decode pool when it has pools
    (:attr:`Estimate.serving`); None otherwise."""
    if plan.mode != "serve" or plan.serve is None or plan.serve.concurrency is None:
        return None
    from parc.cost.serving import serve_load

    w, dec = serve_load(plan, _est(plan))
    return w, dec.ranks, dec.est.kv_capacity_tokens, -(-w.concurrency // dec.ranks), dec.limits


@rule("P406", "kv-cache-holds-the-workload", severity=WARNING, whole=True)
def kv_cache_workload(plan, c):
    got = _workload(plan)
    if got is None:
        return
    w, replicas, cap, batch, _ = got
    per = w.prompt_tokens + w.output_tokens
    if batch * per <= cap or cap < per:
        return
    fit = (cap // per) * replicas
    c.report(c.at("serve.concurrency"),
             f"concurrency = {w.concurrency} requests of {w.prompt_tokens:,} + {w.output_tokens:,} tokens need "
             f"{batch:,} × {per:,} = {batch * per:,} tokens of KV cache per replica ({count(replicas, 'replica')}) "
             f"but {cap:,} fit: the engine runs {fit} at once and {_overflow(plan, 'queues or preempts')}",
             help=f"`concurrency = {fit}` fits; or add replicas (dp), or a smaller kv_cache_dtype")


@rule("P407", "concurrency-above-max-num-seqs", severity=WARNING, whole=True)
def concurrency_max_num_seqs(plan, c):
    got = _workload(plan)
    if got is None:
        return
    w, replicas, cap, batch, lim = got
    seqs = lim.max_num_seqs
    if batch <= seqs:
        return
    fits = cap // max(1, w.prompt_tokens + w.output_tokens)
    share = lim.attn_dp if lim.engine == "sglang" else 1       # SGLang's limit is the server's, over its ranks
    fix = (f"`max_num_seqs = {batch * share}`, which the KV cache holds" if batch <= fits else
           f"`max_num_seqs = {fits * share}` holds as many as the KV cache does, and "
           f"`concurrency = {fits * replicas}`")
    said = (f"max_num_seqs = {seqs * share} ({seqs} per attention-DP rank)" if share > 1 else
            f"max_num_seqs = {seqs}" + ("" if "max_num_seqs" in lim.stated else " (the engine's default)"))
    c.report(c.at("serve.concurrency"),
             f"concurrency = {w.concurrency} is {batch} requests per replica ({count(replicas, 'replica')}) but "
             f"{said}: the engine schedules {seqs} at once per replica and the rest wait for a slot, "
             f"so their time to first token grows by whole requests",
             help=fix, related=[(c.at("serve.max_num_seqs", "serve"), said)])


@rule("P408", "workload-longer-than-max-model-len", severity=WARNING, whole=True)
def workload_max_model_len(plan, c):
    srv = plan.serve
    if plan.mode != "serve" or srv is None or srv.prompt_tokens is None:
        return
    out = srv.output_tokens or 0
    mlen = _limits(plan).max_model_len
    if srv.prompt_tokens + out <= mlen:
        return
    c.report(c.at("serve.prompt_tokens"),
             f"prompt_tokens + output_tokens = {srv.prompt_tokens:,} + {out:,} = {srv.prompt_tokens + out:,} exceed "
             f"max_model_len = {mlen:,}{_whose(plan, 'max_model_len')}: the engine refuses such requests (vLLM: \"This model's "
             f"maximum context length is ...\"), so none of the workload is served",
             help=f"raise max_model_len to {srv.prompt_tokens + out:,}, or shorten the workload")
