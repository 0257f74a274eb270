"""One diagnostic type for every stage, and its renderers.

A :class:`Diagnostic` carries a stable code (``P102``), a severity, the source span a user
would edit, a message in the user's terms, an optional ``help`` line with the fix, and
related spans (``note:`` lines pointing at the other half of a conflict).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

ERROR = "error"
WARNING = "warning"
NOTE = "note"
_SEVERITY_ORDER = {ERROR: 0, WARNING: 1, NOTE: 2}


@dataclass(frozen=True, slots=True)
class Span:
    """A region of one source file: 1-based lines and columns, end exclusive; 0-based offsets."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int
    start: int = 0
    end: int = 0

    @classmethod
    def point(cls, file: str, line: int = 1, column: int = 1, offset: int = 0) -> "Span":
        return cls(file, line, column, line, column + 1, offset, offset + 1)

    def to(self, other: "Span") -> "Span":
        """The span from the start of ``self`` to the end of ``other`` (same file)."""
        return Span(self.file, self.line, self.column, other.end_line, other.end_column,
                    self.start, other.end)


@dataclass(slots=True)
class Related:
    span: Span
    message: str


@dataclass(slots=True)
class Diagnostic:
    code: str
    severity: str
    message: str
    span: Span
    help: str | None = None
    related: list[Related] = field(default_factory=list)
    target: str | None = None  # the target whose rule this is, None for generic rules

    def to_json(self) -> dict:
        s = self.span
        d = {
            "file": s.file,
            "line": s.line,
            "column": s.column,
            "end_line": s.end_line,
            "end_column": s.end_column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "help": self.help,
        }
        if self.target:
            d["target"] = self.target
        if self.related:
            d["related"] = [
                {"file": r.span.file, "line": r.span.line, "column": r.span.column,
                 "end_line": r.span.end_line, "end_column": r.span.end_column, "message": r.message}
                for r in self.related
            ]
        return d


class ParcError(Exception):
    """Raised inside the compiler to abort one value; carries the diagnostic to report."""

    def __init__(self, diagnostic: Diagnostic, more: list[Diagnostic] | None = None):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic
        self.more = list(more or [])  # further independent errors (other blocks' syntax errors)


def sort_key(d: Diagnostic):
    s = d.span
    return (s.file, s.line, s.column, _SEVERITY_ORDER.get(d.severity, 3), d.code)


def summarize(diags: Iterable[Diagnostic], files: int) -> dict:
    diags = list(diags)
    return {
        "files": files,
        "errors": sum(d.severity == ERROR for d in diags),
        "warnings": sum(d.severity == WARNING for d in diags),
    }


# ---------------------------------------------------------------------------- text

_COLORS = {ERROR: "\x1b[1;31m", WARNING: "\x1b[1;33m", NOTE: "\x1b[1;36m"}
_BOLD = "\x1b[1m"
_BLUE = "\x1b[1;34m"
_RESET = "\x1b[0m"


def use_color(stream=None) -> bool:
    """Colour only on a terminal, never with NO_COLOR set; FORCE_COLOR forces it."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def source_text(sources: dict[str, str], file: str) -> str | None:
    """A file's text from ``sources``, read (and kept there) on first use; None if unreadable."""
    text = sources.get(file)
    if text is None:
        from parc.resolve.reader import read_spec

        try:  # the spec reader: never a device, a FIFO or a file over the size limit
            text = read_spec(file)
        except OSError:
            return None
        sources[file] = text
    return text


@lru_cache(maxsize=32)
def _lines(text: str) -> list[str]:
    """The lines of ``text`` as the lexer counts them (only ``\\n`` ends a line), split once
    per text however many diagnostics point into it."""
    return text.split("\n")


def _line_text(sources: dict[str, str], file: str, line: int) -> str | None:
    text = source_text(sources, file)
    if text is None:
        return None
    lines = _lines(text)
    if 1 <= line <= len(lines):
        return lines[line - 1].rstrip("\r")
    return None


def _snippet(sources, span: Span, color: bool, caret_color: str, label: str = "") -> list[str]:
    src = _line_text(sources, span.file, span.line)
    if src is None:
        return []
    src = src.expandtabs(1)
    if len(src) > 200:  # keep pathological lines readable
        lo = max(0, span.column - 80)
        src = src[lo:lo + 160]
        col = span.column - lo
    else:
        col = span.column
    width = len(str(span.line))
    end = span.end_column if span.end_line == span.line else len(src) + 1
    n = max(1, min(end, len(src) + 1) - col)
    gutter = " " * width + " |"
    bar = f"{_BLUE}{gutter}{_RESET}" if color else gutter
    num = f"{_BLUE}{span.line} |{_RESET}" if color else f"{span.line} |"
    carets = " " * (col - 1) + "^" * n + (f" {label}" if label else "")
    if color:
        carets = f"{caret_color}{carets}{_RESET}"
    return [bar, f"{num} {src}".rstrip(), f"{bar} {carets}".rstrip()]


def render_text(diags: Sequence[Diagnostic], sources: dict[str, str] | None = None,
                color: bool = False) -> str:
    """``file:line:col: CODE message``, the source line with a caret underline, ``help:``."""
    sources = {} if sources is None else sources
    out: list[str] = []
    for d in diags:
        s = d.span
        head_color = _COLORS.get(d.severity, "")
        sev = f"{head_color}{d.severity}{_RESET}" if color else d.severity
        where = f"{s.file}:{s.line}:{s.column}:"
        if color:
            where = f"{_BOLD}{where}{_RESET}"
        tag = f" [{d.target}]" if d.target else ""
        out.append(f"{where} {d.code} {sev}{tag}: {d.message}")
        out.extend(_snippet(sources, s, color, head_color))
        for r in d.related:
            rs = r.span
            out.append(f"  note: {rs.file}:{rs.line}:{rs.column}: {r.message}")
            out.extend("  " + x for x in _snippet(sources, rs, color, _COLORS[NOTE]))
        if d.help:
            hl = "help:"
            if color:
                hl = f"{_COLORS[NOTE]}help:{_RESET}"
            out.append(f"  = {hl} {d.help}")
        out.append("")
    return "\n".join(out)


def render_summary(summary: dict, notes: int = 0) -> str:
    """The last line of `parc check`: "no problems" only when nothing was reported, else the
    counts (``notes``: the notes that were printed)."""
    from parc.words import count

    e, w, f = summary["errors"], summary["warnings"], summary["files"]
    if not e and not w:
        return f"ok: {count(f, 'file')} checked, " + (count(notes, "note") if notes else "no problems")
    parts = []
    if e:
        parts.append(count(e, "error"))
    if w:
        parts.append(count(w, "warning"))
    if notes:
        parts.append(count(notes, "note"))
    return f"{', '.join(parts)} in {count(f, 'file')}"


def render_json(diags: Sequence[Diagnostic], files: int) -> str:
    return json.dumps({"diagnostics": [d.to_json() for d in diags],
                       "summary": summarize(diags, files)}, indent=2)
