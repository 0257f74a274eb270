"""Diagnostics as terminal text: ``file:line:col: CODE severity: message``, the source line
with a caret underline, ``note:`` lines for related spans, ``help:``; and the summary lines
of ``parc check`` and ``parc lint``."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from parc.language.diagnostics import ERROR, NOTE, WARNING, Diagnostic, Span, summarize
from parc.printable import printable
from parc.resolve.reader import source_text
from parc.report.term import BLUE, BOLD, CYAN, GREEN, RED, RESET, UNDERLINE, YELLOW, paint, sgr
from parc.words import count

_COLORS = {ERROR: sgr(RED), WARNING: sgr(YELLOW), NOTE: sgr(CYAN)}


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
    col = span.column
    end = span.end_column if span.end_line == span.line else len(src) + 1
    if len(src) > 200:  # keep pathological lines readable
        lo = max(0, span.column - 80)
        src = src[lo:lo + 160]
        col, end = col - lo, end - lo
    # control characters are shown escaped, and the carets follow the columns they take
    end = min(end, len(src) + 1)
    col, end = len(printable(src[:col - 1])) + 1, len(printable(src[:max(end, col) - 1])) + 1
    src = printable(src)
    width = len(str(span.line))
    n = max(1, end - col)
    bar = paint(" " * width + " |", BLUE, color)
    num = paint(f"{span.line} |", BLUE, color)
    carets = " " * (col - 1) + "^" * n + (f" {label}" if label else "")
    if color:
        carets = f"{caret_color}{carets}{RESET}"
    return [bar, f"{num} {src}".rstrip(), f"{bar} {carets}".rstrip()]


def render_text(diags: Sequence[Diagnostic], sources: dict[str, str] | None = None,
                color: bool = False) -> str:
    """``file:line:col: CODE message``, the source line with a caret underline, ``help:``."""
    sources = {} if sources is None else sources
    out: list[str] = []
    for d in diags:
        s = d.span
        head_color = _COLORS.get(d.severity, "")
        sev = f"{head_color}{d.severity}{RESET}" if color else d.severity
        where = paint(f"{printable(s.file)}:{s.line}:{s.column}:", BOLD, color)
        tag = f" [{d.target}]" if d.target else ""
        out.append(f"{where} {d.code} {sev}{tag}: {printable(d.message)}")
        out.extend(_snippet(sources, s, color, head_color))
        for r in d.related:
            rs = r.span
            out.append(f"  note: {printable(rs.file)}:{rs.line}:{rs.column}: {printable(r.message)}")
            out.extend("  " + x for x in _snippet(sources, rs, color, _COLORS[NOTE]))
        if d.help:
            out.append(f"  = {paint('help:', CYAN, color)} {printable(d.help)}")
        out.append("")
    return "\n".join(out)


def render_summary(summary: dict, notes: int = 0) -> str:
    """The last line of `parc check`: "no problems" only when nothing was reported, else the
    counts (``notes``: the notes that were printed)."""
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


def _notes(diags) -> int:
    return sum(d.severity not in (ERROR, WARNING) for d in diags)


def check_summary(diags, files: int, shown) -> str:
    """`parc check`'s last line over ``diags`` (``shown``: those printed, whose notes count)."""
    return render_summary(summarize(diags, files), notes=_notes(shown))


def lint_summary(res, shown=None) -> str:
    """`parc lint`'s last line: the counts, with the suppressed findings (``shown``: the
    findings printed, whose notes are counted too)."""
    line = render_summary(summarize(res.diagnostics, res.named),
                          notes=_notes(res.diagnostics if shown is None else shown))
    if line.startswith("ok:"):
        line = line.replace("checked", "linted")
    if res.suppressed:
        line += f" ({res.suppressed} suppressed)"
    return line


def render_lint(res, diags, quiet: bool, color: bool) -> str:
    """`parc lint`'s text: the findings grouped under a heading per file, then the summary
    (left out with ``quiet`` when nothing is shown)."""
    groups: dict[str, list] = {}
    for d in diags:
        groups.setdefault(d.span.file, []).append(d)
    out = []
    for f, ds in groups.items():
        e = sum(d.severity == ERROR for d in ds)
        w = sum(d.severity == WARNING for d in ds)
        counts = ", ".join(x for x in (count(e, "error") if e else "", count(w, "warning") if w else "") if x)
        head = f"{f}" + (f"  ({counts})" if counts else "")
        out.append((paint(head, UNDERLINE) if color else f"── {head}") + "\n")
        out.append(render_text(ds, res.sources, color=color).rstrip("\n") + "\n\n")
    if not quiet or diags:
        tint = RED if res.errors else YELLOW if res.warnings else GREEN
        out.append(paint(lint_summary(res, diags), tint, color) + "\n")
    return "".join(out)


def ensure_newline(text: str) -> str:
    """``text`` ending in a newline (diagnostics text as a stream expects it)."""
    return text if text.endswith("\n") else text + "\n"


def write(diags: Sequence[Diagnostic], sources: dict[str, str] | None, stream=None,
          color: bool | None = None) -> None:
    """Print ``diags`` on ``stream`` (default stderr), coloured when it is a terminal."""
    import sys

    from parc.report.term import use_color

    stream = stream or sys.stderr
    text = render_text(diags, sources, color=use_color(stream) if color is None else color)
    stream.write(ensure_newline(text))
