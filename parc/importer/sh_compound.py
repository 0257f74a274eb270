"""The shell's compound commands (bash(1), Compound Commands): ``if``, ``for``, ``while``/``until``,
``case``, ``{ ...; }``, ``( ... )``, ``(( ... ))`` and function definitions, read by
:class:`parc.importer.sh_parse.Parser`."""
from __future__ import annotations

import re

from parc.importer.sh_parse import Parser
from parc.importer.sh_tree import Arith2, Case, For, FuncDef, Group, If, While, Word


def _reserved(p: Parser, word: str) -> bool:
    return bool(re.match(re.escape(word) + r"(?=[\s;&|()]|$)", p.text[p.pos:p.pos + len(word) + 1]))


def _expect(p: Parser, word: str) -> None:
    p.blanks(newlines=True)
    while p.peek() == ";" and not p.startswith(";;"):
        p.take()
        p.blanks(newlines=True)
    if not _reserved(p, word):
        p.fail(f"expected `{word}`")
    p.take(len(word))


def compound(p: Parser):
    """The compound command at the parser's position, or None for a simple command."""
    line = p.line
    if p.startswith("((") :
        p.take(2)
        text = p._balanced("(", ")")
        if p.peek() == ")":
            p.take()
        return Arith2(text, line)
    if p.peek() == "(":
        p.take()
        body = p.command_list(stop=())
        p.blanks(newlines=True)
        if p.peek() != ")":
            p.fail("`(` is never closed")
        p.take()
        return Group(body, True, line)
    if _reserved(p, "{"):
        p.take()
        body = p.command_list(stop=("}",))
        _expect(p, "}")
        return Group(body, False, line)
    for word, read in (("if", _if), ("for", _for), ("while", _while), ("until", _while), ("case", _case),
                       ("function", _function)):
        if _reserved(p, word):
            return read(p, line)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_.:-]*)[ \t]*\(\)", p.text[p.pos:p.pos + 200])
    if m:
        p.take(m.end())
        p.blanks(newlines=True)
        body = compound(p)
        if body is None:
            p.fail(f"the function `{m.group(1)}` has no body")
        return FuncDef(m.group(1), body, line)
    return None


def _if(p: Parser, line: int) -> If:
    p.take(2)
    clauses, otherwise = [], None
    while True:
        cond = p.command_list(stop=("then",))
        _expect(p, "then")
        body = p.command_list(stop=("elif", "else", "fi"))
        clauses.append((cond, body))
        p.blanks(newlines=True)
        if _reserved(p, "elif"):
            p.take(4)
            continue
        if _reserved(p, "else"):
            p.take(4)
            otherwise = p.command_list(stop=("fi",))
        _expect(p, "fi")
        return If(clauses, otherwise, line)


def _for(p: Parser, line: int) -> For:
    p.take(3)
    p.blanks()
    if p.startswith("(("):
        p.take(2)
        p._balanced("(", ")")
        p.take()
        _expect(p, "do")
        body = p.command_list(stop=("done",))
        _expect(p, "done")
        return For("", [], body, line)
    name = p.word()
    var = name.literal() if name else None
    if not var:
        p.fail("`for` needs a variable name")
    p.blanks(newlines=True)
    words = None
    if _reserved(p, "in"):
        p.take(2)
        words = []
        while True:
            p.blanks()
            if p.peek() in (";", "\n", ""):
                break
            w = p.word()
            if w is None:
                break
            words.append(w)
    _expect(p, "do")
    body = p.command_list(stop=("done",))
    _expect(p, "done")
    return For(var, words, body, line)


def _while(p: Parser, line: int) -> While:
    until = _reserved(p, "until")
    p.take(5)
    cond = p.command_list(stop=("do",))
    _expect(p, "do")
    body = p.command_list(stop=("done",))
    _expect(p, "done")
    return While(cond, body, until, line)


def _case(p: Parser, line: int) -> Case:
    p.take(4)
    p.blanks()
    subject = p.word()
    if subject is None:
        p.fail("`case` needs a word")
    _expect(p, "in")
    arms = []
    while True:
        p.blanks(newlines=True)
        if _reserved(p, "esac"):
            p.take(4)
            return Case(subject, arms, line)
        if p.peek() == "(":
            p.take()
        patterns: list[Word] = []
        while True:
            p.blanks()
            w = p.word()
            if w is None:
                p.fail("a `case` pattern is missing")
            patterns.append(w)
            p.blanks()
            if p.peek() == "|":
                p.take()
                continue
            if p.peek() != ")":
                p.fail("a `case` pattern needs `)`")
            p.take()
            break
        body = p.command_list(stop=("esac",))
        p.blanks(newlines=True)
        for end in (";;&", ";;", ";&"):
            if p.startswith(end):
                p.take(len(end))
                break
        arms.append((patterns, body))
        if not p.peek():
            p.fail("`case` is never closed with `esac`")


def _function(p: Parser, line: int) -> FuncDef:
    p.take(8)
    p.blanks()
    name = p.word()
    if name is None or not name.literal():
        p.fail("`function` needs a name")
    p.blanks()
    if p.startswith("()"):
        p.take(2)
    p.blanks(newlines=True)
    body = compound(p)
    if body is None:
        p.fail(f"the function `{name.literal()}` has no body")
    return FuncDef(name.literal(), body, line)
