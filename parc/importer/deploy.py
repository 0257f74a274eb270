"""From the launches of the files read to one spec: which engine (``--from``, else the one the
files run), which of its launches belong together (the nodes of one deployment, the prefill and
decode pools of a disaggregated one) and which are alternatives (``--launch N`` picks one), and
the blocks the engine's reader and the cluster's facts give."""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

from parc.importer.draft import Draft, Name
from parc.importer.engines.common import Report
from parc.importer.launches import ENGINES, Launch
from parc.importer.sources import ImportError_, Source

FORMAT_ENGINE = {"toml": "torchtitan", "json": "deepspeed"}
# the launches no engine reader reads (their facts are read by the engine's deployment)
HELPERS = ("ray", "sglang_router")
# the engines whose launches have a reader (parc/importer/engines/; torchrun's, a TrainJob's only)
READERS = ("vllm", "sglang", "megatron", "megatron_deepspeed", "torchtitan", "deepspeed", "torchrun")


@dataclass
class Options:
    """What the command line asks of the import."""
    engine: str | None = None          # --from
    model: str | None = None           # --model: a preset or a spec whose model block is taken
    cluster: str | None = None         # --cluster: a spec whose cluster block is taken
    launch: int | None = None          # --launch N: the N-th of several alternative launches
    variables: dict = field(default_factory=dict)     # --var NAME=VALUE
    positional: list | None = None


@dataclass
class Context:
    """One import under way: the files read, the options, the draft and the report it fills."""
    sources: list[Source]
    options: Options
    draft: Draft
    report: Report
    group: list[Launch]
    engine: str

    def helpers(self, engine: str) -> list[Launch]:
        return [la for s in self.sources for la in s.launches if la.engine == engine]

    def facts(self) -> dict:
        out: dict = {}
        for s in self.sources:
            out.update(s.facts)
        for la in self.group:
            out.update(la.facts)
        return out

    def data(self, kind: str) -> list[Source]:
        return [s for s in self.sources if s.kind == kind]


def engine_of(sources: list[Source], wanted: str | None) -> str:
    """The engine the files launch: ``wanted`` (--from), else the one engine among them."""
    found = {la.engine for s in sources for la in s.launches if la.engine not in HELPERS}
    found |= {FORMAT_ENGINE[s.kind] for s in sources if s.kind in FORMAT_ENGINE}
    if wanted:
        if wanted not in ENGINES:
            raise ImportError_(f"--from {wanted}: parc imports {', '.join(ENGINES)}")
        return wanted
    named = found & set(ENGINES)
    if len(named) == 1:
        return named.pop()
    if "torchtitan" in named and "deepspeed" not in named and named <= {"torchtitan", "torchrun"}:
        return "torchtitan"
    if not named and found:
        return sorted(found)[0]
    if not found:
        raise ImportError_("no engine launch found in " + ", ".join(s.path for s in sources) + " (parc imports "
                           "vllm serve, sglang, Megatron-LM's and Megatron-DeepSpeed's pretrain_*.py, torchtitan, deepspeed and "
                           "torchrun launches)")
    raise ImportError_(f"the files launch {', '.join(sorted(named))}: name the one to import with --from")


def build(sources: list[Source], options: Options) -> tuple[Draft, Report, str]:
    """(the spec, what to say about it, the target it is for)."""
    draft, report = Draft(), Report()
    for s in sources:
        report.notes += s.notes
        report.warnings += s.warnings
    engine = engine_of(sources, options.engine)
    group = [la for s in sources for la in s.launches if la.engine == engine]
    if options.launch is not None:
        if not 1 <= options.launch <= len(group):
            raise ImportError_(f"--launch {options.launch}: the files hold {len(group)} {engine} launch(es)")
        group = [group[options.launch - 1]]
    ctx = Context(sources, options, draft, report, group, engine)
    if engine not in READERS:
        raise ImportError_(f"the files launch {engine}: parc import reads {' and '.join(READERS)} launches so far "
                           f"(write the spec of a {engine} launch by hand; `parc compile --target {engine}` emits it)")
    module = importlib.import_module(f"parc.importer.engines.{engine}")
    target = module.deploy(ctx)
    scheduler = next((s.scheduler for s in sources if s.scheduler), None)
    if scheduler and target not in _runs(scheduler["target"]):
        report.notes.append(f"target {scheduler['target']} launches {', '.join(_runs(scheduler['target']))} only: "
                            f"the spec is for target {target}, and the scheduler's settings are not carried")
        scheduler = None
    if scheduler:
        _scheduler(draft, scheduler, target)
    draft.header = [f"Imported by `parc import` from {', '.join(s.name for s in sources)} ({engine}).",
                    "Each value's comment names the line it came from; unknown(...) marks a value the files do "
                    "not give (P040)."]
    return draft, report, scheduler["target"] if scheduler else target


def _runs(scheduler_target: str) -> tuple[str, ...]:
    """The engines a scheduler target runs, as its target.toml's engine key lists them."""
    from parc.model.targets import engines

    return tuple(engines(scheduler_target))


def _scheduler(draft: Draft, scheduler: dict, engine_target: str) -> None:
    """The scheduler's target block (lws, slurm, skypilot, kubernetes, trainjob) around the engine."""
    from parc.model.targets import engine_key, engines

    t = scheduler["target"]
    key = engine_key(t)
    if key and engine_target in engines(t):
        draft.target(t, key["key"], Name(engine_target), f"the engine its {scheduler.get('what', 'nodes')} run")
    if "replicas" in scheduler:         # each group a whole engine: its replicas are data parallel
        n, note = scheduler["replicas"]
        dp = draft.get("mesh", "dp", 1)
        if isinstance(dp, int):
            draft.blocks["mesh"] = {"dp": draft.blocks.get("mesh", {}).get("dp"), **draft.blocks.get("mesh", {})}
            draft.set("mesh", "dp", dp * n, note if dp == 1 else f"{note} × dp {dp}")
    for k, (v, note) in scheduler.get("keys", {}).items():
        draft.target(t, k, v, note)
    draft.targets.setdefault(t, {})


def model_block(ctx: Context, model_id: str | None, note: str) -> str | None:
    """The model block of a serving launch: ``--model``, else the preset its id names, else
    placeholders; the preset, or None."""
    from parc.importer.models import from_hub, given_block, placeholders

    d, want = ctx.draft, ctx.options.model
    if want:
        from parc.resolve.catalog import presets

        if want in presets("models"):
            d.labels["model"] = want.replace("_", "-")
            d.set("model", "from", Name(want), f"--model {want}")
            return want
        d.raw_blocks["model"] = given_block(want, "model")
        m = re.search(r"\bfrom\s*=\s*([A-Za-z_][A-Za-z0-9_]*)", "\n".join(d.raw_blocks["model"]))
        return m.group(1) if m and m.group(1) in presets("models") else None
    preset = from_hub(d, model_id, note)
    if preset is None:
        placeholders(d, model_id)
    return preset


def is_moe(ctx: Context, preset: str | None) -> bool | None:
    """Whether the model has experts (None where the launch cannot tell)."""
    from parc.resolve.catalog import presets

    if preset:
        return bool(presets("models")[preset].get("experts"))
    if "model" in ctx.draft.raw_blocks:
        m = re.search(r"\bexperts\s*=\s*(\d+)", "\n".join(ctx.draft.raw_blocks["model"]))
        return bool(m and int(m.group(1)) > 0)
    e = ctx.draft.get("model", "experts")
    return isinstance(e, int) and e > 0 if e is not None else None


def signature(target: str, la: Launch) -> tuple:
    """A launch's options but its wiring (node ranks, addresses, ports of the launch itself):
    equal for the nodes of one deployment, different for alternatives."""
    from parc.importer.argv import parse

    opts, positional = parse(target, la.args, underscores=target == "vllm")
    keep = tuple((o.what or o.spelled, tuple(v.shown for v in o.values)) for o in opts
                 if not o.entry.get("plumbing") and o.what not in ("port", "disaggregation_mode", "kv_transfer_config"))
    return tuple(a.shown for a in positional), keep


def alternatives(ctx: Context, target: str, groups: list[list[Launch]]) -> None:
    """Refuse launches that differ in more than their wiring: they are alternatives, not one plan."""
    sigs = {signature(target, g[0]) for g in groups}
    if len(sigs) > 1:
        where = "; ".join(f"{i}: {g[0].where()}" for i, g in enumerate(groups, 1))
        raise ImportError_(f"the files hold {len(groups)} different {target} launches ({where}): pick one with "
                           "--launch N")


def merge_pools(ctx: Context, drafts: dict[str, Draft], instances: dict[str, int]) -> None:
    """Two pools' drafts into one spec: what both say is the spec's; a mesh key or max_num_seqs
    they differ on is each pool's own; any other key they differ on is the first pool's, noted."""
    from parc.model.fields import BLOCKS

    d = ctx.draft
    first, *rest = list(drafts.values())
    per_pool = set(BLOCKS["prefill"]) - {"instances"}
    for pool, n in instances.items():
        d.pool(pool, "instances", n, f"{n} {pool} launch(es)")
    for block in sorted({b for x in drafts.values() for b in x.blocks}):
        keys = {k for x in drafts.values() for k in x.blocks.get(block, {})}
        for k in sorted(keys, key=lambda k: list(first.blocks.get(block, {})).index(k)
                        if k in first.blocks.get(block, {}) else 99):
            vals = {p: x.blocks.get(block, {}).get(k) for p, x in drafts.items()}
            texts = {repr(e.value) if e else None for e in vals.values()}
            if len(texts) == 1:
                d.blocks.setdefault(block, {})[k] = next(iter(vals.values()))
            elif (block == "mesh" or (block == "serve" and k == "max_num_seqs")) and k in per_pool:
                for p, e in vals.items():
                    if e is not None:
                        d.pool(p, k, e.value, e.note)
            else:
                e = next(e for e in vals.values() if e is not None)
                d.blocks.setdefault(block, {})[k] = e
                ctx.report.notes.append(f"the pools differ on {block}.{k}: the spec takes the first's ({e.note})")
    for x in drafts.values():
        for t, entries in x.targets.items():
            for k, e in entries.items():
                d.targets.setdefault(t, {}).setdefault(k, e)
        for key, items in x.lists.items():
            have = d.lists.setdefault(key, [])
            for it in items:
                if all(h.words != it.words for h in have):
                    have.append(it)
        d.labels.update({k: v for k, v in x.labels.items() if k not in d.labels})
        d.raw_blocks.update({k: v for k, v in x.raw_blocks.items() if k not in d.raw_blocks})
