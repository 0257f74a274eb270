"""The spec an import builds, block by block, and its text in ``parc fmt``'s layout.

Each value carries the comment that says where it came from (``serve.sh:3 --tp 16``), so that a
diagnostic ``parc check`` reports at a line of the imported spec shows the original's words
beside it. Values are Python values: ``int``, ``float``, ``bool``, :class:`Name` (an identifier:
a preset, an enum value), ``str`` (written as a string), a list of them, :class:`Raw` (spec text
as it is: ``nvlink(450GB/s)``) or :class:`Placeholder` (``unknown("$NNODES")``, P040)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_COMMENT = 120
MAX_STRING = 4096           # the grammar's longest token (parc/language/tree.py MAX_TOKEN)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u0085]")
BLOCK_ORDER = ("model", "cluster", "mesh", "placement", "schedule", "train", "serve")


@dataclass(frozen=True)
class Name:
    text: str


@dataclass(frozen=True)
class Raw:
    text: str


@dataclass(frozen=True)
class Placeholder:
    shown: str


class Unwritable(ValueError):
    """A value the spec's grammar cannot hold as it is (a control character, a string too long)."""


@dataclass
class Entry:
    value: object
    note: str = ""


@dataclass
class Item:
    """One item of a list that is written a line each (``extra_args``), with its comment."""
    words: list
    note: str = ""


@dataclass
class Draft:
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
        from parc.language import fmt

        out = [f"# {comment(h, 400)}".rstrip() for h in self.header]
        for name in BLOCK_ORDER:
            if name in self.raw_blocks:
                out += [""] + self.raw_blocks[name]
            elif name in self.blocks or (name == "serve" and self.pools):
                out += [""] + self._block(name, self.blocks.get(name, {}))
        for t, entries in self.targets.items():
            out += [""] + self._block(f"target {t}", entries, target=t)
        text = "\n".join(out).lstrip("\n") + "\n"
        return fmt.format_text(text)

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
