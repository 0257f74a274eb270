"""parc check: parse and validate specs."""
from __future__ import annotations

import sys

from parc.resolve.reader import READ_CODE, STDIN, STDIN_NAME, diagnostic as read_diagnostic
from parc.cli.common import add_common, spec_paths, stdin_text

DESCRIPTION = "Parse and validate specs: every P0-P7 problem, before a GPU is allocated."
EPILOG = """exit status: 0 clean or warnings only, 1 errors, 2 usage or I/O failure

example:
  parc check examples/llama3-70b-train.par --target megatron"""


def add_arguments(p):
    p.add_argument("specs", nargs="+", metavar="SPEC",
                   help=".par files, folders (searched recursively) or globs; `-` reads a spec from stdin")
    from parc.cli.targets import add_target

    add_target(p)
    p.add_argument("--warnings-as-errors", action="store_true", help="exit 1 on warnings too")
    add_common(p)


def run(args) -> int:
    from parc.api import check_file
    from parc.language.diagnostics import summarize
    from parc.report.diagnostics.json import render_json
    from parc.report.diagnostics.text import check_summary, render_text
    from parc.report.term import use_color

    paths, diags = spec_paths(args.specs)
    sources: dict[str, str] = {}
    files = 0
    for path in paths:
        text = stdin_text() if path == STDIN else None
        if isinstance(text, Exception):
            diags.append(read_diagnostic(text, STDIN_NAME))
            continue
        r = check_file(STDIN_NAME if path == STDIN else path, args.target, root=args.root, text=text)
        files += bool(r.sources)  # the spec itself was read
        diags.extend(r.diagnostics)
        sources.update(r.sources)
    io_fail = any(d.code == READ_CODE for d in diags)
    summary = summarize(diags, files)
    if args.format == "json":
        print(render_json(diags, files))
    else:
        shown = diags if not args.quiet else [d for d in diags if d.severity in ("error", "warning")]
        text = render_text(shown, sources, color=use_color(sys.stdout))
        if text:
            sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        if not args.quiet or summary["errors"] or summary["warnings"]:
            print(check_summary(diags, files, shown))
    if io_fail:
        return 2
    if summary["errors"] or (args.warnings_as_errors and summary["warnings"]):
        return 1
    return 0
