"""The spec an import builds, block by block, and its text in ``parc fmt``'s layout.

Each value carries the comment that says where it came from (``serve.sh:3 --tp 16``), so that a
diagnostic ``parc check`` reports at a line of the imported spec shows the original's words
beside it. Values are Python values: ``int``, ``float``, ``bool``, :class:`Name` (an identifier:
a preset, an enum value), ``str`` (written as a string), a list of them, :class:`Raw` (spec text
as it is: ``nvlink(450GB/s)``) or :class:`Placeholder` (``unknown("$NNODES")``, P040)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.language.limits import MAX_INPUT, MAX_TOKEN

MAX_COMMENT = 120
MAX_STRING = MAX_TOKEN      # the grammar's longest token
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u0085]")
BLOCK_ORDER = ("model", "cluster", "mesh", "placement", "schedule", "train", "serve")


@dataclass(frozen=True)
class Name:
    """An identifier written as it is: a preset, an enum value."""
    text: str


@dataclass(frozen=True)
class Raw:
    """Spec text written as it is (``nvlink(450GB/s)``)."""
    text: str


@dataclass(frozen=True)
class Placeholder:
    """A value the files do not give: ``unknown("...")`` (P040), with what they show instead."""
    shown: str


class Unwritable(ValueError):
    """A value the spec's grammar cannot hold as it is (a control character, a string too long)."""


@dataclass
class Entry:
    """A key's value and the comment that says where it came from."""
    value: object
    note: str = ""


@dataclass
class Item:
    """One item of a list that is written a line each (``extra_args``), with its comment."""
    words: list
    note: str = ""


@dataclass
class Draft:
    """The spec as it is built: its blocks, pools, target blocks and their lists, each value with
    its comment."""
    header: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)         # block -> its label ("model" -> "llama3-8b")
    blocks: dict[str, dict[str, Entry]] = field(default_factory=dict)
    pools: dict[str, dict[str, Entry]] = field(default_factory=dict)
    targets: dict[str, dict[str, Entry]] = field(default_factory=dict)
    lists: dict[tuple[str, str], list[Item]] = field(default_factory=dict)   # (target, key) -> items
    raw_blocks: dict[str, list[str]] = field(default_factory=dict)           # block -> its text as given

    def set(self, block: str, key: str, value, note: str = "", replace: bool = True) -> None:
        entries = self.blocks.setdefault(block, {})
        if replace or key not in entries:
            entries[key] = Entry(value, note)

    def get(self, block: str, key: str, default=None):
        e = self.blocks.get(block, {}).get(key)
        return e.value if e else default

    def has(self, block: str, key: str) -> bool:
        return key in self.blocks.get(block, {})

    def drop(self, block: str, key: str) -> None:
        self.blocks.get(block, {}).pop(key, None)

    def pool(self, pool: str, key: str, value, note: str = "") -> None:
        self.pools.setdefault(pool, {})[key] = Entry(value, note)

    def target(self, name: str, key: str, value, note: str = "") -> None:
        self.targets.setdefault(name, {})[key] = Entry(value, note)

    def extra(self, target: str, key: str, words: list[str], note: str = "") -> None:
        self.lists.setdefault((target, key), []).append(Item(list(words), note))
        self.targets.setdefault(target, {})

    # --- text ---------------------------------------------------------------------------------
    def text(self) -> str:
        """The spec in fmt's layout. Where every statement is one fmt writes back as it is (the
        draft's own blocks, each value in its canonical form), its lines are laid out as fmt lays
        them out (:func:`parc.language.layout.layout`) without parsing the text again: the parser
        takes longer to load than the rest of the import. Else (a block given as text, a value fmt
        would rewrite) the text goes through fmt itself."""
        text = self.plain_text()
        if len(text) <= MAX_INPUT and self._canonical():
            from parc.language.layout import layout

            return layout(self._lines())
        from parc.language import fmt

        return fmt.format_text(text)

    def plain_text(self) -> str:
        """The draft's statements as they are written, before fmt's layout."""
        out = self._header()
        for name in BLOCK_ORDER:
            if name in self.raw_blocks:
                out += [""] + self.raw_blocks[name]
            elif name in self.blocks or (name == "serve" and self.pools):
                out += [""] + self._block(name, self.blocks.get(name, {}))
        for t, entries in self.targets.items():
            out += [""] + self._block(f"target {t}", entries, target=t)
        return "\n".join(out).lstrip("\n") + "\n"

    def _header(self) -> list[str]:
        return [f"# {comment(h, 400)}".rstrip() for h in self.header]

    def _canonical(self) -> bool:
        """Whether fmt would write each statement of the draft's text back as it is: no block
        given as text, every key and pool a plain name, every value in its canonical form."""
        if self.raw_blocks or any(_keyword(k) for k in (*self.pools, *self.targets)):
            return False
        written = [n for n in BLOCK_ORDER if n in self.blocks or (n == "serve" and self.pools)]
        if any(self.labels.get(f"target {t}") for t in self.targets) or any(
                len(string(self.labels[n])) > MAX_STRING for n in written if self.labels.get(n)):
            return False
        groups = [*(self.blocks.get(n, {}) for n in written), *self.pools.values(), *self.targets.values()]
        if any(_keyword(k) or not _canonical(e.value) for g in groups for k, e in g.items()):
            return False
        return all(not _keyword(k) and all(it.words and all(_canonical(w) for w in it.words) for it in items)
                   for (t, k), items in self.lists.items() if t in self.targets)

    def _lines(self) -> list:
        """The statements of the draft's text as fmt cuts them into lines (the text parsed,
        :class:`parc.language.fmt._Formatter`): header comments, a blank line before each block."""
        from parc.language.layout import Line

        lines = [Line(0, h) for h in self._header()]
        for name in BLOCK_ORDER:
            if name in self.blocks or (name == "serve" and self.pools):
                lines += [Line(0, blank=True), *self._block_lines(name, self.blocks.get(name, {}))]
        for t, entries in self.targets.items():
            lines += [Line(0, blank=True), *self._block_lines(f"target {t}", entries, target=t)]
        return lines

    def _block_lines(self, name: str, entries: dict[str, Entry], target: str | None = None) -> list:
        """:meth:`_block`'s lines as fmt writes them: an empty block on one line where it fits,
        a list with a comment on an item line as it is written, one without on one line."""
        from parc.language.layout import WIDTH, Line

        label = self.labels.get(name)
        head = f"{name} {string(label)} {{" if label else f"{name} {{"
        lines = [Line(0, head), *(_assign(1, k, e) for k, e in entries.items())]
        if target is not None:
            for (t, key), items in self.lists.items():
                if t != target or not items:
                    continue
                if not any(it.note for it in items):
                    lines.append(Line(1, key=key, rest="[" + ", ".join(value(w) for it in items for w in it.words) + "]"))
                    continue
                lines.append(Line(1, f"{key} = ["))
                lines += [Line(0, _line("    " + ", ".join(value(w) for w in it.words) + ",", it.note).rstrip())
                          for it in items]
                lines.append(Line(0, "  ]"))
        if name == "serve":
            for pool, pe in self.pools.items():
                lines += [Line(1, f"{pool} {{"), *(_assign(2, k, e) for k, e in pe.items()), Line(1, "}")]
        if len(lines) == 1 and len(head + " }") <= WIDTH:
            return [Line(0, head + " }")]
        return lines + [Line(0, "}")]

    def _block(self, name: str, entries: dict[str, Entry], target: str | None = None) -> list[str]:
        label = self.labels.get(name)
        lines = [f"{name} {string(label)} {{" if label else f"{name} {{"]
        for key, e in entries.items():
            lines.append(_line(f"  {key} = {value(e.value)}", e.note))
        if target is not None:
            for (t, key), items in self.lists.items():
                if t == target and items:
                    lines.append(f"  {key} = [")
                    for it in items:
                        lines.append(_line("    " + ", ".join(value(w) for w in it.words) + ",", it.note))
                    lines.append("  ]")
        if name == "serve":
            for pool, pe in self.pools.items():
                lines.append(f"  {pool} {{")
                lines += [_line(f"    {k} = {value(e.value)}", e.note) for k, e in pe.items()]
                lines.append("  }")
        lines.append("}")
        if len(lines) == 2:
            return [lines[0] + " }"]
        return lines


def _line(code: str, note: str) -> str:
    return f"{code}  # {comment(note)}" if note else code


def _assign(indent: int, key: str, e: Entry):
    from parc.language.layout import Line

    return Line(indent, key=key, rest=value(e.value), comment=f"# {comment(e.note)}".rstrip() if e.note else None)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what the grammar reads as one value written back as it is: a name (dotted), a number, a quantity
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
                    r"|[0-9][0-9_]*(?:\.[0-9]+)?(?:[A-Za-z][A-Za-z0-9_]*(?:/s)?)?")
_DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")
_KEYWORDS = ("use", "on", "true", "false", "auto")


def _keyword(key: str) -> bool:
    """Whether ``key`` is no plain name of a statement (a keyword of the grammar, or no name)."""
    return key in _KEYWORDS or not _WORD.fullmatch(key)


def _canonical(v, depth: int = 0) -> bool:
    """Whether fmt writes ``value(v)`` back as it is (``1e-05`` it reads as ``1e - 05``)."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return len(str(v)) < MAX_STRING
    if isinstance(v, float):
        return v.is_integer() or bool(_DECIMAL.fullmatch(repr(v)))
    if isinstance(v, Name):
        return (len(v.text) < MAX_STRING and bool(_TOKEN.fullmatch(v.text))
                and not {"use", "on"} & set(v.text.split(".")))
    if isinstance(v, (list, tuple)):
        return depth < 32 and all(_canonical(x, depth + 1) for x in v)
    if isinstance(v, Placeholder):
        return True
    if isinstance(v, Raw):
        return False
    return len(string(str(v))) <= MAX_STRING


def comment(text: str, limit: int = MAX_COMMENT) -> str:
    """A comment's text on one line: control characters and new lines made visible, cut to ``limit``."""
    t = _CONTROL.sub("?", text.replace("\n", " ").replace("\r", " ").replace("\t", " "))
    return t if len(t) <= limit else t[:limit - 1] + "…"


def string(s: str) -> str:
    """A .par string literal for ``s``; :class:`Unwritable` where the grammar cannot hold it."""
    if _CONTROL.search(s):
        raise Unwritable(f"{s!r} holds a control character")
    if len(s) + 2 > MAX_STRING:
        raise Unwritable(f"a value of {len(s):,} characters (a spec string holds at most {MAX_STRING - 2:,})")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if not v.is_integer() else str(int(v))
    if isinstance(v, Name):
        return v.text
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Placeholder):
        return f"unknown({string(comment(v.shown, 200))})"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return string(str(v))


def writable(s: str) -> bool:
    try:
        string(s)
        return True
    except Unwritable:
        return False
