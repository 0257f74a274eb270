"""A plain ``torchrun`` launch inside a Kubeflow TrainJob read back (the inverse of parc/targets/
trainjob with its default engine, torchrun): the TrainJob and its runtime give the nodes and the
processes a node, torchrun's own options what parc/targets/torchrun/flags.toml names (``--no-python``,
``--max-restarts``), and the script with its arguments the target's ``entrypoint`` and ``args``.

What the script itself does (its model, how it splits the processes into parallel groups, its
batch) is in its code, which ``parc import`` does not read: those values are placeholders
(``unknown(...)``, P040), never a guess. A TrainJob whose command is its runtime's, and whose
runtime no file given holds, has its entrypoint a placeholder too, said as P041."""
from __future__ import annotations

from parc.importer.argv import parse
from parc.importer.draft import Name, Placeholder, writable
from parc.importer.engines.common import Reader

UNKNOWN_CODE = "P041"


class Torchrun(Reader):
    target = "trainjob"
    extra_key = "args"

    def read_launcher(self, la) -> None:
        for o in parse("torchrun", la.launcher_args)[0]:
            if o.what in ("no_python", "max_restarts"):
                self.direct(o, f"target.{o.what}")
            elif o.what not in ("nnodes", "nproc_per_node"):
                self.wiring(o) if o.entry.get("plumbing") else self.drop(o, "a torchrun option parc has no key for")


def deploy(ctx) -> str:
    """The spec of a TrainJob's torchrun launch (module doc)."""
    from parc.importer import cluster
    from parc.importer.deploy import model_block
    from parc.importer.sources import ImportError_

    scheduler = next((s.scheduler for s in ctx.sources if s.scheduler), None)
    if not scheduler or scheduler["target"] != "trainjob":
        raise ImportError_("the files launch a plain torchrun script: its parallelism, batch and model are in the "
                           "Python code it runs, which parc import does not read (write the spec by hand; "
                           "`parc compile --target torchrun` emits its launch)")
    d, la = ctx.draft, ctx.group[0]
    d.target("trainjob", "engine", Name("torchrun"), "")     # first in its block (deploy._scheduler notes it)
    model_block(ctx, None, "")
    unknown = la.facts.get("trainjob.unknown")
    if unknown:
        d.target("trainjob", "entrypoint", Placeholder(unknown[0]), f"{unknown[1]}: {UNKNOWN_CODE}")
        what = f"the TrainJob runs {unknown[0]}: its entrypoint is unknown(...); {unknown[2]}"
        ctx.report.warnings.append((UNKNOWN_CODE, unknown[1], what))
    else:
        r = Torchrun(d, ctx.report)
        r.read_launcher(la)
        script = la.script
        if script is not None and script.value is not None and writable(script.value):
            d.target("trainjob", "entrypoint", script.value, f"{la.where()} torchrun {script.shown}")
        else:
            d.target("trainjob", "entrypoint", Placeholder(script.shown if script else "the script"),
                     f"{la.where()}: the script torchrun runs")
        words = [a.value for a in la.args]
        if la.args and all(w is not None and writable(w) for w in words):
            d.target("trainjob", "args", list(words), f"{la.where()}: the script's arguments")
        elif la.args:
            ctx.report.dropped.append((la.where(), "the script's arguments hold a value the files do not give"))
    code = "the script's own code, which parc import does not read"
    d.set("mesh", "dp", Placeholder(f"how the script splits its processes: {code}"), "not in the launch")
    d.set("schedule", "micro_batch", Placeholder(f"the batch a process: {code}"), "not in the launch")
    d.set("schedule", "global_batch", Placeholder(f"the global batch: {code}"), "not in the launch")
    d.blocks.setdefault("train", {})
    facts = ctx.facts()
    facts.pop("trainjob.unknown", None)
    cluster.write(d, facts, ctx.options.cluster, ctx.report, "imported")
    return "torchrun"
