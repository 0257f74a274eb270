"""parc lint: check plus style and advice over many specs, for editors and pull-request CI."""
from __future__ import annotations

import sys

from parc.words import count

DESCRIPTION = """Check specs like `parc check`, plus style and advice (P5), over files, folders and globs.

Folders are searched for .par files recursively. Silence one finding on its line with a
comment, `# parc: ignore[P552]` (several codes comma-separated); a comment that silences
nothing is reported as P550."""
EPILOG = """exit status: 0 clean or warnings only, 1 errors (or warnings with --warnings-as-errors),
2 usage or I/O failure; --exit-zero turns 1 into 0

examples:
  parc lint specs/
  parc lint 'specs/**/*.par' --select P1,P5 --ignore P552
  parc lint specs/ --format sarif > parc.sarif
  parc lint specs/ --format github"""

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


def run(args) -> int:
    from parc.lint.engine import UsageError, exit_code, lint_paths

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
        print(_json(res, diags))
    elif fmt == "sarif":
        from parc.report.ci import render_sarif

        print(render_sarif(diags, ok=not res.io_errors))
    elif fmt == "github":
        from parc.report.ci import render_github

        out = render_github(diags)
        if out:
            print(out)
        if not args.quiet or diags:
            print(summary_line(res, diags))
    else:
        _text(res, diags, args.quiet)
    if not res.files and not res.io_errors and fmt == "text":
        print("parc lint: no .par files found", file=sys.stderr)
    return exit_code(res, args.warnings_as_errors, args.exit_zero)


def _json(res, diags) -> str:
    import json

    return json.dumps({
        "diagnostics": [d.to_json() for d in diags],
        "summary": {"files": len(res.files), "errors": sum(d.severity == "error" for d in diags),
                    "warnings": sum(d.severity == "warning" for d in diags), "suppressed": res.suppressed},
    }, indent=2)


def summary_line(res, shown=None) -> str:
    """The counts; ``shown``: the findings printed (their notes are counted too)."""
    from parc.language.diagnostics import render_summary, summarize

    notes = sum(d.severity not in ("error", "warning") for d in (res.diagnostics if shown is None else shown))
    line = render_summary(summarize(res.diagnostics, len(res.files)), notes=notes)
    if line.startswith("ok:"):
        line = line.replace("checked", "linted")
    if res.suppressed:
        line += f" ({res.suppressed} suppressed)"
    return line


def _text(res, diags, quiet: bool):
    from parc.language.diagnostics import ERROR, WARNING, render_text, use_color

    color = use_color(sys.stdout)
    groups: dict[str, list] = {}
    for d in diags:
        groups.setdefault(d.span.file, []).append(d)
    out = sys.stdout
    for f, ds in groups.items():
        e = sum(d.severity == ERROR for d in ds)
        w = sum(d.severity == WARNING for d in ds)
        counts = ", ".join(x for x in (count(e, "error") if e else "", count(w, "warning") if w else "") if x)
        head = f"{f}" + (f"  ({counts})" if counts else "")
        out.write((f"\x1b[1;4m{head}\x1b[0m" if color else f"── {head}") + "\n")
        out.write(render_text(ds, res.sources, color=color).rstrip("\n") + "\n\n")
    if not quiet or diags:
        line = summary_line(res, diags)
        if color:
            tint = "\x1b[1;31m" if res.errors else "\x1b[1;33m" if res.warnings else "\x1b[1;32m"
            line = f"{tint}{line}\x1b[0m"
        out.write(line + "\n")
