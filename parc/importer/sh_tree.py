"""The syntax tree of a launch script as :mod:`parc.importer.sh_parse` reads it (bash(1), SHELL
GRAMMAR): words of literal, quoted and expanded parts, simple commands with their assignments and
redirections, pipelines, lists and the compound commands."""
from __future__ import annotations

from dataclasses import dataclass

class ShellSyntax(ValueError):
    """A script the reader cannot follow (its line is in the message)."""


# --- the tree ----------------------------------------------------------------------------------
@dataclass
class Lit:
    text: str
    quoted: bool = False


@dataclass
class Param:
    """``$name``, ``${name...}``: ``op`` is the operator after the name (``:-``, ``-``, ``:=``,
    ``:+``, ``+``, ``#`` for a length, ``[@]`` for an array's elements, ``?`` for any other form),
    ``arg`` its word; ``src`` the text as written."""
    name: str
    op: str = ""
    arg: "Word | None" = None
    quoted: bool = False
    src: str = ""
    index: str = ""


@dataclass
class CmdSub:
    """``$(...)`` or a backquoted command: never run, its text kept for the placeholder."""
    text: str
    quoted: bool = False


@dataclass
class Arith:
    text: str
    quoted: bool = False


@dataclass
class Unknown:
    """A word a shell cannot give a value: a documentation placeholder such as ``<client args>``."""
    text: str
    quoted: bool = False


@dataclass
class Word:
    parts: list
    line: int
    # a word written with quotes around all of it keeps its own boundaries (no splitting)

    def literal(self) -> str | None:
        """The word's text when it is plain text (no expansion), else None."""
        if all(isinstance(p, Lit) for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None

    def source(self) -> str:
        out = []
        for p in self.parts:
            if isinstance(p, Lit):
                out.append(p.text)
            elif isinstance(p, Param):
                out.append(p.src)
            elif isinstance(p, CmdSub):
                out.append(f"$({p.text})")
            elif isinstance(p, Arith):
                out.append(f"$(({p.text}))")
            else:
                out.append(p.text)
        return "".join(out)


@dataclass
class Assign:
    name: str
    value: Word | None
    array: list[Word] | None = None
    append: bool = False
    index: str = ""


@dataclass
class Redirect:
    op: str
    target: Word | None = None
    heredoc: Word | None = None       # the body, expanded unless its delimiter was quoted


@dataclass
class Simple:
    assigns: list[Assign]
    words: list[Word]
    redirects: list[Redirect]
    line: int


@dataclass
class Pipeline:
    commands: list
    negated: bool = False
    background: bool = False
    line: int = 0


@dataclass
class AndOr:
    items: list          # Pipelines
    ops: list            # "&&" / "||" between them
    line: int = 0


@dataclass
class If:
    clauses: list        # (condition list, body list)
    otherwise: list | None
    line: int = 0


@dataclass
class For:
    var: str
    words: list[Word] | None
    body: list
    line: int = 0


@dataclass
class While:
    cond: list
    body: list
    until: bool = False
    line: int = 0


@dataclass
class Case:
    word: Word
    arms: list           # (patterns: list[Word], body list)
    line: int = 0


@dataclass
class Group:
    body: list
    subshell: bool = False
    line: int = 0


@dataclass
class FuncDef:
    name: str
    body: object
    line: int = 0


@dataclass
class Arith2:
    """``(( ... ))`` as a command: an arithmetic test."""
    text: str
    line: int = 0
