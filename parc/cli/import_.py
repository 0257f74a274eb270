"""parc import: a launch people already run (a vLLM or SGLang server, a Megatron-LM, torchtitan
or DeepSpeed training launch, alone or inside a Slurm, Kubernetes, LeaderWorkerSet, TrainJob or
SkyPilot file, or the workers of a Dynamo, KServe or Ray Serve LLM deployment) read into a .par
spec."""
from __future__ import annotations

import sys

DESCRIPTION = ("Read the launch files people already have into a .par spec: every option parc has a key "
               "for becomes that key (with the line it came from), every other one goes to extra_args "
               "(listed on stderr), and a value the files do not give becomes unknown(...), which "
               "`parc check` reports (P040). The files are read, never run.")
EPILOG = """exit status: 0 written (placeholders and unparsed options are listed on stderr; `parc check`
reports the placeholders); 2 usage or I/O failure, or no launch found

examples:
  parc import serve.sh                              # vllm serve / sglang launch in a script
  parc import lws.yaml -o plan.par                  # a LeaderWorkerSet, its pods' commands
  parc import dgd.yaml                              # a Dynamo graph (llmisvc.yaml, Ray's serve.yaml alike)
  parc import trainjob.yaml runtime.yaml            # a TrainJob and the runtime it names
  parc import train.sh --var 1=ckpt --cluster dgx.par --explain
  parc import llama3_8b.toml --from torchtitan      # a torchtitan config
  parc import ds_config.json launch.sh hostfile     # DeepSpeed's config, launcher line and hosts"""

ENGINES = ("vllm", "sglang", "megatron", "torchtitan", "deepspeed")


def add_arguments(p):
    p.add_argument("files", nargs="+", metavar="FILE", help="the launch files (script, YAML, TOML, JSON, hostfile)")
    p.add_argument("--from", dest="engine", choices=ENGINES, help="the engine to import (default: the one the files launch)")
    p.add_argument("--model", metavar="PRESET|SPEC", help="the model: a preset, or a spec whose model block is taken")
    p.add_argument("--cluster", metavar="SPEC", help="a spec whose cluster block is the cluster (else the files' facts)")
    p.add_argument("--launch", type=int, metavar="N", help="the N-th launch, where the files hold alternatives")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable the files read but do not set (1=... for a script's first argument); repeatable")
    p.add_argument("-o", "--output", metavar="OUT", help="write the spec here (default: standard output)")
    p.add_argument("--explain", action="store_true", help="also check the spec and print explain's numbers for it")


def _variables(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not (name.isidentifier() or name.isdigit()):
            raise SystemExit(f"parc: --var {item!r}: write NAME=VALUE (or 1=VALUE for the first argument)")
        out[name] = value
    return out


def report(r, out=None) -> None:
    """What stderr says beside the spec: options carried unparsed, options left to parc's launch,
    values that cannot be written, assumptions."""
    out = sys.stderr if out is None else out   # the stream of the call, not the one when the module was imported
    rep = r.report
    for code, where, what in rep.warnings:
        out.write(f"parc import: {code} warning: {where}: {what}\n")
    for where, why in rep.carried:
        out.write(f"parc import: carried to extra_args: {where} ({why})\n")
    for where, why in rep.dropped:
        out.write(f"parc import: not carried: {where} ({why})\n")
    for where, what in rep.wiring:
        out.write(f"parc import: parc's launch writes it: {where} ({what})\n")
    for n in rep.notes:
        out.write(f"parc import: note: {n}\n")


def run(args) -> int:
    from parc.importer import ImportError_, Options, import_files

    try:
        options = Options(args.engine, args.model, args.cluster, args.launch, _variables(args.var))
        r = import_files(args.files, options)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 2
    except (ImportError_, ValueError, OSError) as e:
        print(f"parc import: {e}", file=sys.stderr)
        return 2
    if args.output:
        from parc.cli.output import write_output

        if (code := write_output(args.output, r.text)):
            return code
    else:
        sys.stdout.write(r.text)
    report(r)
    if args.explain:
        _explain(r, args.output)
    return 0


def _explain(r, path: str | None) -> None:
    """The imported spec checked for its target and explained: its diagnostics (the imported lines
    they name) on stderr, then explain's numbers (on stdout when the spec went to a file, else on
    stderr, so that standard output stays the spec)."""
    from parc.api import check_file
    from parc.cli.explain import _estimate
    from parc.report import explain
    from parc.report.diagnostics.text import write

    shown = path or "imported.par"
    res = check_file(shown, [r.target], text=r.text, shown=shown)
    if res.diagnostics:
        write(res.diagnostics, res.sources, sys.stderr)
    est = _estimate(res.plan) if res.plan is not None else None
    if est is None:
        sys.stderr.write("parc import: no numbers to explain: the spec has errors that leave no plan\n")
        return
    out = sys.stdout if path else sys.stderr
    out.write(explain.render_text(res.plan, est, shown, res.diagnostics) + "\n")
