"""``parc import``: the launch scripts people already run, read into a reviewed plan.

The files (a shell script or a text of command lines, a Slurm batch script, a Kubernetes,
LeaderWorkerSet, TrainJob (with its training runtime) or SkyPilot YAML file, a Dynamo
DynamoGraphDeployment, a KServe LLMInferenceService, a Ray Serve LLM config, a torchtitan TOML, a
DeepSpeed JSON config and hostfile) are read, never run (:mod:`parc.importer.sh_eval`); each engine launch among them is
read through its target's ``flags.toml``, the table ``parc compile`` writes from, so what compile
writes import reads back; the spec is written in ``parc fmt``'s layout, every value with the
line it came from, ``unknown(...)`` where the files do not give a value (P040), and every option
parc has no key for in the target's ``extra_args`` (reported).

A sibling of planner/ and lint/: it reads language/ (fmt's layout; the parser only for a block given as a spec), model/ (the targets' tables, the
presets), resolve/ (the presets' data) and targets/ (their data helpers), and nothing reads it but
the command line.
"""
from __future__ import annotations

from dataclasses import dataclass

from parc.importer.deploy import Options
from parc.importer.engines.common import Report
from parc.importer.sources import ImportError_, read_source

__all__ = ["ImportError_", "Imported", "Options", "import_files"]


@dataclass
class Imported:
    """What an import gives: the spec's text, the target it is for and what stderr says."""
    text: str          # the spec
    target: str        # the target the original runs on (parc compile --target)
    report: Report


def import_files(paths: list[str], options: Options | None = None) -> Imported:
    """The spec of the launch the files hold; :class:`ImportError_` where they hold none."""
    from parc.importer.deploy import build
    from parc.importer.sh_values import lit

    options = options or Options()
    variables = {k: lit(v) for k, v in options.variables.items() if not k.isdigit()}
    numbered = {int(k): v for k, v in options.variables.items() if k.isdigit() and int(k) > 0}
    positional = ([lit(numbered.get(i, "")) for i in range(1, max(numbered) + 1)] if numbered else None)
    sources = [read_source(p, variables, positional) for p in paths]
    if any(isinstance(s.data, dict) and "trainjobs" in s.data for s in sources):
        from parc.importer.trainjob import link

        link(sources, variables)    # a TrainJob and its runtime, in one file or two
    draft, report, target = build(sources, options)
    return Imported(draft.text(), target, report)
