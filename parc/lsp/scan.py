"""Where the cursor is in a spec that may not parse (an editor's buffer mid-edit).

The language server answers completion and hover while the user types, so the text in front of
the cursor is read here with a small scanner rather than the parser: the blocks that enclose
the cursor (kind and label, outermost first), the key of the statement it is in and whether it
stands at the key or in the value, and the word under it. Strings and comments are skipped as
the lexer skips them (a string ends at its line). A block whose head starts a line (no
indentation, as ``parc fmt`` writes top-level blocks) closes the blocks left open above it: the
user is typing the one above.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_WORD = re.compile(r"[A-Za-z0-9_.\-]*")
_HEAD = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)(?:\s+("(?:[^"\\\n]|\\.)*"|[A-Za-z_][A-Za-z0-9_\-]*))?\s*$')
_KEY = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*|"[^"\n]*")\s*=\s*')


@dataclass
class Context:
    """The cursor's place: ``blocks`` (kind, label) outermost first; ``key`` of the statement
    it is in (None at a statement's start); ``in_value`` once past the ``=``; ``word`` the
    text of the word under the cursor and where it starts and ends."""

    blocks: list[tuple[str, str | None]] = field(default_factory=list)
    key: str | None = None
    in_value: bool = False
    word: str = ""
    start: int = 0
    end: int = 0
    in_use: bool = False     # inside the string of a `use` line
    head: str | None = None  # the block keyword being written before its `{` (`target vl|`)

    @property
    def block(self) -> str | None:
        return self.blocks[-1][0] if self.blocks else None

    @property
    def label(self) -> str | None:
        return self.blocks[-1][1] if self.blocks else None


def _statement_start(text: str, offset: int) -> int:
    """Where the statement the cursor is in begins: after the last new line, `;`, `{` or `}`
    before it (outside strings and comments)."""
    line_start = text.rfind("\n", 0, offset) + 1
    seg = text[line_start:offset]
    cut, in_str = 0, False
    for i, ch in enumerate(seg):
        if in_str:
            in_str = ch != '"' or seg[i - 1] == "\\"
        elif ch == '"':
            in_str = True
        elif ch == "#":
            break
        elif ch in ";{}":
            cut = i + 1
    return line_start + cut


def _blocks(text: str, offset: int) -> list[tuple[str, str | None]]:
    """The blocks open at ``offset``: each ``{`` not yet closed, with its head's kind and label."""
    stack: list[tuple[str, str | None]] = []
    i, n = 0, min(offset, len(text))
    stmt = 0
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < len(text) and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "#":
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        if ch == "{":
            m = _HEAD.search(text[stmt:i])
            label = m.group(2) if m else None
            if label and label.startswith('"'):
                label = label[1:-1]
            if m and stack and (stmt == 0 or text[stmt - 1] == "\n") and text[stmt:stmt + 1].isalpha():
                stack.clear()  # a block at the start of a line: the one above was left open mid-edit
            stack.append((m.group(1), label) if m else ("?", None))
            stmt = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            stmt = i + 1
        elif ch in ";\n":
            stmt = i + 1
        i += 1
    return stack


def context(text: str, offset: int) -> Context:
    """The cursor's :class:`Context` at ``offset`` of ``text``."""
    offset = max(0, min(offset, len(text)))
    a = offset
    while a > 0 and (text[a - 1].isalnum() or text[a - 1] in "_.-"):
        a -= 1
    m = _WORD.match(text, offset)
    ctx = Context(_blocks(text, a), word=text[a:m.end()] if m else text[a:offset], start=a,
                  end=m.end() if m else offset)
    stmt = text[_statement_start(text, a):a]
    if re.match(r'^\s*use\s+"', stmt):
        ctx.in_use = True
        return ctx
    km = _KEY.match(stmt)
    if km:
        ctx.key, ctx.in_value = km.group(1).strip('"'), True
        return ctx
    head = stmt.strip()
    if head and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", head):
        ctx.head = head  # `target |`: the word after a block keyword is its label
    return ctx
