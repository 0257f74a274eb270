"""parc calibrate: fit the cluster's efficiency factors to measured runs, as a `profile` block."""
from __future__ import annotations

import sys

DESCRIPTION = ("Fit a cluster's efficiency factors (the `profile` block: GEMM efficiency, link "
               "efficiencies, overlap, ...) to measured runs of the spec's model on its cluster, and "
               "write them as a profile block the cluster file can `use`: `explain` and `plan` then "
               "predict other plans on that cluster with them.")
EPILOG = """logs: Megatron-LM training logs (the arguments block, `elapsed time per iteration (ms)`,
memory reports), torchtitan logs (`step: ... tps: ... mfu: ...`, the device mesh line), or CSV
files with a header (one run per row: step_time, tokens_per_second, tokens_per_second_per_gpu,
tflops_per_gpu, mfu, memory_gb, memory_gib, and spec fields such as mesh.tp, schedule.global_batch,
train.recompute). The settings a log prints (mesh, batch, recompute) replace the spec's for that
run; the first logged step and steps 1-3 are warm-up and left out; the median of the rest counts.
Without -o the block goes to standard output and the report to standard error.

exit status: 0 fitted; 1 the spec has errors, or a log or run cannot be used (the message names
the file and line); 2 usage or I/O failure

examples:
  parc calibrate cluster-run.par logs/tp8-pp4.log logs/tp4-pp8.log -o clusters/measured.par
  parc calibrate cluster-run.par runs.csv --format json"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file of the runs' model, cluster and settings (`-`: read "
                   "it from stdin; its imports are read relative to this folder)")
    p.add_argument("logs", metavar="LOG", nargs="+", help="a measured run: a Megatron-LM or torchtitan log, "
                   "or a CSV file of runs")
    p.add_argument("-o", "--output", metavar="FILE", help="write the profile block to FILE (replaced "
                   "atomically) instead of standard output")
    p.add_argument("--name", help="the profile's label (default: the spec's profile's, else CLUSTER-measured)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")


def run(args) -> int:
    from parc.calibrate.fit import FitError
    from parc.calibrate.from_logs import calibrate
    from parc.calibrate.logs import LogError
    from parc.calibrate.render import render_json, render_text
    from parc.cli.common import load_spec, unread
    from parc.report.diagnostics.text import write

    text = None
    if args.spec == "-":   # the runs `use` it under a name of its own, in this folder
        from parc.resolve.reader import STDIN_NAME, read_stdin

        text = read_stdin()
        args.spec = f"{STDIN_NAME}.par"
        r = load_spec(args.spec, (), root=args.root, text=text)
    else:
        r = load_spec(args.spec, (), root=args.root)
    if (code := unread(r)) is not None:
        return code
    if r.plan is None:
        write(r.diagnostics, r.sources, sys.stderr)
        print(f"parc: cannot calibrate: {args.spec} has errors", file=sys.stderr)
        return 1
    from parc.calibrate.runs import RunError

    try:
        cal = calibrate(args.spec, r.plan, args.logs, root=args.root, name=args.name, text=text)
    except OSError as e:
        print(f"parc: cannot read {e.filename or 'a log'}: {e.strerror or e}", file=sys.stderr)
        return 2
    except (LogError, RunError, FitError) as e:
        print(f"parc: {e}", file=sys.stderr)
        if args.format == "json":
            import json

            where = {"file": e.file, "line": e.line} if isinstance(e, LogError) else {}
            print(json.dumps({"spec": r.file, "error": str(e), **where}, indent=2))
        return 1
    if args.output:
        from parc.cli.output import write_output

        if (code := write_output(args.output, cal.text)):
            return code
    if args.format == "json":
        print(render_json(cal.report, r.file, cal.runs, args.output, cal.text))
        return 0
    print(render_text(cal.report, [x.source for x in cal.runs]), file=sys.stderr if not args.output else sys.stdout)
    if args.output:
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(cal.text)
    return 0
