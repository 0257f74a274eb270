"""The syntax tree of a `.par` file: plain nodes, each with the span it was read from."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Union

from parc.language.diagnostics import Span


@dataclass(slots=True)
class Number:
    value: Union[int, Fraction]
    text: str
    span: Span


@dataclass(slots=True)
class Quantity:
    """A number glued to letters: ``80GB``, ``450GB/s``, ``8k`` or an identifier like ``1f1b``."""

    number: Union[int, Fraction]
    unit: str
    text: str
    span: Span


@dataclass(slots=True)
class String:
    value: str
    text: str
    span: Span


@dataclass(slots=True)
class Bool:
    value: bool
    span: Span


@dataclass(slots=True)
class Auto:
    span: Span


@dataclass(slots=True)
class Ref:
    parts: list[str]
    span: Span

    @property
    def name(self) -> str:
        return ".".join(self.parts)


@dataclass(slots=True)
class Call:
    name: str
    args: list["Value"]
    span: Span
    name_span: Span


@dataclass(slots=True)
class List:
    items: list["Value"]
    span: Span


@dataclass(slots=True)
class BinOp:
    op: str  # + - * / %
    left: "Value"
    right: "Value"
    span: Span


@dataclass(slots=True)
class Neg:
    operand: "Value"
    span: Span


@dataclass(slots=True)
class Broken:
    """A value that did not parse (its syntax error is reported): the key it was written for
    is poisoned, as by a bad value (``parc.language.resync``)."""
    span: Span


Value = Union[Number, Quantity, String, Bool, Auto, Ref, Call, List, BinOp, Neg, Broken]


@dataclass(slots=True)
class Assign:
    key: str
    key_span: Span
    value: Value
    span: Span
    quoted: bool = False  # the key was a string ("layers.*.wq" = colwise(tp))


@dataclass(slots=True)
class OnRule:
    axis: str
    axis_span: Span
    link: str
    link_span: Span
    span: Span


@dataclass(slots=True)
class Use:
    path: str
    span: Span
    path_span: Span


@dataclass(slots=True)
class Block:
    kind: str
    kind_span: Span
    label: str | None
    label_span: Span | None
    items: list["Stmt"]
    span: Span
    label_quoted: bool = False


Stmt = Union[Block, Assign, OnRule, Use]


@dataclass(slots=True)
class Document:
    file: str
    items: list[Stmt]
    comments: list = field(default_factory=list)  # (line, column, text) of every comment
