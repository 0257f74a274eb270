"""The canonical layout of a `.par` file.

Two-space indent, one statement per line, ``=`` aligned within each run of consecutive
assignments, one blank line between top-level blocks (at most one anywhere), spaces around
binary operators and after commas, parentheses only where precedence needs them. Comments
stay where they were: trailing comments after their statement (aligned within a run),
comment lines before the statement that follows them. A statement with a comment inside
it (a list over several lines, say) keeps its original text. Formatting never changes
meaning: the formatted text resolves to the same plan, and formatting twice changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import syntax as S
from .parse import comments as find_comments
from .parse import parse_text

INDENT = "  "
WIDTH = 100
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}


def value_text(v) -> str:
    """A value in canonical form."""
    if isinstance(v, S.Number):
        return v.text
    if isinstance(v, S.Quantity):
        return v.text
    if isinstance(v, S.String):
        return v.text
    if isinstance(v, S.Bool):
        return "true" if v.value else "false"
    if isinstance(v, S.Auto):
        return "auto"
    if isinstance(v, S.Ref):
        return v.name
    if isinstance(v, S.Call):
        return f"{v.name}(" + ", ".join(value_text(a) for a in v.args) + ")"
    if isinstance(v, S.List):
        return "[" + ", ".join(value_text(a) for a in v.items) + "]"
    if isinstance(v, S.Neg):
        inner = value_text(v.operand)
        if isinstance(v.operand, S.BinOp):
            inner = f"({inner})"
        return "-" + inner
    if isinstance(v, S.BinOp):
        p = _PREC[v.op]
        left = value_text(v.left)
        right = value_text(v.right)
        if isinstance(v.left, S.BinOp) and _PREC[v.left.op] < p:
            left = f"({left})"
        if isinstance(v.right, S.BinOp) and (_PREC[v.right.op] < p or
                                              (_PREC[v.right.op] == p)):
            right = f"({right})"
        return f"{left} {v.op} {right}"
    raise TypeError(type(v).__name__)


def _key_text(a: S.Assign) -> str:
    if a.quoted:
        return '"' + a.key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return a.key


def _label_text(b: S.Block) -> str:
    if b.label is None:
        return ""
    if b.label_quoted:
        return ' "' + b.label.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return " " + b.label


@dataclass
class _Line:
    """One output line: ``key`` and ``rest`` for aligned assignments, else ``text``."""

    indent: int
    text: str = ""
    key: str | None = None
    rest: str = ""
    comment: str | None = None
    blank: bool = False


class _Formatter:
    def __init__(self, text: str, doc: S.Document):
        self.text = text
        self.lines_src = text.splitlines()
        self.doc = doc
        cs = find_comments(text)
        self.comments = {line: (col, body) for line, col, body in cs}
        self.used: set[int] = set()
        self.out: list[_Line] = []

    # -- comment helpers
    def leading(self, start: int, stop: int, indent: int, blank_before: list) -> None:
        """Comment lines in [start, stop) become lines before the next statement."""
        prev_line = None
        for ln in range(start, stop):
            c = self.comments.get(ln)
            if c is None or ln in self.used:
                continue
            col, body = c
            if self.lines_src[ln - 1][:col - 1].strip():
                continue  # a trailing comment of something else
            if prev_line is not None and ln - prev_line > 1 and self._blank_between(prev_line, ln):
                self.out.append(_Line(indent, blank=True))
            self.used.add(ln)
            self.out.append(_Line(indent, body))
            prev_line = ln
        if prev_line is not None:
            blank_before.append(prev_line)
            if stop <= len(self.lines_src) and self._blank_between(prev_line, stop):
                self.out.append(_Line(indent, blank=True))

    def _blank_between(self, a: int, b: int) -> bool:
        return any(not self.lines_src[i - 1].strip() for i in range(a + 1, b))

    def trailing(self, line: int) -> str | None:
        c = self.comments.get(line)
        if c is None or line in self.used:
            return None
        col, body = c
        if not self.lines_src[line - 1][:col - 1].strip():
            return None
        self.used.add(line)
        return body

    def has_inner_comment(self, st) -> bool:
        return any(st.span.line <= ln < st.span.end_line for ln in self.comments
                   if self.lines_src[ln - 1][:self.comments[ln][0] - 1].strip()
                   or st.span.line < ln < st.span.end_line)

    # -- statements
    def stmts(self, items, indent: int, first_line: int, end_line: int, top: bool) -> None:
        prev_end = first_line
        prev = None
        for st in items:
            lead: list[int] = []
            start = st.span.line
            mark = len(self.out)
            blank_src = self._blank_between(prev_end, start) if prev is not None else False
            self.leading(prev_end + 1 if prev is not None else first_line + (0 if top else 1), start, indent, lead)
            if prev is not None:
                want_blank = blank_src or (top and (isinstance(st, S.Block) or isinstance(prev, S.Block)))
                if want_blank:
                    self.out.insert(mark, _Line(indent, blank=True))
            self.stmt(st, indent)
            prev_end = max(st.span.end_line, prev_end)
            prev = st
        # comment lines after the last statement, before the closing brace / end of file
        rest: list[int] = []
        start = prev_end + 1 if prev is not None else first_line + (0 if top else 1)
        if any(ln in self.comments and ln not in self.used for ln in range(start, end_line + 1)):
            if prev is not None and self._blank_between(prev_end, min(
                    ln for ln in range(start, end_line + 1) if ln in self.comments and ln not in self.used)):
                self.out.append(_Line(indent, blank=True))
            self.leading(start, end_line + 1, indent, rest)

    def stmt(self, st, indent: int) -> None:
        if isinstance(st, S.Assign):
            if st.span.line != st.span.end_line and self.has_inner_comment(st):
                self.verbatim(st, indent)
                return
            rest = value_text(st.value)
            self.out.append(_Line(indent, key=_key_text(st), rest=rest,
                                  comment=self.trailing(st.span.end_line)))
        elif isinstance(st, S.OnRule):
            self.out.append(_Line(indent, f"{st.axis} on {st.link}", comment=self.trailing(st.span.end_line)))
        elif isinstance(st, S.Use):
            self.out.append(_Line(indent, f"use {_quote(st.path)}", comment=self.trailing(st.span.end_line)))
        elif isinstance(st, S.Block):
            self.block(st, indent)

    def verbatim(self, st, indent: int) -> None:
        src = self.text[st.span.start:st.span.end]
        lines = src.split("\n")
        first = lines[0]
        self.out.append(_Line(indent, first))
        for ln in lines[1:]:
            self.out.append(_Line(0, ln.rstrip()))
        for ln in range(st.span.line, st.span.end_line + 1):
            self.used.add(ln)

    def block(self, b: S.Block, indent: int) -> None:
        head = f"{b.kind}{_label_text(b)} {{"
        one_line = (b.span.line == b.span.end_line and len(b.items) <= 1
                    and not any(isinstance(i, S.Block) for i in b.items))
        if one_line:
            inner = ""
            if b.items:
                it = b.items[0]
                if isinstance(it, S.Assign):
                    inner = f"{_key_text(it)} = {value_text(it.value)}"
                elif isinstance(it, S.OnRule):
                    inner = f"{it.axis} on {it.link}"
                else:
                    one_line = False
            if one_line:
                text = f"{head} {inner} }}" if inner else f"{head} }}"
                if len(INDENT * indent + text) <= WIDTH:
                    self.out.append(_Line(indent, text, comment=self.trailing(b.span.end_line)))
                    return
        # the header line may carry a comment (`mesh {   # outermost first`)
        head_comment = None
        if b.items and b.items[0].span.line != b.span.line:
            head_comment = self.trailing(b.span.line)
        elif not b.items and b.span.line != b.span.end_line:
            head_comment = self.trailing(b.span.line)
        self.out.append(_Line(indent, head, comment=head_comment))
        self.stmts(b.items, indent + 1, b.span.line, b.span.end_line - 1, top=False)
        close_comment = self.trailing(b.span.end_line) if b.span.end_line != b.span.line else None
        if b.items and b.items[-1].span.end_line == b.span.end_line:
            close_comment = None
        self.out.append(_Line(indent, "}", comment=close_comment))

    # -- layout
    def render(self) -> str:
        doc = self.doc
        last = len(self.lines_src)
        self.stmts(doc.items, 0, 0, last, top=True)
        lines = self.out
        # align `=` and trailing comments within runs of assignments at one indent
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
        out = []
        run_start = 0
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


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def format_text(text: str, file: str = "<input>") -> str:
    """The canonical layout of ``text``; raises ParcError on a syntax error."""
    doc = parse_text(text, file)
    return _Formatter(text, doc).render()
