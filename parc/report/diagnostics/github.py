"""Diagnostics as GitHub Actions workflow commands (``::error file=...,line=...::message``),
escaped as ``@actions/core`` escapes them, and the reader of one such line back."""
from __future__ import annotations

import os
from typing import Sequence

from parc.language.diagnostics import ERROR, NOTE, WARNING, Diagnostic
from parc.printable import printable


def escape_data(s: str) -> str:
    """A workflow command's message: ``%``, CR and LF escaped."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """A workflow command's property value: as a message, plus ``:`` and ``,``."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def unescape(s: str) -> str:
    """The inverse of both escapes (``%25`` last, so escaped escapes survive)."""
    return (s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
            .replace("%25", "%"))


_COMMAND = {ERROR: "error", WARNING: "warning", NOTE: "notice"}


def render_github_line(d: Diagnostic) -> str:
    s = d.span
    props = [("file", printable(s.file.replace(os.sep, "/"))), ("line", str(s.line)), ("col", str(s.column)),
             ("endLine", str(max(s.end_line, s.line)))]
    if s.end_line == s.line:
        props.append(("endColumn", str(max(s.end_column, s.column + 1))))
    props.append(("title", d.code))
    text = printable(d.message + (f"\nhelp: {d.help}" if d.help else ""))
    head = ",".join(f"{k}={escape_property(v)}" for k, v in props)
    return f"::{_COMMAND.get(d.severity, 'warning')} {head}::{escape_data(text)}"


def render_github(diags: Sequence[Diagnostic]) -> str:
    """One workflow command per diagnostic (``::error file=...,line=...::message``)."""
    return "\n".join(render_github_line(d) for d in diags)


def parse_github_line(line: str) -> dict:
    """Read back one annotation line: command, properties and message (for tests and tools)."""
    if not line.startswith("::"):
        raise ValueError(f"not a workflow command: {line!r}")
    cmd_end = line.index("::", 2)
    head, message = line[2:cmd_end], line[cmd_end + 2:]
    command, _, props = head.partition(" ")
    out = {"command": command, "message": unescape(message)}
    if props:
        for kv in props.split(","):
            k, _, v = kv.partition("=")
            out[k] = unescape(v)
    return out
