"""The rule catalog: every registered code is documented, every documented code is reported by
something, and `parc rules` prints the list and each page."""
from __future__ import annotations

import inspect
import json

import pytest

from parc.cli.main import main
from parc.rules import GENERIC, TARGET_FAMILIES, rule_docs
from parc.targets import load_rules as registry   # the rules, the targets' own included
from parc.lint import engine as lint
from parc.lint import suppress
from parc.rules import style


def test_every_registered_code_is_documented():
    docs = rule_docs()
    for code, r in registry().items():
        assert code in docs, f"{code} has no entry in rules.toml"
        d = docs[code]
        assert d["name"] == r.name, code
        assert d.get("title") and len(d.get("doc", "")) > 40, code
        assert r.severity in ("error", "warning", "note"), code
        assert all(t == GENERIC or t in TARGET_FAMILIES for t in r.targets), code


def test_every_documented_p1_to_p6_code_is_registered():
    reg = registry()
    # `parc lint` reports its whole-file checks and unused suppressions directly, not as rules
    text_checks = inspect.getsource(style) + inspect.getsource(lint) + inspect.getsource(suppress)
    missing = [c for c in rule_docs() if c[:2] in ("P1", "P2", "P3", "P4", "P5", "P6")
               and c not in reg and f'"{c}"' not in text_checks]
    assert not missing


def test_target_rules_name_their_targets():
    reg = registry()
    assert reg["P203"].targets == ("megatron",)
    assert reg["P205"].targets == ("torch",)
    assert reg["P110"].targets == ("torch", "torchtitan")     # torchtitan's model build refuses it too
    assert reg["P601"].targets == ("vllm",)
    assert reg["P102"].targets == (GENERIC,)


def test_rules_lists_every_code(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for code in rule_docs():
        assert f"\n{code} " in out
    line = next(ln for ln in out.splitlines() if ln.startswith("P203 "))
    assert "interleaved-microbatches" in line and "megatron" in line and "error" in line


def test_rules_one_page(capsys):
    assert main(["rules", "P102"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("P102 heads-divisible-by-tp: Attention heads not divisible by tp")
    assert "source: Megatron-LM" in out and "check: parc/rules/mesh.py:" in out


def test_rules_json_and_filters(capsys):
    assert main(["rules", "P2", "--target", "torchrun", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    codes = {e["code"] for e in got}
    assert "P205" in codes and "P203" not in codes and all(c.startswith("P2") for c in codes)
    assert main(["rules", "P601", "--format", "json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["targets"] == ["vllm"] and one["family"] == "P6" and one["severity"] == "error"


@pytest.mark.parametrize("arg", ["P999", "X1"])
def test_rules_unknown_code(capsys, arg):
    assert main(["rules", arg]) == 2
    assert "unknown code" in capsys.readouterr().err
