"""parc fmt: rewrite specs in the canonical layout."""
from __future__ import annotations

import sys

DESCRIPTION = ("Rewrite specs in the canonical layout: two-space indent, aligned `=`, one blank line "
               "between blocks, comments kept. Idempotent; never changes what a spec means.")
EPILOG = """exit status: 0 done (or nothing to change with --check), 1 files would change (--check) or
a syntax error, 2 usage or I/O failure

examples:
  parc fmt examples/*.par
  parc fmt --check --diff specs/"""


def add_arguments(p):
    p.add_argument("specs", nargs="+", metavar="SPEC", help=".par files or folders (`-` reads stdin, writes stdout)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    p.add_argument("--diff", action="store_true", help="print a unified diff of what would change")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


def _files(specs):
    from pathlib import Path

    for s in specs:
        p = Path(s)
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.par") if q.is_file())
        else:
            yield p


def run(args) -> int:
    from parc.cli.output import Unwritten, put_file, refuse
    from parc.language.diagnostics import ParcError
    from parc.language.fmt import format_text
    from parc.report.diagnostics.text import write
    from parc.report.fmt import render_diff
    from parc.resolve.reader import read_bytes, read_stdin_bytes

    status = 0
    changed = 0
    for path in (["-"] if args.specs == ["-"] else _files(args.specs)):
        name = "<stdin>" if path == "-" else str(path)
        try:
            data = read_stdin_bytes() if path == "-" else read_bytes(path)  # never a device or a FIFO
            text = data.decode("utf-8")  # strict: a file is never rewritten with replaced bytes
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
            print(f"parc: cannot read {name}: {why}", file=sys.stderr)
            status = 2
            continue
        try:
            new = format_text(text, name)
        except ParcError as e:
            write([e.diagnostic], {name: text}, sys.stderr)
            status = max(status, 1)
            continue
        if path == "-":
            if args.check or args.diff:
                if new != text:
                    changed += 1
                    if args.diff:
                        sys.stdout.write(render_diff(text, new, name, stdin=True))
            else:
                sys.stdout.write(new)
            continue
        if new == text:
            continue
        changed += 1
        if args.diff:
            sys.stdout.write(render_diff(text, new, name))
        if args.check:
            if not args.quiet and not args.diff:
                print(f"would reformat {name}")
        elif not args.diff:
            try:
                put_file(path, new)
            except Unwritten as e:
                status = refuse(e)
                continue
            if not args.quiet:
                print(f"reformatted {name}")
    if args.check and changed:
        status = max(status, 1)
    return status
