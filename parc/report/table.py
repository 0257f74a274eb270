"""Plain aligned text tables for the terminal."""
from __future__ import annotations


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
