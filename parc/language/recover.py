"""Syntax errors: what each says, and recovery so that one run reports every independent one.

The parser runs with lark's ``on_error``: at an error, :class:`Recovery` records a ``P001``
diagnostic (what was found, what could come next, a hint), then reads tokens on to the end of
the top-level statement that failed (a new line or `;` outside every brace, or a `}` that
closes nothing), puts the parser back at the start of a statement and lets it go on. An
error in one statement so never causes a follow-on error in another. When the braces of the
file do not balance, statement ends cannot be trusted and only the first error is kept; a
file that ends inside a block is the one ``P002`` error "block ... is never closed".

Recovery also keeps what did parse: the top-level statements completed before each error
(:meth:`Recovery.statements`) and the kind of each statement that failed (:attr:`broken`:
``("train", None)``, ``("target", "vllm")``, or None when it cannot be told), so that a syntax
error in one block need not hide the findings of the others (``parc.resolve.loader``).

Hints come from ``syntax_hints.toml`` (data): broken examples, each with the hint it earns.
An error gets the hint of an example that fails in the same parser state on the same kind of
token. A hint that names one change carries it as ``fix`` (``newline``: the statement moves to a
line of its own; ``before``: text to insert before the misplaced token), which becomes the
diagnostic's structured edit. This is lark's ``match_examples`` idea keyed by the state alone: lark's own method also
compares the depth of the parser's stack, so an example would match only at the nesting depth
it was written at.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from parc.language.diagnostics import ERROR, Diagnostic, Edit, Fix, Related, Span

HINTS_PATH = Path(__file__).resolve().parent / "syntax_hints.toml"
MAX_SYNTAX_ERRORS = 200  # syntax errors reported for one file, the first included

_TERMINAL_WORDS = {
    "NAME": "a name", "NUMBER": "a number", "QUANTITY": "a value with a unit",
    "STRING": "a string", "LBRACE": "`{`", "RBRACE": "`}`", "EQUAL": "`=`",
    "LSQB": "`[`", "RSQB": "`]`", "LPAR": "`(`", "RPAR": "`)`", "COMMA": "`,`",
    "DOT": "`.`", "SEMICOLON": "`;`", "_NL": "a new line", "$END": "the end of the file",
    "PLUS": "`+`", "MINUS": "`-`", "STAR": "`*`", "SLASH": "`/`", "PERCENT": "`%`",
    "TRUE": "`true`", "FALSE": "`false`", "AUTO": "`auto`", "ON": "`on`", "USE": "`use`",
}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "DOT"}
_STATEMENT_ENDS = {"_NL", "SEMICOLON"}
_STATEMENTS = {"block", "assign", "on_rule", "use"}   # the grammar's statement rules


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


class Braces:
    """The braces met in the token stream (fed by the lexer): the ``{`` still open, and whether
    the last ``}`` closed nothing."""

    __slots__ = ("open", "stray")

    def __init__(self):
        self.open: list = []
        self.stray = False

    def lbrace(self, tok):
        self.open.append(tok)
        return tok

    def rbrace(self, tok):
        if self.open:
            self.open.pop()
        else:
            self.stray = True
        return tok


@lru_cache(maxsize=1)
def hint_table() -> dict:
    """(parser state, token type) → hint (its ``help`` and ``fix``), from the examples of
    ``syntax_hints.toml``."""
    import tomllib

    import lark

    from parc.language.parser import quiet_parse

    with open(HINTS_PATH, "rb") as f:
        data = tomllib.load(f)
    table: dict = {}
    for entry in data["hint"]:
        for example in entry["examples"]:
            try:
                quiet_parse(example)
            except lark.UnexpectedToken as e:
                table.setdefault((e.state.position, e.token.type), entry)
                continue
            except lark.UnexpectedInput:
                pass
            raise ValueError(f"syntax_hints.toml: the example {example!r} does not end in a misplaced token")
    return table


def _span_at(file: str, text: str, off: int) -> Span:
    from parc.language.parser import line_starts, offset_position

    line, col = offset_position(line_starts(text), off)
    return Span(file, line, col, line, col + 1, off, off + 1)


def _unexpected_character(file: str, text: str, exc) -> Diagnostic:
    off = exc.pos_in_stream
    ch = text[off] if off < len(text) else ""
    line, col = exc.line, exc.column
    span = Span(file, line, col, line, col + 1, off, off + 1)
    if ch == '"':
        eol = text.find("\n", off)
        eol = len(text) if eol < 0 else eol
        end = off + 1 + len(text[off + 1:eol].rstrip(" \t\r})]"))  # before the brackets that close the line
        return Diagnostic("P001", ERROR, "unterminated string: a string must close on the same line",
                          span, help='close it with `"`',
                          fixes=[Fix('close the string with `"`', (Edit(Span.of(file, text, end, end), '"'),))])
    shown = repr(ch)[1:-1]
    return Diagnostic("P001", ERROR, f"unexpected character `{shown}`; expected {_words(exc.allowed or [])}",
                      span)


def syntax_diag(file: str, text: str, exc, braces: Braces) -> Diagnostic:
    """The diagnostic for one lark error, judged before the parser moves on."""
    import lark

    if isinstance(exc, lark.UnexpectedCharacters):
        return _unexpected_character(file, text, exc)
    if not isinstance(exc, lark.UnexpectedToken):
        return Diagnostic("P001", ERROR, f"cannot parse this file: {exc}", Span.point(file))
    tok = exc.token
    expected = {e for e in exc.expected if not e.startswith("__")}
    try:  # the tokens the parser really accepts here (LALR's lookahead set is wider)
        acc = {e for e in exc.interactive_parser.accepts() if not e.startswith("__")}
        expected = acc or expected
    except Exception:
        pass
    if tok.type == "$END":
        span = _span_at(file, text, len(text))
        if "RBRACE" in expected and braces.open:
            lb = braces.open[-1]
            head_start = text.rfind("\n", 0, lb.start_pos) + 1
            return Diagnostic("P002", ERROR, f"block `{text[head_start:lb.start_pos].strip()}` opened here "
                              "is never closed", _span_at(file, text, lb.start_pos),
                              help="add `}` at the end of the block", related=[Related(span, "the file ends here")],
                              fixes=[_close_block(file, text, lb.start_pos, head_start)])
    else:
        span = Span(file, tok.line, tok.column, tok.end_line or tok.line,
                    tok.end_column or tok.column + 1, tok.start_pos or 0, tok.end_pos or 0)
    hint = hint_table().get((exc.state.position, tok.type)) if exc.state is not None else None
    fixes = [f for f in [_hint_fix(file, text, hint, span)] if f] if hint else []
    return Diagnostic("P001", ERROR, f"expected {_words(expected)}, found {_found(tok)}", span,
                      help=hint["help"] if hint else None, fixes=fixes)


def _empty(at: Span) -> Span:
    """The empty span at the start of ``at``: where an edit inserts."""
    return Span(at.file, at.line, at.column, at.line, at.column, at.start, at.start)


def _indent(text: str, off: int) -> str:
    start = text.rfind("\n", 0, off) + 1
    line = text[start:off]
    return line[:len(line) - len(line.lstrip(" \t"))]


def _hint_fix(file: str, text: str, hint: dict, span: Span) -> Fix | None:
    """The change a hint names, at the misplaced token ``span``."""
    how = hint.get("fix") or {}
    if how.get("newline"):
        a = span.start
        while a > 0 and text[a - 1] in " \t;":
            a -= 1
        gap = Span.of(file, text, a, span.start)
        head = text[text.rfind("\n", 0, a) + 1:a]
        if head.count("{") > head.count("}"):  # a block on one line: keep it there
            return Fix("separate the statements with `;`", (Edit(gap, "; "),))
        return Fix("move it to a line of its own", (Edit(gap, "\n" + _indent(text, a)),))
    if "before" in how:
        return Fix(f"insert `{how['before'].strip()}`", (Edit(_empty(span), how["before"]),))
    return None


def _close_block(file: str, text: str, brace: int, head_start: int) -> Fix:
    """`}` after the block's last line: before the next line that starts at the block's own
    indentation (the next block), else at the end of the file."""
    indent = _indent(text, head_start + 1) if head_start < len(text) else ""
    at, pos = len(text), text.find("\n", brace)
    while 0 <= pos < len(text):
        line_end = text.find("\n", pos + 1)
        line = text[pos + 1:len(text) if line_end < 0 else line_end]
        body = line.strip()
        if body and not body.startswith("#") and not line.startswith(indent + " ") \
                and not line.startswith(indent + "\t") and line.startswith(indent):
            at = pos + 1
            while at > 1 and text[at - 2] == "\n" and text[:at - 1].strip():  # above the blank lines
                at -= 1
            break
        pos = line_end
    new = "}\n" if at == 0 or text[at - 1] == "\n" else "\n}\n"
    return Fix("close the block with `}`", (Edit(Span.of(file, text, at, at), new),))


class Recovery:
    """lark's ``on_error`` handler: records each error and restarts at the next statement."""

    def __init__(self, file: str, text: str, braces: Braces):
        self.file, self.text, self.braces = file, text, braces
        self.found: list[Diagnostic] = []
        self.kept: list = []            # lark trees of the top-level statements completed so far
        self.broken: list[tuple[str, str | None] | None] = []

    def __call__(self, exc) -> bool:
        self.found.append(syntax_diag(self.file, self.text, exc, self.braces))
        ip = exc.interactive_parser
        self._salvage(ip.parser_state.value_stack)
        if self.found[-1].code != "P001" or len(self.found) >= MAX_SYNTAX_ERRORS:
            self._skip(ip, exc, to_end=True)
            return False
        if not self._skip(ip, exc, to_end=False):
            return False
        ps = ip.parser_state
        ps.state_stack[:] = [ps.parse_conf.start_state]
        del ps.value_stack[:]
        return True

    def diagnostics(self) -> list[Diagnostic]:
        if self.braces.open and len(self.found) > 1:
            return self.found[:1]  # statement ends cannot be trusted: only the first error
        return self.found

    def trusted(self) -> bool:
        """Whether the statements kept after the first error can be trusted (balanced braces)."""
        return not self.braces.open

    def statements(self, tree) -> list:
        """The top-level statements that parsed: those kept at each error, then those of the
        final ``tree`` (the statements after the last error), in file order."""
        out = list(self.kept)
        if tree is not None:
            _flatten(tree.children, out)
        return out

    def _salvage(self, stack: list) -> None:
        """Keep the completed statements at the bottom of the parser's value stack (those before
        the failing one) and note the kind of the one that failed."""
        from lark import Token, Tree

        done: list = []
        i = 0
        for i, v in enumerate(stack):
            if isinstance(v, Tree) and (v.data in _STATEMENTS or str(v.data).startswith("_")):
                _flatten([v], done)
            elif not (isinstance(v, Token) and v.type in _STATEMENT_ENDS):
                break
        else:
            i = len(stack)
        self.kept += done
        rest = stack[i:]
        kind = None
        if rest and isinstance(rest[0], Token) and rest[0].type == "NAME":
            label = rest[1] if len(rest) > 1 else None
            name = (label.children[0] if isinstance(label, Tree) and label.data == "label" and label.children
                    else label if isinstance(label, Token) and label.type in ("NAME", "STRING") else None)
            name = str(name).strip('"') if name is not None else None
            if len(rest) == 1 or name is not None or (isinstance(rest[1], Token) and rest[1].type == "LBRACE"):
                kind = (str(rest[0]), name)
        self.broken.append(kind)

    def _skip_characters(self, state, at_quote: bool):
        """Past a character no token starts with; past the rest of the line after a `"` that
        is never closed (a string never spans lines)."""
        p = state.line_ctr.char_pos
        text = state.text.text
        q = p + 1
        if at_quote:
            nl = text.find("\n", p)
            q = len(text) if nl < 0 else nl
        state.line_ctr.feed(text[p:q])

    def _end_of_statement(self, tok) -> bool:
        if tok.type in _STATEMENT_ENDS:
            return not self.braces.open
        if tok.type == "RBRACE" and self.braces.stray:
            self.braces.stray = False
            return True
        return False

    def _skip(self, ip, exc, to_end: bool) -> bool:
        """Read tokens to the end of the failed statement (or of the file); False at the end of
        the file. The lexer's callbacks see every token, so comments are still collected."""
        import lark

        state = ip.lexer_thread.state
        if isinstance(exc, lark.UnexpectedCharacters):
            self._skip_characters(state, self.text[exc.pos_in_stream:exc.pos_in_stream + 1] == '"')
        elif exc.token.type == "$END":
            return False
        elif not to_end and self._end_of_statement(exc.token):
            return True
        self.braces.stray = False
        lexer = ip.lexer_thread.lexer
        lexer = getattr(lexer, "root_lexer", lexer)
        while True:
            try:
                tok = lexer.next_token(state, ip.parser_state)
            except EOFError:
                return False
            except lark.UnexpectedCharacters as e:
                self._skip_characters(state, self.text[e.pos_in_stream:e.pos_in_stream + 1] == '"')
                continue
            if not to_end and self._end_of_statement(tok):
                return True


def _flatten(items, out: list) -> None:
    """Append the statement trees among ``items``, looking into the grammar's inlined helpers."""
    from lark import Tree

    for v in items:
        if isinstance(v, Tree):
            if v.data in _STATEMENTS:
                out.append(v)
            elif str(v.data).startswith("_") or v.data == "start":
                _flatten(v.children, out)
