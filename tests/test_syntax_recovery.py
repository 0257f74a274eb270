"""A syntax error no longer hides the rest of a file's findings. The parser recovers at each
statement, in every block: a broken statement poisons its key as a bad value does, so every
block's own mistakes are reported with it; where it is confined to a block nothing else is
computed from (`train`, a `target` block) the rules of the rest of the spec run too; elsewhere
(the model, the cluster, the mesh) the rules wait for the fix, and no error follows from the
broken statement's absence."""
from __future__ import annotations

from support.specs import spec


def codes(r) -> list[str]:
    return sorted(d.code for d in r.diagnostics if d.severity == "error")


BROKEN_TRAIN = spec("from = llama3_70b", mesh="tp = 6", schedule="micro_batch = 1; global_batch = 8",
                    train="zero = 1  recompute = full", target={"torchrun": 'entrypoint = "train.py"'})


def test_a_broken_train_block_leaves_the_rest_checked(check_spec):
    r = check_spec(BROKEN_TRAIN)
    assert codes(r) == ["P001", "P102", "P302"], [(d.code, d.message) for d in r.diagnostics]
    assert r.plan is None   # a plan with a block that did not parse is never handed on
    # nothing that reads the train block runs on its defaults (the memory estimate waits)
    assert not [d for d in r.diagnostics if d.code.startswith("P4")]


def test_a_broken_target_block_leaves_its_rules_out(check_spec):
    text = BROKEN_TRAIN.replace("zero = 1  recompute = full", "zero = 1\n  recompute = full").replace(
        'entrypoint = "train.py"', 'entrypoint = "train.py"  max_restarts = 1')
    for targets in ((), ("torchrun",)):
        r = check_spec(text, targets)
        assert codes(r) == ["P001", "P102", "P302"], [(d.code, d.message) for d in r.diagnostics]
        assert not [d for d in r.diagnostics if d.target == "torchrun"]   # no P602 for the block's absence


def test_a_broken_model_or_mesh_block_stands_alone(check_spec):
    for broken in (BROKEN_TRAIN.replace("from = llama3_70b", "from = llama3_70b  layers = 4"),
                   BROKEN_TRAIN.replace("tp = 6", "tp = 6  dp = 1")):
        broken = broken.replace("zero = 1  recompute = full", "zero = 1")
        r = check_spec(broken)
        assert codes(r) == ["P001"], [(d.code, d.message) for d in r.diagnostics]


def test_every_syntax_error_is_still_reported_once(check_spec):
    text = BROKEN_TRAIN.replace('entrypoint = "train.py"', 'entrypoint = "train.py"  max_restarts = 1')
    r = check_spec(text)
    assert [d.code for d in r.diagnostics].count("P001") == 2
    # an unclosed block: statement ends cannot be trusted, so the first error alone
    r = check_spec(BROKEN_TRAIN.rstrip().rstrip("}") + "\n")
    assert codes(r) == ["P001"], [(d.code, d.message) for d in r.diagnostics]


# A spec whose every block carries a mistake of its own (a misspelt key), so that a syntax error in
# any one statement can be seen not to hide the others.
EVERY_BLOCK = """model "m" {
  from  = llama3_70b
  layrs = 80
}
cluster "c" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_nod     = nvlink(450GB/s)
}
mesh {
  tp  = 8
  dpp = 1
}
schedule {
  micro_batch  = 1
  global_batch = 8
  pipelin      = gpipe
}
train {
  zero      = 1
  recompute = fulll
}
"""


def _found(r) -> list[tuple[str, int, int]]:
    return sorted((d.code, d.span.line, d.span.column) for d in r.diagnostics)


def test_a_syntax_error_in_any_block_keeps_the_other_findings(check_spec):
    clean = _found(check_spec(EVERY_BLOCK))
    assert [c for c, _, _ in clean].count("P007") == 4 and ("P016", 22, 15) in clean, clean
    for key, value in (("from ", "llama3_70b"), ("nodes ", "1"), ("tp ", "8"), ("micro_batch ", "1"),
                       ("zero ", "1")):
        line = next(i for i, ln in enumerate(EVERY_BLOCK.splitlines(), 1) if ln.strip().startswith(key))
        broken = EVERY_BLOCK.splitlines(keepends=True)
        text = broken[line - 1].rstrip("\n")
        broken[line - 1] = text + " 7\n"
        r = check_spec("".join(broken))
        got = _found(r)
        p001 = [g for g in got if g[0] == "P001"]
        assert p001 == [("P001", line, len(text) + 2)], (key, got)
        # every other block's finding, at its own span: none hidden, none added
        assert sorted(g for g in got if g[0] != "P001") == clean, (key, got)


def test_two_syntax_errors_in_one_block_are_both_reported(check_spec):
    text = EVERY_BLOCK.replace("  tp  = 8\n", "  tp  = 8 8\n  pp = = 2\n")
    got = _found(check_spec(text))
    assert [g for g in got if g[0] == "P001"] == [("P001", 12, 11), ("P001", 13, 8)], got
    assert [g for g in got if g[0] == "P007"] == [("P007", 3, 3), ("P007", 9, 3), ("P007", 14, 3),
                                                  ("P007", 19, 3)], got


# ------------------------------------------------------------------ property: any block, any break

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BASES = [
    spec("from = llama3_8b", mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64", train="zero = 1"),
    spec("from = llama3_70b", nodes=2, mesh="pp = 2; tp = 8", placement="layers = balanced",
         schedule="micro_batch = 1; global_batch = 64; pipeline = 1f1b", train="zero = 1; recompute = full"),
    spec("from = llama3_8b", mesh="tp = 2; dp = 4", serve="max_model_len = 4096; max_num_seqs = 64"),
]
# What breaks a statement, each with the column (past the line's end) where the parser stops: its
# first character after the space, or (a dangling operator) the end of the line.
BREAKERS = [(" 8", 2), (" = 2", 2), (" )", 2), (" ,", 2), (" ]", 2), (" +", 3), (" *", 3), (' "x', 2)]
PLANTED = "xyzzy = 1"   # a key no block has: P007 at its own span, whatever else is wrong


def _assignment_lines(text: str) -> list[int]:
    return [i for i, ln in enumerate(text.splitlines()) if "=" in ln and "{" not in ln]


def _block_ends(text: str) -> list[int]:
    return [i for i, ln in enumerate(text.splitlines()) if ln.strip() == "}"]


@st.composite
def broken_spec(draw):
    """(text, the planted keys' (line, column), the broken line, the P001's column)."""
    lines = draw(st.sampled_from(BASES)).splitlines()
    ends = _block_ends("\n".join(lines))
    plant = sorted(draw(st.sets(st.sampled_from(ends), min_size=1, max_size=len(ends))), reverse=True)
    for i in plant:   # from the bottom up, so the earlier line numbers hold
        lines.insert(i, "  " + PLANTED)
    text = "\n".join(lines) + "\n"
    planted = [(i + 1, 3) for i, ln in enumerate(lines) if ln.strip() == PLANTED]
    candidates = [i for i in _assignment_lines(text) if lines[i].strip() != PLANTED]
    at = draw(st.sampled_from(candidates))
    brk, past = draw(st.sampled_from(BREAKERS))
    column = len(lines[at]) + past
    lines[at] += brk
    return "\n".join(lines) + "\n", planted, at + 1, column


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=broken_spec())
def test_a_syntax_error_anywhere_keeps_every_other_blocks_findings(check_spec, case):
    text, planted, line, column = case
    r = check_spec(text)
    errors = sorted((d.code, d.span.line, d.span.column) for d in r.diagnostics if d.severity == "error")
    assert errors == sorted([("P001", line, column)] + [("P007", ln, col) for ln, col in planted]), text
    # each planted finding's span is exactly the key
    for d in r.diagnostics:
        if d.code == "P007":
            assert text[d.span.start:d.span.end] == "xyzzy", d
