"""The audit in data/rules.toml: for every P1, P2 and P6 error, where each target it applies to
refuses the same plan (argument check, initialisation, model build, first step), or that it runs it."""
from __future__ import annotations

import pytest

from support.specs import spec

FAILS = {"argument check", "initialisation", "model build", "first step", "runs", "not checked", "not applicable"}


def error_rules():
    from parc.rules import ERROR
    from parc.targets import load_rules

    return [r for c, r in sorted(load_rules().items()) if c[:2] in ("P1", "P2", "P6") and r.severity == ERROR]


def test_every_error_rule_has_an_audit_entry_for_each_of_its_targets():
    from parc.rules import AUDIT_TARGETS, GENERIC, audit, rule_docs

    rules = error_rules()
    assert len(rules) > 30
    for r in rules:
        entries = rule_docs()[r.code].get("targets", {})
        wanted = AUDIT_TARGETS if GENERIC in r.targets else r.targets
        for t in wanted:
            assert t in entries, f"{r.code} has no audit entry for {t}"
            e = audit(r.code, t)
            assert e is not None, f"{r.code}.{t}: same_as leads nowhere"
            assert e["fails"] in FAILS, (r.code, t, e["fails"])
            assert e["source"] and e["check"], (r.code, t)
        assert not set(entries) - set(wanted) - {"torch"}, (r.code, sorted(entries))


@pytest.mark.parametrize("code", ["P102", "P202", "P610"])
def test_parc_rules_prints_the_audit(capsys, code):
    from parc.cli.main import main
    from parc.rules import rule_docs

    assert main(["rules", code]) == 0
    out = capsys.readouterr().out
    assert "where each target refuses it:" in out
    for t, e in rule_docs()[code]["targets"].items():
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{t}:"))
        assert (f"as {e['same_as']}" if "same_as" in e else f"{e['fails']} ({e['source']}") in line
    assert main(["rules", code, "--format", "json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["targets_audit"] == rule_docs()[code]["targets"]


def test_error_says_when_a_target_would_fail_late(check_spec):
    # ffn_hidden = 14336 is not divisible by tp = 3 (nor are the heads): Megatron-LM's argument check
    # refuses the heads, and only the model build the MLP width; the message says so for each target
    text = spec("from = llama3_8b; heads = 48; kv_heads = 48; hidden = 6144", gpn=6, mesh="dp = 2; tp = 3",
                schedule="micro_batch = 1; global_batch = 8", target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    r = check_spec(text)
    d = [x for x in r.errors if x.code == "P106"][0]
    assert "Megatron-LM refuses it only when it builds the model (megatron/core/tensor_parallel/layers.py)" \
        in d.message
    # refused at the argument check: nothing to add
    heads = spec("from = llama3_8b", gpn=6, mesh="dp = 2; tp = 3", schedule="micro_batch = 1; global_batch = 8",
                 target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    d = [x for x in check_spec(heads).errors if x.code == "P102"][0]
    assert "refuses it only" not in d.message
    # no target: no target to speak of
    d = [x for x in check_spec(text.split("target megatron")[0]).errors if x.code == "P106"][0]
    assert "refuses it only" not in d.message


def test_a_target_keeps_its_audit_in_its_own_folder():
    """Each target folder's rules.toml holds that target's audit entries for the generic rules, and
    the docs gather every folder's entries for one rule without one folder hiding another's."""
    import tomllib
    from pathlib import Path

    import parc.targets
    from parc.model.targets import audit_targets
    from parc.rules import rule_docs

    folder = Path(parc.targets.__file__).parent
    for t in audit_targets():
        own = folder / t / "rules.toml"
        if not (folder / t / "target.toml").exists():
            continue   # a rule family without a folder (deepspeed) keeps its entries in parc/rules
        doc = tomllib.loads(own.read_text())
        assert doc["P101"]["targets"].keys() == {t}, t
    assert set(rule_docs()["P101"]["targets"]) == set(audit_targets())
