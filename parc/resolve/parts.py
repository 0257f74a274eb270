"""What every builder of the typed plan shares: a field's value with failures poisoned, the marker of
a part that could not be built, and a block's header span."""
from __future__ import annotations

from parc.language.diagnostics import Span
from parc.resolve.evaluate import Evaluator, Poison


def _get(r: Evaluator, kind: str, key: str, default=None):
    """A field's value, or ``default`` if unset; None if it failed (already reported)."""
    try:
        return r.value(kind, key, default)
    except Poison:
        return _FAILED


_FAILED = object()


class _Incomplete(Exception):
    """Some value the plan needs failed; its error is already reported."""


def _head(r: Evaluator, kind: str, fallback: Span) -> Span:
    """A short span for a block: its header line."""
    b = r.blocks.get(kind)
    if not b:
        return fallback
    s = b.span
    return Span(s.file, s.line, s.column, s.line, s.column + len(kind), s.start, s.start + len(kind))
