"""P1xx: the mesh against the cluster and the model's shapes.

Every tensor-parallel rule looks at the same tp, so the first width that tp does not split
reports and names the others; the later rules stay quiet until tp splits the widths before
them (one mistake, one error).
"""
from __future__ import annotations

from dataclasses import replace

from parc.rules import WARNING, rule
from parc.rules.util import (axes_product, describe_tp_options, dims, divisors, given, join,
                   nearest, offered_tp_options, plural, ratio, refusers, target_name, tp_options,
                   value_fixes)
from parc.model.dims import grid_fits, splits
from parc.words import count


def _mesh_desc(m, axes=None) -> str:
    axes = axes or [ax for ax in m.order if m.size(ax) > 1]
    return " · ".join(f"{ax}={m.size(ax)}" for ax in axes) or "all axes 1"


def _fact(plan, code: str):
    """The fact ``code`` of :meth:`ParallelDims.violations` for this plan, or None."""
    return next((f for f in dims(plan).violations(plan.model, plan.mode, replicate_kv=False) if f.code == code), None)


def _offered(plan, c, changes: list[dict], axis: str) -> list[int]:
    """The values of ``axis`` among ``changes`` (mesh degrees to set) that the whole rule set
    accepts (:func:`parc.rules.suggest.accepted`), in order."""
    from parc.rules.suggest import accepted, variant

    return [ch[axis] for ch in changes
            if accepted(plan, variant(plan, mesh=replace(plan.mesh, **ch)), c.rule.code, c.active)]


def _tp_facts(plan) -> list:
    """The tensor-parallel facts of :meth:`ParallelDims.violations` for this plan."""
    return [f for f in dims(plan).violations(plan.model, plan.mode, replicate_kv=False)
            if f.code in ("heads_tp", "kv_tp", "width_tp", "kv_tp_replicated", "vocab_tp")]


def _fails(plan, code: str) -> bool:
    return any(f.code == code for f in _tp_facts(plan))


def _heads_fail(plan) -> bool:
    return _fails(plan, "heads_tp")


def _kv_fail(plan) -> bool:
    return _fails(plan, "kv_tp")


def _tp_widths_fail(plan) -> list[tuple[str, int]]:
    return [(f.values["name"], f.values["width"]) for f in _tp_facts(plan) if f.code == "width_tp"]


def _keep_gpus_hint(plan) -> str:
    """Keep the GPUs per model copy: split the current tp into a valid tp times pp."""
    m, md = plan.mesh, plan.model
    for t in reversed(divisors(m.tp)):
        if t == m.tp:
            continue
        if [o for o, _ in tp_options(plan, limit=m.tp) if o == t]:
            p = m.tp // t
            how = "" if md.layers % (m.pp * p * plan.schedule.virtual_stages) == 0 else \
                " (and `layers = balanced` in placement)"
            return (f"; or keep {count(m.tp * m.pp, 'GPU')} per model copy with tp = {t} and pp = {m.pp * p}{how}")
    return ""


# ------------------------------------------------------------------------------------ P101

@rule("P101", "mesh-product-matches-world")
def mesh_product(plan, c):
    m, cl = plan.mesh, plan.cluster
    world = cl.world
    where = f"cluster \"{cl.name}\" has {world} ({plural(cl.nodes, 'node')} × {count(cl.gpus_per_node, 'GPU')})"
    if m.auto and m.size(m.auto) == 0:
        others = axes_product(plan, [ax for ax in m.order if ax != m.auto])
        shown = " · ".join(f"{ax}={m.size(ax)}" for ax in m.order if ax != m.auto and m.size(ax) > 1) or "1"
        fits = [d for d in divisors(world) if d > 1]
        helps = []
        for ax in m.order:
            if ax == m.auto or m.size(ax) <= 1:
                continue
            rest = others // m.size(ax)
            ok = [d for d in divisors(world // rest) if d > 1] if world % rest == 0 else []
            if ok:
                helps.append(f"`{ax}` = {join(nearest(ok, m.size(ax), 3))}")
        c.report(c.at(f"mesh.{m.auto}"),
                 f"`{m.auto} = auto` has no whole value: {where}, which is not a multiple of "
                 f"{shown} = {others}",
                 help=("make the other axes multiply to a divisor of " + str(world) + ": " +
                       ("; ".join(helps) if helps else join(fits[:10]))),
                 related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}")])
        return
    need = m.product
    if need <= world:
        return  # fewer GPUs than the cluster has: P302 (idle GPUs)
    from parc.rules.suggest import offered

    found: list[tuple[str, dict]] = []
    if need % cl.gpus_per_node == 0:
        found.append((f"use `nodes = {need // cl.gpus_per_node}` in the cluster",
                      {"cluster.nodes": need // cl.gpus_per_node}))
    for ax in ("dp", "pp", "cp", "tp"):
        rest = need // m.size(ax)
        if m.size(ax) > 1 and world % rest == 0:
            found.append((f"set `{ax} = {world // rest}`" + (" (or `dp = auto`)" if ax == "dp" else ""),
                          {f"mesh.{ax}": world // rest}))
    kept = offered(plan, c, [o for _, o in found])   # only the changes the other rules accept too
    helps = [h for h, o in found if o in kept]
    options = [o for _, o in found if o in kept]
    first = next((k.split(".")[1] for o in options for k in o if k.startswith("mesh.")), None)
    span = c.at(f"mesh.{first}") if first else c.at("mesh")
    c.report(span,
             f"the mesh needs {count(need, 'GPU')} ({_mesh_desc(m)}) but {where}",
             help=("; or ".join(helps) if helps else
                   f"pp · dp · cp · tp must equal the cluster's {count(world, 'GPU')}"),
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}, gpus_per_node = {cl.gpus_per_node}")],
             fixes=value_fixes(plan, options))


# ------------------------------------------------------------------------------------ P102

@rule("P102", "heads-divisible-by-tp")
def heads_tp(plan, c):
    m, md = plan.mesh, plan.model
    if not _heads_fail(plan):
        return
    also = []
    if _kv_fail(plan):
        also.append(f"kv_heads = {md.kv_heads}")
    also += [f"{n} = {w}" for n, w in _tp_widths_fail(plan)]
    msg = (f"tp = {m.tp} does not divide the model's {md.heads} attention heads "
           f"({md.heads} / {m.tp} = {ratio(md.heads, m.tp)} per GPU, but every target gives each GPU of a TP "
           f"group whole heads)")
    if also:
        msg += f"; nor does it split {join(also, 'or')}"
    opts = describe_tp_options(plan, c=c)
    help_ = (f"tensor-parallel degrees that split this model and fit {count(plan.cluster.world, 'GPU')}: {opts}"
             if opts else f"tp must divide heads = {md.heads}: {join(divisors(md.heads)[:8])}")
    keep = _keep_gpus_hint(plan)
    help_ += keep
    options = [{"mesh.tp": t, **({"mesh.dp": dp} if dp != m.dp and m.auto != "dp" else {})}
               for t, dp in (offered_tp_options(plan, c=c) if opts else [])]
    fixes = value_fixes(plan, options)
    if keep:   # the help names another way too (pp): each fix is one alternative, for the user to choose
        fixes = [replace(f, safe=False) for f in fixes]
    c.report(c.at("mesh.tp"), msg, help=help_, related=[(c.at("model.heads"), f"heads = {md.heads}")],
             fixes=fixes)


# ------------------------------------------------------------------------------------ P103

@rule("P103", "kv-heads-vs-tp")
def kv_heads_tp(plan, c):
    m, md = plan.mesh, plan.model
    if _heads_fail(plan) or not _kv_fail(plan):
        return
    kv, t = md.kv_heads, m.tp
    opts = describe_tp_options(plan, c=c)
    c.report(c.at("mesh.tp"),
             f"tp = {t} can neither split the model's {kv} KV heads ({kv} % {t} = {kv % t}) nor replicate "
             f"them evenly ({t} % {kv} = {t % kv})",
             help=(f"tp must divide kv_heads = {kv} (each GPU holds kv_heads / tp) or be a multiple of it "
                   f"(Megatron-LM and vLLM then replicate each KV head tp / kv_heads times)"
                   + (f"; degrees that work here: {opts}" if opts else "")),
             related=[(c.at("model.kv_heads"), f"kv_heads = {kv}")])


# ------------------------------------------------------------------------------------ P104

@rule("P104", "layers-divisible-by-stages")
def layers_stages(plan, c):
    m, md, pl = plan.mesh, plan.model, plan.placement
    fact = _fact(plan, "layers_stages")
    if pl.layers_mode != "even" or not fact:
        return
    from parc.model.params import balanced_split, engine_split
    from parc.model.targets import layer_split

    v, stages = fact.values["virtual_stages"], dims(plan).stages
    why = ""
    if not given(plan, "placement.layers"):
        def splits_itself(t):
            return engine_split(layer_split(t), md.layers, stages) is not None if layer_split(t) else None

        # engines that split the layers themselves run the plan (placement.layers holds their split)
        who = refusers(plan, c, "P104", splits_itself)
        if who == []:
            return
        split_by = [t for t in c.active if splits_itself(t)]
        if who and split_by:
            why = (f": {join(sorted(target_name(t) for t in who), 'and')} refuse{'s' if len(who) == 1 else ''} "
                   f"it, though {join(sorted(target_name(t) for t in split_by), 'and')} would split it")
    what = f"pp = {m.pp}" + (f" × virtual_stages = {v} = {count(stages, 'stage')}" if v > 1 else " stages")
    w, inner = plan.cluster.world, m.cp * m.tp
    ok = sorted({p for p in fact.alternatives if p != m.pp and w % (p * inner) == 0})
    split = balanced_split(md, stages)
    helps = []
    if split:
        helps.append(f"keep {count(stages, 'stage')} with an uneven split: `layers = {split}` in placement "
                     f"(or `layers = balanced`; Megatron-LM takes it as --decoder-first/last-pipeline-num-layers "
                     f"or a --pipeline-model-parallel-layout, vLLM as VLLM_PP_LAYER_PARTITION)")
    if ok:
        alts = [f"pp = {p} (dp = {w // (p * inner)})" for p in nearest(ok, m.pp, 3)]
        helps.append(f"or a pipeline size that divides {count(md.layers, 'layer')} on {count(w, 'GPU')}: {join(alts)}")
    c.report(c.at("placement.layers", "mesh.pp"),
             f"{count(md.layers, 'layer')} cannot be split evenly over {what} ({ratio(md.layers, stages)} per stage)"
             + why,
             help="; ".join(helps) or None,
             related=[(c.at("model.layers"), f"layers = {md.layers}")])


# ------------------------------------------------------------------------------------ P105

@rule("P105", "layer-split-matches-stages")
def explicit_split(plan, c):
    m, md, pl = plan.mesh, plan.model, plan.placement
    v, stages = dims(plan).virtual_stages, dims(plan).stages
    from parc.model.params import balanced_split

    span = c.at("placement.layers")
    if pl.layers_mode == "balanced":
        if stages > md.layers:
            c.report(span, f"`layers = balanced` cannot give each of {count(stages, 'stage')} a layer: the model has "
                           f"{md.layers}", help=f"use at most {md.layers} pipeline stages (pp · virtual_stages)")
        return
    if pl.layers_mode != "explicit" or not pl.layers:
        return
    split = pl.layers
    fix = balanced_split(md, stages)
    fix_s = f"; for example `layers = {fix}`" if fix else ""
    what = f"pp = {m.pp}" + (f" × virtual_stages = {v}" if v > 1 else "")
    if len(split) != stages:
        c.report(span, f"the layer split lists {plural(len(split), 'stage')} but the plan has {stages} "
                       f"({what})",
                 help=f"give one layer count per (virtual) stage, {stages} in all{fix_s}",
                 related=[(c.at("mesh.pp"), f"pp = {m.pp}")])
        return
    total = sum(split)
    if total != md.layers:
        diff = md.layers - total
        c.report(span, f"the layer split adds up to {count(total, 'layer')} but the model has {md.layers} "
                       f"({plural(abs(diff), 'layer')} {'missing' if diff > 0 else 'too many'})",
                 help=f"the counts must sum to layers = {md.layers}{fix_s}",
                 related=[(c.at("model.layers"), f"layers = {md.layers}")])
        return
    empty = [i for i, n in enumerate(split) if n == 0 and 0 < i < stages - 1]
    if empty:
        c.report(span, f"stage{'s' if len(empty) > 1 else ''} {join(empty, 'and')} would hold no layers and no "
                       f"parameters: {'their' if len(empty) > 1 else 'its'} GPUs would only pass activations on",
                 help=f"give every middle stage at least one layer{fix_s}")


# ------------------------------------------------------------------------------------ P127

def _fewer_stages(plan) -> list[int]:
    """Pipeline sizes that give every stage a layer and fill the cluster (dp takes the rest)."""
    m, md, w = plan.mesh, plan.model, plan.cluster.world
    inner = m.cp * m.tp
    ok = [p for p in divisors(max(1, w // inner)) if p <= md.layers and w % (p * inner) == 0]
    return nearest(ok, m.pp, 3)


def _fewer_stages_help(plan) -> str:
    m, md, w = plan.mesh, plan.model, plan.cluster.world
    inner = m.cp * m.tp
    alts = [f"pp = {p}" + (f" (dp = {w // (p * inner)})" if w // (p * inner) > 1 else "") for p in _fewer_stages(plan)]
    return f"give every stage a layer: at most pp = {md.layers}" + (f", such as {join(alts)}" if alts else "")


@rule("P127", "empty-pipeline-stage")
def empty_stage(plan, c):
    """A serving pipeline stage that holds no layers (the engine's own split of fewer layers than
    stages, or a split that says 0) keeps no KV cache: vLLM then sizes every stage's cache at one
    block (v1/core/kv_cache_planning.py get_kv_cache_configs gives a worker without KV cache groups
    one block, and every worker takes the smallest count)."""
    m, md, pl = plan.mesh, plan.model, plan.placement
    split = pl.layers
    if plan.mode != "serve" or m.pp <= 1 or not split or len(split) != m.pp:
        return
    empty = [i for i, n in enumerate(split) if n == 0]
    if pl.layers_mode == "explicit":
        empty = [i for i in empty if i in (0, len(split) - 1)]     # P105 names the middle ones
    if not empty:
        return
    from parc.model.params import split_engine

    engine = split_engine(plan, c.active) if pl.layers_mode == "even" else None
    whose = f"{target_name(engine)} splits them {split}" if engine else f"the split is {split}"
    vllm = (": vLLM gives a stage without attention layers one KV block and sizes every stage's cache by the "
            "smallest, so the whole cache would hold one block (get_kv_cache_configs)") if "vllm" in c.active else ""
    stages = join([str(i) for i in empty], "and")
    c.report(c.at("placement.layers", "mesh.pp"),
             f"pipeline stage{'s' if len(empty) > 1 else ''} {stages} of {m.pp} would hold none of the model's "
             f"{count(md.layers, 'layer')} ({whose}) and keep no KV cache{vllm}",
             help=_fewer_stages_help(plan),
             related=[(c.at("model.layers"), f"layers = {md.layers}")],
             fixes=value_fixes(plan, [{"mesh.pp": p, "mesh.dp": plan.cluster.world // (p * m.cp * m.tp)}
                                      for p in _fewer_stages(plan)]))


# ------------------------------------------------------------------------------------ P106

@rule("P106", "mlp-width-divisible-by-tp")
def mlp_width_tp(plan, c):
    m = plan.mesh
    if _heads_fail(plan) or _kv_fail(plan):
        return
    bad = _tp_widths_fail(plan)
    if not bad:
        return
    name, w = bad[0]
    opts = describe_tp_options(plan, c=c)
    path = "model.ffn_hidden" if name == "ffn_hidden" else "model.moe_ffn_hidden"
    c.report(c.at("mesh.tp"),
             f"tp = {m.tp} does not divide {name} = {w}: the column-parallel MLP would need "
             f"{ratio(w, m.tp)} columns per GPU (Megatron-LM and vLLM fail at model build with "
             f"\"{w} is not divisible by {m.tp}\")",
             help=(f"tensor-parallel degrees that split every width: {opts}" if opts else
                   f"tp must divide {name} = {w}: {join([d for d in divisors(w) if d <= 16])}"),
             related=[(c.at(path), f"{name} = {w}")])


# ------------------------------------------------------------------------------------ P107/P108

def _vocab_fail(plan) -> bool:
    return _fails(plan, "vocab_tp") and not _heads_fail(plan) and not _kv_fail(plan)


@rule("P107", "vocab-padded-for-tp", severity=WARNING, targets=("megatron",))
def vocab_padded(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "train" or not _vocab_fail(plan):
        return
    step = 128 * m.tp
    padded = -(-md.vocab // step) * step
    c.report(c.at("model.vocab"),
             f"vocab = {md.vocab} is not divisible by tp = {m.tp}: Megatron-LM pads the embedding and the "
             f"output layer to {padded} rows (a multiple of make-vocab-size-divisible-by 128 × tp = {step}), "
             f"{padded - md.vocab} rows that exist only for the split",
             help=(f"expected; convert checkpoints with the same padding (vocab {padded}), or pick a tp that "
                   f"divides {md.vocab}: {join([d for d in divisors(md.vocab) if 1 < d <= 16]) or 'none up to 16'}"),
             related=[(c.at("mesh.tp"), f"tp = {m.tp}")])


@rule("P108", "vocab-divisible-by-tp", targets=("torch",))
def vocab_tp_torch(plan, c):
    m, md = plan.mesh, plan.model
    if not _vocab_fail(plan):
        return
    ok = [d for d in divisors(md.vocab) if 1 < d <= max(16, m.tp)]
    up = -(-md.vocab // m.tp) * m.tp
    c.report(c.at("mesh.tp"),
             f"tp = {m.tp} does not divide vocab = {md.vocab}; {target_name(c.target)} shards the embedding rows "
             f"and the output layer (loss parallel) evenly over tp and does not pad the vocabulary "
             f"(Megatron-LM and vLLM pad it)",
             help=(f"pad the tokenizer's vocabulary to {up} (`vocab = {up}`)"
                   + (f", or use tp = {join(ok)}" if ok else "")),
             related=[(c.at("model.vocab"), f"vocab = {md.vocab}")])


# ------------------------------------------------------------------------------------ P128

# vLLM and SGLang pad the vocabulary to a multiple of this before splitting it over tp
# (DEFAULT_VOCAB_PADDING_SIZE in vllm/model_executor/layers/vocab_parallel_embedding.py and
# sglang/srt/layers/vocab_parallel_embedding.py)
VOCAB_PADDING = 64


@rule("P128", "padded-vocab-divisible-by-tp", targets=("vllm", "sglang"))
def padded_vocab_tp(plan, c):
    """vLLM and SGLang pad the vocabulary to a multiple of 64 and split the padded rows evenly over
    tp: VocabParallelEmbedding's ``divide(num_embeddings_padded, tp_size)`` asserts it."""
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or m.tp <= 1 or _heads_fail(plan) or _kv_fail(plan):
        return
    padded = -(-md.vocab // VOCAB_PADDING) * VOCAB_PADDING
    if padded % m.tp == 0:
        return
    fits = [(t, dp) for t, dp in tp_options(plan) if padded % t == 0 and t > 1]
    ok = [t for t, _ in fits]
    c.report(c.at("mesh.tp"),
             f"{target_name(c.target)} pads the vocabulary to a multiple of {VOCAB_PADDING} (vocab = {md.vocab} → "
             f"{padded} rows) and splits the padded rows evenly over tp, but {padded} is not divisible by "
             f"tp = {m.tp}: its VocabParallelEmbedding fails with \"{padded} is not divisible by {m.tp}\"",
             help=(f"tensor-parallel degrees that split the padded vocabulary and this model: tp = {join(ok)}" if ok else
                   f"tp must divide the padded vocabulary {padded}"),
             related=[(c.at("model.vocab"), f"vocab = {md.vocab}")],
             fixes=value_fixes(plan, [{"mesh.tp": t, **({"mesh.dp": dp} if dp not in (None, m.dp) and m.auto != "dp"
                                                        else {})} for t, dp in fits]))


# ------------------------------------------------------------------------------------ P109

@rule("P109", "experts-divisible-by-ep")
def experts_ep(plan, c):
    m, md = plan.mesh, plan.model
    if m.ep <= 1 and m.etp <= 1:
        return
    if not md.is_moe:
        ax = "ep" if m.ep > 1 else "etp"
        msg = f"{ax} = {m.size(ax)} but model \"{md.name}\" has no experts"
        help_ = f"remove `{ax}` from the mesh, or give the model `experts` (and `top_k`)"
        if refusers(plan, c, "P109", field="without_experts") == []:
            # torchtitan leaves the expert degree unused on a dense model
            c.report(c.at(f"mesh.{ax}"), msg + ": no layer uses it, so it has no effect", help=help_, severity=WARNING)
            return
        c.report(c.at(f"mesh.{ax}"), msg, help=help_)
        return
    fact = _fact(plan, "experts_ep")
    if fact and fact.values["redundant"]:
        return   # EPLB's copies spread with the experts: P125 (and SGLang's P628) judge experts + redundant
    if fact:
        region = dims(plan).region
        ok = _offered(plan, c, [{"ep": e} for e in fact.alternatives], "ep")
        slots, what = md.experts, count(md.experts, "expert")
        helps = (f"expert-parallel degrees that divide {what} and fit the dp·cp·tp = {region} "
                 f"ranks of a stage: ep = {join(ok)}" if ok else f"ep must divide {what}")
        related = [(c.at("model.experts"), f"experts = {md.experts}")]
        # vLLM spreads the remainder over the first ranks (determine_expert_map); Megatron-LM's
        # validate_args and the torch runtime (torchtitan's update_from_config) refuse it
        strict = c.active & {"megatron", "torch"}
        if plan.mode == "serve" and "vllm" in c.active and not strict:
            k, rest = divmod(slots, m.ep)
            d = c.report(c.at("mesh.ep"),
                         f"vLLM spreads the model's {what} over ep = {count(m.ep, 'rank')} unevenly "
                         f"(determine_expert_map): {plural(rest, 'rank holds', 'ranks hold')} {count(k + 1, 'expert')} and "
                         f"{m.ep - rest} hold {k}, so the slowest rank holds {k + 1} of {slots}, "
                         f"{(k + 1) * m.ep / slots:.2f}× an even share ({ratio(slots, m.ep)}), and every MoE "
                         f"layer waits for it",
                         help=helps, related=related, severity=WARNING)
            d.target = "vllm"
            return
        who = (join(sorted(target_name(t) for t in strict), "and") + " refuse" + ("s" if len(strict) == 1 else "")
               if strict else "Megatron-LM (validate_args) and the torch runtime refuse")
        c.report(c.at("mesh.ep"),
                 f"ep = {m.ep} does not divide the model's {what} ({count(ratio(slots, m.ep), 'expert')} "
                 f"per GPU); every rank of an EP group must hold whole experts, and {who} it before the first step",
                 help=helps, related=related)


# ------------------------------------------------------------------------------------ P111

@rule("P111", "hidden-divisible-by-heads")
def hidden_heads(plan, c):
    md = plan.model
    if md.head_dim is not None or md.hidden % md.heads == 0:
        return
    ok = [a for a in divisors(md.hidden) if abs(a - md.heads) <= md.heads // 2 and a > 1]
    c.report(c.at("model.hidden"),
             f"hidden = {md.hidden} is not divisible by heads = {md.heads}, so the head size "
             f"({ratio(md.hidden, md.heads)}) is not whole (Megatron-LM asserts hidden % heads == 0 when "
             f"kv_channels is not given)",
             help=("set `head_dim` explicitly (as Gemma and Qwen configs do), or use heads = "
                   + (join(nearest(ok, md.heads, 3)) if ok else "a divisor of hidden")),
             related=[(c.at("model.heads"), f"heads = {md.heads}")])


# ------------------------------------------------------------------------------------ P110

@rule("P110", "kv-heads-replicated", targets=("torch", "torchtitan"))
def kv_replicated(plan, c):
    m, md = plan.mesh, plan.model
    t, kv = m.tp, md.kv_heads
    if _heads_fail(plan) or not _fails(plan, "kv_tp_replicated"):
        return
    opts = describe_tp_options(plan, strict_kv=True, c=c)
    c.report(c.at("mesh.tp"),
             f"tp = {t} is larger than the model's {kv} KV heads: vLLM and Megatron-LM would replicate each KV "
             f"head {t // kv} times, but {target_name(c.target)} only splits them (tp must divide kv_heads)",
             help=(f"degrees this target can run: {opts}" if opts else f"use a tp that divides kv_heads = {kv}")
                  + f"; or compile for {'vLLM' if plan.mode == 'serve' else 'Megatron-LM'}, which replicates",
             related=[(c.at("model.kv_heads"), f"kv_heads = {kv}")])


# ------------------------------------------------------------------------------------ P112

@rule("P112", "expert-grid-divides-stage")
def expert_grid(plan, c):
    m, md = plan.mesh, plan.model
    if not md.is_moe or (m.ep <= 1 and m.etp <= 1):
        return
    # the grid is judged whatever P109 said of experts % ep: where P109 is an error this rule
    # is gated off (it reads ep); where it is vLLM's warning the grid must still fit the stage
    region = dims(plan).region
    if grid_fits(region, m.ep, m.etp):
        return
    fact = _fact(plan, "expert_grid")
    ok = fact.alternatives if fact else tuple(
        e for e in divisors(md.experts) if e > 1 and grid_fits(region, e, m.etp))
    ok = _offered(plan, c, [{"ep": e} for e in ok], "ep")
    grid = m.ep * m.etp
    world = m.product
    helps = []
    if ok:
        helps.append(f"ep = {join(nearest(ok, m.ep, 4))} with etp = {m.etp}")
    etps = _offered(plan, c, [{"etp": e} for e in divisors(region)
                              if grid_fits(region, m.ep, e) and splits(md.moe_ffn_hidden, e)], "etp")
    if etps and m.ep > 1 and md.experts % m.ep == 0:
        helps.append(f"etp = {join(etps)} with ep = {m.ep}")
    c.report(c.at("mesh.ep" if m.ep > 1 else "mesh.etp"),
             f"the expert grid ep · etp = {m.ep} · {m.etp} = {grid} does not fit the dp · cp · tp = "
             f"{m.dp} · {m.cp} · {m.tp} = {count(region, 'rank')} of a pipeline stage it is carved from "
             f"(Megatron-LM: world {world} % (etp·ep·pp = {grid * m.pp}) ≠ 0, found only at process-group init)",
             help=("ep · etp must divide dp · cp · tp: " + "; or ".join(helps)) if helps else
                  f"ep · etp must divide dp · cp · tp = {region}")


# ------------------------------------------------------------------------------------ P113

@rule("P113", "moe-ffn-divisible-by-etp")
def moe_ffn_etp(plan, c):
    m, md = plan.mesh, plan.model
    fact = _fact(plan, "moe_ffn_etp")
    if not fact:
        return
    ok = fact.alternatives
    c.report(c.at("mesh.etp"),
             f"etp = {m.etp} does not divide moe_ffn_hidden = {md.moe_ffn_hidden}: each expert's MLP would "
             f"need {ratio(md.moe_ffn_hidden, m.etp)} columns per GPU",
             help=f"expert tensor-parallel degrees that divide it: etp = {join(ok)}" if ok else None,
             related=[(c.at("model.moe_ffn_hidden"), f"moe_ffn_hidden = {md.moe_ffn_hidden}")])


# ------------------------------------------------------------------------------------ P114/P115

@rule("P114", "seq-len-divisible-by-2cp")
def seq_cp(plan, c):
    m, md = plan.mesh, plan.model
    fact = _fact(plan, "seq_cp")
    if not fact:
        return
    ok_cp = [d for d in divisors(md.seq_len // 2 if md.seq_len % 2 == 0 else 1) if 1 < d <= max(16, m.cp)]
    c.report(c.at("model.seq_len"),
             f"seq_len = {md.seq_len} is not divisible by 2 · cp = {2 * m.cp}: context parallelism cuts each "
             f"sequence into 2·cp chunks and gives every rank one from the head and one from the tail, "
             f"to balance causal attention (Megatron-LM refuses it in validate_args)",
             help=f"use seq_len = {join(fact.alternatives)}"
                  + (f", or cp = {join(ok_cp)}" if ok_cp else ""),
             related=[(c.at("mesh.cp"), f"cp = {m.cp}")])


@rule("P115", "seq-len-divisible-by-tp-with-sp")
def seq_sp(plan, c):
    m, md = plan.mesh, plan.model
    fact = _fact(plan, "seq_sp")   # quiet while P114 reports seq_len % 2·cp
    if not fact:
        return
    local = md.seq_len // m.cp
    per = f"seq_len / cp = {md.seq_len} / {m.cp} = {local}" if m.cp > 1 else f"seq_len = {md.seq_len}"
    c.report(c.at("model.seq_len"),
             f"sequence parallelism splits each sequence over tp = {m.tp}, but {per} is not divisible by {m.tp} "
             f"(Megatron-LM only finds out in the first forward pass, on every rank: \"First dimension of the "
             f"tensor should be divisible by tensor parallel size\")",
             help=f"use seq_len = {join(fact.alternatives)}, or turn `sequence_parallel` off",
             related=[(c.at("train.sequence_parallel"), "sequence_parallel = true"), (c.at("mesh.tp"), f"tp = {m.tp}")])


# ------------------------------------------------------------------------------------ P116

@rule("P116", "vocab-aligned-to-8", severity=WARNING, targets=("deepspeed",))
def vocab_align(plan, c):
    md = plan.model
    if md.vocab % 8 == 0:
        return
    up = -(-md.vocab // 8) * 8
    c.report(c.at("model.vocab"),
             f"vocab = {md.vocab} is not a multiple of 8: the embedding and output matrix multiplies miss the tensor "
             f"cores' 8-element alignment (DeepSpeed warns \"vocabulary size is not aligned to 8\")",
             help=f"pad the vocabulary to {up} (`vocab = {up}`); the extra rows are never predicted")
