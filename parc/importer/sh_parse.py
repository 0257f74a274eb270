"""A launch script read as the shell would read it, into a syntax tree, without running anything.

The importer never executes a script (nor a ``$(...)`` inside one): this module only parses the
text, and :mod:`parc.importer.sh_eval` works out what each command would be asked to run. The
grammar is the part of POSIX sh and bash that launch scripts use (bash(1), SHELL GRAMMAR,
QUOTING, EXPANSION): simple commands with assignments and redirections, pipelines, ``&&``/``||``
lists, ``if``/``for``/``while``/``until``/``case``, groups, subshells, functions, arrays
(``A=(...)``, ``A+=(...)``), here-documents, the three quotes and ``$'...'``, parameter,
command and arithmetic expansion. What it cannot read becomes a word of its own text, never an
error: a launch script is data to the importer.

A documentation placeholder (``<client_entry.py>`` in a command copied from docs, which a shell
would read as a redirection) is read as one word marked unknown.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.importer.sh_tree import (AndOr, Arith, Assign, CmdSub, Lit, Param, Pipeline, Redirect, ShellSyntax,
                                   Simple, Unknown, Word)

# a file larger than this is refused before parsing (a launch script is a few kilobytes)
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until", "case", "esac",
            "function", "{", "}", "!"}
_META = set(" \t\n;&|<>()")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DECLARE = {"export", "declare", "typeset", "local", "readonly"}
_PLACEHOLDER = re.compile(r"<[A-Za-z_](?:[^<>\n]*[^<>\s])?>(?=\s|$)")


# --- the reader --------------------------------------------------------------------------------
@dataclass
class _Heredoc:
    """A here-document whose body starts on the next line."""
    delim: str
    strip: bool
    quoted: bool
    redirect: Redirect


@dataclass
class Parser:
    """The reader: the text, where it is in it, the here-documents waiting for their body."""
    text: str
    pos: int = 0
    line: int = 1
    pending: list = field(default_factory=list)
    depth: int = 0

    # characters
    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def take(self, n: int = 1) -> str:
        s = self.text[self.pos:self.pos + n]
        self.line += s.count("\n")
        self.pos += n
        return s

    def startswith(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def fail(self, what: str):
        raise ShellSyntax(f"line {self.line}: {what}")

    # blanks, comments, continuations
    def blanks(self, newlines: bool = False) -> None:
        while self.pos < len(self.text):
            c = self.peek()
            if c in " \t\r":
                self.take()
            elif c == "\\" and self.peek(1) == "\n":
                self.take(2)
            elif c == "#":
                while self.pos < len(self.text) and self.peek() != "\n":
                    self.take()
            elif c == "\n" and newlines:
                self.newline()
            else:
                return

    def newline(self) -> None:
        self.take()
        for h in self.pending:
            self._heredoc_body(h)
        self.pending = []

    def _heredoc_body(self, h: _Heredoc) -> None:
        start_line, lines = self.line, []
        while self.pos < len(self.text):
            end = self.text.find("\n", self.pos)
            end = len(self.text) if end < 0 else end
            raw = self.text[self.pos:end]
            self.take(end - self.pos + (1 if end < len(self.text) else 0))
            check = raw.lstrip("\t") if h.strip else raw
            if check == h.delim:
                break
            lines.append(check + "\n")
        body = "".join(lines)
        if h.quoted:
            h.redirect.heredoc = Word([Lit(body, True)], start_line)
        else:
            h.redirect.heredoc = Word(_Inner(body, start_line).double_parts(heredoc=True), start_line)

    # --- words ---------------------------------------------------------------------------------
    def word(self) -> Word | None:
        """The next word (None at an operator, a new line or the end)."""
        line = self.line
        m = _PLACEHOLDER.match(self.text, self.pos)
        if m:
            self.take(m.end() - self.pos)
            return Word([Unknown(m.group(0))], line)
        parts: list = []
        while self.pos < len(self.text):
            c = self.peek()
            if c in _META:
                break
            if c == "\\":
                if self.peek(1) == "\n":
                    self.take(2)
                    continue
                self.take()
                parts.append(Lit(self.take() or "\\", True))
            elif c == "'":
                parts.append(Lit(self._single(), True))
            elif c == '"':
                parts += self._double()
            elif c == "$" and self.peek(1) == "'":
                parts.append(Lit(self._ansi(), True))
            elif c == "$" and self.peek(1) == '"':
                self.take()
                parts += self._double()
            elif c == "$" or c == "`":
                parts.append(self.expansion(quoted=False))
            else:
                parts.append(Lit(self.take()))
        return Word(_merge(parts), line) if parts else None

    def _single(self) -> str:
        self.take()
        end = self.text.find("'", self.pos)
        if end < 0:
            self.fail("a single quote is never closed")
        s = self.take(end - self.pos)
        self.take()
        return s

    def _ansi(self) -> str:
        self.take(2)
        out = []
        esc = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "e": "\x1b"}
        while self.pos < len(self.text) and self.peek() != "'":
            c = self.take()
            if c == "\\" and self.pos < len(self.text):
                n = self.take()
                out.append(esc.get(n, "\\" + n))
            else:
                out.append(c)
        if not self.take():
            self.fail("a $'...' quote is never closed")
        return "".join(out)

    def _double(self) -> list:
        self.take()
        parts: list = []
        while True:
            if self.pos >= len(self.text):
                self.fail("a double quote is never closed")
            c = self.peek()
            if c == '"':
                self.take()
                return parts or [Lit("", True)]
            self._double_char(parts, '$`"\\\n')

    def _double_char(self, parts: list, escapable: str) -> None:
        """One character inside double quotes (or a here-document): a backslash escapes only the
        characters of ``escapable`` (and joins lines), ``$`` and a backquote expand."""
        c = self.peek()
        if c == "\\" and self.peek(1) in escapable:
            self.take()
            n = self.take()
            if n != "\n":
                parts.append(Lit(n, True))
        elif c in "$`":
            parts.append(self.expansion(quoted=True))
        else:
            parts.append(Lit(self.take(), True))

    def _balanced(self, open_: str, close: str) -> str:
        """The text up to the ``close`` that matches an ``open_`` already taken (quotes respected)."""
        depth, start = 1, self.pos
        while self.pos < len(self.text):
            c = self.peek()
            if c == "\\":
                self.take(2)
                continue
            if c == "'":
                self._single()
                continue
            if c == '"':
                self._double()
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    s = self.text[start:self.pos]
                    self.take()
                    return s
            self.take()
        self.fail(f"`{open_}` is never closed")

    def expansion(self, quoted: bool):
        start = self.pos
        if self.peek() == "`":
            self.take()
            end = self.pos
            while end < len(self.text) and self.text[end] != "`":
                end += 2 if self.text[end] == "\\" else 1
            text = self.take(end - self.pos)
            self.take()
            return CmdSub(text, quoted)
        self.take()   # $
        c = self.peek()
        if self.startswith("(("):
            self.take(2)
            inner = self._balanced("(", ")")
            if self.peek() != ")":
                return CmdSub("(" + inner + ")", quoted)
            self.take()
            return Arith(inner, quoted)
        if c == "(":
            self.take()
            return CmdSub(self._balanced("(", ")"), quoted)
        if c == "{":
            self.take()
            body = self._balanced("{", "}")
            return _brace_param(body, quoted, self.text[start:self.pos], self.line)
        m = _NAME.match(self.text, self.pos)
        if m:
            self.take(m.end() - self.pos)
            return Param(m.group(0), quoted=quoted, src=self.text[start:self.pos])
        if c and (c.isdigit() or c in "@*#?$!-"):
            self.take()
            return Param(c, quoted=quoted, src="$" + c)
        return Lit("$", quoted)

    # --- commands ------------------------------------------------------------------------------
    def program(self) -> list:
        out = self.command_list(stop=())
        self.blanks(newlines=True)
        if self.pos < len(self.text):
            self.fail(f"unexpected `{self.peek()}`")
        return out

    def command_list(self, stop: tuple) -> list:
        """Commands until one of the reserved words ``stop`` (or `)`/`;;` for subshells and case)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"commands nested more than {MAX_DEPTH} deep")
        out = []
        while True:
            self.blanks(newlines=True)
            while self.peek() == ";" and not self.startswith(";;"):
                self.take()
                self.blanks(newlines=True)
            if self.pos >= len(self.text) or self.peek() == ")" or self.startswith(";;"):
                break
            if self._at_reserved(stop):
                break
            node = self.and_or()
            if node is None:
                break
            out.append(node)
        self.depth -= 1
        return out

    def _at_reserved(self, words: tuple) -> bool:
        m = re.match(r"[a-z{}]+(?=[\s;&|()]|$)", self.text[self.pos:self.pos + 12])
        return bool(m) and m.group(0) in words

    def and_or(self):
        line = self.line
        items, ops = [self.pipeline()], []
        while True:
            self.blanks()
            if self.startswith("&&") or self.startswith("||"):
                ops.append(self.take(2))
                self.blanks(newlines=True)
                items.append(self.pipeline())
            else:
                break
        self.blanks()
        if self.peek() == "&" and not self.startswith("&&"):
            self.take()
            items[-1].background = True
        elif self.peek() == ";" and not self.startswith(";;"):
            self.take()
        return AndOr(items, ops, line)

    def pipeline(self) -> Pipeline:
        line = self.line
        self.blanks()
        negated = False
        if self.startswith("!") and self.peek(1) in " \t":
            self.take()
            negated = True
        cmds = [self.command()]
        while True:
            self.blanks()
            if self.peek() == "|" and not self.startswith("||"):
                self.take(2 if self.startswith("|&") else 1)
                self.blanks(newlines=True)
                cmds.append(self.command())
            else:
                break
        return Pipeline(cmds, negated, line=line)

    def command(self):
        from parc.importer.sh_compound import compound

        self.blanks()
        node = compound(self)
        if node is not None:
            self.redirects_after(node)
            return node
        return self.simple()

    def redirects_after(self, node) -> None:
        while True:
            self.blanks()
            r = self.redirect()
            if r is None:
                return

    def redirect(self) -> Redirect | None:
        m = re.match(r"(\d*)(<<<|<<-|<<|>>|&>>|&>|>&|<&|>\||<>|>|<)", self.text[self.pos:self.pos + 6])
        if not m or _PLACEHOLDER.match(self.text, self.pos):
            return None
        self.take(m.end())
        op = m.group(2)
        self.blanks()
        target = self.word()
        r = Redirect(op, target)
        if op in ("<<", "<<-") and target is not None:
            delim = "".join(p.text if isinstance(p, (Lit, Unknown)) else p.src if isinstance(p, Param) else ""
                            for p in target.parts)
            quoted = any(getattr(p, "quoted", False) for p in target.parts)
            self.pending.append(_Heredoc(delim, op == "<<-", quoted, r))
        return r

    def simple(self) -> Simple:
        line = self.line
        assigns, words, redirects = [], [], []
        while True:
            self.blanks()
            if words and words[0].literal() == "[[" and self._test_word(words):
                continue
            c = self.peek()
            if not c or (c in "\n;&|)" and not self.startswith("&>")) or (c == "(" and words):
                break
            r = self.redirect()
            if r is not None:
                redirects.append(r)
                continue
            if not words or words[0].literal() in DECLARE:
                a = self.assignment()
                if a is not None:
                    assigns.append(a)
                    continue
            w = self.word()
            if w is None:
                if c == "(":
                    self.fail("unexpected `(`")
                break
            words.append(w)
        return Simple(assigns, words, redirects, line)

    def _test_word(self, words: list) -> bool:
        """Inside ``[[ ... ]]``: ``&&``, ``||``, ``<``, ``>``, ``(`` and ``)`` are words of the test."""
        if words[-1].literal() == "]]":
            return False
        if words[-1].literal() == "=~":     # the regex: one word up to a blank, ( ) and | its own
            m = re.match(r"(?:\([^\s)]*\)|[^\s()])+", self.text[self.pos:self.pos + 4096])
            if m and not self.text.startswith("]]", self.pos):
                words.append(Word([Lit(self.take(m.end()))], self.line))
                return True
        m = re.match(r"&&|\|\||[<>()!]", self.text[self.pos:self.pos + 2])
        if not m:
            return False
        words.append(Word([Lit(self.take(m.end()))], self.line))
        return True

    def assignment(self) -> Assign | None:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?=)", self.text[self.pos:self.pos + 256])
        if not m:
            return None
        self.take(m.end())
        name, index, append = m.group(1), (m.group(2) or "")[1:-1], m.group(3) == "+="
        if self.peek() == "(":
            self.take()
            items = []
            while True:
                self.blanks(newlines=True)
                if self.peek() == ")":
                    self.take()
                    break
                if not self.peek():
                    self.fail(f"the array `{name}` is never closed")
                w = self.word()
                if w is None:
                    self.fail(f"unexpected `{self.peek()}` in the array `{name}`")
                items.append(w)
            return Assign(name, None, items, append, index)
        w = self.word()
        return Assign(name, w or Word([Lit("")], self.line), None, append, index)


def _merge(parts: list) -> list:
    out: list = []
    for p in parts:
        if isinstance(p, Lit) and out and isinstance(out[-1], Lit) and out[-1].quoted == p.quoted:
            out[-1] = Lit(out[-1].text + p.text, p.quoted)
        else:
            out.append(p)
    return out


class _Inner(Parser):
    """A string read as the inside of double quotes (a here-document's body)."""

    def __init__(self, text: str, line: int):
        super().__init__(text, 0, line)

    def double_parts(self, heredoc: bool = False) -> list:
        parts: list = []
        while self.pos < len(self.text):
            self._double_char(parts, "$`\\\n")
        return _merge(parts) or [Lit("", True)]


_BRACE = re.compile(r"(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(\[[^\]]*\])?(.*)", re.S)


def _brace_param(body: str, quoted: bool, src: str, line: int) -> Param:
    m = _BRACE.fullmatch(body)
    if not m or body.startswith("!"):
        return Param("", "?", quoted=quoted, src=src)
    length, name, index, rest = m.group(1), m.group(2), (m.group(3) or "")[1:-1], m.group(4)
    if length:
        return Param(name, "#", quoted=quoted, src=src, index=index) if not rest else Param("", "?", quoted=quoted,
                                                                                             src=src)
    if index in ("@", "*") and not rest:
        return Param(name, "[@]", quoted=quoted, src=src, index=index)
    if not rest:
        return Param(name, "", quoted=quoted, src=src, index=index)
    for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
        if rest.startswith(op):
            arg = _Inner(rest[len(op):], line).double_parts()
            if not quoted:      # unquoted: the word's own quotes apply
                p = Parser(rest[len(op):], 0, line)
                try:
                    w = p.word()
                    arg = w.parts if w is not None and p.pos == len(p.text) else arg
                except ShellSyntax:
                    pass
            return Param(name, op, Word(arg, line), quoted=quoted, src=src, index=index)
    return Param(name, "?", quoted=quoted, src=src, index=index)


def parse(text: str) -> list:
    """The script's commands (a list of :class:`AndOr`); raises :class:`ShellSyntax`."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ShellSyntax(f"the file is larger than {MAX_BYTES // 1024} KiB")
    return Parser(text).program()
