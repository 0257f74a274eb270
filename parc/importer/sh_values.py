"""Values as the importer's shell reader knows them: text of which some parts may be unknown.

A value is a tuple of segments, each either known text (``str``) or :class:`U`, a part the file
cannot give (a variable it never sets, a ``$(...)`` it never runs, a documentation placeholder);
``U.shown`` is how the part was written, which becomes the placeholder the spec carries."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class U:
    """A part of a value the script does not give, as it is written (``$NNODES``)."""
    shown: str


Text = tuple   # of str | U


def lit(s: str) -> Text:
    return (s,) if s else ()


def unknown(shown: str) -> Text:
    return (U(shown),)


def known(t: Text) -> str | None:
    """The text when every part is known, else None."""
    if any(isinstance(p, U) for p in t):
        return None
    return "".join(t)


def shown(t: Text) -> str:
    """The text with each unknown part as it was written."""
    return "".join(p.shown if isinstance(p, U) else p for p in t)


def unknowns(t: Text) -> list[str]:
    return [p.shown for p in t if isinstance(p, U)]


def join(parts) -> Text:
    out: list = []
    for t in parts:
        for p in t:
            if isinstance(p, str) and out and isinstance(out[-1], str):
                out[-1] += p
            elif p != "":
                out.append(p)
    return tuple(out)


def split(t: Text) -> list[Text]:
    """Word splitting (IFS space, tab, new line) of unquoted text: known text is split; an
    unknown part stays glued to its neighbours."""
    fields: list[list] = [[]]
    for p in t:
        if isinstance(p, U):
            fields[-1].append(p)
            continue
        pieces = re.split(r"[ \t\n]+", p)
        for i, piece in enumerate(pieces):
            if i:
                fields.append([])
            if piece:
                fields[-1].append(piece)
    return [tuple(f) for f in fields if f]


@dataclass
class Arg:
    """One word of a command as the shell would pass it: its value, the word as written and its line."""
    text: Text
    src: str
    line: int
    file: str = ""

    @property
    def value(self) -> str | None:
        return known(self.text)

    @property
    def shown(self) -> str:
        return shown(self.text)

    def __repr__(self) -> str:
        return f"Arg({self.shown!r})"


def arg(s: str, line: int = 0, file: str = "") -> Arg:
    """A known word (for commands that come from YAML lists, not shell text)."""
    return Arg(lit(s), s, line, file)
