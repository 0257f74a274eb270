"""torchtitan read back into a spec: a torchtitan 0.2 TOML file (each ``[section] option`` is the
command line's ``--section.option``, torchtitan/config/manager.py) with the command-line
overrides after ``--job.config_file`` (later wins), or a 0.3 command line alone, through
parc/targets/torchtitan/flags.toml; the inverse of parc/targets/torchtitan/__init__.py. Every
option of the TOML or the command line parc has no key for goes to the target's ``args``."""
from __future__ import annotations

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name, Placeholder
from parc.importer.engines.common import Reader, number
from parc.importer.sh_values import Arg, arg

# the TOML's sections parc reads itself rather than as options
MODEL_KEYS = ("name", "flavor")


def toml_words(data: dict, where: str, prefix: str = "") -> list[Arg]:
    """A TOML table as the command line it stands for: ``--a.b value``, a true boolean ``--a.b``,
    a false one ``--a.no_b`` (tyro's negation), a list its items."""
    out: list[Arg] = []
    for k, v in data.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out += toml_words(v, where, name + ".")
        elif isinstance(v, bool):
            head, _, last = name.rpartition(".")
            out.append(arg(f"--{name}" if v else f"--{head + '.' if head else ''}no_{last}", 0, where))
        elif isinstance(v, list):
            out += [arg(f"--{name}", 0, where)] + [arg(str(x), 0, where) for x in v]
        else:
            out += [arg(f"--{name}", 0, where), arg(str(v), 0, where)]
    return out


class Torchtitan(Reader):
    target = "torchtitan"
    extra_key = "args"

    def __init__(self, draft, report):
        super().__init__(draft, report)
        self.degrees: dict[str, Opt] = {}
        self.local: Opt | None = None

    # --- the rules of flags.toml's `read` -------------------------------------------------------
    def read_config_function(self, o: Opt) -> None:
        self.direct(o)

    def read_dp_degrees(self, o: Opt) -> None:
        self.degrees[o.what] = o

    def read_reshard(self, o: Opt) -> None:
        self.degrees["reshard"] = o

    def read_schedule(self, o: Opt) -> None:
        from parc.model.targets import spec

        names = {v: k for k, v in spec(self.target).get("schedules", {}).items()}
        if o.value in names:
            self.draft.set("schedule", "pipeline", Name(names[o.value]), self.note(o))
        else:
            self.carry(o, f"the schedule {o.value!r} is none parc names")

    def read_split(self, o: Opt) -> None:
        self.carry(o, "an uneven or per-stage layer split parc does not read back yet")

    def read_local_batch(self, o: Opt) -> None:
        self.local = o

    def read_recompute(self, o: Opt) -> None:
        pass        # the subcommand form: read from [activation_checkpoint] (recompute())

    def recompute(self, mode: Opt | None, option: Opt | None) -> None:
        """``[activation_checkpoint] mode`` (and ``selective_ac_option``) as train.recompute."""
        if mode is None:
            return
        if mode.value in ("none", "full"):
            self.draft.set("train", "recompute", Name(mode.value), self.note(mode))
        elif mode.value == "selective" and option is not None and option.value == "op":
            self.draft.set("train", "recompute", Name("selective_op"), f"{self.note(mode)} {option.source()}")
        else:
            self.carry(mode, "a checkpointing mode parc has no key for (selective by layer count)")
            if option is not None:
                self.carry(option, "goes with the mode above")

    def subcommand(self, a: Arg) -> bool:
        """0.3's ``activation-checkpoint:MODE`` (tyro's choice of the union's member; 0.3's
        selective checkpointing is per-op): train.recompute; False for any other word."""
        head, _, mode = (a.value or "").partition(":")
        if head != "activation-checkpoint" or mode not in ("none", "full", "selective"):
            return False
        self.draft.set("train", "recompute", Name("selective_op" if mode == "selective" else mode),
                       f"{a.file}:{a.line} {a.shown}" if a.line else a.shown)
        return True

    def read_all(self, opts: list[Opt]) -> None:
        """Every option, the checkpointing mode apart (two TOML keys make one .par value)."""
        ac = {o.spelled: o for o in opts if o.spelled.startswith("--activation_checkpoint.")}
        self.recompute(ac.get("--activation_checkpoint.mode"), ac.get("--activation_checkpoint.selective_ac_option"))
        self.read([o for o in opts if o.spelled not in ("--activation_checkpoint.mode",
                                                           "--activation_checkpoint.selective_ac_option")])

    # --- after every option, with the world known -----------------------------------------------
    def finish(self, world) -> None:
        d = self.draft
        rep, shard = (self._degree(k) for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree"))
        others = [d.get("mesh", k, 1) for k in ("tp", "cp", "pp")]
        note = " ".join(self.note(o) for k, o in self.degrees.items() if k != "reshard")
        if shard == -1:
            if isinstance(world, int) and all(isinstance(x, int) for x in others) and isinstance(rep, int):
                shard = world // (rep * others[0] * others[1] * others[2])
                note += f" (-1: the rest of the {world} GPUs)"
            else:
                shard = None
        if isinstance(rep, int) and isinstance(shard, int):
            d.set("mesh", "dp", rep * shard, note or "torchtitan's default degrees")
            if shard > 1 and rep > 1:
                d.target(self.target, "replicate", rep, note)
            zero = 0 if shard == 1 else 3
            r = self.degrees.get("reshard")
            if shard > 1 and r is not None and r.value == "never":
                zero = 2
            if zero != 3 or r is not None:
                d.set("train", "zero", zero, self.note(r) if r is not None else note)
            elif shard > 1:
                d.set("train", "zero", 3, "FSDP2 over the shard degree, resharding after forward (torchtitan's default)")
        else:
            d.set("mesh", "dp", Placeholder("data_parallel_replicate_degree × data_parallel_shard_degree"), note)
        self._batch()

    def _degree(self, what: str):
        o = self.degrees.get(what)
        if o is None:
            return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1}[what]
        n = number(o.value)
        return n if isinstance(n, int) else Placeholder(o.values[0].shown if o.values else what)

    def _batch(self) -> None:
        o = self.local
        if o is None:
            return
        n = number(o.value)
        pp = self.draft.get("mesh", "pp", 1)
        if not isinstance(n, int):
            self.draft.set("schedule", "micro_batch", Placeholder(o.values[0].shown if o.values else "?"), self.note(o))
        elif pp == 1:
            self.draft.set("schedule", "micro_batch", n, self.note(o))
        else:
            micro = self.draft.get("schedule", "micro_batch", 1)
            if isinstance(micro, int) and n % micro == 0:
                self.draft.set("schedule", "microbatches", n // micro, f"{self.note(o)} / micro batch {micro}")
            else:
                self.carry(o, "a local batch that is no whole number of pipeline micro batches")


def _config(ctx, la):
    """(the TOML's data, its name) of the launch's ``--job.config_file`` or of a TOML file given."""
    from parc.importer.sources import read_beside

    path = None
    args = la.args if la is not None else []
    for i, a in enumerate(args):
        name, _, val = (a.value or "").partition("=")
        if name == "--job.config_file":
            path = val or (args[i + 1].value if i + 1 < len(args) else None)
    if path is not None:
        import tomllib

        text = read_beside(la, path)
        if text is not None:
            try:
                return tomllib.loads(text), path.rsplit("/", 1)[-1]
            except tomllib.TOMLDecodeError:
                pass
    given = ctx.data("toml")
    return (given[0].data, given[0].name) if given else (None, path)


def _overrides(la) -> list[Arg]:
    """The launch's command-line words but ``--job.config_file``."""
    out, skip = [], False
    for a in (la.args if la is not None else []):
        if skip:
            skip = False
            continue
        name = (a.value or "").partition("=")[0]
        if name == "--job.config_file":
            skip = "=" not in (a.value or "")
            continue
        out.append(a)
    return out


def deploy(ctx) -> str:
    """The spec of a torchtitan training launch (its TOML, its overrides, its torchrun)."""
    from parc.importer import cluster
    from parc.importer.engines.megatron import _launcher, _world
    from parc.importer.models import settle, torchtitan_preset

    la = ctx.group[0] if ctx.group else None
    data, where = _config(ctx, la)
    if la is not None and data is None and any((a.value or "").startswith("--job.config_file") for a in la.args):
        ctx.report.notes.append(f"{la.where()}: its --job.config_file cannot be read here; the options are the "
                                "command line's alone")
    d = ctx.draft
    model = (data or {}).get("model", {}) if isinstance(data, dict) else {}
    words = toml_words({k: v for k, v in (data or {}).items() if k != "model"}, where or "")
    words += toml_words({"model": {k: v for k, v in model.items() if k not in MODEL_KEYS}}, where or "")
    r = Torchtitan(d, ctx.report)
    opts, positional = parse("torchtitan", words + _overrides(la))
    positional = [a for a in positional if not r.subcommand(a)]
    r.carry_args(positional, "words torchtitan does not take")
    r.read_all(opts)
    preset = torchtitan_preset(model.get("name"), model.get("flavor"))
    note = f"{where} [model] name = {model.get('name')!r}, flavor = {model.get('flavor')!r}"
    if preset is None:
        config = d.targets.get("torchtitan", {}).get("config")
        preset, note = _config_preset(d), (config.note if config else "")
    if preset:
        d.labels["model"] = preset.replace("_", "-")
        d.blocks["model"] = {"from": _entry(Name(preset), note), **d.blocks.get("model", {})}
    settle(d, None)
    _config_function(d, preset, model, where)
    facts = ctx.facts()
    cluster.given_facts(ctx.options.cluster, facts)
    nodes, per = _world(ctx, la, facts) if la is not None else (facts.get("nodes", (None,))[0],
                                                                  facts.get("gpus_per_node", (None,))[0])
    if la is not None:
        _launcher(r, la)
    world = nodes * per if isinstance(nodes, int) and isinstance(per, int) else None
    r.finish(world)
    d.blocks.setdefault("train", {})
    mesh = d.blocks.get("mesh", {})
    d.blocks["mesh"] = {k: mesh[k] for k in sorted(mesh, key=lambda k: ["pp", "dp", "cp", "tp", "ep"].index(k)
                                                     if k in ("pp", "dp", "cp", "tp", "ep") else 9)}
    cluster.write(d, facts, ctx.options.cluster, ctx.report, "imported")
    return "torchtitan"


def _config_preset(d) -> str | None:
    """The preset of a 0.3 command line's ``--config`` (target.toml [configs]); the spec's
    ``module`` and ``config`` are then the preset's own and left out."""
    from parc.model.targets import spec

    t = d.targets.get("torchtitan", {})
    config = t.get("config")
    entry = spec("torchtitan").get("configs", {}).get(config.value if config else None)
    if not entry or entry.get("module") != (t["module"].value if "module" in t else entry.get("module")):
        return None
    t.pop("config", None)
    t.pop("module", None)
    return entry.get("preset")


def _config_function(d, preset: str | None, model: dict, where: str | None) -> None:
    """torchtitan 0.3's --module/--config for a 0.2 TOML's model where parc's preset has no
    shipped config function (target.toml [configs]): the module of that name, the flavor's function."""
    from parc.model.targets import spec

    name, flavor = model.get("name"), model.get("flavor")
    t = d.targets.get("torchtitan", {})
    if not name or not flavor or "module" in t or "config" in t:
        return
    shipped = {c.get("preset") for c in spec("torchtitan").get("configs", {}).values()}
    if preset in shipped:
        return
    d.target("torchtitan", "module", str(name), f"{where} [model] name = {name!r}")
    d.target("torchtitan", "config", f"{name}_{str(flavor).lower()}", f"{where} the {flavor} flavor's config function")


def _entry(v, note):
    from parc.importer.draft import Entry

    return Entry(v, note)
