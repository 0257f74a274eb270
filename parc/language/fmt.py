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

from bisect import bisect_left

from parc.language import syntax as S
from parc.language.layout import INDENT, WIDTH, layout
from parc.language.layout import Line as _Line
from parc.language.parser import parse_text

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}


def value_text(v) -> str:
    """A value in canonical form."""
    if isinstance(v, S.BinOp):
        return _chain_text(v)
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
    raise TypeError(type(v).__name__)


def _chain_text(v: S.BinOp) -> str:
    """``a + b - c ...``: written along the chain's left operands without recursion, so a
    flat sum of thousands of terms formats like a short one."""
    spine = []
    while isinstance(v, S.BinOp):
        spine.append(v)
        v = v.left
    text = value_text(v)
    left = v
    for op in reversed(spine):
        p = _PREC[op.op]
        if isinstance(left, S.BinOp) and _PREC[left.op] < p:
            text = f"({text})"
        right = value_text(op.right)
        if isinstance(op.right, S.BinOp) and _PREC[op.right.op] <= p:
            right = f"({right})"
        text = f"{text} {op.op} {right}"
        left = op
    return text


def _key_text(a: S.Assign) -> str:
    return _quote(a.key) if a.quoted else a.key


def _label_text(b: S.Block) -> str:
    if b.label is None:
        return ""
    if b.label_quoted:
        return " " + _quote(b.label)
    return " " + b.label


_NO_CODE = " \t\f\r;"  # the grammar's WS characters and the statement separator


class _Formatter:
    def __init__(self, text: str, doc: S.Document):
        self.text = text
        self.lines_src = text.split("\n")  # the lexer's lines: only \n ends one
        self.doc = doc
        self.comments = {line: (col, body) for line, col, body in doc.comments}  # the lexer's
        self.comment_lines = sorted(self.comments)
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
            if self.code_before(ln, col):
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

    def code_before(self, line: int, col: int) -> bool:
        """Whether a statement, a brace or a value precedes column ``col`` of ``line``: what the
        lexer skips (spaces, tabs, form feeds, carriage returns) and `;` separators, which end no
        statement of their own (`;; # note`), leave the comment on a line of its own."""
        return bool(self.lines_src[line - 1][:col - 1].strip(_NO_CODE))

    def _blank_between(self, a: int, b: int) -> bool:
        return any(not self.lines_src[i - 1].strip() for i in range(a + 1, b))

    def trailing(self, line: int) -> str | None:
        c = self.comments.get(line)
        if c is None or line in self.used:
            return None
        col, body = c
        if not self.code_before(line, col):
            return None
        self.used.add(line)
        return body

    def has_inner_comment(self, st) -> bool:
        """A comment on a line of ``st`` before its last (``st`` spans several lines)."""
        i = bisect_left(self.comment_lines, st.span.line)
        return i < len(self.comment_lines) and self.comment_lines[i] < st.span.end_line

    # -- statements
    def has_trailing(self, line: int) -> bool:
        """A comment not yet placed ends ``line`` after some code."""
        c = self.comments.get(line)
        return c is not None and line not in self.used and self.code_before(line, c[0])

    def groups(self, items) -> list[list]:
        """Statements that share one line and end it before a comment stay together: a
        trailing comment (``# parc: ignore[...]`` above all) belongs to the whole line, so the
        line is kept whole; every other statement is a group of its own."""
        out: list[list] = []
        i, n = 0, len(items)
        while i < n:
            st = items[i]
            line = st.span.line
            j = i + 1
            if st.span.end_line == line:
                while j < n and items[j].span.line == line and items[j].span.end_line == line:
                    j += 1
            group = items[i:j]
            keep = self.has_trailing(line) and st.span.end_line == line and (
                len(group) > 1 or isinstance(st, S.Block))
            if keep:
                out.append(group)
            else:
                out.extend([x] for x in group)
            i = j
        return out

    def stmts(self, items, indent: int, first_line: int, end_line: int, top: bool) -> None:
        prev_end = first_line
        prev = None
        for group in self.groups(items):
            st = group[0]
            lead: list[int] = []
            start = st.span.line
            mark = len(self.out)
            blank_src = self._blank_between(prev_end, start) if prev is not None else False
            self.leading(prev_end + 1 if prev is not None else first_line + (0 if top else 1), start, indent, lead)
            if prev is not None:
                want_blank = blank_src or (top and (any(isinstance(x, S.Block) for x in group)
                                                    or isinstance(prev, S.Block)))
                if want_blank:
                    self.out.insert(mark, _Line(indent, blank=True))
            if len(group) > 1 or (isinstance(st, S.Block) and st.span.end_line == st.span.line
                                  and self.has_trailing(st.span.line)):
                text = "; ".join(_inline(x) for x in group)
                self.out.append(_Line(indent, text, comment=self.trailing(st.span.line)))
            else:
                self.stmt(st, indent)
            prev_end = max(group[-1].span.end_line, prev_end)
            prev = group[-1]
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
        self.stmts(self.doc.items, 0, 0, len(self.lines_src), top=True)
        return layout(self.out)


def _inline(st) -> str:
    """A one-line statement written on one line (blocks as ``kind "label" { a = 1; b = 2 }``)."""
    if isinstance(st, S.Assign):
        return f"{_key_text(st)} = {value_text(st.value)}"
    if isinstance(st, S.OnRule):
        return f"{st.axis} on {st.link}"
    if isinstance(st, S.Use):
        return f"use {_quote(st.path)}"
    head = f"{st.kind}{_label_text(st)} {{"
    if not st.items:
        return f"{head} }}"
    return f"{head} " + "; ".join(_inline(i) for i in st.items) + " }"


def _quote(s: str) -> str:
    """``s`` as a string literal that reads back as ``s``: the escapes the lexer knows
    (backslash, quote, new line, tab); every other character stands for itself."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def format_text(text: str, file: str = "<input>") -> str:
    """The canonical layout of ``text``; raises ParcError on a syntax error."""
    doc = parse_text(text, file)
    return _Formatter(text, doc).render()
