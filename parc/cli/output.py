"""Writing what a command puts in a file (`-o FILE`, `-o DIR`, `--html FILE`, `--report FILE`,
a spec rewritten in place), and the one line it prints when it cannot.

Every command writes the same way: the file is replaced atomically (a temporary file in the same
folder, renamed over it: a reader sees the old file or the new one, never half), byte for byte
what the command made; a path that is a symbolic link is refused, never written through nor
replaced (the link and what it points at stay as they were); and parc makes no folder for the
file (a missing folder is refused), so nothing is written outside the folder the path names.
`parc compile -o DIR` makes DIR itself, inside a folder that must exist. When the write cannot
be done, stderr gets one line, ``parc: cannot write PATH: WHY``, and the command exits 2 (an
I/O failure, LANGUAGE.md section 3).
"""
from __future__ import annotations

import os
import sys

WRITE_FAILED = 2  # the exit status of an I/O failure


class Unwritten(Exception):
    """The output could not be written; ``str()`` is ``cannot write PATH: WHY``."""

    def __init__(self, path, why: str):
        super().__init__(f"cannot write {os.fspath(path)}: {why}")
        self.path, self.why = os.fspath(path), why


def _bare(path: str) -> str:
    """``path`` without trailing separators (``out/`` names the entry ``out``, link or not)."""
    return path.rstrip(os.sep) or path


def check_path(path) -> None:
    """Raise Unwritten for a path that is a symbolic link or whose folder does not exist (a
    command that works long before it writes asks first, then writes with :func:`put_file`)."""
    p = _bare(os.fspath(path))
    if os.path.islink(p):
        raise Unwritten(path, "it is a symbolic link; parc writes no file through a link, nor replaces one")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.lexists(folder):
        shown = os.path.dirname(p) or "."
        raise Unwritten(path, f"the folder {shown} does not exist (parc makes none for it)")


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def put_file(path, data: str | bytes) -> None:
    """Replace the file ``path`` with ``data`` atomically; Unwritten when it cannot."""
    from parc.files import write_atomic

    check_path(path)
    try:
        write_atomic(path, data)
    except OSError as e:
        raise Unwritten(path, _why(e)) from None


def put_folder(path, files) -> None:
    """Write the set ``files`` into the folder ``path`` as one swap (parc.files.write_files);
    Unwritten when it cannot."""
    from parc.files import write_files

    check_path(path)
    try:
        write_files(path, files)
    except OSError as e:
        raise Unwritten(path, _why(e)) from None


def refuse(e: Unwritten) -> int:
    """Print ``parc: cannot write PATH: WHY`` on stderr; the exit status, 2."""
    print(f"parc: {e}", file=sys.stderr)
    return WRITE_FAILED


def write_output(path, data: str | bytes) -> int:
    """:func:`put_file`, and on failure :func:`refuse` why: 0 written, 2 not."""
    try:
        put_file(path, data)
    except Unwritten as e:
        return refuse(e)
    return 0
