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


def emit(text: str, stream=None):
    stream = stream or sys.stdout
    stream.write(text)
    if text and not text.endswith("\n"):
        stream.write("\n")
