"""One diagnostic type for every stage (its renderers live in ``parc.report.diagnostics``).

A :class:`Diagnostic` carries a stable code (``P102``), a severity, the source span a user
would edit, a message in the user's terms, an optional ``help`` line with the fix, and
related spans (``note:`` lines pointing at the other half of a conflict), and the fixes: the
changes the ``help`` names, as edits of the source (:class:`Fix`), which ``parc lint --fix``,
the language server's code actions and the JSON and SARIF outputs all read.
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

    @classmethod
    def of(cls, file: str, text: str, start: int, end: int) -> "Span":
        """The span of ``text[start:end]``, lines and columns counted from the text."""
        def pos(off: int) -> tuple[int, int]:
            return text.count("\n", 0, off) + 1, off - (text.rfind("\n", 0, off) + 1) + 1

        (line, col), (end_line, end_col) = pos(start), pos(end)
        return cls(file, line, col, end_line, end_col, start, end)

    def to(self, other: "Span") -> "Span":
        """The span from the start of ``self`` to the end of ``other`` (same file)."""
        return Span(self.file, self.line, self.column, other.end_line, other.end_column,
                    self.start, other.end)


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace the text of ``span`` (its offsets) with ``text``; an empty span inserts."""

    span: Span
    text: str

    def to_json(self) -> dict:
        s = self.span
        return {"file": s.file, "line": s.line, "column": s.column, "end_line": s.end_line,
                "end_column": s.end_column, "text": self.text}


@dataclass(frozen=True, slots=True)
class Fix:
    """One change that resolves a diagnostic: what it does, in words, and its edits.

    ``safe``: the one change the ``help`` names, which ``parc lint --fix`` may apply (after
    checking that it introduces no new finding); a fix that is one of several alternatives,
    or that writes an example value, is offered to the user (an editor's code action) but
    never applied unasked."""

    message: str
    edits: tuple[Edit, ...]
    safe: bool = True

    def to_json(self) -> dict:
        return {"message": self.message, "safe": self.safe, "edits": [e.to_json() for e in self.edits]}


def replace_with(span: Span, text: str, message: str | None = None, safe: bool = True) -> Fix:
    """The fix that writes ``text`` over ``span``."""
    return Fix(message or f"write `{text}`", (Edit(span, text),), safe)


def apply_edits(text: str, edits) -> str:
    """``text`` with ``edits`` (of one file, by offset) applied; ValueError if two overlap."""
    out, at = [], 0
    for e in sorted(edits, key=lambda e: (e.span.start, e.span.end)):
        a, b = e.span.start, e.span.end
        if a < at or b < a or b > len(text):
            raise ValueError("edits overlap or fall outside the text")
        out += [text[at:a], e.text]
        at = b
    out.append(text[at:])
    return "".join(out)


def diff_edits(file: str, old: str, new: str) -> tuple[Edit, ...]:
    """The edits that turn ``old`` into ``new``, one per run of changed lines (a formatter's
    result as a fix, or as an editor's text edits)."""
    from difflib import SequenceMatcher

    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    starts = [0]
    for line in a:
        starts.append(starts[-1] + len(line))
    edits = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            edits.append(Edit(Span.of(file, old, starts[i1], starts[i2]), "".join(b[j1:j2])))
    return tuple(edits)


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
    fixes: list[Fix] = field(default_factory=list)  # the help's changes as edits (safe ones first)

    @property
    def safe_fix(self) -> Fix | None:
        """The fix ``parc lint --fix`` may apply: the only one, and safe."""
        return self.fixes[0] if len(self.fixes) == 1 and self.fixes[0].safe else None

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
        if self.fixes:
            d["fixes"] = [f.to_json() for f in self.fixes]
        return d


class ParcError(Exception):
    """Raised inside the compiler to abort one value; carries the diagnostic to report."""

    def __init__(self, diagnostic: Diagnostic, more: list[Diagnostic] | None = None):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic
        self.more = list(more or [])  # further independent errors (other blocks' syntax errors)


def family(code: str) -> str:
    """A code's family: its first two characters (P4 for P403), except P720-P729, the
    orchestrator targets' own rules, whose family is P72, and P730-P739, TensorRT-LLM's own, whose
    family is P73 (the P6 codes ran out; P7 is otherwise the known defects of a release)."""
    return code[:3] if code.startswith(("P72", "P73")) else code[:2]


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
