"""A syntax error no longer hides the rest of a file's findings: where it is confined to a block
nothing else is computed from (`train`, a `target` block), the rest of the spec is checked and
its findings reported with it; elsewhere (the model, the cluster, the mesh) the syntax errors
stand alone, with no error that follows from the block's absence."""
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
