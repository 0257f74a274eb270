"""The terminal: when to colour, the colours, and aligned text tables.

Every renderer that prints to a terminal takes its escape codes and its tables from here."""
from __future__ import annotations

import os
import sys

RED = "1;31"
YELLOW = "1;33"
GREEN = "1;32"
CYAN = "1;36"
BLUE = "1;34"
BOLD = "1"
UNDERLINE = "1;4"
RESET = "\x1b[0m"


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


def sgr(code: str) -> str:
    """The escape sequence that starts style ``code`` (``"1;31"``: bold red)."""
    return f"\x1b[{code}m"


def paint(text: str, code: str, color: bool = True) -> str:
    """``text`` in style ``code`` when ``color``; empty text stays empty."""
    return f"{sgr(code)}{text}{RESET}" if color and text else text


def table(headers, rows, align: str | None = None) -> str:
    """Columns padded to their widest cell; ``align`` is one of l/r per column."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    n = len(headers)
    align = align or "l" * n
    widths = [max(len(r[i]) for r in cells) for i in range(n)]

    def fmt(r):
        out = []
        for i, c in enumerate(r):
            out.append(c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def rows(cells, align: str) -> str:
    """Aligned rows without a header."""
    return "\n".join(table([""] * len(align), cells, align).splitlines()[2:])


def indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + ln for ln in text.splitlines())
