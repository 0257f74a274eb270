"""parc explain: the math behind a plan — rank map, memory, communication, bubble, step time."""
from __future__ import annotations

import sys

from parc.words import count

DESCRIPTION = ("Show the numbers behind a plan: where ranks land, what each GPU holds, what each axis "
               "sends and on which link, the pipeline bubble, step time and MFU.")
EPILOG = """exit status: 0 shown; 1 the spec has errors: they are listed first, then the numbers of
the plan as written wherever its mesh resolves (with --format json, the full object with the
errors among its `diagnostics`; without an estimate only where nothing can be computed); 2 usage
or I/O failure

examples:
  parc explain examples/llama3-70b-train.par
  parc explain examples/llama3-70b-serve.par --format json
  parc explain spec.par --html plan.html"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file to explain (`-`: read it from stdin)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    from parc.cli.targets import add_target

    add_target(p, help="also apply this target's rules before explaining (repeatable)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")
    p.add_argument("--html", metavar="FILE", help="also write the explanation as an HTML page")


def run(args) -> int:
    from parc.cli.common import load_spec, read_error, unread
    from parc.language.diagnostics import ERROR
    from parc.report.diagnostics.text import write

    try:
        r = load_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if (code := unread(r)) is not None:
        return code
    errors = [d for d in r.diagnostics if d.severity == ERROR]
    est = _estimate(r.plan)
    if est is None and args.format == "json":
        from parc.report.diagnostics.json import render_file_errors

        print(render_file_errors(r.file, r.diagnostics))
        return 1
    if est is None:
        write(r.diagnostics, r.sources, sys.stderr)
        sys.stderr.write(f"parc: cannot explain {args.spec}: it has {count(len(errors), 'error')}, "
                         "and no numbers follow from a mesh that cannot be laid out on ranks\n")
        return 1
    if args.html:
        try:
            from parc.report.html import explain_page
        except ImportError as e:
            if e.name not in ("parc.report", "parc.report.html"):
                raise
            print("parc: --html needs parc.report.html, which this installation lacks", file=sys.stderr)
            return 2
    from parc.report import explain

    if args.html:
        from parc.cli.output import write_output

        if (code := write_output(args.html, explain_page(r.plan, est, r.diagnostics))):
            return code
    if args.format == "json":
        print(explain.render_json(est, r.file, r.diagnostics))
    else:
        if r.diagnostics:
            write(r.diagnostics, r.sources, sys.stderr)
        print(explain.render_text(r.plan, est, r.file, r.diagnostics))
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    return 1 if errors else 0


def _estimate(plan):
    """The estimate of ``plan`` as written, errors and all; None when there is no plan (its mesh
    or model did not resolve) or its mesh cannot be laid out on ranks (an axis of size 0 from an
    ``auto`` that does not divide the world, an expert grid that does not divide a stage's
    ranks): the rank map refuses those with ValueError, and every number rests on it."""
    if plan is None:
        return None
    from parc.cost.estimate import estimate

    try:
        return estimate(plan)
    except ValueError:
        return None
