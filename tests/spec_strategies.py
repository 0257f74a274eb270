"""Hypothesis strategies for `.par` text: valid specs with every escape, every whitespace
character, comments and suppressions in every place; expressions with huge numbers, long
chains and deep nesting; and near-valid specs (valid ones with a few characters broken).

Used by tests/test_fuzz.py (bounded, in the suite) and bench/fuzz_frontend.py (a long run).
"""
from __future__ import annotations

from hypothesis import strategies as st

# Inside a string: the escapes the lexer knows, unknown ones (kept as written), and raw
# characters Python's str.splitlines() would break a line at but the lexer does not.
ESCAPES = ["\\n", "\\t", "\\\\", '\\"', "\\r", "\\x", "\\0", "\\u2028"]
RAW = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00", "é", "·", "#", "{", "}", ";"]
# Between tokens: every character the lexer skips but a lone \r (files are read with Python's
# universal new lines, which turn it into a line break; see the note in docs/language.md).
# New lines: \n and \r\n.
WS = [" ", "  ", "\t", "\f", " \f ", "\t\f"]
NL = ["\n", "\r\n", "\n\n", "\n\f\n", "\n \t\n"]

string_body = st.lists(st.one_of(st.sampled_from(ESCAPES), st.sampled_from(RAW),
                                 st.text(alphabet="abcxyz_-./ 0189", max_size=6)), max_size=6).map("".join)
string = string_body.map(lambda s: '"' + s + '"')
comment_body = st.lists(st.one_of(st.sampled_from(RAW + ['"', "\\"]), st.text(alphabet="abc xyz=-", max_size=8)),
                        max_size=5).map("".join)
suppression = st.sampled_from(["# parc: ignore[P3]", "# parc: ignore[P302]", "# parc: ignore[P1, P5]",
                               "# parc: ignore", "# parc: ignore[P6]"])
comment = st.one_of(comment_body.map(lambda s: "#" + s), suppression)
ws = st.sampled_from(WS)
nl = st.sampled_from(NL)

digits = st.integers(1, 5000).map(lambda n: "9" * n)
number = st.one_of(
    st.integers(0, 10**6).map(str),
    st.sampled_from(["0", "1", "8", "1_024", "0.5", "0.9", "2.25", "007"]),
    digits, digits.map(lambda d: "0." + d), digits.map(lambda d: "1" + "0" * len(d)))
UNITS = ["GB", "GiB", "MB", "TB", "GB/s", "Gb/s", "TFLOPS", "PFLOPS", "k", "M", "f1b", "xyz"]
quantity = st.tuples(st.one_of(st.sampled_from(["1", "8", "80", "450", "0.5", "989"]), digits),
                     st.sampled_from(UNITS)).map("".join)
name = st.sampled_from(["tp", "dp", "pp", "cp", "auto_x", "x", "cluster.gpus_per_node", "cluster.nodes",
                        "model.layers", "mesh.tp", "a.b.c", "llama3_8b", "h100_sxm", "gpipe", "1f1b"])
atom = st.one_of(number, quantity, string, name, st.sampled_from(["true", "false", "auto"]))


def _binop(children):
    return st.tuples(children, st.sampled_from(["+", "-", "*", "/", "%"]), children).map(
        lambda t: f"{t[0]} {t[1]} {t[2]}")


def _extend(children):
    return st.one_of(
        _binop(children),
        children.map(lambda c: f"({c})"),
        children.map(lambda c: f"-{c}"),
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(st.sampled_from(["nvlink", "pcie", "infiniband", "colwise", "f"]),
                  st.lists(children, max_size=2)).map(lambda t: f"{t[0]}(" + ", ".join(t[1]) + ")"))


flat_chain = st.tuples(st.integers(2, 400), st.sampled_from(["+ 1 - 1", "* 1", "- 0"])).map(
    lambda t: "8 " + " ".join([t[1]] * t[0]))
deep = st.tuples(st.integers(1, 80), st.sampled_from(["()", "[]", "-", "f()"])).map(
    lambda t: ("(" * t[0] + "1" + ")" * t[0]) if t[1] == "()" else
    ("[" * t[0] + "1" + "]" * t[0]) if t[1] == "[]" else
    ("- " * t[0] + "1") if t[1] == "-" else ("f(" * t[0] + "1" + ")" * t[0]))
right_nested = st.integers(1, 80).map(lambda n: "8" + " + (0" * n + ")" * n)
_small = st.recursive(atom, _extend, max_leaves=8)
expr = st.one_of(_small, _small, _small, _small, _small, flat_chain, deep, right_nested)

KEYS = {
    "model": ["from", "layers", "hidden", "heads", "seq_len", "vocab", "tied_embeddings", "dtype"],
    "cluster": ["nodes", "gpus_per_node", "gpu", "intra_node", "inter_node"],
    "mesh": ["dp", "tp", "pp", "cp", "ep"],
    "schedule": ["pipeline", "micro_batch", "global_batch", "virtual_stages"],
    "train": ["zero", "recompute", "sequence_parallel", "optimizer"],
    "serve": ["max_model_len", "gpu_memory_utilization", "max_num_seqs"],
    "placement": ["layers", "tp", "pp"],
    "target torchrun": ["entrypoint", "args", "max_restarts"],
    "gpu": ["memory", "flops", "hbm_bandwidth"],
}
GOOD = {
    ("model", "from"): "llama3_8b", ("cluster", "nodes"): "1", ("cluster", "gpus_per_node"): "8",
    ("cluster", "gpu"): "h100_sxm", ("cluster", "intra_node"): "nvlink(450GB/s)", ("mesh", "dp"): "8",
}


@st.composite
def statement(draw, kind: str):
    if kind == "placement" and draw(st.booleans()):
        key = draw(string)  # a quoted key: "layers.*.wq" = colwise(tp)
    else:
        key = draw(st.sampled_from(KEYS[kind]))
    value = GOOD.get((kind, key)) if draw(st.integers(0, 3)) else None
    if value is None:
        value = draw(expr)
    return f"{key}{draw(ws)}={draw(ws)}{value}"


@st.composite
def block(draw, kind: str):
    label = ""
    if kind in ("model", "cluster"):
        label = " " + draw(st.one_of(string, st.sampled_from(["m", "c", "x_1"])))
    items = draw(st.lists(statement(kind), min_size=0, max_size=5))
    if kind == "cluster" and draw(st.booleans()):
        items.append(draw(block("gpu")))
    head = f"{kind}{label}{draw(ws)}{{"
    if draw(st.booleans()) and all("\n" not in i for i in items):  # one line, maybe with a comment
        tail = f"{draw(ws)}{draw(comment)}" if draw(st.booleans()) else ""
        return f"{head} " + "; ".join(items) + f" }}{tail}"
    lines = []
    for it in items:
        line = draw(ws) + it
        if draw(st.integers(0, 3)) == 0:
            line += draw(ws) + draw(comment)
        lines.append(line)
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(ws) + draw(comment))
    head_comment = (draw(ws) + draw(comment)) if draw(st.integers(0, 3)) == 0 else ""
    close = "}" + ((draw(ws) + draw(comment)) if draw(st.integers(0, 3)) == 0 else "")
    return head + head_comment + draw(nl) + "".join(ln + draw(nl) for ln in lines) + close


@st.composite
def spec(draw):
    """A spec that follows the grammar (its values may be wrong: the checks then say so)."""
    kinds = ["model", "cluster", "mesh"] + draw(st.sampled_from(
        [["schedule", "train"], ["serve"], ["train"], [], ["placement", "schedule"]]))
    if draw(st.integers(0, 3)) == 0:
        kinds.append("target torchrun")
    parts = [draw(block(k)) for k in kinds]
    if draw(st.integers(0, 3)) == 0:
        parts.insert(0, draw(comment))
    return "".join(p + draw(nl) for p in parts) + (draw(comment) if draw(st.integers(0, 4)) == 0 else "")


BREAKERS = ['"', "{", "}", "(", ")", "[", "]", "=", ";", "\n", "\\", "#", ",", ".", "-", "\x00", "\v", "é"]


@st.composite
def near_valid(draw):
    """A valid spec with one to four characters deleted, inserted or duplicated."""
    text = draw(spec())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "dup", "truncate"]))
        if op == "delete" and text:
            text = text[:i] + text[i + 1:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(BREAKERS)) + text[i:]
        elif op == "dup":
            text = text[:i] + text[i:i + 20] + text[i:]
        elif op == "truncate":
            text = text[:i]
    return text


# ----------------------------------------------------------------------------- the properties

def resolved(text: str, folder):
    """The meaning of a spec: its resolved plan (JSON) and what the checks say about it."""
    from parc.api import check_file

    r = check_file(folder / "spec.par", root=folder, text=text)
    for d in r.diagnostics:  # every finding is a coded diagnostic with a real span
        assert d.code[0] == "P" and d.span.line >= 1 and d.span.column >= 1, d
    plan = r.plan.to_dict() if r.plan else None
    return plan, sorted((d.code, d.severity, d.message) for d in r.diagnostics)


def _anchor(items, offset: int, path=()) -> tuple:
    """The statement a finding points into, named by its path (block kind and label, key),
    counted among same-named siblings: a name for the place that does not change with layout."""
    from parc.language import syntax as S

    seen: dict = {}
    for st in items:
        name = (st.kind, st.label) if isinstance(st, S.Block) else \
            ("=", st.key) if isinstance(st, S.Assign) else (type(st).__name__,)
        seen[name] = seen.get(name, 0) + 1
        if st.span.start <= offset < max(st.span.end, st.span.start + 1):
            here = path + ((name, seen[name]),)
            if isinstance(st, S.Block):
                return _anchor(st.items, offset, here)
            return here
    return path


def lint_findings(text: str, folder):
    """What `parc lint` reports on a spec (the layout check aside), each finding placed by the
    statement it points into, so that a finding keeps its place when the layout changes."""
    from parc.language.parser import parse_text
    from parc.lint.engine import lint_files

    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "spec.par"
    f.write_text(text, encoding="utf-8", newline="")
    res = lint_files([str(f)], root=str(folder), ignore=["P551"])  # fmt fixes the layout
    doc = parse_text(res.sources.get(str(f), text), str(f))  # the text as lint read it
    out = []
    for d in res.diagnostics:
        if d.code == "P551":
            continue
        out.append((d.code, d.severity, d.message, _anchor(doc.items, d.span.start)))
    return sorted(out, key=repr), res.suppressed


def check_fmt(text: str, folder, lint: bool = False) -> str:
    """fmt is idempotent, keeps the meaning (and, with ``lint``, every finding and every
    suppression); returns "formatted", or "refused" when the text has a syntax error."""
    from parc.language.diagnostics import ParcError
    from parc.language.fmt import format_text
    from parc.language.parser import comments_of as comments

    try:
        once = format_text(text)
    except ParcError as e:
        assert e.diagnostic.code in ("P001", "P002"), e.diagnostic
        return "refused"
    assert format_text(once) == once, "fmt is not idempotent"
    assert resolved(once, folder) == resolved(text, folder), "fmt changed the meaning"
    assert [c for _, _, c in comments(once)] == [c for _, _, c in comments(text)], "fmt lost a comment"
    if lint:
        assert lint_findings(once, folder / "after") == lint_findings(text, folder / "before"), \
            "fmt changed what lint reports"
    return "formatted"
