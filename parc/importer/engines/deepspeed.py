"""The ``deepspeed`` launcher read back into a spec: its own options (deepspeed/launcher/runner.py
parse_args), the hostfile it names (``host slots=N`` a line), the training script it starts with
that script's arguments, and the ds_config.json ``--deepspeed_config`` names (DeepSpeedConfig's
keys, a nested key written with dots), through parc/targets/deepspeed/flags.toml. A config value
``"auto"`` is the Hugging Face Trainer's to fill in from its own arguments: left out, said so."""
from __future__ import annotations

import json

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name, Placeholder
from parc.importer.engines.common import Reader, number
from parc.importer.sh_values import Arg, arg

# the Hugging Face Trainer's arguments that fill a config's "auto" (transformers
# integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process)
TRAINER_AUTO = {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
                "gradient_accumulation_steps": "--gradient_accumulation_steps",
                "bf16.enabled": "--bf16", "fp16.enabled": "--fp16"}
OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd", "fusedadam": "adam", "cpuadam": "adam"}


def flatten(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict) and k not in ("optimizer",):
            out += flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


class DeepSpeed(Reader):
    target = "deepspeed"
    extra_key = "args"

    def __init__(self, draft, report):
        super().__init__(draft, report)
        self.hostfile: Opt | None = None
        self.config_path: Opt | None = None
        self.trainer: dict[str, Arg] = {}         # the script's Trainer arguments that fill "auto"

    # --- the rules of flags.toml's `read` -------------------------------------------------------
    def read_hostfile(self, o: Opt) -> None:
        self.hostfile = o

    def read_config_file(self, o: Opt) -> None:
        self.config_path = o

    def read_zero(self, o: Opt) -> None:
        v = o.value
        stage = 1 if v == "True" else 0 if v == "False" else number(v)
        if isinstance(stage, int) and 0 <= stage <= 3:
            self.draft.set("train", "zero", stage, self.note(o) + (" (DeepSpeed reads true as stage 1)" if v == "True" else ""))
        else:
            self.carry_config(o, "not a ZeRO stage")

    def read_overlap_comm(self, o: Opt) -> None:
        self.direct(o, "target.overlap_comm")

    def read_reduce_bucket_size(self, o: Opt) -> None:
        n = number(o.value)
        if isinstance(n, float) and n.is_integer():
            self.draft.target(self.target, "reduce_bucket_size", int(n), self.note(o))
        else:
            self.direct(o, "target.reduce_bucket_size")

    def carry(self, o: Opt, why: str) -> None:
        if o.spelled.startswith("-"):
            super().carry(o, why)
        else:                          # a config key cannot go to the script's arguments
            self.carry_config(o, why)

    def carry_config(self, o: Opt, why: str) -> None:
        """A ds_config key parc has no key for: the config parc writes cannot hold it; said so."""
        self.drop(o, f"a ds_config.json key {why}: the config parc writes leaves it out")

    # --- the config file ----------------------------------------------------------------------
    def read_config(self, data: dict, where: str) -> None:
        from parc.model.targets import flag_table

        table = {n["name"]: (what, e) for what, e in flag_table(self.target).items() if e.get("form") == "config"
                 for n in e["names"]}
        for key, v in flatten(data):
            switch = key in table and table[key][1].get("takes") == "switch"
            words = [arg(key, 0, where)] + ([] if isinstance(v, bool) and switch else
                                             [arg(_word(v).lower() if isinstance(v, bool) else _word(v), 0, where)])
            o = Opt(table[key][0] if key in table else None, key, words[1:], words, table[key][1] if key in table else {})
            if v == "auto" and TRAINER_AUTO.get(key) in self.trainer:
                a = self.trainer[TRAINER_AUTO[key]]
                if a.value in ("True", "true", "False", "false"):
                    if a.value.lower() == "true":
                        self.read([Opt(o.what, key, [], [a], o.entry)])
                else:
                    self.read([Opt(o.what, key, [a], [a], o.entry)])
            elif v == "auto":
                self.report.notes.append(f"{where} {key} = \"auto\": the Hugging Face Trainer fills it in from its "
                                         "own arguments; the spec leaves it out")
            elif key == "zero_optimization":           # `"zero_optimization": true`
                self.read_zero(Opt("zero_stage", key, [arg(str(v), 0, where)], words, table["zero_optimization.stage"][1]))
            elif key == "optimizer":
                self._optimizer(o, v)
            elif o.what is None:
                self.carry_config(o, "parc has no key for")
            elif o.entry.get("takes") == "switch":
                if v is True:
                    self.read([o])
                elif v is not False:
                    self.carry_config(o, f"`{v}` is not true or false")
            else:
                self.read([o])

    def _optimizer(self, o: Opt, v) -> None:
        kind = str(v.get("type", "")).lower() if isinstance(v, dict) else ""
        if kind in OPTIMIZERS:
            self.draft.set("train", "optimizer", Name(OPTIMIZERS[kind]), f"{self.where(o)} optimizer.type {v['type']}")
        else:
            self.carry_config(o, "an optimizer parc has no name for")

    def note(self, o: Opt) -> str:
        return f"{self.where(o)} {o.source()}" if o.line else f"{self.where(o)} \"{o.spelled}\""


def _word(v) -> str:
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def _config_text(ctx, r: DeepSpeed, la) -> tuple[dict | None, str]:
    from parc.importer.sources import read_beside

    o = r.config_path
    path = o.value if o is not None else None
    if o is not None and path is None and o.values and isinstance(o.values[0].text[-1], str):
        # "$here/"ds_config.json: a folder the script works out ($(dirname ...)), then a known name,
        # read beside the script, where parc's own launch keeps it
        path = o.values[0].text[-1].rsplit("/", 1)[-1]
        ctx.report.notes.append(f"{r.note(o)}: its folder is worked out when the script runs; {path} is read "
                                "from beside the script")
    if path:
        text = read_beside(la, path)
        if text is not None:
            try:
                data = json.loads(text)
                return (data if isinstance(data, dict) else None), path.rsplit("/", 1)[-1]
            except ValueError:
                ctx.report.notes.append(f"{path}: not JSON (a template the script fills in?): not read")
    given = ctx.data("json")
    return (given[0].data, given[0].name) if given else (None, "")


def _hosts(ctx, r: DeepSpeed, la, facts: dict) -> None:
    from parc.importer.sources import hosts, read_beside

    found, where = None, ""
    o = r.hostfile
    if o is not None and o.value:
        text = read_beside(la, o.value)
        found, where = (hosts(text), o.value) if text is not None else (None, o.value)
    if found is None and ctx.data("hostfile"):
        s = ctx.data("hostfile")[0]
        found, where = s.data, s.name
    if not found:
        return
    facts["nodes"] = (len(found), f"{where}: {len(found)} hosts")
    slots = {n for _, n in found}
    if len(slots) == 1:
        facts["gpus_per_node"] = (slots.pop(), f"{where}: slots={found[0][1]}")
    if all(_ok_host(h) for h, _ in found):
        ctx.draft.target("deepspeed", "hosts", [h for h, _ in found], where)


def _ok_host(h: str) -> bool:
    return bool(h) and not h.startswith("-") and all(c.isalnum() or c in "-._" for c in h)


def _script_args(r: DeepSpeed, args: list[Arg]) -> list[Arg]:
    """The script's arguments but DeepSpeed's own (--deepspeed, --deepspeed_config), read here;
    the Hugging Face Trainer's ``--deepspeed FILE`` names the config, and its batch and precision
    arguments fill the config's "auto"."""
    for i, a in enumerate(args[:-1]):
        if a.value in TRAINER_AUTO.values():
            r.trainer[a.value] = args[i + 1]
        if a.value == "--deepspeed" and (args[i + 1].value or "").endswith(".json"):
            r.config_path = Opt("deepspeed_config", "--deepspeed", [args[i + 1]], [a, args[i + 1]])
            r.wiring(r.config_path, "the config file parc writes (ds_config.json)")
            return args[:i] + args[i + 2:]
    opts, _ = parse("deepspeed", args)
    mine = [o for o in opts if o.what in ("deepspeed", "deepspeed_config")]
    r.read(mine)
    keep = {id(w) for o in mine for w in o.words}
    return [a for a in args if id(a) not in keep]


def deploy(ctx) -> str:
    """The spec of a deepspeed launch: its launcher, hostfile, script and config."""
    from parc.importer import cluster
    from parc.importer.deploy import alternatives
    from parc.importer.models import from_hub, settle

    alternatives(ctx, "deepspeed", [[la] for la in ctx.group])
    la = ctx.group[0] if ctx.group else None
    d = ctx.draft
    r = DeepSpeed(d, ctx.report)
    rest: list[Arg] = []
    if la is not None:
        r.read(parse("deepspeed", la.launcher_args)[0])
        if la.script is not None:
            s = la.script
            d.target("deepspeed", "entrypoint", s.value.rsplit("/", 1)[-1] if s.value else Placeholder(s.shown),
                     f"{la.where()} {s.shown}")
        rest = _script_args(r, la.args)
        if rest:
            d.extra("deepspeed", "args", [a.value if a.value is not None else Placeholder(a.shown) for a in rest],
                    f"{la.where()}: the script's own arguments")
    data, where = _config_text(ctx, r, la)
    if data is not None:
        r.read_config(data, where)
    facts = ctx.facts()
    _hosts(ctx, r, la, facts)
    cluster.given_facts(ctx.options.cluster, facts)
    model_id = next((rest[i + 1].value for i, a in enumerate(rest[:-1])
                     if a.value in ("--model_name_or_path", "--model-name-or-path", "--model")), None)
    if not (ctx.options.model and _given_model(ctx)) and not from_hub(d, model_id, f"--model_name_or_path {model_id}"):
        settle(d, model_id)
    _mesh(d, facts)
    mesh = d.blocks.get("mesh", {})         # DeepSpeed's rank order, outermost first (target.toml)
    d.blocks["mesh"] = {k: mesh[k] for k in sorted(mesh, key=lambda k: ("pp", "dp", "cp", "tp").index(k)
                                                     if k in ("pp", "dp", "cp", "tp") else 9)}
    d.blocks.setdefault("train", {})
    cluster.write(d, facts, ctx.options.cluster, ctx.report, "imported")
    return "deepspeed"


def _given_model(ctx) -> bool:
    from parc.importer.deploy import model_block

    return model_block(ctx, None, "") is not None or "model" in ctx.draft.raw_blocks


def _mesh(d, facts: dict) -> None:
    """dp = world / (tp · pp), and the micro batch DeepSpeed derives from the global batch
    (train_batch_size = micro · accumulation · dp, deepspeed/runtime/config.py)."""
    nodes, per = facts.get("nodes", (None,))[0], facts.get("gpus_per_node", (None,))[0]
    tp, pp = d.get("mesh", "tp", 1), d.get("mesh", "pp", 1)
    if isinstance(nodes, int) and isinstance(per, int) and isinstance(tp, int) and isinstance(pp, int):
        world = nodes * per
        if world % (tp * pp) == 0:
            d.set("mesh", "dp", world // (tp * pp), f"{world} GPUs / (tp · pp = {tp * pp})", replace=False)
    else:
        d.set("mesh", "dp", Placeholder("the world size / (tp · pp)"), "the launch's world size is not known", replace=False)
    g, acc, dp = d.get("schedule", "global_batch"), d.get("schedule", "microbatches", 1), d.get("mesh", "dp")
    if (not d.has("schedule", "micro_batch") and all(isinstance(x, int) for x in (g, acc, dp))
            and g % (acc * dp) == 0):
        d.set("schedule", "micro_batch", g // (acc * dp), f"train_batch_size {g} / (accumulation {acc} · dp {dp})")
