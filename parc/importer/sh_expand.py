"""Shell expansion without running anything (bash(1), EXPANSION): parameters, arrays, arithmetic,
word splitting and quote removal over :mod:`parc.importer.sh_values` text; ``$(...)`` is never run
and stays an unknown part. Also the tests of ``[``, ``[[`` and ``test`` (bash(1), CONDITIONAL
EXPRESSIONS), answered True, False or None where the answer depends on what the file cannot know."""
from __future__ import annotations

import fnmatch
import re

from parc.importer.sh_tree import Arith, CmdSub, Lit, Param, Unknown, Word
from parc.importer.sh_values import U, Arg, Text, join, known, lit, unknown

MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
_MARK = re.compile(MARK_OPEN + r"(\d+)" + MARK_CLOSE)
BREAK = object()        # a field boundary inside a word ("${A[@]}" in quotes)


class Scope:
    """What expansion reads: variables (a name -> Text, or list[Text] for an array), the
    positional parameters (None: not known), the marks standing for unknown parts of a text
    that is read again as a script (``bash -c``, ``eval``, a batch script's body)."""

    def __init__(self, variables: dict | None = None, positional: list | None = None):
        self.vars: dict = dict(variables or {})
        self.positional = positional
        self.marks: list[U] = []
        self.notes: list[str] = []
        self.defaults_taken: dict[str, Text] = {}

    def mark(self, t: Text) -> str:
        """``t`` as plain text, each unknown part replaced by a mark :func:`unmark` reads back."""
        out = []
        for p in t:
            if isinstance(p, U):
                self.marks.append(p)
                out.append(f"{MARK_OPEN}{len(self.marks) - 1}{MARK_CLOSE}")
            else:
                out.append(p)
        return "".join(out)

    def unmark(self, s: str) -> Text:
        if MARK_OPEN not in s:
            return lit(s)
        out, at = [], 0
        for m in _MARK.finditer(s):
            out.append(s[at:m.start()])
            i = int(m.group(1))
            out.append(self.marks[i] if i < len(self.marks) else U(m.group(0)))
            at = m.end()
        out.append(s[at:])
        return join([(p,) for p in out])


def _value(scope: Scope, name: str, index: str = "") -> Text | list | None:
    """A variable's value: Text, a list of Text for a whole array, None when unset."""
    if name.isdigit():
        n = int(name)
        if n == 0:
            return lit("script")
        if scope.positional is None:
            return None
        return scope.positional[n - 1] if n <= len(scope.positional) else None
    if name in ("@", "*"):
        return list(scope.positional) if scope.positional is not None else None
    if name == "#":
        return lit(str(len(scope.positional))) if scope.positional is not None else None
    if name == "?":
        return lit("0")
    v = scope.vars.get(name)
    if isinstance(v, list):
        if index in ("@", "*"):
            return v
        if index and index.isdigit():
            i = int(index)
            return v[i] if i < len(v) else None
        return v[0] if v else lit("")
    return v


def _param(p: Param, scope: Scope) -> Text | list:
    """A parameter expansion: Text, or a list of Text (each its own field) for ``${A[@]}``/``$@``."""
    if p.op == "?" or not p.name:
        return unknown(p.src)
    v = _value(scope, p.name, p.index or ("@" if p.op == "[@]" else ""))
    if p.op == "#":
        if isinstance(v, list):
            return lit(str(len(v)))
        return lit(str(len(known(v)))) if v is not None and known(v) is not None else unknown(p.src)
    if p.op in ("", "[@]"):
        if v is None:
            return [] if p.name in ("@", "*") or p.op == "[@]" else unknown(p.src)
        return v
    if isinstance(v, list):
        v = join(v) if v else lit("")
    unset = v is None or (p.op.startswith(":") and known(v) == "")
    if p.op in (":-", "-", ":=", "="):
        if not unset:
            return v
        d = expand_scalar(p.arg, scope) if p.arg else lit("")
        if p.op in (":=", "="):
            scope.vars[p.name] = d
        if v is None:
            scope.defaults_taken[p.name] = d
        return d
    if p.op in (":+", "+"):
        if v is not None and any(isinstance(x, U) for x in v):
            return unknown(p.src)
        return lit("") if unset else (expand_scalar(p.arg, scope) if p.arg else lit(""))
    return unknown(p.src)   # ${X:?message}: the file's own check


def _chunks(word: Word, scope: Scope) -> list:
    """(Text, splittable) chunks of a word and BREAKs between the fields of a quoted array."""
    out: list = []
    for part in word.parts:
        if isinstance(part, Lit):
            out.append((scope.unmark(part.text), False, part.quoted))
        elif isinstance(part, Unknown):
            out.append((unknown(part.text), False, True))
        elif isinstance(part, CmdSub):
            out.append((unknown(f"$({part.text})" if not part.text.startswith("(") else f"${part.text}"),
                        not part.quoted, part.quoted))
        elif isinstance(part, Arith):
            out.append((arith(part.text, scope), not part.quoted, part.quoted))
        else:
            v = _param(part, scope)
            if isinstance(v, list):
                for i, t in enumerate(v):
                    if i:
                        out.append(BREAK if part.quoted else (lit(" "), True, False))
                    out.append((t, not part.quoted, part.quoted))
                if not v and part.quoted:
                    out.append(("EMPTY-ARRAY", False, False))
            else:
                out.append((v, not part.quoted, part.quoted))
    return out


def expand(word: Word, scope: Scope, file: str = "") -> list[Arg]:
    """The fields a word expands to, split and unquoted as the shell would."""
    fields: list[list] = [[]]
    real = [False]
    only_empty_array = False
    for c in _chunks(word, scope):
        if c is BREAK:
            fields.append([])
            real.append(True)
            continue
        t, splittable, quoted = c
        if t == "EMPTY-ARRAY":
            only_empty_array = True
            continue
        if quoted:
            real[-1] = True
        if not splittable:
            fields[-1].append(t)
            continue
        pieces = _split_keep(t)
        for i, (piece, sep_before) in enumerate(pieces):
            if sep_before and (fields[-1] or real[-1]):
                fields.append([])
                real.append(False)
            if piece:
                fields[-1].append(piece)
    out = []
    src = word.source()
    for f, r in zip(fields, real):
        t = join(f)
        if t or r and not (only_empty_array and not t):
            out.append(Arg(t, src, word.line, file))
    return out


def _split_keep(t: Text) -> list[tuple[Text, bool]]:
    """Unquoted text cut at blanks: (piece, whether a blank comes before it)."""
    out: list[tuple[Text, bool]] = []
    cur: list = []
    sep = False
    for p in t:
        if isinstance(p, U):
            cur.append(p)
            continue
        for j, piece in enumerate(re.split(r"([ \t\n]+)", p)):
            if j % 2:
                out.append((tuple(cur), sep))
                cur, sep = [], True
            elif piece:
                cur.append(piece)
    out.append((tuple(cur), sep))
    return out


def expand_scalar(word: Word | None, scope: Scope) -> Text:
    """A word expanded without splitting (an assignment's value, a case subject)."""
    if word is None:
        return lit("")
    parts = []
    for c in _chunks(word, scope):
        if c is BREAK:
            parts.append(lit(" "))
        elif c[0] != "EMPTY-ARRAY":
            parts.append(c[0])
    return join(parts)


def expand_all(words: list[Word], scope: Scope, file: str = "") -> list[Arg]:
    return [a for w in words for a in expand(w, scope, file)]


# --- arithmetic ---------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|<=|>=|==|!=|&&|\|\||<<|>>|[-+*/%()<>!]))")


def arith(text: str, scope: Scope) -> Text:
    """``$(( ... ))`` over integers; unknown where a name it reads is unknown."""
    src = "$((" + text + "))"
    # parameter expansions inside are expanded first
    from parc.importer.sh_parse import _Inner

    try:
        inner = expand_scalar(Word(_Inner(text, 0).double_parts(), 0), scope)
    except ValueError:
        return unknown(src)
    s = known(inner)
    if s is None:
        return unknown(src)
    toks, pos = [], 0
    while pos < len(s.rstrip()):
        m = _TOKEN.match(s, pos)
        if not m:
            return unknown(src)
        num, name, op = m.groups()
        if name:
            v = _value(scope, name)
            v = known(v) if isinstance(v, tuple) else ("0" if v is None else None)
            if v is None or not re.fullmatch(r"-?\d+", v.strip()):
                return unknown(src)
            num = v.strip()
        toks.append(int(num) if num is not None else op)
        pos = m.end()
    try:
        value, rest = _expr(toks, 0)
    except (IndexError, ZeroDivisionError, TypeError, ValueError, OverflowError):
        return unknown(src)
    return lit(str(value)) if not rest else unknown(src)


_LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]


def _expr(toks: list, level: int):
    if level == len(_LEVELS):
        return _unary(toks)
    left, toks = _expr(toks, level + 1)
    while toks and toks[0] in _LEVELS[level]:
        op = toks[0]
        right, toks = _expr(toks[1:], level + 1)
        left = _apply(op, left, right)
    return left, toks


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "/" else a - q * b
    if abs(a) > 1 << 62 or abs(b) > 1 << 62:
        raise OverflowError
    return {"+": a + b, "-": a - b, "*": a * b, "==": int(a == b), "!=": int(a != b), "<": int(a < b),
            "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b), "&&": int(bool(a and b)),
            "||": int(bool(a or b))}[op]


def _unary(toks: list):
    t = toks[0]
    if t == "-":
        v, rest = _unary(toks[1:])
        return -v, rest
    if t == "+":
        return _unary(toks[1:])
    if t == "!":
        v, rest = _unary(toks[1:])
        return int(not v), rest
    if t == "(":
        v, rest = _expr(toks[1:], 0)
        if not rest or rest[0] != ")":
            raise ValueError
        return _power(v, rest[1:])
    if isinstance(t, int):
        return _power(t, toks[1:])
    raise ValueError


def _power(v: int, rest: list):
    if rest and rest[0] == "**":
        e, rest = _unary(rest[1:])
        if e < 0 or e > 64:
            raise OverflowError
        return v ** e, rest
    return v, rest


# --- tests --------------------------------------------------------------------------------------
_FILE_TESTS = {"-f", "-e", "-d", "-x", "-s", "-r", "-w", "-L", "-h", "-a"}


def test(args: list[Text]) -> bool | None:
    """``[ ... ]``/``test``/``[[ ... ]]`` over expanded arguments: True, False or None (unknown).
    A file test is read as true: the script is run where the files it names are."""
    if args and known(args[0]) == "!":
        r = test(args[1:])
        return None if r is None else not r
    for i, a in enumerate(args):
        if known(a) in ("-o", "||") and i:
            return _or(test(args[:i]), test(args[i + 1:]))
    for i, a in enumerate(args):
        if known(a) in ("-a", "&&") and i:
            return _and(test(args[:i]), test(args[i + 1:]))
    if len(args) >= 2 and known(args[0]) == "(" and known(args[-1]) == ")":
        return test(args[1:-1])
    if len(args) == 1:
        s = known(args[0])
        return None if s is None else s != ""
    if len(args) == 2:
        op, s = known(args[0]), known(args[1])
        if op in _FILE_TESTS:
            return True
        if op in ("-n", "-z"):
            if s is None:
                return None
            return (s != "") == (op == "-n")
        return None
    if len(args) == 3:
        return _binary(known(args[1]), args[0], args[2])
    return None


def _binary(op: str | None, a: Text, b: Text) -> bool | None:
    x, y = known(a), known(b)
    if x is None or y is None or op is None:
        return None
    if op in ("=", "=="):
        return fnmatch.fnmatchcase(x, y)
    if op == "!=":
        return not fnmatch.fnmatchcase(x, y)
    if op == "=~":
        try:
            return re.search(y, x) is not None
        except re.error:
            return None
    nums = {"-eq": "==", "-ne": "!=", "-lt": "<", "-le": "<=", "-gt": ">", "-ge": ">="}
    if op in nums:
        try:
            return bool(_apply(nums[op], int(x.strip() or 0), int(y.strip() or 0)))
        except ValueError:
            return None
    if op in ("<", ">"):
        return x < y if op == "<" else x > y
    return None


def _or(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _and(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def words_of(args: list[Arg]) -> list[Text]:
    return [a.text for a in args]
