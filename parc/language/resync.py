"""Recovery inside blocks: a syntax error costs its own statement, not the block around it.

:class:`parc.language.recover.Recovery` restarts the parser at the next top-level statement, so
an error inside a block used to drop the whole block. Here each statement that failed is found
in the text (from the statement boundary before the error to the one after it: a new line or
`;` at the same brace depth outside parentheses, or the `}` that closes the block), blanked
(every character but the new lines becomes a space, so every offset, line and column of the
rest stays exact) and the text parsed again, until a parse finds no new error. The errors of
every round are reported together.

The statements that failed are then put back into the document as what they are to the
resolver: an assignment to the key they began with (``tp = 8 8``: ``tp``), whose value is
:class:`parc.language.syntax.Broken`. A broken value poisons its key as a bad value does: the
resolver reports nothing more of it, a check that reads it waits, and every other block is
checked. A statement whose key cannot be told (``= 8``, a broken block header, a broken `use`)
or that lies in a `target` block leaves its whole top-level block out, as before, named in
``broken``; a broken top-level statement that is no block (an assignment outside every block)
is left out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.language import syntax as S
from parc.language.diagnostics import Span

MAX_ROUNDS = 100   # parses of one file's recovery (each blanks at least one statement)

_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9_.]*[A-Za-z0-9_/]*|\n|\S')


def _tokens(text: str, start: int = 0, end: int | None = None):
    """(kind, start, end) of the tokens of ``text[start:end]`` that boundaries depend on: strings
    and comments as one token each (their braces do not count), names, numbers, punctuation."""
    for m in _TOKEN.finditer(text, start, len(text) if end is None else end):
        s = m.group()
        if s.startswith("#"):
            continue
        kind = "str" if s.startswith('"') else "name" if s[0].isalpha() or s[0] == "_" else s[0] \
            if not s[0].isdigit() else "num"
        yield kind, m.start(), m.end()


@dataclass
class _Scan:
    """The boundary events of a text: each `{`, `}`, new line, `;`, and bracket, with the brace
    and bracket depth before it."""

    events: list[tuple[str, int, int, int]] = field(default_factory=list)   # kind, offset, braces, brackets
    balanced: bool = True

    @classmethod
    def of(cls, text: str) -> "_Scan":
        out, braces, brackets = cls(), 0, 0
        for kind, a, _ in _tokens(text):
            if kind not in ("{", "}", "\n", ";", "(", "[", ")", "]"):
                continue
            out.events.append((kind, a, braces, brackets))
            if kind == "{":
                braces, brackets = braces + 1, 0
            elif kind == "}":
                braces, brackets = braces - 1, 0
                out.balanced = out.balanced and braces >= 0
            elif kind in "([":
                brackets += 1
            elif kind in ")]":
                brackets = max(brackets - 1, 0)
        out.balanced = out.balanced and braces == 0
        return out

    def statement(self, off: int, length: int) -> tuple[int, int, bool] | None:
        """(start, end, clean) of the statement holding offset ``off``: ``clean`` when it ends
        at a boundary outside brackets. None when ``off`` lies at no depth a statement has."""
        before = [e for e in self.events if e[1] < off]
        depth = sum(1 if e[0] == "{" else -1 if e[0] == "}" else 0 for e in before)
        start = 0
        for kind, at, braces, brackets in reversed(before):
            if (kind in "\n;" and braces == depth and brackets == 0) or (kind == "{" and braces == depth - 1):
                start = at + 1
                break
        for kind, at, braces, brackets in self.events:
            if at < off:
                continue
            if kind in "\n;" and braces == depth:
                return start, at, brackets == 0
            if kind == "}" and braces == depth and depth > 0:
                return start, at, brackets == 0
        return start, length, True


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + re.sub(r"[^\n]", " ", text[a:b]) + text[b:]


@dataclass
class Resynced:
    """What the rounds found: every error, the document of the blanked text with the broken
    statements put back as :class:`~parc.language.syntax.Broken` values, the top-level blocks
    left out (``broken``), and the top-level kind of each broken value's block (``poisoned``,
    one per error that became one)."""

    diagnostics: list
    document: S.Document
    broken: list
    poisoned: list = field(default_factory=list)   # (kind, label, diagnostic)


def resync(text: str, file: str, first: list, parse) -> Resynced | None:
    """Recover from the errors ``first`` (a round's P001 diagnostics on ``text``) statement by
    statement; ``parse(text)`` returns (tree or None, diagnostics, trusted) of one round. None
    when the file's braces do not balance or a statement cannot be bounded (the caller keeps
    its first round)."""
    if not _Scan.of(text).balanced:
        return None
    found, cur, ranges = list(first), text, []
    todo = list(first)
    for _ in range(MAX_ROUNDS):
        scan = _Scan.of(cur)
        for d in todo:
            st = scan.statement(d.span.start, len(cur))
            if st is None or not cur[st[0]:st[1]].strip():
                return None
            ranges.append((st, d))
            cur = _blank(cur, st[0], st[1])
        tree, todo, trusted = parse(cur)
        if not trusted or any(d.code != "P001" for d in todo):
            return None
        found += todo
        if not todo:
            return _rebuild(text, file, tree, found, ranges)
    return None


def _rebuild(text: str, file: str, tree, found: list, ranges: list) -> Resynced | None:
    from parc.language.tree import to_syntax

    doc = to_syntax(tree, file)
    out = Resynced(sorted(found, key=lambda d: d.span.start), doc, [])
    dropped: set[int] = set()
    for (a, b, clean), d in sorted(ranges, key=lambda r: r[0][0]):
        path = _blocks_at(doc.items, a)
        keys = _keys(text, a, b) if clean else []
        if path and keys and not any(blk.kind == "target" for blk in path):
            _put_back(file, text, path[-1], keys, b)
            out.poisoned.append((path[0].kind, path[0].label, d))
        elif path:
            top = doc.items.index(path[0])
            if top not in dropped:
                dropped.add(top)
                out.broken.append((path[0].kind, path[0].label))
        else:
            kind = _top_kind(text, a, b)
            if kind is not False:
                out.broken.append(kind)
    doc.items = [st for i, st in enumerate(doc.items) if i not in dropped]
    return out


def _blocks_at(items, off: int) -> list:
    """The blocks around offset ``off``, outermost first."""
    for st in items:
        if isinstance(st, S.Block) and st.span.start < off < st.span.end:
            return [st] + _blocks_at(st.items, off)
    return []


def _keys(text: str, a: int, b: int) -> list[tuple[int, int, int]]:
    """(key start, key end, value start) of each ``key =`` in the statement ``text[a:b]``, outside
    brackets, when it starts with one; else none."""
    toks = [t for t in _tokens(text, a, b) if t[0] != "\n"]
    if len(toks) < 2 or toks[0][0] not in ("name", "str") or toks[1][0] != "=":
        return []
    out, depth = [], 0
    for i, (kind, s, e) in enumerate(toks):
        if kind in ("(", "["):
            depth += 1
        elif kind in (")", "]"):
            depth = max(depth - 1, 0)
        elif kind in ("name", "str") and depth == 0 and i + 1 < len(toks) and toks[i + 1][0] == "=" \
                and (i == 0 or toks[i - 1][0] != "="):
            out.append((s, e, toks[i + 1][2]))
    return out


def _put_back(file: str, text: str, block: S.Block, keys, end: int) -> None:
    """Each key of a broken statement as an assignment of a :class:`Broken` value, in place."""
    for i, (ks, ke, vs) in enumerate(keys):
        ve = keys[i + 1][0] if i + 1 < len(keys) else end
        ve = max(vs, len(text[:ve].rstrip(" \t;")))
        key = text[ks:ke]
        quoted = key.startswith('"')
        a = S.Assign(key.strip('"'), Span.of(file, text, ks, ke), S.Broken(Span.of(file, text, vs, ve)),
                     Span.of(file, text, ks, ve), quoted=quoted)
        block.items.append(a)
    block.items.sort(key=lambda st: st.span.start)


def _top_kind(text: str, a: int, b: int):
    """What a broken top-level statement was: (kind, label) of a block, None for a `use` (its
    import is unknown), False for anything else (left out)."""
    toks = [(k, text[s:e]) for k, s, e in _tokens(text, a, b) if k != "\n"]
    if not toks:
        return False
    if toks[0] == ("name", "use"):
        return None
    if any(k == "{" for k, _ in toks) and toks[0][0] == "name":
        label = toks[1][1].strip('"') if len(toks) > 1 and toks[1][0] in ("name", "str") else None
        return toks[0][1], label
    return False
