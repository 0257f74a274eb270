"""Property tests for the parser, the resolver and the formatter.

* For generated specs, `fmt` is idempotent and the formatted text resolves to the same plan.
* Random edits of real specs (deleted, duplicated or swapped tokens, random bytes, very long
  lines, deep nesting, huge numbers) never raise and never hang.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parc.api import check_file
from parc.language.diagnostics import ParcError
from parc.language.fmt import format_text
from parc.language.parser import comments_of as comments
from spec_strategies import lint_findings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.par"))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EDITS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def time_limit(seconds: int):
    """Fail (instead of hanging the suite) if the body runs longer than ``seconds``."""

    def handler(signum, frame):
        raise TimeoutError(f"input took longer than {seconds}s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- generated specs

comment = st.text(alphabet="abcdefghij xyz=·-{}\"#", min_size=0, max_size=20).map(lambda s: "# " + s)
ws = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def assignment(draw, key, values):
    v = draw(st.sampled_from(values))
    return f"{key}{draw(ws)}={draw(ws)}{v}"


@st.composite
def block(draw, head, stmts):
    chosen = draw(st.lists(st.sampled_from(stmts), min_size=1, max_size=len(stmts), unique_by=lambda s: s[0]))
    lines = []
    for key, values in chosen:
        line = draw(ws) + draw(assignment(key, values))
        if draw(st.booleans()) and draw(st.booleans()):
            line += " " + draw(comment)
        lines.append(line)
        if draw(st.integers(0, 5)) == 0:
            lines.append("")
        if draw(st.integers(0, 6)) == 0:
            lines.append(draw(ws) + draw(comment))
    if len(lines) == 1 and draw(st.booleans()) and "#" not in lines[0]:
        return f"{head} {{ {lines[0].strip()} }}"
    if draw(st.booleans()) and not any("#" in ln for ln in lines) and all(ln.strip() for ln in lines):
        return f"{head} {{ " + "; ".join(ln.strip() for ln in lines) + " }"
    tail = (" " + draw(comment)) if draw(st.booleans()) and draw(st.booleans()) else ""
    return f"{head} {{{tail}\n" + "\n".join(lines) + "\n}"


MODEL = [("from", ["llama3_8b", "llama2_7b", "mixtral_8x7b", "qwen2_5_7b"]),
         ("seq_len", ["2048", "4096", "8k", "1024 * 4", "(2048 + 2048)"]),
         ("layers", ["16", "32", "4 * 8"]), ("tied_embeddings", ["true", "false"])]
CLUSTER = [("nodes", ["1", "2", "4"]), ("gpus_per_node", ["8", "4", "2 * 4"]),
           ("gpu", ["h100_sxm", "a100_sxm_80gb", "h200"]),
           ("intra_node", ["nvlink(450GB/s)", "nvlink(3600Gb/s)", "pcie(32GB/s)", "nvlink"]),
           ("inter_node", ["infiniband(400Gb/s)", "ethernet(100Gb/s)"])]
MESH = [("dp", ["auto", "1", "2", "4", "8 / 2"]), ("tp", ["1", "2", "4", "8", "cluster.gpus_per_node"]),
        ("pp", ["1", "2"]), ("cp", ["1", "2"])]
SCHED = [("micro_batch", ["1", "2"]), ("global_batch", ["64", "128", "8 * 16"]),
         ("pipeline", ["1f1b", "gpipe", "interleaved_1f1b"]), ("virtual_stages", ["1", "2"])]
TRAIN = [("zero", ["0", "1", "3"]), ("recompute", ["none", "selective", "full"]),
         ("sequence_parallel", ["true", "false"])]
SERVE = [("max_model_len", ["4096", "8k"]), ("gpu_memory_utilization", ["0.9", "0.85"]),
         ("max_num_seqs", ["16", "256"])]


@st.composite
def spec(draw):
    parts = [draw(block('model "m"', MODEL)), draw(block('cluster "c"', CLUSTER)), draw(block("mesh", MESH))]
    if draw(st.booleans()):
        parts.append(draw(block("schedule", SCHED)))
        parts.append(draw(block("train", TRAIN)))
    else:
        parts.append(draw(block("serve", SERVE)))
    if draw(st.booleans()):
        parts.insert(0, draw(comment))
    seps = [draw(st.sampled_from(["\n", "\n\n", "\n\n\n"])) for _ in parts]
    return "".join(p + s for p, s in zip(parts, seps))


def _resolved(text: str, tmp: Path):
    r = check_file(tmp / "spec.par", root=tmp, text=text)
    plan = r.plan.to_dict() if r.plan else None
    return plan, [(d.code, d.severity, d.message) for d in r.diagnostics]


@SETTINGS
@given(spec())
def test_fmt_is_idempotent_and_keeps_meaning(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("p")
    with time_limit(10):
        once = format_text(text)
        assert format_text(once) == once
        assert _resolved(once, tmp) == _resolved(text, tmp)
    # every comment survives
    assert once.count("#") == text.count("#")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_are_formatted_and_check_clean(path):
    text = path.read_text()
    assert format_text(text) == text, "run `parc fmt examples/`"
    r = check_file(path)
    assert r.ok, [(d.code, d.message) for d in r.errors]


# ----------------------------------------------------------------------------- random edits

SOURCES = [p.read_text() for p in EXAMPLES]


@st.composite
def mangled(draw):
    text = draw(st.sampled_from(SOURCES))
    tokens = text.replace("\n", " \n ").split(" ")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "bytes", "long", "nest", "huge", "chars"]))
        i = draw(st.integers(0, len(tokens) - 1))
        if op == "delete" and len(tokens) > 1:
            del tokens[i]
        elif op == "duplicate":
            tokens.insert(i, tokens[i])
        elif op == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif op == "bytes":
            tokens.insert(i, draw(st.binary(max_size=12)).decode("latin-1"))
        elif op == "long":
            tokens.insert(i, "x" * draw(st.integers(1000, 8000)))
        elif op == "nest":
            n = draw(st.integers(10, 1000))
            kind = draw(st.sampled_from(["()", "[]", "{}"]))
            tokens.insert(i, kind[0] * n + "1" + kind[1] * n)
        elif op == "huge":
            tokens.insert(i, draw(st.sampled_from(["9" * 400, "1" + "0" * 30, "123456789012345678901234567890GB",
                                                   "-99999999999999999999", "1e999", "0.000000000000000001"])))
        elif op == "chars":
            tokens.insert(i, draw(st.text(max_size=8)))
    return " ".join(tokens).replace(" \n ", "\n")


@EDITS
@given(mangled())
def test_random_edits_never_raise_or_hang(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("m")
    with time_limit(10):
        r = check_file(tmp / "spec.par", root=tmp, text=text)
        for d in r.diagnostics:
            assert d.code[0] == "P" and d.span.line >= 1 and d.span.column >= 1
        try:
            out = format_text(text)
        except ParcError as e:
            assert e.diagnostic.code in ("P001", "P002")
        else:
            assert format_text(out) == out


# ----------------------------------------------------------------------------- fmt fidelity

FIDELITY_BASE = '''model "m" { from = llama3_8b }
cluster "c" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}
mesh { dp = 8 }
'''


@pytest.mark.parametrize("text", [
    FIDELITY_BASE.replace('model "m"', 'model "a\\nb\\tc\\\\d\\"e"'),
    FIDELITY_BASE.replace('cluster "c"', 'cluster "x\\ny"'),
    FIDELITY_BASE + 'placement {\n  "layers.*\\n.wq" = colwise(tp)\n  layers = even\n}\n',
], ids=["model-label", "cluster-label", "quoted-key"])
def test_fmt_keeps_escaped_newlines_in_labels_and_keys(tmp_path, text):
    once = format_text(text)
    assert format_text(once) == once
    assert _resolved(once, tmp_path) == _resolved(text, tmp_path)
    assert "\\n" in once


@pytest.mark.parametrize("ch", ["\f", "\v", "\x1c", "\x85", "\u2028"])
def test_fmt_keeps_comments_after_a_form_feed_or_vertical_tab(ch):
    """str.splitlines() breaks lines at these characters; the lexer does not."""
    text = FIDELITY_BASE + f"serve {{ max_num_seqs = 16 }}  # last{ch}\n# note{ch} one\n  # note two\n"
    once = format_text(text)
    assert format_text(once) == once
    assert [c for _, _, c in comments(once)] == [c for _, _, c in comments(text)]


@pytest.mark.parametrize("text", [
    # the suppression trails a one-line block whose second statement has the finding
    FIDELITY_BASE.replace('model "m" { from = llama3_8b }',
                          'model "m" { from = llama3_8b; layers = 32 }  # parc: ignore[P552]'),
    # ... and a line of several statements inside a block
    FIDELITY_BASE.replace('model "m" { from = llama3_8b }',
                          'model "m" {\n  from = llama3_8b; layers = 32  # parc: ignore[P552]\n}'),
    # ... and two blocks on one line
    FIDELITY_BASE.replace("mesh { dp = 8 }\n", "").replace(
        'model "m" { from = llama3_8b }', 'model "m" { from = llama3_8b; layers = 32 }; mesh { dp = 8 }  # parc: ignore[P552]'),
], ids=["one-line-block", "shared-line", "two-blocks"])
def test_fmt_keeps_a_trailing_suppression_on_its_statements(tmp_path, text):
    before = lint_findings(text, tmp_path / "before")
    once = format_text(text)
    assert lint_findings(once, tmp_path / "after") == before
    assert before == ([], 1)  # the P552 finding is there and suppressed


def test_fmt_formats_a_flat_sum_of_thousands_of_terms(tmp_path):
    text = FIDELITY_BASE.replace("dp = 8", "dp = 8" + " + 1 - 1" * 3000)
    once = format_text(text)
    assert format_text(once) == once
    assert _resolved(once, tmp_path) == _resolved(text, tmp_path)


@pytest.mark.parametrize("head", ['model "m"\f{', "model m {", 'model "a\\"b" {'], ids=["form-feed", "name-label", "escaped-label"])
def test_lint_judges_a_spec_the_same_before_and_after_fmt(tmp_path, head):
    """lint told a spec from a shared fragment by a pattern that missed a form feed before `{`,
    a label that is a name, or an escaped quote: such a spec went unchecked until fmt."""
    text = FIDELITY_BASE.replace('model "m" { from = llama3_8b }', head + " from = llama3_8b; hidden = 80MB }")
    before = lint_findings(text, tmp_path / "before")
    assert [f[0] for f in before[0]] == ["P004"]
    assert lint_findings(format_text(text), tmp_path / "after") == before
