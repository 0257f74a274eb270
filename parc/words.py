"""Counted nouns in user-facing text: "1 GPU", "2 GPUs", "1 microbatch", "3 microbatches".
Every message that prints a count with its noun goes through :func:`count`."""
from __future__ import annotations

_IRREGULAR = {"axis": "axes", "is": "are", "was": "were", "this": "these"}


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``noun`` when ``n`` is exactly one, its plural otherwise (``many`` if given)."""
    if n == 1:
        return noun
    if many is not None:
        return many
    if noun in _IRREGULAR:
        return _IRREGULAR[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def count(n: float, noun: str, many: str | None = None, *, sep: bool = False) -> str:
    """``"1 GPU"``, ``"8 GPUs"``; ``sep`` writes thousands separators (``"1,024 GPUs"``)."""
    shown = f"{n:,}" if sep else f"{n}"
    return f"{shown} {plural(n, noun, many)}"
