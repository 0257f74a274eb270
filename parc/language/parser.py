"""Text → syntax tree with spans.

The LALR parser is built ahead of time: ``parc/language/par_table.json`` holds lark's
serialized parse table (plain data, read with :mod:`json`, never unpickled), generated from
``par.lark`` by ``python -m parc.language.build_table`` and checked against the grammar's hash
on load (a test keeps it up to date). Nothing is read from a per-user cache: parc loads no
executable data from outside the installed package. A syntax error never escapes as a lark
exception: it becomes a ``P001`` diagnostic that says what was found and what could come next.

Limits (each refused with a ``P001`` diagnostic, never a crash): a file of at most
``MAX_INPUT`` characters, a token (string, name, number) of at most ``MAX_TOKEN`` characters,
values nested (parentheses, lists, calls, signs) at most ``MAX_DEPTH`` levels deep. A flat
chain of operators (``a + b + c + ...``) is no nesting, whatever its length.
"""
from __future__ import annotations

import gc
import hashlib
import json
import re
from bisect import bisect_right
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, ParcError, Span

GRAMMAR_DIR = Path(__file__).resolve().parent
GRAMMAR_PATH = GRAMMAR_DIR / "par.lark"
TABLE_PATH = GRAMMAR_DIR / "par_table.json"

MAX_DEPTH = 64  # nesting of parentheses, lists, calls and signs in one value
MAX_INPUT = 1 << 20  # characters in one file (1 MiB of ASCII)
MAX_TOKEN = 4096  # characters in one string, name or number

_LARK_OPTIONS = dict(parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=True)


def grammar_hash(grammar: str | None = None) -> str:
    """The key a parse table is built for: the grammar's text and the parser options."""
    if grammar is None:
        grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    return hashlib.sha256((grammar + repr(sorted(_LARK_OPTIONS.items()))).encode()).hexdigest()


# JSON has no tuples and no integer keys; the table has both. They are tagged on the way out.
def _encode(x):
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: _encode(v) for k, v in x.items()}
        return {"__items__": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"parse table holds a {type(x).__name__}")  # never data we cannot write


def _decode(d: dict):
    if "__tuple__" in d and len(d) == 1:
        return tuple(d["__tuple__"])
    if "__items__" in d and len(d) == 1:
        return {(tuple(k) if isinstance(k, list) else k): v for k, v in d["__items__"]}
    return d


def build_table(grammar: str | None = None) -> str:
    """The JSON text of the parse table for ``grammar`` (default: ``par.lark``)."""
    import lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    if grammar is None:
        grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    parser = lark.Lark(grammar, **_LARK_OPTIONS)
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    doc = {"grammar_sha256": grammar_hash(grammar), "lark": lark.__version__,
           "data": _encode(data), "memo": _encode(memo)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"


@lru_cache(maxsize=1)
def get_parser():
    """The grammar's LALR parser, from the parse table shipped in the package.

    The table is data (JSON), so a planted file cannot run code. If it does not match the
    grammar (an edited ``par.lark`` without a rebuilt table), the parser is built from the
    grammar in memory, which is correct but slow."""
    import lark

    grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    try:
        with open(TABLE_PATH, encoding="utf-8") as f:
            doc = json.load(f, object_hook=_decode)
        if doc.get("grammar_sha256") == grammar_hash(grammar):
            return lark.Lark._load_from_dict(doc["data"], doc["memo"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError):
        pass  # a missing or unreadable table: build from the grammar below
    return lark.Lark(grammar, **_LARK_OPTIONS)


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts, lines as the lexer counts them (ended by ``\\n`` only)."""
    return [0] + [m.end() for m in re.finditer("\n", text)]


def offset_position(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` given :func:`line_starts`."""
    i = bisect_right(starts, offset) - 1
    return i + 1, offset - starts[i] + 1


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


_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}


class _Builder:
    def __init__(self, file: str):
        self.file = file

    def span_tok(self, t) -> Span:
        return Span(self.file, t.line, t.column, t.end_line, t.end_column, t.start_pos, t.end_pos)

    def span_meta(self, m) -> Span:
        if getattr(m, "empty", False):
            return Span.point(self.file)
        return Span(self.file, m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)

    def token(self, t) -> str:
        """A token's text, refused when it is longer than the grammar reads."""
        if len(t.value) > MAX_TOKEN:
            what = {"STRING": "string", "NAME": "name", "NUMBER": "number",
                    "QUANTITY": "value"}.get(t.type, "token")
            sp = self.span_tok(t)
            raise ParcError(Diagnostic(
                "P001", ERROR, f"this {what} is {len(t.value):,} characters long; parc reads tokens of at "
                f"most {MAX_TOKEN:,} characters", sp,
                help="shorten it; a spec names things and sizes, it does not carry data"))
        return t.value

    def document(self, tree) -> S.Document:
        return S.Document(self.file, [self.stmt(c) for c in tree.children])

    blocks = 0

    def stmt(self, t):
        d = t.data
        if d == "block":
            if self.blocks >= MAX_DEPTH:
                raise ParcError(Diagnostic("P001", ERROR, f"blocks nested more than {MAX_DEPTH} levels deep",
                                           self.span_tok(t.children[0]),
                                           help="blocks hold fields and at most a few blocks; close the blocks"))
            self.blocks += 1
            try:
                return self.block(t)
            finally:
                self.blocks -= 1
        return self.simple(t)

    def block(self, t):
        kind, label, *items = t.children
        lab = lab_span = None
        quoted = False
        if label is not None:
            tok = label.children[0]
            quoted = tok.type == "STRING"
            lab = _unescape(self.token(tok)) if quoted else self.token(tok)
            lab_span = self.span_tok(tok)
        return S.Block(self.token(kind), self.span_tok(kind), lab, lab_span,
                       [self.stmt(c) for c in items], self.span_meta(t.meta), quoted)

    def simple(self, t):
        d = t.data
        if d == "assign":
            key, value = t.children
            ktok = key.children[0]
            quoted = ktok.type == "STRING"
            k = _unescape(self.token(ktok)) if quoted else self.token(ktok)
            return S.Assign(k, self.span_tok(ktok), self.value(value), self.span_meta(t.meta), quoted)
        if d == "on_rule":
            a, b = t.children
            return S.OnRule(self.token(a), self.span_tok(a), self.token(b), self.span_tok(b),
                            self.span_meta(t.meta))
        if d == "use":
            (p,) = t.children
            return S.Use(_unescape(self.token(p)), self.span_meta(t.meta), self.span_tok(p))
        raise AssertionError(f"unknown statement {d}")  # grammar and builder out of step

    depth = 0

    def value(self, t):
        """A value; ``depth`` counts nesting (an operand inside parentheses, a list item, a
        call argument, a sign), not the length of a chain like ``a + b + c``."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                sp = self.span_meta(t.meta)
                raise ParcError(Diagnostic("P001", ERROR, f"value nested more than {MAX_DEPTH} levels deep",
                                           sp, help="write the value without so many parentheses or lists"))
            return self._value(t)
        finally:
            self.depth -= 1

    def chain(self, t):
        """A left-leaning chain of binary operators, built without recursion along the chain:
        its left operands are at the chain's own level, each right operand one level down."""
        spine = []
        while t.data in _OPS:
            spine.append(t)
            t = t.children[0]
        node = self._value(t)  # the leftmost operand: same level as the chain
        for op in reversed(spine):
            node = S.BinOp(_OPS[op.data], node, self.value(op.children[1]), self.span_meta(op.meta))
        return node

    def _value(self, t):
        d = t.data
        sp = self.span_meta(t.meta)
        if d == "number":
            tok = t.children[0]
            return S.Number(_num(self.token(tok)), tok.value, sp)
        if d == "quantity":
            tok = t.children[0]
            m = _UNIT_SPLIT.fullmatch(self.token(tok))
            return S.Quantity(_num(m.group(1)), m.group(2), tok.value, sp)
        if d == "string":
            tok = t.children[0]
            return S.String(_unescape(self.token(tok)), tok.value, sp)
        if d == "true":
            return S.Bool(True, sp)
        if d == "false":
            return S.Bool(False, sp)
        if d == "auto":
            return S.Auto(sp)
        if d == "ref":
            return S.Ref([self.token(c) for c in t.children], sp)
        if d == "call":
            name, *args = t.children
            args = [a for a in args if a is not None]
            return S.Call(self.token(name), [self.value(a) for a in args], sp, self.span_tok(name))
        if d == "list":
            items = [c for c in t.children if c is not None]
            return S.List([self.value(c) for c in items], sp)
        if d in _OPS:
            return self.chain(t)
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
    return offset_position(line_starts(text), offset)


def _syntax_diag(file: str, text: str, exc) -> Diagnostic:
    import lark

    from parc.language.diagnostics import Related

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


def _too_large(text: str, file: str) -> Diagnostic:
    starts = line_starts(text[:MAX_INPUT + 1])
    line, col = offset_position(starts, MAX_INPUT)
    return Diagnostic(
        "P001", ERROR, f"this file is {len(text):,} characters long; parc reads files of at most "
        f"{MAX_INPUT:,} characters (1 MiB)", Span(file, line, col, line, col + 1, MAX_INPUT, MAX_INPUT + 1),
        help="split the spec with `use`; each file has its own limit")


@contextmanager
def _no_cycle_collection():
    """The parse builds a tree of many small objects and no cycles; the cyclic collector would
    walk every live object again and again while it grows, and that cost grows faster than the
    file. It is paused for the parse (and restored as it was)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse_text(text: str, file: str) -> S.Document:
    if len(text) > MAX_INPUT:
        raise ParcError(_too_large(text, file))
    with _no_cycle_collection():
        return _parse_tree(text, file)


def _parse_tree(text: str, file: str) -> S.Document:
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


def _shift(sp: Span, line: int, col: int, off: int) -> Span:
    """A span read in a piece of text that starts at (line, col, off) of the whole file."""
    c0 = sp.column + col - 1 if sp.line == 1 else sp.column
    c1 = sp.end_column + col - 1 if sp.end_line == 1 else sp.end_column
    return Span(sp.file, sp.line + line - 1, c0, sp.end_line + line - 1, c1, sp.start + off, sp.end + off)


MAX_SYNTAX_ERRORS = 200  # syntax errors reported for one file, the first included


def _independent_errors(parser, file: str, text: str, first: Diagnostic) -> list[Diagnostic]:
    """The first syntax error of every other top-level statement: each is parsed on its own,
    so an error in one never causes a follow-on error in another. Each statement is parsed
    once, alone, so the whole pass is linear in the size of the file."""
    import lark

    from parc.language.diagnostics import Related

    if first.code != "P001":
        return []
    chunks = _top_level_chunks(text)
    if not chunks:
        return []
    starts = line_starts(text)
    out = []
    for a, b in chunks:
        if a <= first.span.start < b:
            continue
        piece = text[a:b]
        try:
            parser.parse(piece)
        except lark.exceptions.UnexpectedInput as e:
            line, col = offset_position(starts, a)
            d = _syntax_diag(file, piece, e)
            d.span = _shift(d.span, line, col, a)
            d.related = [Related(_shift(r.span, line, col, a), r.message) for r in d.related]
            out.append(d)
            if len(out) + 1 >= MAX_SYNTAX_ERRORS:  # the first error counts too
                break
    return out


_COMMENT_SCAN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|#[^\n]*')


def comments(text: str) -> list[tuple[int, int, str]]:
    """Every ``#`` comment as (line, column, text), found with the same rules as the lexer:
    strings hide `#`, and only ``\\n`` ends a line (a form feed or vertical tab does not)."""
    out = []
    starts = None
    for m in _COMMENT_SCAN.finditer(text):
        if m.group(0)[0] != "#":
            continue
        if starts is None:
            starts = line_starts(text)
        line, col = offset_position(starts, m.start())
        out.append((line, col, m.group(0).rstrip()))
    return out
