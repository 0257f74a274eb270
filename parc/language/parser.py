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
import threading
from bisect import bisect_right
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, ParcError, Span
from parc.language.recover import MAX_SYNTAX_ERRORS, Braces, Recovery
from parc.language.limits import MAX_DEPTH, MAX_INPUT, MAX_TOKEN
from parc.language.tree import to_syntax

GRAMMAR_DIR = Path(__file__).resolve().parent
GRAMMAR_PATH = GRAMMAR_DIR / "par.lark"
TABLE_PATH = GRAMMAR_DIR / "par_table.json"

__all__ = ["MAX_DEPTH", "MAX_INPUT", "MAX_TOKEN", "MAX_SYNTAX_ERRORS", "parse_text", "comments_of",
           "imports", "shared_parses", "get_parser", "line_starts", "offset_position"]

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
            return lark.Lark._load_from_dict(doc["data"], doc["memo"], lexer_callbacks=_CALLBACKS)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError):
        pass  # a missing or unreadable table: build from the grammar below
    return lark.Lark(grammar, lexer_callbacks=_CALLBACKS, **_LARK_OPTIONS)


# ----------------------------------------------------------------------------- the token stream

class _Stream:
    """What the lexer hands over while one text is parsed: its comments and its braces."""

    __slots__ = ("comments", "braces")

    def __init__(self):
        self.comments: list = []
        self.braces = Braces()


_local = threading.local()  # .stream: the _Stream of the parse running on this thread


def _comment(tok):
    stream = getattr(_local, "stream", None)
    if stream is not None:  # None: lark's parser used directly, outside parse_text
        stream.comments.append(tok)
    return tok


def _lbrace(tok):
    stream = getattr(_local, "stream", None)
    return tok if stream is None else stream.braces.lbrace(tok)


def _rbrace(tok):
    stream = getattr(_local, "stream", None)
    return tok if stream is None else stream.braces.rbrace(tok)


_CALLBACKS = {"COMMENT": _comment, "LBRACE": _lbrace, "RBRACE": _rbrace}


@contextmanager
def _streaming():
    was = getattr(_local, "stream", None)
    stream = _local.stream = _Stream()
    try:
        yield stream
    finally:
        _local.stream = was


def quiet_parse(text: str):
    """lark's parse tree of ``text``, raising lark's own errors (for the hint examples)."""
    with _streaming():
        return get_parser().parse(text)


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts, lines as the lexer counts them (ended by ``\\n`` only)."""
    return [0] + [m.end() for m in re.finditer("\n", text)]


def offset_position(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` given :func:`line_starts`."""
    i = bisect_right(starts, offset) - 1
    return i + 1, offset - starts[i] + 1


# ----------------------------------------------------------------------------- parsing

class SyntaxFailure(ParcError):
    """A text that does not parse; it still carries the comments its token stream held, the
    document of the statements that did parse (``partial``, None when none can be trusted), the
    top-level blocks left out of it (``broken``: (kind, label), None for a `use`; see
    :class:`Recovery` and :mod:`parc.language.resync`) and, for each error whose statement is
    in the document as a broken value, the kind and label of its top-level block with the
    error (``poisoned``)."""

    def __init__(self, diagnostic: Diagnostic, more=None, comments=None, partial=None, broken=(),
                 poisoned=()):
        super().__init__(diagnostic, more)
        self.comments = list(comments or [])
        self.partial = partial
        self.broken = list(broken)
        self.poisoned = list(poisoned)


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
    """Parse ``text``; raise :class:`ParcError` with a ``P001``/``P002`` diagnostic on a syntax error.

    The document's ``comments`` are those of the token stream, as (line, column, text)."""
    memo = _SHARED.get()
    if memo is None:
        return _parse_text(text, file)
    doc = memo.get((file, text))
    if doc is None:
        try:
            doc = memo[(file, text)] = _parse_text(text, file)
        except SyntaxFailure as e:
            memo[("comments", file, text)] = e.comments
            raise
    return doc


def comments_of(text: str, file: str = "<input>") -> list[tuple[int, int, str]]:
    """Every ``#`` comment of ``text`` as (line, column, text), taken from the lexer's token
    stream, whether or not the text parses (a file past ``MAX_INPUT`` is not read: none)."""
    memo = _SHARED.get()
    if memo is not None and ("comments", file, text) in memo:
        return memo[("comments", file, text)]
    try:
        return parse_text(text, file).comments
    except SyntaxFailure as e:
        return e.comments


def imports(text: str, file: str = "<input>") -> list[tuple[str, Span]]:
    """The path of every ``use`` in ``text`` (at any depth) with the span of its string, in
    order; none when the text does not parse."""
    try:
        doc = parse_text(text, file)
    except ParcError:
        return []
    out = []
    todo = list(reversed(doc.items))
    while todo:
        st = todo.pop()
        if isinstance(st, S.Use):
            out.append((st.path, st.path_span))
        elif isinstance(st, S.Block):
            todo.extend(reversed(st.items))
    return out


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
        raise SyntaxFailure(_too_large(text, file))
    with _no_cycle_collection(), _streaming() as stream:
        return _parse_tree(text, file, stream)


def _partial(recovery: Recovery, tree, file: str) -> S.Document | None:
    """The document of the statements that parsed around the syntax errors, or None."""
    import lark

    if not recovery.trusted():   # unbalanced braces: what follows the first error may be swallowed
        return None
    try:
        return to_syntax(lark.Tree("start", recovery.statements(tree)), file)
    except ParcError:
        return None


def _comment_list(stream: _Stream) -> list[tuple[int, int, str]]:
    return [(t.line, t.column, t.value.rstrip()) for t in stream.comments]


def _round(text: str, file: str, braces: Braces):
    """One parse with recovery at top-level statements: (lark tree or None, the recovery)."""
    import lark

    recovery = Recovery(file, text, braces)
    tree = None
    try:
        tree = get_parser().parse(text, on_error=recovery)
    except lark.exceptions.UnexpectedInput:
        pass
    return tree, recovery


def _again(file: str):
    """A parse of a blanked text for :func:`parc.language.resync.resync`: (tree, errors, trusted)."""
    def parse(text: str):
        with _streaming() as stream:
            tree, rec = _round(text, file, stream.braces)
        return tree, rec.diagnostics(), rec.trusted()
    return parse


def _fail(text: str, file: str, recovery: Recovery, tree, comments) -> SyntaxFailure:
    """The failure of a text with syntax errors: statement by statement where each can be told
    (:mod:`parc.language.resync`), else what recovery at top-level statements kept."""
    from parc.language.resync import resync

    found = recovery.diagnostics()
    again = None
    if recovery.trusted() and len(found) < MAX_SYNTAX_ERRORS and all(d.code == "P001" for d in found):
        try:
            again = resync(text, file, found, _again(file))
        except (ParcError, RecursionError):
            again = None
    if again is None:
        return SyntaxFailure(found[0], found[1:], comments, _partial(recovery, tree, file), recovery.broken)
    diags = again.diagnostics
    return SyntaxFailure(diags[0], diags[1:], comments, again.document, again.broken, again.poisoned)


def _parse_tree(text: str, file: str, stream: _Stream) -> S.Document:
    try:
        tree, recovery = _round(text, file, stream.braces)
    except RecursionError:
        raise SyntaxFailure(Diagnostic("P001", ERROR, "expression nested too deeply", Span.point(file)),
                            comments=_comment_list(stream)) from None
    comments = _comment_list(stream)
    if recovery.diagnostics():
        raise _fail(text, file, recovery, tree, comments)
    try:
        doc = to_syntax(tree, file)
    except ParcError as e:
        raise SyntaxFailure(e.diagnostic, e.more, comments) from None
    doc.comments = comments
    return doc
