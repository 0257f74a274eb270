"""A plan the checks refuse never reaches a builder through `parc compile`, and a builder handed
one anyway (the library's ``targets.get(T).build(plan)``) stops with the diagnostic of the key it
lacks, never a KeyError: compile prints diagnostics, not a traceback."""
from __future__ import annotations

import pytest

from parc.language.diagnostics import ParcError
from support.specs import spec

L8 = "from = llama3_8b"
# an unknown key (P007) holds back the block's own rules (P602 among them), so the plan has
# errors but no word about the key the builder needs
CASES = {
    "skypilot": (spec(L8, nodes=2, gpn=8, mesh="dp = 16", target={"skypilot": "bogus = 1"}), "entrypoint"),
    "slurm": (spec(L8, nodes=2, gpn=8, mesh="dp = 16", target={"slurm": "bogus = 1"}), "entrypoint"),
    "vllm": (spec(L8, gpn=1, mesh="tp = 1", serve="", target={"vllm": "bogus = 1"}), "model"),
}


@pytest.mark.parametrize("target", sorted(CASES))
def test_a_refused_spec_is_diagnosed_not_raised(target, check_spec, write_spec, capsys):
    from parc import targets
    from parc.cli.main import main

    text, key = CASES[target]
    r = check_spec(text, (target,))
    assert "P007" in {d.code for d in r.errors}
    with pytest.raises(ParcError) as got:
        targets.get(target).build(r.plan)
    d = got.value.diagnostic
    assert (d.code, d.severity) == ("P602", "error") and f"`{key}`" in d.message, d.message
    path = write_spec(text, f"{target}.par")
    assert main(["compile", "--target", target, str(path), "-o", str(path.parent / "out")]) == 1
    err = capsys.readouterr().err
    assert "P007" in err and "Traceback" not in err
