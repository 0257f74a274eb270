"""One diagnostic type for every stage (its renderers live in ``parc.report.diagnostics``).

A :class:`Diagnostic` carries a stable code (``P102``), a severity, the source span a user
would edit, a message in the user's terms, an optional ``help`` line with the fix, and
related spans (``note:`` lines pointing at the other half of a conflict).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

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
