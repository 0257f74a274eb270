"""Text → syntax tree with spans.

The LALR parser is built once per process and cached on disk in the per-user cache
directory (``$XDG_CACHE_HOME/parc`` or ``~/.cache/parc``), keyed by the grammar's hash
and lark's version, written atomically. A syntax error never escapes as a lark exception:
it becomes a ``P001`` diagnostic that says what was found and what could come next.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

from . import syntax as S
from .diagnostics import ERROR, Diagnostic, ParcError, Span

GRAMMAR_PATH = Path(__file__).resolve().parent.parent / "grammar" / "par.lark"

MAX_DEPTH = 64  # nesting of parentheses and lists in one value

_LARK_OPTIONS = dict(parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=True)


def _cache_dir() -> Path | None:
    base = os.environ.get("PARC_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "parc"
    home = os.path.expanduser("~")
    if home and home != "~":
        return Path(home) / ".cache" / "parc"
    return None


@lru_cache(maxsize=1)
def get_parser():
    """The grammar's LALR parser, from the per-user cache when it is there."""
    import lark

    grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    key = hashlib.sha256((grammar + lark.__version__ + repr(sorted(_LARK_OPTIONS.items())))
                         .encode()).hexdigest()[:16]
    cdir = _cache_dir()
    cfile = cdir / f"par-{key}.lark.pickle" if cdir else None
    if cfile is not None and cfile.is_file():
        try:
            with open(cfile, "rb") as f:
                return lark.Lark.load(f)
        except Exception:  # a stale or broken cache is rebuilt below
            pass
    parser = lark.Lark(grammar, **_LARK_OPTIONS)
    if cfile is not None:
        try:
            cdir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cdir, prefix=".par-", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                parser.save(f)
            os.replace(tmp, cfile)
        except OSError:
            pass
    return parser


# ----------------------------------------------------------------------------- tree → nodes

_UNIT_SPLIT = re.compile(r"([0-9][0-9_]*(?:\.[0-9]+)?)(.*)", re.S)


def _num(text: str):
    t = text.replace("_", "")
    if "." in t:
        return Fraction(t)
    return int(t)


def _unescape(s: str) -> str:
    body = s[1:-1]
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            out.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"'}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Builder:
    def __init__(self, file: str):
        self.file = file

    def span_tok(self, t) -> Span:
        return Span(self.file, t.line, t.column, t.end_line, t.end_column, t.start_pos, t.end_pos)

    def span_meta(self, m) -> Span:
        if getattr(m, "empty", False):
            return Span.point(self.file)
        return Span(self.file, m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)

    def document(self, tree) -> S.Document:
        return S.Document(self.file, [self.stmt(c) for c in tree.children])

    def stmt(self, t):
        d = t.data
        if d == "block":
            kind, label, *items = t.children
            lab = lab_span = None
            quoted = False
            if label is not None:
                tok = label.children[0]
                quoted = tok.type == "STRING"
                lab = _unescape(tok.value) if quoted else tok.value
                lab_span = self.span_tok(tok)
            return S.Block(kind.value, self.span_tok(kind), lab, lab_span,
                           [self.stmt(c) for c in items], self.span_meta(t.meta), quoted)
        if d == "assign":
            key, value = t.children
            ktok = key.children[0]
            quoted = ktok.type == "STRING"
            k = _unescape(ktok.value) if quoted else ktok.value
            return S.Assign(k, self.span_tok(ktok), self.value(value), self.span_meta(t.meta), quoted)
        if d == "on_rule":
            a, b = t.children
            return S.OnRule(a.value, self.span_tok(a), b.value, self.span_tok(b), self.span_meta(t.meta))
        if d == "use":
            (p,) = t.children
            return S.Use(_unescape(p.value), self.span_meta(t.meta), self.span_tok(p))
        raise AssertionError(f"unknown statement {d}")  # grammar and builder out of step

    depth = 0

    def value(self, t):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                sp = self.span_meta(t.meta)
                raise ParcError(Diagnostic("P001", ERROR, f"value nested more than {MAX_DEPTH} levels deep",
                                           sp, help="write the value without so many parentheses or lists"))
            return self._value(t)
        finally:
            self.depth -= 1

    def _value(self, t):
        d = t.data
        sp = self.span_meta(t.meta)
        if d == "number":
            tok = t.children[0]
            return S.Number(_num(tok.value), tok.value, sp)
        if d == "quantity":
            tok = t.children[0]
            m = _UNIT_SPLIT.fullmatch(tok.value)
            return S.Quantity(_num(m.group(1)), m.group(2), tok.value, sp)
        if d == "string":
            tok = t.children[0]
            return S.String(_unescape(tok.value), tok.value, sp)
        if d == "true":
            return S.Bool(True, sp)
        if d == "false":
            return S.Bool(False, sp)
        if d == "auto":
            return S.Auto(sp)
        if d == "ref":
            return S.Ref([c.value for c in t.children], sp)
        if d == "call":
            name, *args = t.children
            args = [a for a in args if a is not None]
            return S.Call(name.value, [self.value(a) for a in args], sp, self.span_tok(name))
        if d == "list":
            items = [c for c in t.children if c is not None]
            return S.List([self.value(c) for c in items], sp)
        if d in ("add", "sub", "mul", "div", "mod"):
            op = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}[d]
            a, b = t.children
            return S.BinOp(op, self.value(a), self.value(b), sp)
        if d == "neg":
            return S.Neg(self.value(t.children[0]), sp)
        raise AssertionError(f"unknown value {d}")


# ----------------------------------------------------------------------------- errors

_TERMINAL_WORDS = {
    "NAME": "a name", "NUMBER": "a number", "QUANTITY": "a value with a unit",
    "STRING": "a string", "LBRACE": "`{`", "RBRACE": "`}`", "EQUAL": "`=`",
    "LSQB": "`[`", "RSQB": "`]`", "LPAR": "`(`", "RPAR": "`)`", "COMMA": "`,`",
    "DOT": "`.`", "SEMICOLON": "`;`", "_NL": "a new line", "$END": "the end of the file",
    "PLUS": "`+`", "MINUS": "`-`", "STAR": "`*`", "SLASH": "`/`", "PERCENT": "`%`",
    "TRUE": "`true`", "FALSE": "`false`", "AUTO": "`auto`", "ON": "`on`", "USE": "`use`",
}


_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "DOT"}


def _words(names) -> str:
    names = set(names)
    ops = names & _OPERATORS
    if len(ops) > 2:  # "an operator" reads better than six symbols
        names = (names - ops) | {"an operator"}
    ws = sorted({_TERMINAL_WORDS.get(n, n) for n in names}, key=lambda w: (w.startswith("`"), w))
    if not ws:
        return "nothing"
    if len(ws) == 1:
        return ws[0]
    return ", ".join(ws[:-1]) + " or " + ws[-1]


def _found(tok) -> str:
    if tok.type == "$END":
        return "the end of the file"
    if tok.type == "_NL":
        return "the end of the line"
    v = tok.value
    if len(v) > 30:
        v = v[:27] + "..."
    kind = {"NAME": "name", "NUMBER": "number", "QUANTITY": "value", "STRING": "string"}.get(tok.type)
    return f"{kind} `{v}`" if kind else f"`{v}`"


def _string_end(text: str, i: int) -> int:
    """The offset just past the string that opens at ``i``: after its closing quote, or at the
    end of the line when it is not closed (strings never span lines)."""
    n = len(text)
    j = i + 1
    while j < n and text[j] not in '"\n':
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, n) if j < n and text[j] == '"' else min(j, n)


def _scan_braces(text: str):
    """Offsets of `{` that are never closed, ignoring strings and comments."""
    stack = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == '"':
            i = _string_end(text, i)
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            stack.pop()
        i += 1
    return stack


def _pos(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _syntax_diag(file: str, text: str, exc) -> Diagnostic:
    import lark

    from .diagnostics import Related

    if isinstance(exc, lark.UnexpectedCharacters):
        off = exc.pos_in_stream
        ch = text[off] if off < len(text) else ""
        line, col = exc.line, exc.column
        span = Span(file, line, col, line, col + 1, off, off + 1)
        if ch == '"':
            return Diagnostic("P001", ERROR, "unterminated string: a string must close on the same line",
                              span, help='close it with `"`')
        shown = repr(ch)[1:-1]
        expected = _words(exc.allowed or [])
        return Diagnostic("P001", ERROR, f"unexpected character `{shown}`; expected {expected}", span)
    if isinstance(exc, lark.UnexpectedToken):
        tok = exc.token
        expected = {e for e in exc.expected if not e.startswith("__")}
        try:  # the tokens the parser really accepts here (LALR's lookahead set is wider)
            acc = {e for e in exc.interactive_parser.accepts() if not e.startswith("__")}
            if acc:
                expected = acc
        except Exception:
            pass
        if tok.type == "$END":
            off = len(text)
            line, col = _pos(text, off)
            span = Span(file, line, col, line, col + 1, off, off + 1)
        else:
            span = Span(file, tok.line, tok.column, tok.end_line or tok.line,
                        tok.end_column or tok.column + 1, tok.start_pos or 0, tok.end_pos or 0)
        if "RBRACE" in expected:
            opened = _scan_braces(text)
            if opened and (tok.type == "$END"):
                off = opened[-1]
                line, col = _pos(text, off)
                head_start = text.rfind("\n", 0, off) + 1
                header = text[head_start:off].strip()
                return Diagnostic(
                    "P002", ERROR,
                    f"block `{header}` opened here is never closed",
                    Span(file, line, col, line, col + 1, off, off + 1),
                    help="add `}` at the end of the block",
                    related=[Related(span, "the file ends here")])
        msg = f"expected {_words(expected)}, found {_found(tok)}"
        hint = None
        if tok.type == "NAME" and "_NL" in expected:
            hint = "put each statement on its own line, or separate them with `;`"
        elif "EQUAL" in expected and tok.type in ("NUMBER", "QUANTITY", "STRING"):
            hint = "write `key = value`"
        return Diagnostic("P001", ERROR, msg, span, help=hint)
    line, col = 1, 1
    return Diagnostic("P001", ERROR, f"cannot parse this file: {exc}", Span(file, line, col, line, col + 1))


_SHARED: ContextVar[dict | None] = ContextVar("parc_shared_parses", default=None)


@contextmanager
def shared_parses():
    """Within this block the same text of the same file is parsed once: ``parc lint`` parses
    each file for the checks and again for the layout check, and shared files once per importer.
    The syntax tree is read-only to every consumer, so sharing it is safe."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def parse_text(text: str, file: str = "<input>") -> S.Document:
    """Parse ``text``; raise :class:`ParcError` with a ``P001``/``P002`` diagnostic on a syntax error."""
    memo = _SHARED.get()
    if memo is None:
        return _parse_text(text, file)
    doc = memo.get((file, text))
    if doc is None:
        doc = memo[(file, text)] = _parse_text(text, file)
    return doc


def _parse_text(text: str, file: str) -> S.Document:
    import lark

    parser = get_parser()
    try:
        tree = parser.parse(text)
    except lark.exceptions.UnexpectedInput as e:
        first = _syntax_diag(file, text, e)
        raise ParcError(first, _independent_errors(parser, file, text, first)) from None
    except RecursionError:
        raise ParcError(Diagnostic("P001", ERROR, "expression nested too deeply",
                                   Span.point(file))) from None
    try:
        return _Builder(file).document(tree)
    except RecursionError:
        raise ParcError(Diagnostic("P001", ERROR, "expression nested too deeply",
                                   Span.point(file))) from None


def _top_level_chunks(text: str) -> list[tuple[int, int]] | None:
    """Offsets of each top-level statement (a whole block with its braces), or None when the
    braces do not balance (then only the first error can be trusted)."""
    chunks = []
    depth = 0
    start = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == '"':
            if start is None:
                start = i
            i = _string_end(text, i)
            continue
        if c in "\n;" and depth == 0:
            if start is not None:
                chunks.append((start, i))
                start = None
        elif not c.isspace() and start is None:
            start = i
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:  # a stray `}` ends the statement it closes nothing of
                depth = 0
                if start is not None:
                    chunks.append((start, i + 1))
                    start = None
        i += 1
    if depth != 0:
        return None
    if start is not None:
        chunks.append((start, n))
    return chunks


def _mask(text: str, a: int, b: int) -> str:
    """``text`` with everything outside [a, b) blanked, keeping every line and column."""
    def blank(s):
        return "".join(ch if ch == "\n" else " " for ch in s)

    return blank(text[:a]) + text[a:b] + blank(text[b:])


def _independent_errors(parser, file: str, text: str, first: Diagnostic) -> list[Diagnostic]:
    """The first syntax error of every other top-level statement: each block is parsed on its
    own, so an error in one never causes a follow-on error in another."""
    import lark

    if first.code != "P001":
        return []
    chunks = _top_level_chunks(text)
    if not chunks or len(chunks) > 200:
        return []
    out = []
    for a, b in chunks:
        if a <= first.span.start < b:
            continue
        masked = _mask(text, a, b)
        try:
            parser.parse(masked)
        except lark.exceptions.UnexpectedInput as e:
            out.append(_syntax_diag(file, masked, e))
    return out


def comments(text: str) -> list[tuple[int, int, str]]:
    """Every ``#`` comment as (line, column, text), found with the same rules as the lexer."""
    out = []
    line, col = 1, 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            col = 1
            i += 1
            continue
        if c == '"':
            j = _string_end(text, i)
            col += j - i
            i = j
            continue
        if c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, col, text[i:j].rstrip()))
            col += j - i
            i = j
            continue
        i += 1
        col += 1
    return out
