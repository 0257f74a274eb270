"""The rule registry: each rule is one small function over the resolved plan.

A rule is registered with :func:`rule` and returns (or yields) diagnostics built through its
:class:`Check`; its documentation lives in ``rules.toml`` under its code (a target's own rules: in
its folder, ``parc/targets/<name>/rules.toml``).

Every independent mistake is reported in one run; only errors that follow from another are
dropped. :data:`DEPENDS` says, for each rule, the quantities it reads and the quantity it judges:
when a rule reports an error, the quantity it judges is wrong, and every later rule that reads
it is skipped (a tp that does not divide the heads is one error, not one per rule that divides
by tp). A degree that is ``auto`` is computed from the others, so it is wrong when they are. The
rules that judge the mesh against the cluster (P101, P302) run first; the rest run in code order.

Releases: a target rule whose ``rules.toml`` entry carries ``since`` (included) and/or ``until``
(excluded) runs only for the releases of its target in that range (the target block's
``version``, default the newest its target.toml knows); an audit entry (``[CODE.targets.T]``)
with them says how T refuses the plan only in those releases. A rule whose outcome changed
between releases is two entries in data, each with its range, never a version test in code.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from parc.language.diagnostics import ERROR, NOTE, WARNING, Diagnostic, Fix, Related, Span, family
from parc.model import targets as T
from parc.model.plan import Plan

GENERIC = "generic"
# Targets whose rules exist: every target folder, and the rule families without one ("torch",
# parc's own runtime, torchtitan-style), as parc/targets
# declares them. A spec opts into a target's rules by naming it (`target vllm`) or --target.
TARGET_FAMILIES = tuple(T.rule_targets())

# The rules of the plan itself. A target's own rules live in its folder and are registered by
# ``parc.targets.load_rules()``, which whoever checks a plan for targets calls: this registry
# never imports a target.
_MODULES = ("mesh", "batch", "topology", "placement", "memory", "advice", "style", "serving")


@dataclass(slots=True)
class Rule:
    code: str
    name: str
    severity: str
    targets: tuple[str, ...]          # ("generic",) or the targets it applies to
    fn: Callable
    family: str = ""
    reads: tuple[str, ...] | None = None   # the quantities it reads, where DEPENDS does not say
    whole: bool = False                    # judges a disaggregated plan's pools together, once

    def doc(self) -> dict:
        return rule_docs().get(self.code, {})


_REGISTRY: dict[str, Rule] = {}


def rule(code: str, name: str, severity: str = ERROR, targets: tuple[str, ...] = (GENERIC,),
         reads: tuple[str, ...] | None = None, whole: bool = False):
    """Register a rule function ``fn(plan, check) -> iterable of Diagnostic | None``; ``reads``
    names the quantities it reads (see :data:`DEPENDS`), so a target folder's rule says it where
    it is written. A rule with ``whole`` judges a disaggregated plan as a whole (its pools
    together), once; the others judge each pool's instance plan."""

    def deco(fn):
        if code in _REGISTRY:
            raise RuntimeError(f"rule {code} registered twice")
        _REGISTRY[code] = Rule(code, name, severity, tuple(targets), fn, family(code),
                               None if reads is None else tuple(reads), whole)
        return fn

    return deco


@dataclass(slots=True)
class Check:
    """What a rule uses to report: the plan's spans and its own code and severity."""

    rule: Rule
    plan: Plan
    target: str | None = None
    active: frozenset = frozenset()   # every target whose rules run (torch implied by torchrun, ...)
    out: list[Diagnostic] = field(default_factory=list)
    version: str | None = None        # the release of ``target`` the plan launches (None: unversioned)

    @property
    def release(self) -> str:
        """``vLLM 0.32``: the tool and release a version-bound message names."""
        return f"{T.display(self.target)} {self.version}" if self.version else T.display(self.target)

    def report(self, span: Span, message: str, help: str | None = None, *, severity: str | None = None,
               related: list[tuple[Span, str]] | None = None, fixes: list[Fix] | None = None) -> Diagnostic:
        d = Diagnostic(self.rule.code, severity or self.rule.severity, message, span, help=help,
                       related=[Related(s, m) for s, m in (related or [])], target=self.target, fixes=fixes or [])
        self.out.append(d)
        return d

    def at(self, *paths: str) -> Span:
        return self.plan.span(*paths)

    def fixed_by(self) -> tuple[str | None, str]:
        """A known defect's way out (P7xx): the release its rules.toml entry says fixed it
        (``until``), and the words a message ends with: ``SGLang 0.5.22 and later fix it``, or
        ``no release parc knows (SGLang 0.5.22 to 0.5.23) fixes it``."""
        doc, known = self.rule.doc(), T.versions(self.target)
        tool = T.display(self.target)
        if doc.get("until"):
            return doc["until"], f"{tool} {doc['until']} and later fix it"
        first = doc.get("since") or (known[0] if known else None)
        span = f" ({tool} {first} to {known[-1]})" if first and known else ""
        return None, f"no release parc knows{span} fixes it"

    def reports(self) -> str:
        """``llm-d#2433, sglang#38552``: the public issues of a known defect's rules.toml entry
        (``issues``; pull requests left out), as messages cite them."""
        refs = []
        for url in self.rule.doc().get("issues", []):
            parts = url.rstrip("/").split("/")
            if len(parts) >= 2 and parts[-2] == "issues":
                refs.append(f"{parts[-3]}#{parts[-1]}")
        return ", ".join(refs)


@lru_cache(maxsize=1)
def rule_docs() -> dict[str, dict]:
    import tomllib

    path = Path(__file__).resolve().parent / "rules.toml"
    with open(path, "rb") as f:
        docs = tomllib.load(f)
    T.merge_docs(docs, T.rule_docs())   # target folders: their rules, and their audit entries
    return dict(sorted(docs.items()))


# Targets as the audit in rules.toml names them, in the order messages list them.
AUDIT_TARGETS = T.audit_targets()
LATE = {"initialisation": "only when it sets up its process groups", "model build": "only when it builds the model",
        "first step": "only in its first step"}


def audit(code: str, target: str, version: str | None = None, plan: Plan | None = None) -> dict | None:
    """Where ``target`` itself refuses what rule ``code`` refuses (``fails``, ``source``, ``check``,
    ``note``), following ``same_as``; the torch runtime's rules are audited as "torch". With
    ``version``, an entry that carries ``since``/``until`` counts only for releases in its range.
    ``same_as = "engine"`` follows the engine ``plan`` runs under the target (slurm: torchrun,
    megatron, ..., vllm or sglang; without a plan, the first of its default engines with an
    entry)."""
    found = _audit_entry(code, target, version, plan)
    return found[1] if found else None


def _audit_entry(code: str, target: str, version: str | None = None,
                 plan: Plan | None = None) -> tuple[str, dict] | None:
    entries = rule_docs().get(code, {}).get("targets", {})
    key = target if target in entries else T.audit_name(target) or target
    seen = set()
    while key in entries and "same_as" in entries[key] and key not in seen:
        seen.add(key)
        same = entries[key]["same_as"]
        key = _engine_entry(entries, key, plan) if same == "engine" else same
    if key not in entries:
        return None
    e = entries[key]
    if version in T.versions(key) and not T.holds(key, version, e.get("since"), e.get("until")):
        return None
    return key, e


def audit_entries(code: str, plan: Plan, targets: Iterable[str]) -> list[tuple[str, dict]]:
    """(audit name, entry) of rule ``code`` for each of ``targets`` that has one, in message
    order, each entry once (lws names its engine's), for the releases ``plan`` launches."""
    out, seen = [], set()
    for t in T.audit_order(targets):
        found = _audit_entry(code, t, T.pinned(plan, t), plan)
        if found and found[0] not in seen:
            seen.add(found[0])
            out.append(found)
    return out


def _engine_entry(entries: dict, wrapper: str, plan: Plan | None) -> str:
    """The engine whose audit entry a wrapper's ``same_as = "engine"`` follows."""
    if plan is not None:
        return T.engine_of(plan, wrapper)
    defaults = [T.default_engine(wrapper, m) for m in ("train", "serve")]
    return next((e for e in defaults if e in entries), defaults[0])


def in_force(code: str, target: str | None, version: str | None) -> bool:
    """Whether rule ``code`` holds for release ``version`` of ``target`` (its rules.toml entry's
    ``since``/``until``); a generic rule, or a target without versions, always."""
    if target is None or version is None:
        return True
    doc = T.release_bounds().get(code, {})   # read without parsing every rule's documentation
    return T.holds(target, version, doc.get("since"), doc.get("until"))


def when_targets_fail(code: str, targets: Iterable[str], plan: Plan | None = None) -> str:
    """`` (Megatron-LM refuses it only when it builds the model: megatron/...)`` for the targets that
    refuse the plan late (process groups, model build, first step), from the audit of the
    releases ``plan`` launches (the newest without a plan); else ""."""
    parts, seen = [], set()
    for t in targets:
        version = T.pinned(plan, t) if plan is not None else T.newest(t)
        found = _audit_entry(code, t, version, plan)
        if not found or found[0] in seen:
            continue
        key, e = found
        seen.add(key)
        if e.get("said") or e.get("fails") not in LATE:
            continue
        parts.append(f"{T.display(key)} refuses it {LATE[e['fails']]} ({e['source']})")
    return f" ({'; '.join(parts)})" if parts else ""


def registry() -> dict[str, Rule]:
    """Every registered rule: the plan's own, and the targets' where ``parc.targets.load_rules()``
    registered them."""
    for m in _MODULES:
        importlib.import_module(f"{__name__}.{m}")
    return _REGISTRY


def active_targets(plan: Plan, extra: Iterable[str] = ()) -> list[str]:
    names = list(plan.targets)
    for t in extra:
        if t not in names:
            names.append(t)
    return names


# The mesh's degrees; "world" is the mesh against the cluster (and dp when it is derived).
MESH = ("world", "pp", "dp", "cp", "tp", "ep", "etp")
# What the layout rules read: GPU counts, not the widths tp divides (a tp that splits no head
# evenly still crosses a node, or fills one, as its number says).
COUNTS = ("world", "pp", "dp", "cp", "ep", "etp")
# Everything a layout depends on: the memory estimate reads all of it.
LAYOUT = MESH + ("stages", "microbatches", "schedule", "head_dim", "seq", "train", "serve")

# code: (reads, judges). A rule whose error makes a quantity wrong judges it; a rule that reads a
# wrong quantity is skipped. Quantities: the mesh degrees, "world" (the mesh against the cluster),
# "stages" (the layers of each pipeline stage), "microbatches", "schedule" (a pipeline schedule
# that can run), "head_dim", "seq" (the sequence each rank holds), "topology" (where groups land),
# and "train" / "serve" (a block with a bad value, which the resolver left at its defaults).
DEPENDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "P101": ((), ("world",)),
    "P102": (("tp",), ("tp",)),
    "P103": (("tp",), ("tp",)),
    "P104": (("pp",), ("stages",)),
    "P105": (("pp",), ("stages",)),
    "P106": (("tp",), ("tp",)),
    "P107": (("tp",), ()),
    "P108": (("tp",), ("tp",)),
    "P109": (("ep",), ("ep",)),
    "P110": (("tp",), ("tp",)),
    "P111": ((), ("head_dim",)),
    "P112": (("dp", "cp", "tp", "ep", "etp"), ("ep",)),   # the grid against a stage, not the cluster
    "P113": (("etp",), ("etp",)),
    "P114": (("cp",), ("seq",)),
    "P115": (("tp", "cp", "seq", "train"), ("seq",)),
    "P116": ((), ()),
    "P127": (("pp",), ("stages",)),
    "P128": (("tp",), ("tp",)),
    "P201": (("world", "dp"), ("microbatches",)),
    "P202": (("world", "pp", "microbatches"), ("schedule",)),
    "P203": (("world", "pp", "microbatches"), ("schedule",)),
    "P204": (("pp",), ("schedule",)),
    "P205": (("world", "pp", "microbatches"), ("schedule",)),
    "P206": (("pp",), ("schedule",)),
    "P207": (("world", "pp", "microbatches"), ("schedule",)),
    "P208": (("world", "pp", "microbatches"), ("schedule",)),
    "P209": (("world", "pp", "microbatches", "schedule"), ()),
    "P210": (("world", "dp", "microbatches"), ()),
    "P211": (("world", "pp", "microbatches"), ("schedule",)),
    "P301": (COUNTS, ("topology",)),
    "P302": ((), ("world",)),
    "P303": (COUNTS, ()),
    "P304": (COUNTS, ("topology",)),
    "P305": (COUNTS, ()),
    "P306": (COUNTS, ()),
    "P401": (LAYOUT, ()),
    "P402": (LAYOUT, ()),
    "P403": (LAYOUT, ()),
    "P404": (LAYOUT, ()),
    "P405": (LAYOUT, ()),
    "P501": (COUNTS + ("serve",), ()),
    "P502": (("tp", "train"), ()),
    "P503": (COUNTS, ()),
    "P504": (("world", "dp", "pp", "train"), ()),
    "P505": ((), ()),
    "P506": (("cp", "serve"), ()),
    "P507": (COUNTS + ("topology",), ()),
    "P518": ((), ()),
    "P550": ((), ()),
    "P551": ((), ()),
    "P552": ((), ()),
    "P553": ((), ()),
    "P554": ((), ()),
    "P601": ((), ()),
    "P602": ((), ()),
    "P603": ((), ()),
    "P604": ((), ()),
    "P605": (("world", "dp", "cp"), ()),
    "P606": (COUNTS, ()),
    "P607": ((), ()),
    "P608": ((), ()),
    "P609": (("tp", "train"), ()),
    "P610": (("pp",), ()),
    "P611": (("tp", "etp"), ()),
    "P612": (("etp",), ()),
    "P613": (COUNTS, ()),
    "P614": (("world", "dp", "pp", "cp"), ()),
    "P615": (("pp", "train"), ()),
    "P616": (("pp",), ()),
    "P651": (("world", "pp", "cp"), ()),
    "P652": (COUNTS, ()),
    "P653": ((), ()),
    "P660": ((), ()),
    "P661": ((), ()),
    "P664": (("dp", "cp"), ()),
    "P117": ((), ("world",)),
    "P118": ((), ()),
    "P119": ((), ("world",)),
    "P120": ((), ()),
    "P665": ((), ()),
}
# Rules that judge the mesh against the cluster run before the others.
FIRST = ("P101", "P302")


def depends(code: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reads, judges) of ``code``; a rule missing from :data:`DEPENDS` reads what its ``@rule``
    says, else the whole layout."""
    r = _REGISTRY.get(code)
    if code not in DEPENDS and r is not None and r.reads is not None:
        return r.reads, ()
    return DEPENDS.get(code, (LAYOUT + ("topology",), ()))


def _wrong(plan: Plan, failed: set[str]) -> set[str]:
    """The wrong quantities, with an ``auto`` degree wrong when the world or another degree is."""
    out = set(failed)
    auto = plan.mesh.auto
    if auto and (out & (set(MESH) - {auto})):
        out.add(auto)
    if "world" in out and auto:
        out.add(auto)
    return out


def fixed_order_targets(plan: Plan, targets: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The active targets that lay ranks out in an order of their own, with that order
    (outermost first); the topology rules judge the plan under it."""
    orders = {t: T.rank_order(t, plan.mode) for t in targets}
    return {t: order for t, order in orders.items() if order}


def run_rules(plan: Plan, targets: Iterable[str] = (), select: Callable[[str], bool] | None = None,
              failed: Iterable[str] = ()) -> list[Diagnostic]:
    """Every applicable rule over ``plan``; ``targets`` adds targets beyond those the spec names;
    ``failed`` names quantities already reported wrong (a `train` block with a bad value).

    A disaggregated plan is judged pool by pool (each pool's instance plan,
    :func:`parc.model.pools.pool_plan`), then as a whole by the ``whole`` rules. A finding both
    pools share (the model, the cluster, the same key) is reported once; one pool's own says which."""
    if not plan.pools:
        return _run_plan(plan, targets, select, failed)
    from parc.model.pools import pool_plans

    reg = registry()
    per_pool = [(pool.name, _run_plan(pp, targets, lambda c: not reg[c].whole and (select is None or select(c)),
                                      failed)) for pool, pp in pool_plans(plan)]
    out: list[Diagnostic] = []
    for name, diags in per_pool:
        others = [d for n, ds in per_pool if n != name for d in ds]
        for d in diags:
            if d in out:
                continue
            if d not in others:
                d = dataclasses.replace(d, message=f"{name} pool: {d.message}")
            out.append(d)
    out.extend(_run_plan(plan, targets, lambda c: reg[c].whole and (select is None or select(c)), failed))
    return out


def _run_plan(plan: Plan, targets: Iterable[str] = (), select: Callable[[str], bool] | None = None,
              failed: Iterable[str] = ()) -> list[Diagnostic]:
    """The rules over one mesh (see :func:`run_rules`)."""
    reg = registry()
    # a target brings its rule families along (torchrun the torch runtime's; a wrapper such as
    # slurm or lws the engine it runs: parc.model.targets.engine_of)
    implied = T.implied(active_targets(plan, targets), plan.mode, plan.target_settings, plan.targets)
    out: list[Diagnostic] = []
    failed = set(failed)
    codes = [c for c in FIRST if c in reg] + [c for c in sorted(reg) if c not in FIRST]
    for code in codes:
        r = reg[code]
        if select is not None and not select(code):
            continue
        reads, judges = depends(code)
        if _wrong(plan, failed) & set(reads):
            continue  # it reads a quantity another error already reports
        runs = [None] if GENERIC in r.targets else [t for t in r.targets if t in implied]
        for t in runs:
            version = T.pinned(plan, t) if t is not None else None
            if not in_force(code, t, version):
                continue   # the release the plan launches has no such rule (rules.toml since/until)
            chk = Check(r, plan, t, active=frozenset(implied), version=version)
            res = r.fn(plan, chk)
            if res is not None:
                for d in res:
                    if d not in chk.out:
                        chk.out.append(d)
            if any(d.severity == ERROR for d in chk.out):
                failed.update(judges)
            for d in chk.out:
                if d.severity == ERROR:
                    named = [d.target] if d.target else T.audit_order(implied)
                    d.message += when_targets_fail(code, named, plan)
            out.extend(chk.out)
    return out


__all__ = ["audit", "in_force", "when_targets_fail", "rule", "Rule", "Check", "run_rules", "registry", "rule_docs", "ERROR", "WARNING", "NOTE",
           "GENERIC"]
