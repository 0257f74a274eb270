"""The syntax tree of a launch script as :mod:`parc.importer.sh_parse` reads it (bash(1), SHELL
GRAMMAR): words of literal, quoted and expanded parts, simple commands with their assignments and
redirections, pipelines, lists and the compound commands."""
from __future__ import annotations


class ShellSyntax(ValueError):
    """A script the reader cannot follow (its line is in the message)."""


# --- the tree ----------------------------------------------------------------------------------
class Node:
    """What every node has that a dataclass would give it: equality field by field with a node of
    its own class, and a repr of its fields. Written once here, with each class's ``__init__`` by
    hand: making the dataclasses' methods, class by class, took longer than the rest of the
    importer's start."""

    __slots__ = ()
    __hash__ = None   # mutable, compared by value: unhashable, as a dataclass is

    def _fields(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self.__slots__) + ")"


class Lit(Node):
    __slots__ = ("text", "quoted")

    def __init__(self, text: str, quoted: bool = False):
        self.text = text
        self.quoted = quoted


class Param(Node):
    """``$name``, ``${name...}``: ``op`` is the operator after the name (``:-``, ``-``, ``:=``,
    ``:+``, ``+``, ``#`` for a length, ``[@]`` for an array's elements, ``?`` for any other form),
    ``arg`` its word; ``src`` the text as written."""
    __slots__ = ("name", "op", "arg", "quoted", "src", "index")

    def __init__(self, name: str, op: str = "", arg: Word | None = None, quoted: bool = False, src: str = "",
                 index: str = ""):
        self.name = name
        self.op = op
        self.arg = arg
        self.quoted = quoted
        self.src = src
        self.index = index


class CmdSub(Node):
    """``$(...)`` or a backquoted command: never run, its text kept for the placeholder."""
    __slots__ = ("text", "quoted")

    def __init__(self, text: str, quoted: bool = False):
        self.text = text
        self.quoted = quoted


class Arith(Node):
    __slots__ = ("text", "quoted")

    def __init__(self, text: str, quoted: bool = False):
        self.text = text
        self.quoted = quoted


class Unknown(Node):
    """A word a shell cannot give a value: a documentation placeholder such as ``<client args>``."""
    __slots__ = ("text", "quoted")

    def __init__(self, text: str, quoted: bool = False):
        self.text = text
        self.quoted = quoted


class Word(Node):
    # a word written with quotes around all of it keeps its own boundaries (no splitting)
    __slots__ = ("parts", "line")

    def __init__(self, parts: list, line: int):
        self.parts = parts
        self.line = line

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


class Assign(Node):
    __slots__ = ("name", "value", "array", "append", "index")

    def __init__(self, name: str, value: Word | None, array: list[Word] | None = None, append: bool = False,
                 index: str = ""):
        self.name = name
        self.value = value
        self.array = array
        self.append = append
        self.index = index


class Redirect(Node):
    __slots__ = ("op", "target", "heredoc")

    def __init__(self, op: str, target: Word | None = None, heredoc: Word | None = None):
        self.op = op
        self.target = target
        self.heredoc = heredoc  # the body, expanded unless its delimiter was quoted


class Simple(Node):
    __slots__ = ("assigns", "words", "redirects", "line")

    def __init__(self, assigns: list[Assign], words: list[Word], redirects: list[Redirect], line: int):
        self.assigns = assigns
        self.words = words
        self.redirects = redirects
        self.line = line


class Pipeline(Node):
    __slots__ = ("commands", "negated", "background", "line")

    def __init__(self, commands: list, negated: bool = False, background: bool = False, line: int = 0):
        self.commands = commands
        self.negated = negated
        self.background = background
        self.line = line


class AndOr(Node):
    __slots__ = ("items", "ops", "line")

    def __init__(self, items: list, ops: list, line: int = 0):
        self.items = items  # Pipelines
        self.ops = ops  # "&&" / "||" between them
        self.line = line


class If(Node):
    __slots__ = ("clauses", "otherwise", "line")

    def __init__(self, clauses: list, otherwise: list | None, line: int = 0):
        self.clauses = clauses  # (condition list, body list)
        self.otherwise = otherwise
        self.line = line


class For(Node):
    __slots__ = ("var", "words", "body", "line")

    def __init__(self, var: str, words: list[Word] | None, body: list, line: int = 0):
        self.var = var
        self.words = words
        self.body = body
        self.line = line


class While(Node):
    __slots__ = ("cond", "body", "until", "line")

    def __init__(self, cond: list, body: list, until: bool = False, line: int = 0):
        self.cond = cond
        self.body = body
        self.until = until
        self.line = line


class Case(Node):
    __slots__ = ("word", "arms", "line")

    def __init__(self, word: Word, arms: list, line: int = 0):
        self.word = word
        self.arms = arms  # (patterns: list[Word], body list)
        self.line = line


class Group(Node):
    __slots__ = ("body", "subshell", "line")

    def __init__(self, body: list, subshell: bool = False, line: int = 0):
        self.body = body
        self.subshell = subshell
        self.line = line


class FuncDef(Node):
    __slots__ = ("name", "body", "line")

    def __init__(self, name: str, body: object, line: int = 0):
        self.name = name
        self.body = body
        self.line = line


class Arith2(Node):
    """``(( ... ))`` as a command: an arithmetic test."""
    __slots__ = ("text", "line")

    def __init__(self, text: str, line: int = 0):
        self.text = text
        self.line = line
