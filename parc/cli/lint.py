"""parc lint: check plus style and advice over many specs, for editors and pull-request CI."""
from __future__ import annotations

import sys

DESCRIPTION = """Check specs like `parc check`, plus style and advice (P5), over files, folders and globs.

Folders are searched for .par files recursively. Silence one finding on its line with a
comment, `# parc: ignore[P552]` (several codes comma-separated); a comment that silences
nothing is reported as P550.

--fix applies each safe fix (the one change a help names: a misspelt name, a syntax hint, a
unit, a restated line, the layout), keeps it only if the file then lints no worse, and writes
the file atomically; a finding whose help offers alternatives is left for you to choose."""
EPILOG = """exit status: 0 clean or warnings only, 1 errors (or warnings with --warnings-as-errors),
2 usage or I/O failure; --exit-zero turns 1 into 0

examples:
  parc lint specs/
  parc lint 'specs/**/*.par' --select P1,P5 --ignore P552
  parc lint specs/ --format sarif > parc.sarif
  parc lint specs/ --format github
  parc lint specs/ --fix
  parc lint specs/ --fix --diff      (show the fixes, write nothing; exit 1 if there are some)"""

FORMATS = ("text", "json", "sarif", "github")


def add_arguments(p):
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help=".par files, folders (searched recursively) or globs; `-` reads a spec from stdin")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="output format: text (default), json, sarif (GitHub code scanning), "
                        "github (workflow annotations)")
    p.add_argument("--select", action="append", metavar="CODES",
                   help="report only these codes or families, comma-separated (P1, P501, ALL)")
    p.add_argument("--ignore", action="append", metavar="CODES",
                   help="do not report these codes or families, comma-separated")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="skip paths matching this glob (repeatable)")
    from parc.cli.targets import add_target

    add_target(p)
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding each spec, else its folder)")
    p.add_argument("--warnings-as-errors", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only errors and warnings, and the summary only when there are some")
    p.add_argument("--fix", action="store_true",
                   help="apply the safe fixes, each re-checked to bring no new finding, and report the rest")
    p.add_argument("--diff", action="store_true",
                   help="with --fix: print the fixes as a unified diff and write nothing")


def run(args) -> int:
    from parc.lint.engine import UsageError, exit_code, lint_paths

    if args.diff and not args.fix:
        print("parc lint: error: --diff shows what --fix would change: use it with --fix", file=sys.stderr)
        return 2
    if args.fix:
        from parc.cli.lint_fix import run_fix

        try:
            status = run_fix(args)
        except UsageError as e:
            print(f"parc lint: error: {e}", file=sys.stderr)
            return 2
        if status is not None:
            return status
    try:
        res = lint_paths(args.paths, select=args.select, ignore=args.ignore, targets=args.target,
                         root=args.root, exclude=args.exclude)
    except UsageError as e:
        print(f"parc lint: error: {e}", file=sys.stderr)
        return 2
    fmt = args.format
    if fmt != "text":  # the output is for a machine; say it on stderr as well
        for msg in res.io_errors:
            print(msg, file=sys.stderr)
    diags = res.diagnostics
    if args.quiet:
        diags = [d for d in diags if d.severity in ("error", "warning")]
    if fmt == "json":
        from parc.report.diagnostics.json import render_lint

        print(render_lint(res, diags))
    elif fmt == "sarif":
        from parc.report.diagnostics.sarif import render_sarif

        print(render_sarif(diags, ok=not res.io_errors))
    elif fmt == "github":
        from parc.report.diagnostics.github import render_github
        from parc.report.diagnostics.text import lint_summary

        out = render_github(diags)
        if out:
            print(out)
        if not args.quiet or diags:
            print(lint_summary(res, diags))
    else:
        from parc.report.diagnostics.text import render_lint
        from parc.report.term import use_color

        sys.stdout.write(render_lint(res, diags, args.quiet, use_color(sys.stdout)))
    if not res.files and not res.io_errors and fmt == "text":
        print("parc lint: no .par files found", file=sys.stderr)
    return exit_code(res, args.warnings_as_errors, args.exit_zero)
