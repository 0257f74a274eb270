"""parc check: parse and validate specs."""
from __future__ import annotations

import sys

from parc.resolve.reader import READ_CODE, STDIN, STDIN_NAME
from parc.cli.common import add_common, spec_paths

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
    from parc.language.diagnostics import summarize
    from parc.report.diagnostics.text import check_summary, render_text
    from parc.report.term import use_color

    from parc.language.parser import shared_parses

    paths, diags = spec_paths(args.specs)
    files = len(paths) + len(diags)   # every file named, read or not
    with shared_parses():   # each text parsed once: to tell fragments, and to check it
        sources = _check_all(args, paths, diags)

    io_fail = any(d.code == READ_CODE for d in diags)
    summary = summarize(diags, files)
    if args.format == "json":
        from parc.report.diagnostics.json import render_json

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


def _check_all(args, paths, diags) -> dict[str, str]:
    """Check each file (a fragment for its syntax only) into ``diags``; the sources read."""
    from parc.api import check_file

    texts, fragments, unread_stdin = _fragments(paths, args.root)
    sources: dict[str, str] = {}
    for path in paths:
        if path in fragments:   # a shared file of blocks for others to `use`: its syntax, as lint judges it
            diags.extend(fragments[path])
            sources[path] = texts[path]
            continue
        if path == STDIN and STDIN not in texts:
            diags.extend(unread_stdin)
            continue
        r = check_file(STDIN_NAME if path == STDIN else path, args.target, root=args.root,
                       text=texts[STDIN] if path == STDIN else None)
        diags.extend(r.diagnostics)
        sources.update(r.sources)
    return sources


def _fragments(paths, root) -> tuple[dict, dict, list]:
    """(the text of each file that could be read, by path; the syntax diagnostics of each
    fragment, by path; why standard input could not be read): the fragments are the files that
    hold blocks for others to `use` (a shared cluster file), as `parc lint` tells them
    (:func:`parc.lint.discover.is_fragment`)."""
    from parc.language.parser import parse_text
    from parc.language.diagnostics import ParcError
    from parc.lint.discover import imported, is_fragment, read_files

    read, failed = read_files(paths, root)
    texts = {(STDIN if name == STDIN_NAME else name): text for name, text in read.items()}
    used = imported(read)
    out = {}
    for path, text in texts.items():
        if is_fragment(STDIN_NAME if path == STDIN else path, text, used):
            try:
                parse_text(text, STDIN_NAME if path == STDIN else path)
                out[path] = []
            except ParcError as e:
                out[path] = [e.diagnostic, *e.more]
    return texts, out, [d for d in failed if d.span.file == STDIN_NAME]
