"""Parse tree → syntax nodes: one transformer method per grammar rule, spans from lark's meta.

The transformer works bottom-up without recursion (``Transformer_NonRecursive``), so a flat
chain of thousands of operators or a tower of blocks costs no Python stack. The parser's
limits are judged on the finished nodes: each value node's *nesting* (how many levels of
parentheses-as-operands, lists, calls and signs it holds) and each block's height are kept
beside the nodes, and a value or block past ``MAX_DEPTH`` is reported at the node where the
reading from the top first goes past the limit, as a top-down reader would find it. Parentheses
around a left operand are no nesting: ``((8 + 0) + 0)`` is a chain.
"""
from __future__ import annotations

import re
from fractions import Fraction

from lark import Transformer_NonRecursive, v_args
from lark.exceptions import VisitError

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, ParcError, Span
from parc.language.limits import MAX_DEPTH, MAX_TOKEN

_UNIT_SPLIT = re.compile(r"([0-9][0-9_]*(?:\.[0-9]+)?)(.*)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}
_ESCAPE = re.compile(r"\\(.)", re.S)
_KIND = {"STRING": "string", "NAME": "name", "NUMBER": "number", "QUANTITY": "value"}


def _num(text: str):
    t = text.replace("_", "")
    return Fraction(t) if "." in t else int(t)


def _unescape(s: str) -> str:
    body = s[1:-1]
    if "\\" not in body:
        return body
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


@v_args(meta=True)
class ToSyntax(Transformer_NonRecursive):
    """One method per rule of ``par.lark``; each returns the node of :mod:`parc.language.syntax`."""

    def __init__(self, file: str):
        super().__init__(visit_tokens=False)
        self.file = file
        self.nest: dict[int, int] = {}  # id(value node) -> levels of nesting inside it
        self.height: dict[int, int] = {}  # id(block) -> blocks nested in it, itself included
        self.problems: list[Diagnostic] = []  # tokens past MAX_TOKEN, in the order met

    def _call_userfunc(self, tree, new_children=None):
        """Each rule's method, called as ``v_args(meta=True)`` declares it: lark's own dispatch
        wraps the method anew at every node, a third of the cost of a parse."""
        children = tree.children if new_children is None else new_children
        return _RULES[tree.data](self, tree.meta, children)

    # -- spans and tokens
    def _tok_span(self, t) -> Span:
        return Span(self.file, t.line, t.column, t.end_line, t.end_column, t.start_pos, t.end_pos)

    def _span(self, m) -> Span:
        if m.empty:
            return Span.point(self.file)
        return Span(self.file, m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)

    def _text(self, t) -> str:
        """A token's text; one longer than the grammar reads is noted as a problem (the document
        is then refused, so its cut text is never read)."""
        if len(t.value) > MAX_TOKEN:
            self.problems.append(Diagnostic(
                "P001", ERROR, f"this {_KIND.get(t.type, 'token')} is {len(t.value):,} characters long; "
                f"parc reads tokens of at most {MAX_TOKEN:,} characters", self._tok_span(t),
                help="shorten it; a spec names things and sizes, it does not carry data"))
            return t.value[:MAX_TOKEN]
        return t.value

    def _quoted(self, t) -> tuple[str, bool]:
        quoted = t.type == "STRING"
        return (_unescape(self._text(t)) if quoted else self._text(t)), quoted

    def _value(self, node, nest: int):
        self.nest[id(node)] = nest
        return node

    def _inside(self, values) -> int:
        """Nesting of a node whose values each sit one level down (items, arguments, a sign)."""
        return 1 + max((self.nest[id(v)] for v in values), default=-1)

    # -- statements
    def start(self, meta, items):
        return S.Document(self.file, items)

    def use(self, meta, children):
        (p,) = children
        return S.Use(_unescape(self._text(p)), self._span(meta), self._tok_span(p))

    def block(self, meta, children):
        kind, label, *items = children
        lab = lab_span = None
        quoted = False
        if label is not None:
            lab, quoted = self._quoted(label)
            lab_span = self._tok_span(label)
        b = S.Block(self._text(kind), self._tok_span(kind), lab, lab_span, items, self._span(meta), quoted)
        self.height[id(b)] = 1 + max((self.height[id(i)] for i in items if isinstance(i, S.Block)), default=0)
        return b

    def label(self, meta, children):
        return children[0]

    def key(self, meta, children):
        return children[0]

    def assign(self, meta, children):
        ktok, value = children
        k, quoted = self._quoted(ktok)
        return S.Assign(k, self._tok_span(ktok), value, self._span(meta), quoted)

    def on_rule(self, meta, children):
        a, b = children
        return S.OnRule(self._text(a), self._tok_span(a), self._text(b), self._tok_span(b), self._span(meta))

    # -- values
    def number(self, meta, children):
        (tok,) = children
        return self._value(S.Number(_num(self._text(tok)), tok.value, self._span(meta)), 0)

    def quantity(self, meta, children):
        (tok,) = children
        m = _UNIT_SPLIT.fullmatch(self._text(tok))
        return self._value(S.Quantity(_num(m.group(1)), m.group(2), tok.value, self._span(meta)), 0)

    def string(self, meta, children):
        (tok,) = children
        return self._value(S.String(_unescape(self._text(tok)), tok.value, self._span(meta)), 0)

    def true(self, meta, children):
        return self._value(S.Bool(True, self._span(meta)), 0)

    def false(self, meta, children):
        return self._value(S.Bool(False, self._span(meta)), 0)

    def auto(self, meta, children):
        return self._value(S.Auto(self._span(meta)), 0)

    def ref(self, meta, children):
        return self._value(S.Ref([self._text(c) for c in children], self._span(meta)), 0)

    def call(self, meta, children):
        name, *args = children
        args = [a for a in args if a is not None]
        return self._value(S.Call(self._text(name), args, self._span(meta), self._tok_span(name)),
                           self._inside(args))

    def list(self, meta, children):
        items = [c for c in children if c is not None]
        return self._value(S.List(items, self._span(meta)), self._inside(items))

    def neg(self, meta, children):
        return self._value(S.Neg(children[0], self._span(meta)), self._inside(children))

    def _binop(self, op: str, meta, children):
        left, right = children
        nest = max(self.nest[id(left)], 1 + self.nest[id(right)])  # the left operand: same level
        return self._value(S.BinOp(op, left, right, self._span(meta)), nest)

    def add(self, meta, children):
        return self._binop("+", meta, children)

    def sub(self, meta, children):
        return self._binop("-", meta, children)

    def mul(self, meta, children):
        return self._binop("*", meta, children)

    def div(self, meta, children):
        return self._binop("/", meta, children)

    def mod(self, meta, children):
        return self._binop("%", meta, children)

    # -- limits
    def _document(self, tree) -> S.Document:
        """The document of ``tree``; raises ParcError on the first node past a limit."""
        try:
            doc = self.transform(tree)
        except VisitError as e:  # lark wraps what a method raised
            raise e.orig_exc from None
        found = list(self.problems)
        found += self._too_deep(doc.items)
        if found:
            raise ParcError(min(found, key=lambda d: d.span.start))
        return doc

    def _too_deep(self, items) -> list[Diagnostic]:
        out = []
        for st in items:
            if isinstance(st, S.Block) and self.height[id(st)] > MAX_DEPTH:
                out.append(self._deep_block(st))
            elif isinstance(st, S.Block):
                out += self._too_deep(st.items)
            elif isinstance(st, S.Assign) and self.nest[id(st.value)] >= MAX_DEPTH:
                out.append(self._deep_value(st.value))
        return out

    def _deep_block(self, b: S.Block) -> Diagnostic:
        for depth in range(1, MAX_DEPTH + 1):  # b sits at `depth`; go to the first too-tall child
            b = next(c for c in b.items if isinstance(c, S.Block)
                     and depth + self.height[id(c)] > MAX_DEPTH)
        return Diagnostic("P001", ERROR, f"blocks nested more than {MAX_DEPTH} levels deep", b.kind_span,
                          help="blocks hold fields and at most a few blocks; close the blocks")

    def _deep_value(self, v) -> Diagnostic:
        level = 1  # the assignment's value
        while level <= MAX_DEPTH:
            v, level = next((c, lv) for c, lv in self._operands(v, level)
                            if lv + self.nest[id(c)] > MAX_DEPTH)
        return Diagnostic("P001", ERROR, f"value nested more than {MAX_DEPTH} levels deep", v.span,
                          help="write the value without so many parentheses or lists")

    @staticmethod
    def _operands(v, level: int):
        """The values inside ``v``, in reading order, with the level each sits at."""
        if isinstance(v, S.BinOp):
            return [(v.left, level), (v.right, level + 1)]
        if isinstance(v, S.Call):
            return [(a, level + 1) for a in v.args]
        if isinstance(v, S.List):
            return [(a, level + 1) for a in v.items]
        if isinstance(v, S.Neg):
            return [(v.operand, level + 1)]
        return []


_RULES = {name: w.base_func for name, w in vars(ToSyntax).items() if hasattr(w, "visit_wrapper")}


def to_syntax(tree, file: str) -> S.Document:
    """The document of lark's parse ``tree``; raises ParcError on the first node past a limit."""
    return ToSyntax(file)._document(tree)
