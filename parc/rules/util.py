"""Small helpers the rules share: divisors, nearest valid values, the quantities in the user's
terms (``dp = world / (pp·cp·tp) = 64 / (4·1·8) = 2``), the rank map."""
from __future__ import annotations

from math import gcd
# divisors: the rules import it from here
from parc.language.diagnostics import Edit, Fix
from parc.model.dims import ParallelDims, divisors, tp_fits_model, tp_widths as _model_tp_widths  # noqa: F401
from parc.words import count as plural  # "1 node", "2 nodes": the one plural helper
from parc.units import gb  # noqa: F401  bytes in messages ("80.0 GB"): the one number formatter


def target_name(t: str | None) -> str:
    """The name messages give a target or rule family (its ``display`` in parc/targets)."""
    from parc.model.targets import display

    return display(t)


def common_divisors(*ns: int) -> list[int]:
    g = 0
    for n in ns:
        g = gcd(g, n)
    return divisors(g)


def lcm(*ns: int) -> int:
    out = 1
    for n in ns:
        out = out * n // gcd(out, n)
    return out


def nearest_multiples(value: int, step: int) -> list[int]:
    """The multiples of ``step`` just below and above ``value`` (positive only)."""
    lo = (value // step) * step
    hi = lo + step
    return [x for x in (lo, hi) if x > 0]


def nearest(values, target: int, n: int = 3) -> list[int]:
    """The ``n`` values closest to ``target``, in ascending order."""
    return sorted(sorted(set(values), key=lambda v: (abs(v - target), v))[:n])


def set_values(plan, values: dict[str, object]) -> tuple[Edit, ...] | None:
    """Edits that give each field (``mesh.tp``) its new value where the spec writes it; None
    when one of them is not written in the spec (or is `auto`) and so has no value to change."""
    edits = []
    for path, v in values.items():
        s = plan.spans.get(f"{path}.value")
        if s is None or (path.startswith("mesh.") and plan.mesh.auto == path[5:]):
            return None
        edits.append(Edit(s, str(v)))
    return tuple(edits)


def value_fixes(plan, options: list[dict[str, object]]) -> list[Fix]:
    """The fixes of a help that names new values, one per option (``{"mesh.tp": 2, "mesh.dp":
    6}``); safe only when the help names one option, else each is an alternative to choose."""
    fixes = []
    for values in options:
        edits = set_values(plan, values)
        if edits:
            words = " and ".join(f"`{p.rsplit('.', 1)[1]} = {v}`" for p, v in values.items())
            fixes.append(Fix(f"set {words}", edits, safe=len(options) == 1))
    return fixes


def join(xs, last="or") -> str:
    xs = [str(x) for x in xs]
    if len(xs) <= 1:
        return "".join(xs)
    return ", ".join(xs[:-1]) + f" {last} " + xs[-1]


def ratio(a: int, b: int) -> str:
    """``a / b`` as a short decimal (``10.67``) or a whole number."""
    return str(a // b) if b and a % b == 0 else f"{a / b:.2f}"


# ---------------------------------------------------------------- the plan in the user's terms

# An audit's ``fails`` that let the plan through: the target runs it, or never meets the question.
RUNS = ("runs", "not applicable", "not checked")


def refusers(plan, c, code: str, runs=None, field: str = "fails") -> list[str] | None:
    """The active targets whose own checks refuse what rule ``code`` judges, by their audit in
    rules.toml (``fails`` other than :data:`RUNS`; ``field`` names another key of the entry that
    says it for one case of the rule, falling back to ``fails``), in message order;
    ``runs(target)`` may answer for a target instead (None: ask the audit). A launcher whose audit is that of a fixed other
    target (slurm's is torchrun's) is judged through the rule family it brings. None when no
    active target has an audit entry for ``code`` (no target named: the rule keeps parc's own
    stance)."""
    from parc.model import targets as T
    from parc.rules import audit, rule_docs

    entries = rule_docs().get(code, {}).get("targets", {})
    judged, out = False, []
    for t in T.audit_order(c.active):
        own = entries.get(t)
        if own and own.get("same_as") not in (None, "engine"):
            continue
        e = audit(code, t, T.pinned(plan, t), plan)
        if e is None:
            continue
        judged = True
        ok = runs(t) if runs is not None else None
        if not (e.get(field, e.get("fails")) in RUNS if ok is None else ok):
            out.append(t)
    return out if judged else None


def dims(plan, mesh=None) -> ParallelDims:
    """The plan's :class:`ParallelDims` (with ``mesh`` in place of its own, when given)."""
    return ParallelDims.from_plan(plan, mesh)


def axes_product(plan, axes) -> int:
    d = dims(plan)
    out = 1
    for ax in axes:
        out *= d.size(ax)
    return out


def dp_terms(plan) -> str:
    """How dp came about: ``dp = 8`` or ``dp = world / (pp·cp·tp) = 64 / (4·1·8) = 2``."""
    m = plan.mesh
    if m.auto == "dp":
        return (f"dp = world / (pp·cp·tp) = {plan.cluster.world} / ({m.pp}·{m.cp}·{m.tp}) = {m.dp}")
    return f"dp = {m.dp}"


def microbatch_terms(plan) -> str:
    """``global_batch / (micro_batch · dp) = 12 / (1 · 2) = 6``."""
    d = dims(plan)
    per = d.per_microbatch
    mb = d.microbatches
    mbs = str(mb) if mb is not None else f"{d.global_batch / max(per, 1):.2f}"
    return f"global_batch / (micro_batch · dp) = {d.global_batch} / ({d.micro_batch} · {d.dp}) = {mbs}"


def microbatches(plan) -> int | None:
    """The microbatch count the batch sizes give (None when global_batch does not divide)."""
    return dims(plan).microbatches


def batch_span(plan):
    """The span a user edits to change the microbatch count: ``global_batch`` (or
    ``microbatches`` when only that is written)."""
    return plan.span("schedule.global_batch")


def given(plan, path: str) -> bool:
    """Whether the spec wrote ``path`` itself: a field left out points at its block's header
    (or, for the model, at `from`)."""
    s = plan.spans.get(path)
    if s is None:
        return False
    blk = plan.spans.get(path.split(".", 1)[0])
    if blk is None or (s.line, s.column) == (blk.line, blk.column):
        return False  # no such block in the spec, or the field points at the block's header
    if path.startswith("model.") and path != "model.from":
        f = plan.spans.get("model.from")
        if f is not None and (s.line, s.column) == (f.line, f.column):
            return False
    return True


def at_given(plan, *paths: str):
    """The span of the first of ``paths`` that the spec wrote itself, else of the last one."""
    for p in paths:
        if given(plan, p):
            return plan.span(p)
    return plan.span(paths[-1])


def global_batches_for(plan, ok) -> list[int]:
    """Global batches near the current one whose microbatch count satisfies ``ok(m)``."""
    d = dims(plan)
    if d.per_microbatch <= 0:
        return []
    cur = max(1, d.global_batch // d.per_microbatch)
    cands = [k for k in range(1, max(4 * cur, 64) + 1) if ok(k)]
    return [d.global_batch_for(k) for k in nearest(cands, cur, 3)]


# ---------------------------------------------------------------- tensor-parallel alternatives

def tp_widths(plan) -> list[tuple[str, int]]:
    """The model widths a tensor-parallel degree must divide, in the user's names."""
    return _model_tp_widths(plan.model)


def tp_ok(plan, t: int, strict_kv: bool = False) -> bool:
    """Whether tensor-parallel degree ``t`` splits every width of the model (KV heads may be
    replicated unless ``strict_kv``)."""
    return tp_fits_model(plan.model, t, replicate_kv=not strict_kv)


def tp_options(plan, strict_kv: bool = False, limit: int | None = None) -> list[tuple[int, int | None]]:
    """Valid tp degrees for this model and cluster, each with the dp that ``dp = auto`` would give."""
    cap = limit or max(plan.cluster.domain, plan.mesh.tp)
    return dims(plan).tp_degrees(plan.model, not strict_kv, plan.cluster.world, cap)


def offered_tp_options(plan, strict_kv: bool = False, c=None) -> list[tuple[int, int | None]]:
    """The tp degrees to offer (each with the dp ``dp = auto`` gives): with the rule's check
    ``c``, only those the whole rule set accepts (:func:`parc.rules.suggest.accepted`). The
    help's words and its fixes both come from here."""
    opts = tp_options(plan, strict_kv)
    if c is None:
        return opts
    from dataclasses import replace

    from parc.rules.suggest import accepted, variant

    return [(t, dp) for t, dp in opts
            if accepted(plan, variant(plan, mesh=replace(plan.mesh, tp=t, dp=dp or plan.mesh.dp)),
                        c.rule.code, c.active)]


def describe_tp_options(plan, strict_kv: bool = False, c=None) -> str:
    """:func:`offered_tp_options` in words: ``tp = 2 (dp = 6) or tp = 4 (dp = 3)``."""
    opts = offered_tp_options(plan, strict_kv, c)
    if not opts:
        return ""
    parts = []
    for t, dp in opts:
        parts.append(f"tp = {t} (dp = {dp})" if dp != plan.mesh.dp or plan.mesh.auto == "dp" else f"tp = {t}")
    return join(parts)


# ---------------------------------------------------------------- rank map

def rank_map(plan, order=None):
    """The plan's :class:`RankMap` (under ``order``, outermost first, when a target fixes it),
    without expert axes when the expert grid does not divide (P112 reports that); None when the
    mesh does not fit the cluster (P101 reports that)."""
    from parc.model.rankmap import RankMap

    m = plan.mesh
    if m.product <= 0 or m.product > plan.cluster.world:
        return None
    order = list(order) if order else None
    try:
        return RankMap(plan, order=order)
    except ValueError:
        return RankMap(plan, order=order, ep=1, etp=1)


def fixed_order(plan, c) -> tuple[str, tuple[str, ...]] | None:
    """(target, order) when a target whose rules run lays ranks out in an order of its own (vLLM:
    dp, pp, cp, tp, outermost first) that differs from the mesh's: the topology rules judge the
    plan under that order, since it is the one that runs. None otherwise."""
    from parc.rules import fixed_order_targets

    for t, order in fixed_order_targets(plan, c.active).items():
        big = [ax for ax in order if plan.mesh.size(ax) > 1]
        if big != [ax for ax in plan.mesh.order if plan.mesh.size(ax) > 1]:
            return t, order
    return None


def order_words(fixed) -> str:
    """``under vLLM's rank order (dp, pp, cp, tp), `` for a fixed order, else nothing."""
    if not fixed:
        return ""
    return f"under {target_name(fixed[0])}'s rank order ({', '.join(fixed[1])}, outermost first), "


def group_ranks(rm, axis: str, limit: int = 8) -> str:
    """The ranks of the first group of ``axis``, as ``0-7`` or ``0, 8, 16, 24``."""
    first = rm.summary()["axes"].get(axis, {}).get("first_group") if axis in rm.order or axis in ("ep", "etp") \
        else None
    if first is None:
        first = [int(x) for x in rm.groups(axis)[0][:limit]]
    n = rm.size(axis)
    if len(first) > 1 and all(b - a == 1 for a, b in zip(first, first[1:])) and len(first) == n:
        return f"{first[0]}-{first[-1]}"
    s = ", ".join(str(x) for x in first)
    return s + (", …" if n > len(first) else "")
