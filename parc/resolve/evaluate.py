"""Values of the merged blocks: expressions, references, units and ranges, computed exactly.

Numbers stay integers or fractions until a field takes them (a ``frac`` becomes a float), so
``80GB / 8`` is exact and ``7 / 2`` of a count is an error rather than 3. A value that failed
is poisoned: it is reported once, and everything computed from it stays silent.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, NoReturn

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, Fix, ParcError, Span, replace_with
from parc.model import fields as SC
from parc.words import count

MAX_MAGNITUDE = 10**60  # the largest number (and denominator) a spec computes with
_UNIT_KIND = {"int": "count", "int_or_auto": "count", "frac": None, "bytes": "bytes",
              "bandwidth": "bandwidth", "flops": "flops"}
_UNIT_EXAMPLE = {"bytes": "80GB", "bandwidth": "450GB/s", "flops": "989TFLOPS"}
_UNIT_WORDS = {"count": "a count", "bytes": "a size in bytes", "bandwidth": "a bandwidth",
               "flops": "a compute rate"}
_NESTED = ("gpu", "topology", "group")  # blocks inside `cluster`: not referred to as block.field
_REF_HELP = "refer to a field as `block.field`, e.g. `cluster.gpus_per_node`"


def fail(code: str, message: str, span: Span, help: str | None = None, related=None,
         fixes: list[Fix] | None = None) -> NoReturn:
    """Stop evaluating this value with the error ``code`` at ``span``."""
    raise ParcError(Diagnostic(code, ERROR, message, span, help=help, related=related or [], fixes=fixes or []))


class Poison(Exception):
    """A value that already failed (and was reported): uses of it stay silent."""


POISON = object()


def did_you_mean(word: str, options) -> str | None:
    """The option ``word`` most likely meant: an alias of it, the same name in another case
    (``1F1B``: ``1f1b``), the closest of the names it begins (``h100``: ``h100_sxm`` before
    ``h100_pcie``), else the closest by spelling."""
    import difflib   # only when a name is unknown: `parc check` of a good spec never loads it

    options = list(options)
    alias = SC.ALIASES.get(word)
    if alias and alias in options:
        return alias
    low = word.lower()
    same = [o for o in options if o.lower() == low]
    if same:
        return same[0]
    longer = [o for o in options if o.lower().startswith(low) and len(low) >= 2]
    m = difflib.get_close_matches(low, longer, n=1, cutoff=0.0) if longer else None
    m = m or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return m[0] if m else None


def _maybe(sug: str | None) -> str:
    return f"did you mean `{sug}`? " if sug else ""


def rename(span: Span, sug: str | None, word: str | None = None) -> list[Fix]:
    """The fix of a did-you-mean: ``sug`` written over ``span`` (none without a suggestion)."""
    if not sug:
        return []
    return [replace_with(span, sug, f"change `{word}` to `{sug}`" if word else f"write `{sug}`")]


def _too_large(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return abs(v) > MAX_MAGNITUDE
    if isinstance(v, Fraction):
        return abs(v.numerator) > MAX_MAGNITUDE or v.denominator > MAX_MAGNITUDE
    if isinstance(v, float):
        return not (abs(v) <= MAX_MAGNITUDE)  # also inf and nan
    return False


def bounded(v, node, key: str):
    """``v``, or a P017 diagnostic at ``node`` when it is beyond ``MAX_MAGNITUDE``."""
    if not _too_large(v):
        return v
    if isinstance(v, Fraction) and abs(v.numerator) <= MAX_MAGNITUDE:
        what = "has too many decimal places"
    else:
        what = "is too large"
    size = max(abs(v.numerator), v.denominator) if isinstance(v, Fraction) else v
    digits = f" (about {int(abs(size).bit_length() * 0.30103) + 1:,} digits)" if not isinstance(v, float) else ""
    fail("P017", f"`{key}`: this number {what}{digits}; parc computes with numbers up to 10^60",
         node.span, help="write the value in the units the field takes (80GB, 989TFLOPS, 450GB/s)")


def fmt(v) -> str:
    if isinstance(v, Fraction):
        return str(int(v)) if v.denominator == 1 else f"{float(v):g}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def describe(node) -> str:
    if isinstance(node, S.String):
        return f"the string {node.text}"
    if isinstance(node, S.Number):
        return f"the number {node.text}"
    if isinstance(node, S.Quantity):
        return f"`{node.text}`"
    if isinstance(node, S.Bool):
        return f"`{'true' if node.value else 'false'}`"
    if isinstance(node, S.Auto):
        return "`auto`"
    if isinstance(node, S.Ref):
        return f"the name `{node.name}`"
    if isinstance(node, S.Call):
        return f"`{node.name}(...)`"
    if isinstance(node, S.List):
        return "a list"
    return "an expression"


def check_range(v, f: SC.F, key: str, span: Span):
    """``v`` if it lies in the field's range; a P017 diagnostic (with the field's hint) otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Fraction)):
        return v
    if f.min is not None and v < f.min:
        if f.kind in ("int", "int_or_auto") and f.min == 1:
            fail("P017", f"`{key}` must be at least 1, got {fmt(v)}", span,
                 help="degrees and sizes are positive whole numbers")
        fail("P017", f"`{key}` must be at least {fmt(f.min)}, got {fmt(v)}", span)
    if f.max is not None and v > f.max:
        rng = f"between {fmt(f.min)} and {fmt(f.max)}" if f.min is not None else f"at most {fmt(f.max)}"
        fail("P017", f"`{key}` must be {rng}, got {fmt(v)}", span, help=f.hint or None)
    return v


def whole(v, node, key):
    if isinstance(v, Fraction):
        if v.denominator != 1:
            fail("P016", f"`{key}` must be a whole number, got {fmt(v)}", node.span)
        return int(v)
    if isinstance(v, float):
        if not v.is_integer():
            fail("P016", f"`{key}` must be a whole number, got {v:g}", node.span)
        return int(v)
    return v


def _ident(node) -> str | None:
    if isinstance(node, S.Ref) and len(node.parts) == 1:
        return node.parts[0]
    if isinstance(node, S.Quantity) and SC.unit_kind(node.unit) is None:
        return node.text  # 1f1b
    return None


def literal(node, key):
    if isinstance(node, (S.String, S.Bool)):
        return node.value
    if isinstance(node, S.Number):
        bounded(node.value, node, key)
        return node.value if isinstance(node.value, int) else float(node.value)
    if isinstance(node, S.List):
        return [literal(i, key) for i in node.items]
    if isinstance(node, S.Ref) and len(node.parts) == 1:
        return node.parts[0]
    if isinstance(node, S.Quantity):
        return node.text
    fail("P016", f"`{key}` expects a plain value, got {describe(node)}", node.span)


def _enum(node, f: SC.F, key: str):
    """A name from ``f.choices``. ``auto`` is a keyword of the language (``dp = auto``), yet an
    ordinary value of a key that lists it (SGLang's ``deepep_mode = auto``, vLLM's
    ``kv_cache_dtype = auto``): there it is that name."""
    name = "auto" if isinstance(node, S.Auto) and "auto" in (f.choices or ()) else _ident(node)
    if name is None:
        fail("P016", f"`{key}` expects {SC.KIND_WORDS[f.kind]}, got {describe(node)}", node.span,
             help="choose one of: " + ", ".join(f.choices) if f.choices else None)
    if f.kind == "enum" and name not in f.choices:
        sug = did_you_mean(name, f.choices)
        fail("P016", f"`{name}` is not a valid `{key}`", node.span,
             help=_maybe(sug) + "choose one of: " + ", ".join(f.choices), fixes=rename(node.span, sug, name))
    return name


def _bool(node, f: SC.F, key: str):
    if isinstance(node, S.Bool):
        return node.value
    fail("P016", f"`{key}` expects `true` or `false`, got {describe(node)}", node.span)


def _str(node, f: SC.F, key: str):
    if isinstance(node, S.String):
        return node.value
    fail("P016", f"`{key}` expects a string in double quotes, got {describe(node)}", node.span,
         help=f'write `{key} = "..."`')


def _strlist(node, f: SC.F, key: str):
    if isinstance(node, S.String):
        return [node.value]
    if isinstance(node, S.List) and all(isinstance(i, S.String) for i in node.items):
        return [i.value for i in node.items]
    if isinstance(node, S.List):
        bad = next(i for i in node.items if not isinstance(i, S.String))
        fail("P016", f"`{key}` expects a list of strings; this item is {describe(bad)}", bad.span,
             help="quote every item: [\"--flag\", \"value\"]")
    fail("P016", f"`{key}` expects a list of strings, got {describe(node)}", node.span)


def _version(node, f: SC.F, key: str):
    """A release a target block pins: a string among the field's choices (the releases the
    target's target.toml knows; the hint names them and the tool)."""
    if not isinstance(node, S.String):
        fail("P016", f"`{key}` expects a release in double quotes, got {describe(node)}", node.span,
             help=f'write `{key} = "{f.choices[-1] if f.choices else "..."}"`; {f.hint}')
    if node.value not in f.choices:
        sug = did_you_mean(node.value, f.choices)
        fail("P016", f"`{node.value}` is not a release parc knows for this target", node.span,
             help=_maybe(sug) + f.hint, fixes=rename(node.span, sug and f'"{sug}"', node.value))
    return node.value


def _enumlist(node, f: SC.F, key: str):
    """A list of names from ``f.choices`` (quoted or bare); each unknown one is an error with a
    did-you-mean, as for an enum key."""
    items = node.items if isinstance(node, S.List) else [node]
    return [_enum(i if not isinstance(i, S.String) else S.Ref([i.value], i.span), SC.F("enum", choices=f.choices),
                  key) for i in items]


_SIMPLE = {"enum": _enum, "preset": _enum, "bool": _bool, "str": _str, "strlist": _strlist, "enumlist": _enumlist,
           "version": _version,
           "any": lambda node, f, key: literal(node, key)}


class Evaluator:
    """The values of the fields of a merged document (``merge.Document``), each computed once.

    Problems found while evaluating a field on demand (a reference, a preset) go to the
    document's diagnostics; the span each value came from goes to ``spans``."""

    def __init__(self, doc, spans: dict[str, Span] | None = None):
        self.doc = doc
        self.blocks = doc.blocks
        self.diags: list[Diagnostic] = doc.diags
        self.spans: dict[str, Span] = {} if spans is None else spans
        self.values: dict[str, Any] = {}
        self.evaluating: list[str] = []

    def err(self, code, msg, span, help=None, related=None, fixes=None):
        self.diags.append(Diagnostic(code, ERROR, msg, span, help=help, related=related or [], fixes=fixes or []))

    def assign(self, kind: str, key: str) -> S.Assign | None:
        b = self.blocks.get(kind)
        return b.assigns.get(key) if b else None

    def value(self, kind: str, key: str, default: Any = None, required: bool = False) -> Any:
        """The evaluated value of ``kind.key`` (memoised); raise Poison if it failed."""
        path = f"{kind}.{key}"
        if path in self.values:
            v = self.values[path]
            if v is POISON:
                raise Poison(path)
            return v
        a = self.assign(kind, key)
        if a is None:
            if required:
                self.values[path] = POISON
                raise Poison(path)
            return default
        if path in self.evaluating:
            cyc = " -> ".join(self.evaluating[self.evaluating.index(path):] + [path])
            self.err("P012", f"circular reference: {cyc}", a.value.span,
                     help="give one of these fields a value that does not refer back")
            self.values[path] = POISON
            raise Poison(path)
        self.evaluating.append(path)
        try:
            f = SC.BLOCKS[kind][key]
            v = check_range(self.eval(a.value, f, key, kind), f, key, a.value.span)
        except ParcError as e:
            self.diags.append(e.diagnostic)
            self.values[path] = POISON
            raise Poison(path) from None
        except Poison:
            self.values[path] = POISON
            raise
        finally:
            self.evaluating.pop()
        self.values[path] = v
        self.spans[path] = a.span
        self.spans[f"{path}.value"] = a.value.span  # where a fix writes another value
        return v

    def eval(self, node, f: SC.F, key: str, kind: str):
        k = f.kind
        simple = _SIMPLE.get(k)
        if simple is not None:
            return simple(node, f, key)
        if k == "int_or_auto" and isinstance(node, S.Auto):
            return "auto"
        if k == "split":
            return self.split(node, key, kind)
        if k == "link":
            return self.link(node, key)
        # numeric kinds
        if isinstance(node, S.Auto):
            fail("P016", f"`{key}` cannot be `auto`", node.span,
                 help="only the mesh axes pp, dp, cp and tp can be `auto`")
        v = self.number(node, f, key, kind)
        if k in ("int", "int_or_auto"):
            return whole(v, node, key)
        if k == "frac":
            return float(v)
        # bytes / bandwidth / flops keep whole numbers exact where they are
        if isinstance(v, Fraction):
            return int(v) if v.denominator == 1 else float(v)
        return v

    def split(self, node, key: str, kind: str):
        """A layer split: ``even``, ``balanced`` or a list of whole layer counts."""
        if isinstance(node, S.Ref) and len(node.parts) == 1:
            if node.parts[0] in ("even", "balanced"):
                return node.parts[0]
            sug = did_you_mean(node.parts[0], ("even", "balanced"))
            fail("P016", f"`{node.parts[0]}` is not a layer split", node.span,
                 help=_maybe(sug) + "write `even`, `balanced` or a list like [19, 20, 20, 21]",
                 fixes=rename(node.span, sug, node.parts[0]))
        if not isinstance(node, S.List):
            fail("P016", f"`layers` expects {SC.KIND_WORDS['split']}, got {describe(node)}", node.span)
        if not node.items:
            fail("P016", "the layer split is empty", node.span,
                 help="give one layer count per (virtual) stage")
        out = []
        for it in node.items:
            v = whole(self.number(it, SC.F("int"), key, kind), it, key)
            if v < 0:
                fail("P017", f"a stage cannot hold {count(v, 'layer')}", it.span)
            out.append(v)
        return out

    def number(self, node, f: SC.F, key: str, kind: str):
        """The exact value of a numeric expression; every literal and every intermediate
        result is bounded by ``MAX_MAGNITUDE`` (a P017 diagnostic beyond it), so no value
        outgrows what ``int``, ``Fraction`` and ``float`` can print and convert."""
        if isinstance(node, S.BinOp):
            # walk a chain (a + b + c ...) along its left operands without recursion
            spine = []
            while isinstance(node, S.BinOp):
                spine.append(node)
                node = node.left
            acc = self._number(node, f, key, kind)
            for op in reversed(spine):
                acc = bounded(self.binop(op, acc, f, key, kind), op, key)
            return acc
        return self._number(node, f, key, kind)

    def binop(self, node: S.BinOp, a, f: SC.F, key: str, kind: str):
        b = self.number(node.right, SC.F("int") if node.op in "*/%" and f.kind != "int" and
                        isinstance(node.right, S.Number) else f, key, kind)
        if node.op == "+":
            return a + b
        if node.op == "-":
            return a - b
        if node.op == "*":
            return a * b
        if b == 0:
            fail("P003", "division by zero", node.right.span)
        if node.op == "%":
            if isinstance(a, int) and isinstance(b, int):
                return a % b
            fail("P016", "`%` needs whole numbers", node.span)
        q = Fraction(a) / Fraction(b)
        if isinstance(a, int) and isinstance(b, int) and q.denominator != 1:
            lo, hi = a // b, a // b + 1
            fail("P003", f"{a} / {b} is not a whole number ({float(q):.4g})", node.span,
                 help=f"integer division is exact here; write {lo * b} / {b} = {lo} or {hi * b} / {b} = {hi}, "
                      f"or the value itself")
        return q

    def _number(self, node, f: SC.F, key: str, kind: str):
        if isinstance(node, S.Number):
            bounded(node.value, node, key)
            unit_kind = _UNIT_KIND[f.kind]
            if unit_kind in _UNIT_EXAMPLE and node.value != 0:
                fail("P005", f"`{key}` needs a unit: {node.text} of what?", node.span,
                     help=f"expected {SC.KIND_WORDS[f.kind]}; for example `{key} = {_UNIT_EXAMPLE[unit_kind]}`")
            return node.value
        if isinstance(node, S.Quantity):
            return quantity(node, f, key)
        if isinstance(node, S.Ref):
            return self.reference(node, kind, key)
        if isinstance(node, S.Neg):
            return -self.number(node.operand, f, key, kind)
        if isinstance(node, S.BinOp):
            return self.number(node, f, key, kind)
        if isinstance(node, (S.String, S.Bool, S.List, S.Call, S.Auto)):
            fail("P016", f"`{key}` expects {SC.KIND_WORDS[f.kind]}, got {describe(node)}", node.span)
        fail("P016", f"unexpected value for `{key}`", node.span)

    def reference(self, node: S.Ref, kind: str, key: str):
        parts = node.parts
        if len(parts) == 1:
            blk, fld = kind, parts[0]
        elif len(parts) == 2:
            blk, fld = parts
        else:
            fail("P011", f"cannot resolve `{node.name}`", node.span, help=_REF_HELP)
        if blk not in SC.BLOCKS or blk in _NESTED:
            sug = did_you_mean(blk, [b for b in SC.BLOCKS if b not in _NESTED])
            two = bool(sug) and len(parts) == 2
            fail("P011", f"cannot resolve `{node.name}`: no block `{blk}`"
                 if len(parts) == 2 else f"cannot resolve `{node.name}`", node.span,
                 help=f"did you mean `{sug}.{fld}`?" if two else _REF_HELP,
                 fixes=rename(node.span, f"{sug}.{fld}" if two else None, node.name))
        if fld not in SC.BLOCKS[blk]:
            sug = did_you_mean(fld, SC.BLOCKS[blk])
            fail("P011", f"cannot resolve `{node.name}`: `{blk}` has no field `{fld}`",
                 node.span, help=f"did you mean `{blk}.{sug}`?" if sug else None,
                 fixes=rename(node.span, f"{blk}.{sug}" if sug else None, node.name))
        got = self.derived(blk, fld)  # fields that presets fill are read from the resolved value
        if got is None:
            fail("P011", f"`{blk}.{fld}` has no value to refer to", node.span,
                 help=f"set `{fld}` in the `{blk}` block")
        if got == "auto":
            fail("P011", f"`{blk}.{fld}` is `auto` and cannot be referred to", node.span)
        if isinstance(got, bool) or not isinstance(got, (int, float, Fraction)):
            fail("P016", f"`{blk}.{fld}` is not a number", node.span)
        return got

    def derived(self, blk, fld):
        """A field's value for references: explicit, else from the preset."""
        v = self.value(blk, fld)
        if v is not None:
            return v
        if blk == "model":
            pre = self.model_preset()
            if pre and fld in pre:
                return pre[fld]
        return None

    def link(self, node, key):
        if isinstance(node, S.Ref) and len(node.parts) == 1 and node.parts[0] in SC.LINK_KINDS:
            return (node.parts[0], None, node.span)
        if not isinstance(node, S.Call):
            fail("P016", f"`{key}` expects a link like nvlink(450GB/s), got {describe(node)}", node.span,
                 help="links: " + ", ".join(f"{k}(...)" for k in SC.LINK_KINDS))
        if node.name not in SC.LINK_KINDS:
            sug = did_you_mean(node.name, SC.LINK_KINDS)
            fail("P016", f"unknown link `{node.name}`", node.name_span,
                 help=_maybe(sug) + "links: " + ", ".join(SC.LINK_KINDS), fixes=rename(node.name_span, sug, node.name))
        if len(node.args) != 1:
            fail("P016", f"`{node.name}(...)` takes one bandwidth, got {len(node.args)} arguments",
                 node.span, help=f"write `{node.name}(450GB/s)`")
        bw = self.number(node.args[0], SC.F("bandwidth"), key, "cluster")
        if isinstance(bw, Fraction):
            bw = int(bw) if bw.denominator == 1 else float(bw)
        if bw <= 0:
            fail("P017", "a link's bandwidth must be positive", node.args[0].span)
        return (node.name, bw, node.span)

    # -- presets
    def model_preset(self) -> dict | None:
        from parc.resolve.catalog import presets

        try:
            name = self.value("model", "from")
        except Poison:
            return None
        if name is None:
            return None
        return presets("models").get(name)

    def check_preset(self, kind: str, block: str, key: str = "from") -> dict | None:
        """The preset ``block.key`` names in the table ``kind``; P010 (and Poison) if unknown."""
        from parc.resolve.catalog import presets

        name = self.value(block, key) if block in self.blocks else None
        if name is None:
            return None
        table = presets(kind)
        if name not in table:
            a = self.assign(block, key)
            sug = did_you_mean(name, table)
            self.err("P010", f"unknown {'model' if kind == 'models' else 'GPU'} preset `{name}`", a.value.span,
                     help=_maybe(sug) + "`parc presets` lists them", fixes=rename(a.value.span, sug, name))
            self.values[f"{block}.{key}"] = POISON
            raise Poison(block)
        return table[name]


def unit_fix(f: SC.F, node: S.Quantity) -> list[Fix]:
    """A size given for a bandwidth: the same number per second (what :func:`unit_help` says)."""
    if f.kind == "bandwidth" and node.unit in SC.UNITS["bytes"]:
        return rename(node.span, f"{node.text}/s", node.text)
    return []


def unit_help(f: SC.F, node: S.Quantity) -> str:
    if f.kind == "bandwidth" and node.unit in SC.UNITS["bytes"]:
        return f"a bandwidth is per second: write `{node.text}/s`"
    units = SC.UNITS.get({"int": "count", "int_or_auto": "count"}.get(f.kind, f.kind), {})
    return f"expected {SC.KIND_WORDS[f.kind]}" + (
        "; units: " + ", ".join(list(units)[:8]) if units else "")


def quantity(node: S.Quantity, f: SC.F, key: str):
    """The value of a number with a unit, in the field's base unit."""
    bounded(node.number, node, key)
    unit_kind = _UNIT_KIND[f.kind]
    table = SC.UNITS.get(unit_kind or "", {})
    if node.unit in table:
        fac = table[node.unit]
        if isinstance(fac, tuple):
            return bounded(node.number * Fraction(fac[0], fac[1]), node, key)
        return bounded(node.number * fac, node, key)
    got = SC.unit_kind(node.unit)
    if got is None:
        fail("P004", f"unknown unit `{node.unit}` in `{node.text}`", node.span, help=unit_help(f, node),
             fixes=unit_fix(f, node))
    if unit_kind is None:
        bare = node.text[:len(node.text) - len(node.unit)]
        fail("P004", f"`{key}` takes a plain number, but `{node.text}` has a unit", node.span,
             help="write the number alone", fixes=rename(node.span, bare, node.text))
    fail("P004", f"`{node.text}` is {_UNIT_WORDS[got]}, but `{key}` expects {SC.KIND_WORDS[f.kind]}",
         node.span, help=unit_help(f, node), fixes=unit_fix(f, node))
