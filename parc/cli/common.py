"""Options and helpers shared by commands."""
from __future__ import annotations

import sys


def add_common(p, formats=("text", "json")):
    p.add_argument("--format", choices=formats, default="text", help="output format (default: text)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and warnings")


def read_error(path, e: OSError) -> str:
    why = e.strerror or str(e)
    return f"parc: cannot read {path}: {why}"


def spec_paths(args) -> tuple[list[str], list]:
    """The spec files that command-line arguments name (files, folders searched for .par files,
    globs, `-` for stdin) and a P030 diagnostic for each argument that names nothing."""
    from parc.lint.discover import discover

    return discover(args)


def stdin_text():
    """The spec on standard input, or the ReadFailure that stopped reading it."""
    from parc.resolve.reader import ReadFailure, read_stdin

    try:
        return read_stdin()
    except (ReadFailure, OSError) as e:
        return e


def load_spec(path: str, targets=(), root=None, text: str | None = None):
    """``check_file`` for a spec argument (`-`: standard input, shown as `<stdin>`; ``text``:
    the spec's text, read already)."""
    from parc.api import check_file
    from parc.resolve.reader import STDIN, STDIN_NAME, read_stdin

    if path == STDIN:
        return check_file(STDIN_NAME, targets, root=root, text=read_stdin())
    return check_file(path, targets, root=root, text=text)


def read_failed(r) -> bool:
    """Whether the spec itself of a check result could not be read (exit status 2)."""
    from parc.resolve.reader import READ_CODE

    return any(d.code == READ_CODE for d in r.diagnostics)


def unread(r) -> int | None:
    """When the spec of check result ``r`` could not be read: print why on stderr and give the
    exit status 2; None when it was read."""
    if not read_failed(r):
        return None
    from parc.report.diagnostics.text import write
    from parc.resolve.reader import READ_CODE

    write([d for d in r.diagnostics if d.code == READ_CODE], r.sources, sys.stderr, color=False)
    return 2

