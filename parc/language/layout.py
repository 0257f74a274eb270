"""The canonical layout's last step: a spec's lines, already cut into statements, written out
with ``=`` aligned within each run of assignments at one indent, trailing comments aligned
within each run of non-blank lines at one indent, and at most one blank line in a row.

:mod:`parc.language.fmt` feeds it the lines of a parsed text; a writer that builds its spec
statement by statement (``parc import``'s draft) feeds it the same lines without the parser
(:mod:`lark` and the parse table take longer to load than the rest of such a command)."""
from __future__ import annotations

from dataclasses import dataclass

INDENT = "  "
WIDTH = 100


@dataclass
class Line:
    """One output line: ``key`` and ``rest`` for aligned assignments, else ``text``."""

    indent: int
    text: str = ""
    key: str | None = None
    rest: str = ""
    comment: str | None = None
    blank: bool = False


def _aligned(lines: list[Line]) -> list[str]:
    """Each assignment's ``key = rest``, its key padded to the widest of its run: the
    assignments at one indent with no blank line or other statement between them (comment lines
    do not end a run)."""
    i = 0
    texts: list[str] = [""] * len(lines)
    while i < len(lines):
        ln = lines[i]
        if ln.key is None:
            i += 1
            continue
        j = i
        run = []
        while j < len(lines) and not lines[j].blank and lines[j].indent == ln.indent and (
                lines[j].key is not None or (lines[j].text and lines[j].text.startswith("#"))):
            if lines[j].key is not None:
                run.append(j)
            j += 1
        width = max(len(lines[k].key) for k in run)
        for k in run:
            texts[k] = f"{lines[k].key.ljust(width)} = {lines[k].rest}"
        i = j
    return texts


def layout(lines: list[Line]) -> str:
    """The text of ``lines``."""
    texts = _aligned(lines)
    out = []
    # trailing comments: aligned within the same run of non-blank lines at one indent
    rendered = []
    for k, ln in enumerate(lines):
        if ln.blank:
            rendered.append(None)
            continue
        body = texts[k] if ln.key is not None else ln.text
        rendered.append(INDENT * ln.indent + body if body else "")
    k = 0
    while k < len(lines):
        if rendered[k] is None:
            out.append("")
            k += 1
            continue
        j = k
        while j < len(lines) and rendered[j] is not None and lines[j].indent == lines[k].indent:
            j += 1
        j = max(j, k + 1)
        col = max((len(rendered[m]) for m in range(k, j) if lines[m].comment), default=0) + 2
        for m in range(k, j):
            if lines[m].comment:
                out.append(rendered[m].ljust(col) + lines[m].comment if rendered[m] else lines[m].comment)
            else:
                out.append(rendered[m])
        k = j
    # no leading/trailing blank lines, at most one blank line in a row
    cleaned = []
    for s in out:
        s = s.rstrip()
        if not s and (not cleaned or not cleaned[-1]):
            continue
        cleaned.append(s)
    while cleaned and not cleaned[-1]:
        cleaned.pop()
    return "\n".join(cleaned) + "\n" if cleaned else ""
