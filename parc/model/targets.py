"""What each target declares about itself, read as data.

A target is a folder ``parc/targets/<name>/`` whose ``target.toml`` says everything the rest of
parc needs to know about it, so that the resolver, the rules, the planner and the commands read
target facts here without importing any target's code:

* ``display``: the name messages use (``Megatron-LM``); ``description``; ``modes`` (train, serve);
* ``launch``: whether it emits a launch (every target but ``json``);
* ``families``: the rule families that come with it, a list or one list per mode
  (``{ train = ["torch"], serve = ["vllm"] }``): their rules run whenever its rules do;
* ``engine``: ``{ key, default }`` on a wrapper, a target that runs another target's launch on
  each node (slurm, kubernetes, skypilot, trainjob, lws): ``key`` names the engine (its
  ``choices`` are the engines it can run, each in the modes that engine's target.toml lists),
  ``default`` the engine of a block that names none, one for every mode or a table per mode
  (``{ train = "torchrun", serve = "vllm" }``). The engine a plan runs is :func:`engine_of`'s
  (the key; else the spec's one engine block of the plan's mode; else the default), and it comes
  along as a rule family, so the rules that run are those of the engine the plan names, never a
  fixed one. A wrapper that ``inherits`` keys from an engine (slurm's ``entrypoint`` from
  torchrun) stands in for that engine's block: those keys are that engine's, needed and used
  only when it runs it, and that engine's own families come along instead of its rules;
* ``audit``: ``{ name, order }``, the name under which ``rules.toml`` records how the tool itself
  refuses a plan, and where the tool stands in messages that list several;
* ``inherits``: ``{ from = "torchrun", keys = [...] }``, the keys a block that leaves them out
  takes from another target's block;
* ``[schedules]``: the pipeline schedules the tool's runtime has (parc's name -> its own), and
  ``pipeline_runtime``, what builds them (for messages): a pipeline absent from a table is
  refused (P607, P616, P688) and the planner leaves it out;
* ``layer_split``: how it splits a layer count that does not divide its pipeline stages, by
  itself (a rule of :func:`parc.model.params.engine_split`);
* ``rank_order``: per mode, the order (outermost first) in which the tool lays ranks out whatever
  the mesh lists; ``rank_orders``: the layouts it can express, with the argument that picks each;
* ``[keys]``: every key a ``target`` block takes (``kind``, ``doc``, ``min``/``max``/``choices``,
  ``leading_dash``), with ``required`` (what the key is, for P602's message), ``required_modes``
  and ``example`` on the keys it cannot do without; the keys every target takes (``version``)
  are declared once, in ``parc/targets/keys.toml``;
* ``[versions]``: ``known``, the releases of the tool parc can launch (oldest first, newest
  last: the default), and ``released``, each one's date and source. A rule or audit entry in
  ``rules.toml`` holds from ``since`` (included) to ``until`` (excluded), and ``flags.toml``
  beside ``target.toml`` names the options a release spells differently: both are compared by
  their place in ``known``, never by parsing version numbers.

Rule families without a folder of their own (``torch``, parc's runtime) are
declared in ``parc/targets/families.toml``. The folders are listed once (one glob), on first use,
and each target.toml is read the first time its target is asked about.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

FOLDER = Path(__file__).resolve().parent.parent / "targets"


@lru_cache(maxsize=1)
def _folders() -> tuple[str, ...]:
    """The targets' names: the folders with a target.toml, sorted (listed, not read)."""
    return tuple(sorted(path.parent.name for path in FOLDER.glob("*/target.toml")))


@lru_cache(maxsize=None)
def _spec(name: str) -> dict | None:
    """Target ``name``'s target.toml, read on first use (a command about one target reads one)."""
    if name not in _folders():
        return None
    with open(FOLDER / name / "target.toml", "rb") as f:
        return tomllib.load(f)


def _targets() -> dict[str, dict]:
    return {name: _spec(name) for name in _folders()}


@lru_cache(maxsize=1)
def _families() -> dict[str, dict]:
    with open(FOLDER / "families.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def _common_keys() -> dict[str, dict]:
    with open(FOLDER / "keys.toml", "rb") as f:
        return tomllib.load(f)["keys"]


@lru_cache(maxsize=None)
def _flags(name: str) -> dict[str, list[dict]]:
    path = FOLDER / name / "flags.toml"
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=None)
def defaults(name: str) -> dict:
    """Target ``name``'s defaults.toml: what the engine uses where a spec leaves a scheduler
    option out (empty for a target without one); parc.cost.engine reads it."""
    path = FOLDER / name / "defaults.toml"
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


def clear_cache() -> None:
    """Forget what was read (for a test that adds a folder)."""
    _folders.cache_clear()
    _spec.cache_clear()
    _families.cache_clear()
    _common_keys.cache_clear()
    _flags.cache_clear()
    defaults.cache_clear()


def names() -> list[str]:
    """The targets parc can emit for: every folder with a target.toml, sorted."""
    return list(_folders())


def spec(name: str) -> dict | None:
    """Target ``name``'s target.toml, or None if there is no such target."""
    return _spec(name)


def rule_targets() -> list[str]:
    """Every name a rule can apply to: the targets, then the rule families without a folder."""
    return names() + [f for f in _families() if f not in _folders()]


def _entry(name: str | None) -> dict:
    return _spec(name or "") or _families().get(name or "") or {}


def display(name: str | None) -> str:
    """The name messages give target or family ``name`` (``Megatron-LM`` for megatron)."""
    return _entry(name).get("display", name or "")


def keys(name: str) -> dict[str, dict]:
    """The keys a ``target name { ... }`` block takes, with their definitions: its own, then the
    keys every target takes (``version``, whose choices are the releases target.toml knows)."""
    if spec(name) is None:
        return {}
    own = dict(spec(name).get("keys", {}))
    for key, d in _common_keys().items():
        if key == "version":
            d = {**d, "choices": versions(name), "hint": _versions_hint(name)}
        own.setdefault(key, d)
    return own


# --- versions ---------------------------------------------------------------------------------
def versions(name: str | None) -> list[str]:
    """The releases of target ``name`` that parc knows, oldest first (empty: none declared)."""
    return list(_entry(name).get("versions", {}).get("known", []))


def newest(name: str | None) -> str | None:
    """The release a target block without ``version`` launches: the newest parc knows."""
    known = versions(name)
    return known[-1] if known else None


def released(name: str, version: str) -> dict:
    """``{date, source}`` of a known release of target ``name``."""
    return _entry(name).get("versions", {}).get("released", {}).get(version, {})


def _versions_hint(name: str) -> str:
    known = versions(name)
    if not known:
        return f"parc knows no releases of {display(name)}: leave `version` out"
    return f"parc knows {display(name)} " + ", ".join(known) + f" (default: the newest, {known[-1]})"


def pinned(plan, name: str | None) -> str | None:
    """The release of target ``name`` the plan launches: its block's ``version``, else the
    newest parc knows; None for a target or family without versions."""
    if not versions(name):
        return None
    return plan.target_settings(name).get("version") or newest(name)


def _place(name: str, version: str) -> int:
    known = versions(name)
    if version not in known:
        raise ValueError(f"{display(name)} {version} is not among the releases parc knows ({', '.join(known)})")
    return known.index(version)


def _bound(name: str, version: str) -> int:
    """Where a ``since``/``until`` bound falls among the known releases: a known release's place,
    else the place of the first known release after it (an option removed before the oldest
    release parc knows has ``until`` 0: it holds for none)."""
    known = versions(name)
    if version in known:
        return known.index(version)

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    return sum(1 for k in known if key(k) < key(version))


def holds(name: str | None, version: str | None, since: str | None = None, until: str | None = None) -> bool:
    """Whether a fact marked ``since`` (included) and ``until`` (excluded) holds for ``version``
    of target ``name``; a target without versions (``version`` None) holds every fact. A bound
    may name a release parc does not launch (flags.toml: an option removed before the oldest)."""
    if version is None:
        return True
    at = _place(name, version)
    return (since is None or _bound(name, since) <= at) and (until is None or at < _bound(name, until))


def span_text(name: str, since: str | None, until: str | None) -> str:
    """``vLLM 0.31 and later``, ``vLLM before 0.33``, ``vLLM 0.31 to 0.32``: the releases a
    fact holds for, as messages and ``parc rules`` say it."""
    tool = display(name)
    if since and until:
        known = versions(name)
        last = known[_place(name, until) - 1]
        return f"{tool} {since}" if last == since else f"{tool} {since} to {last}"
    if since:
        return f"{tool} {since} and later"
    if until:
        return f"{tool} before {until}"
    return f"every {tool} release parc knows"


def flag(name: str, what: str, version: str | None) -> str | None:
    """The option target ``name``'s release ``version`` spells ``what`` with (flags.toml beside
    target.toml: one entry per spelling, each with the releases it holds for); None where that
    release has no such option. ``version`` None: the newest."""
    version = version or newest(name)
    entries = _flags(name).get(what)
    if entries is None:
        raise KeyError(f"{name}/flags.toml has no `{what}`")
    for e in entries["names"]:
        if not e.get("alias") and holds(name, version, e.get("since"), e.get("until")):
            return e["name"]
    return None


def flag_table(name: str) -> dict[str, list[dict]]:
    """Target ``name``'s flags.toml: what -> ``{names = [{name, since, until, alias}], key, takes,
    values, read, plumbing, emitted, doc}`` (the fields are described at the top of
    ``targets/vllm/flags.toml``; ``parc import`` reads launches through them)."""
    return _flags(name)


def is_launch(name: str) -> bool:
    return bool((spec(name) or {}).get("launch", False))


def launch_targets() -> tuple[str, ...]:
    """The targets that emit a launch (their settings end up on a command line)."""
    return tuple(t for t in names() if is_launch(t))


def engine_key(name: str | None) -> dict | None:
    """``{key, default}``: the key of target ``name`` that names the engine it runs (the target
    whose launch its pods or nodes run), or None for a target without one."""
    return (spec(name or "") or {}).get("engine")


def wrappers() -> tuple[str, ...]:
    """The targets that run another target's launch on each node (those with an engine key)."""
    return tuple(t for t in names() if engine_key(t))


def engines(name: str | None, mode: str | None = None) -> list[str]:
    """The engines target ``name`` can run (in ``mode``: those whose target.toml lists it): the
    choices of its engine key, in their order (empty: none)."""
    e = engine_key(name)
    if not e or (mode is not None and mode not in (spec(name) or {}).get("modes", [mode])):
        return []
    found = keys(name).get(e["key"], {}).get("choices") or list(_defaults(e).values())
    return [x for x in found if mode is None or mode in (spec(x) or {}).get("modes", [mode])]


def _defaults(e: dict) -> dict[str | None, str]:
    d = e["default"]
    return dict(d) if isinstance(d, dict) else {None: d}


def default_engine(name: str | None, mode: str | None = None) -> str | None:
    """The engine target ``name`` runs in ``mode`` when nothing picks another (None: the first
    mode's default)."""
    e = engine_key(name)
    if not e:
        return None
    d = _defaults(e)
    return d[mode] if mode in d else d.get(None, next(iter(d.values())))


def engine_blocks(name: str | None, mode: str | None, settings: dict | None, blocks: Iterable[str]) -> list[str]:
    """The engines of ``mode`` a spec says it means for wrapper ``name``: its blocks of them
    (``target megatron { ... }``), and the engine whose keys the wrapper inherits where its own
    settings hold one of them (``target slurm { entrypoint = ... }`` names a torchrun script)."""
    blocks = set(blocks)
    inh = inherits(name or "")
    if inh and any(k in (settings or {}) for k in inh[1]):
        blocks.add(inh[0])
    return [x for x in engines(name, mode) if x in blocks]


def engine(name: str | None, settings: dict | None = None, mode: str | None = None,
           blocks: Iterable[str] = ()) -> str | None:
    """The engine target ``name`` runs with its block's ``settings`` in ``mode``, the spec holding
    target ``blocks``: the engine key's value; else the one engine block of the mode the spec
    has; else the default (also where several blocks leave it open and the default is among
    them; P618 says so); None for a target without an engine key, or none in ``mode``."""
    e = engine_key(name)
    if not e or (mode is not None and not engines(name, mode)):
        return None
    if e["key"] in (settings or {}):
        return settings[e["key"]]
    found = engine_blocks(name, mode, settings, blocks)
    default = default_engine(name, mode)
    if len(found) == 1 or (found and default not in found):
        return found[0]
    return default


def engine_of(plan, name: str | None) -> str | None:
    """The engine the plan's target ``name`` runs (:func:`engine` with the plan's settings, mode
    and blocks)."""
    return engine(name, plan.target_settings(name or ""), plan.mode, plan.targets)


def stands_in(name: str | None, engine_name: str | None) -> bool:
    """Whether wrapper ``name`` carries engine ``engine_name``'s keys itself (it inherits them:
    slurm's ``entrypoint``, ``args`` and ``max_restarts`` are torchrun's)."""
    inh = inherits(name or "")
    return bool(inh and engine_name and inh[0] == engine_name)


def families(name: str, mode: str | None = None, settings: dict | None = None,
             blocks: Iterable[str] = ()) -> list[str]:
    """The rule families target ``name`` brings in ``mode`` (None: in any mode): those its
    target.toml lists, and the engine its ``settings`` (and the spec's ``blocks``) pick (None:
    every engine it can run); of an engine whose keys it carries itself (:func:`stands_in`),
    that engine's families, not its rules."""
    fam = _entry(name).get("families", [])
    if isinstance(fam, dict):
        modes = [mode] if mode is not None else list(fam)
        out = [f for m in modes for f in fam.get(m, []) if f]
    else:
        out = list(fam)
    if engine_key(name):
        picked = [engine(name, settings, mode, blocks)] if settings is not None else engines(name, mode)
        for x in picked:
            if x is None or (mode is not None and x not in engines(name, mode)):
                continue
            out += [f for f in families(x, mode) if f not in out] if stands_in(name, x) else [x]
    return out


def implied(targets: Iterable[str], mode: str | None = None,
            settings: Callable[[str], dict] | None = None, blocks: Iterable[str] = ()) -> set[str]:
    """``targets`` with every rule family they bring in ``mode`` (None: in any mode);
    ``settings(name)`` gives a target block's settings and ``blocks`` the spec's target blocks,
    which pick the engine of a target with an engine key (no ``settings``: every engine it can
    run comes along)."""
    blocks = tuple(blocks)
    out = set(targets)
    todo = list(out)
    while todo:
        t = todo.pop()
        for f in families(t, mode, settings(t) if settings is not None else None, blocks):
            if f not in out:
                out.add(f)
                todo.append(f)
    return out


ANY = "*"


def required(name: str, mode: str | None = None, engine_name: str | None = ANY) -> list[tuple[str, str]]:
    """(key, what it is) for every key target ``name`` cannot do without in ``mode``; a wrapper's
    keys of the engine it stands in for (:func:`stands_in`) only when it runs that engine
    (``engine_name``; :data:`ANY`: whichever)."""
    inh = inherits(name)
    out = []
    for key, d in keys(name).items():
        if "required" not in d or (mode is not None and mode not in d.get("required_modes", [mode])):
            continue
        if engine_key(name) and inh and key in inh[1] and engine_name not in (ANY, inh[0]):
            continue
        out.append((key, d["required"]))
    return out


def requiring_targets() -> tuple[str, ...]:
    """The targets with a key they cannot do without (P602 runs for them)."""
    return tuple(t for t in names() if required(t))


def example(name: str, key: str) -> str:
    """The example value (as spec text) a message gives for ``key``; "hub_id" means the model's
    Hugging Face id, which only the plan knows."""
    return keys(name).get(key, {}).get("example", '"..."')


def inherits(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(source target, keys) when target ``name`` takes keys its block leaves out from another
    target's block (slurm and kubernetes from torchrun)."""
    inh = (spec(name) or {}).get("inherits")
    if not inh:
        return None
    return inh["from"], tuple(inh.get("keys", ()))


def rank_order(name: str, mode: str) -> tuple[str, ...] | None:
    """The order (outermost first) in which target ``name`` lays ranks out in ``mode`` whatever
    the mesh lists, or None where it follows the mesh."""
    order = (spec(name) or {}).get("rank_order", {}).get(mode)
    return tuple(order) if order else None


def rank_orders(name: str) -> list[tuple[tuple[str, ...], str]]:
    """(order, option) for every rank layout target ``name`` can express (empty: any); the option
    is its entry in the target's flags.toml ("" for the default layout)."""
    return [(tuple(o["order"]), o.get("flag", "")) for o in (spec(name) or {}).get("rank_orders", [])]


def audit_name(name: str) -> str | None:
    """The name under which rules.toml records how target or family ``name`` refuses a plan."""
    return _entry(name).get("audit", {}).get("name")


def audit_targets() -> tuple[str, ...]:
    """The audited targets and families in the order messages list them, each audit name once
    (the torch runtime is audited as torchrun)."""
    found = [(e["audit"]["order"], n) for n, e in {**_families(), **_targets()}.items()
             if "audit" in e and e["audit"].get("name") == n]
    return tuple(n for _, n in sorted(found))


def audit_order(active: Iterable[str]) -> list[str]:
    """The active targets and families in message order, each audit name once."""
    seen, out = set(), []
    ranked = sorted((_entry(t).get("audit", {}).get("order", 1000), t) for t in set(active) if audit_name(t))
    for _, t in ranked:
        if audit_name(t) not in seen:
            seen.add(audit_name(t))
            out.append(t)
    return out


def rule_docs() -> dict[str, dict]:
    """The documentation of the rules that live in target folders (``<name>/rules.toml``, and
    ``rules.toml`` beside the folders for rules that span several targets)."""
    out: dict[str, dict] = {}
    for path in [FOLDER / "rules.toml"] + [FOLDER / t / "rules.toml" for t in names()]:
        if path.is_file():
            with open(path, "rb") as f:
                merge_docs(out, tomllib.load(f))
    return out


# A rule's releases (`since`, `until`) as its entry's header line and string lines write them:
# ``parc check`` asks for them on every run, and reading them so spares it parsing the rules'
# documentation (tests/test_target_versions.py holds this reading to tomllib's).
_TABLE = re.compile(r"^\[\s*([^\]\s]+)\s*\]\s*(?:#.*)?$")
_BOUND = re.compile(r"^(since|until)\s*=\s*\"([^\"]*)\"\s*(?:#.*)?$")


@lru_cache(maxsize=1)
def release_bounds() -> dict[str, dict[str, str]]:
    """code -> {"since": ..., "until": ...} of every rule entry that holds only for some releases
    (the top-level ``since``/``until`` of its entry, merged in :func:`rule_docs`' order, the
    rules of the plan itself first)."""
    out: dict[str, dict[str, str]] = {}
    paths = [FOLDER.parent / "rules" / "rules.toml", FOLDER / "rules.toml"] + [FOLDER / t / "rules.toml"
                                                                              for t in names()]
    for path in paths:
        if not path.is_file():
            continue
        table = None
        for line in path.read_text(encoding="utf-8").splitlines():
            if (m := _TABLE.match(line)):
                table = m.group(1) if "." not in m.group(1) else None   # a code's own entry, not its audit
            elif table and (m := _BOUND.match(line)):
                out.setdefault(table, {})[m.group(1)] = m.group(2)
    return out


def merge_docs(into: dict[str, dict], docs: dict[str, dict]) -> dict[str, dict]:
    """Add ``docs`` (code -> entry) to ``into``: an entry's fields replace, its per-target audit
    (``targets``) adds to what other files recorded for the same rule, and its ``doc_append``
    adds a sentence to the rule's ``doc`` (a target folder saying what a shared rule checks in
    its keys, read after the shared rules.toml)."""
    for code, doc in docs.items():
        entry = into.setdefault(code, {})
        for key, value in doc.items():
            if key == "targets":
                entry.setdefault("targets", {}).update(value)
            elif key == "doc_append":
                entry["doc"] = (entry.get("doc", "") + " " + value).strip()
            else:
                entry[key] = value
    return into


def pipelines(name: str | None) -> dict[str, str]:
    """The pipeline schedules the runtime of target or family ``name`` has: parc's pipeline
    name -> the runtime's own name for it (``[schedules]`` in its target.toml or families.toml);
    empty where the target declares none (it runs no pipeline of its own, or the script does)."""
    return dict(_entry(name).get("schedules", {}))


def pipeline_runtime(name: str | None) -> str:
    """What builds the pipeline of ``name`` (for messages): ``pipeline_runtime`` in its data."""
    return _entry(name).get("pipeline_runtime", display(name))


def layer_split(name: str | None) -> str | None:
    """How target or family ``name`` splits an uneven layer count over its pipeline stages by
    itself: ``layer_split`` in its data, a rule of :func:`parc.model.params.engine_split`; None
    where it has no split of its own (it refuses the count, or takes the spec's)."""
    return _entry(name).get("layer_split")


def context_rule(name: str | None) -> dict:
    """How target or family ``name`` derives a model's context limit from its RoPE scaling
    (``[context]`` in its data, :func:`parc.model.rope.context_limit`); empty where it has none."""
    return dict(_entry(name).get("context", {}))


def tp_across_nodes(name: str | None) -> bool:
    """Whether target or family ``name`` runs a tensor-parallel group across nodes when serving
    (``tp_across_nodes`` in its data): P301 is then a warning with the cost, not an error."""
    return bool(_entry(name).get("tp_across_nodes"))


def runs_pipeline(name: str | None, pipeline: str) -> bool:
    """Whether ``name``'s runtime has ``pipeline``; a target without a table runs any."""
    table = pipelines(name)
    return not table or pipeline in table
