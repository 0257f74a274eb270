"""Text from a spec, shown safely: every control character written as an escape.

A spec is data someone else may have written (a pull request, a shared cluster file). Its names,
strings and lines reach the terminal in diagnostics, explain and diff; an ESC, BEL or NUL among
them would be obeyed by the terminal (retitle it, clear it, hide a line), and the bidirectional
controls reorder what a reviewer reads (CVE-2021-42574, "Trojan Source"). Every renderer that
echoes source passes it through :func:`printable`, which writes those characters as ``\\x1b``,
``\\x07``, ``\\x00``, ``\\u202e``. Tabs and line breaks are left to the renderer, which lays them
out itself; nothing else changes, so ordinary text costs one scan.
"""
from __future__ import annotations

import re

# C0 controls but tab and line feed, DEL, the C1 controls, and the bidirectional formatting
# characters (Unicode UAX #9: embeddings, overrides, isolates and the implicit marks).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b``)."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text
