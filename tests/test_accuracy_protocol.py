"""The accuracy table's protocol: every row declares whether it may set a default (fit) or only
judges parc (held out); the fit procedure reads the fit rows and nothing else; parc's shipped
defaults are what that fit gives; docs/accuracy.md leads with the held-out error."""
from __future__ import annotations

import importlib
import sys
import tomllib

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT))
accuracy = importlib.import_module("bench.accuracy")
accuracy_fit = importlib.import_module("bench.accuracy_fit")


@pytest.fixture(scope="module")
def data():
    return tomllib.loads((ROOT / "bench" / "accuracy_cases.toml").read_text(encoding="utf-8"))


def test_every_row_declares_its_role(data):
    roles = {c["id"]: c.get("role") for c in data["case"]}
    assert set(roles.values()) <= {"fit", "held_out"}, {k: v for k, v in roles.items() if v not in ("fit", "held_out")}
    assert len(roles) == len(data["case"])                      # ids are unique
    training = [c for c in data["case"] if "serve" not in c]
    assert len(training) >= 40
    assert sum(c["role"] == "held_out" for c in training) > sum(c["role"] == "fit" for c in training)


def test_the_fit_reads_only_fit_rows(data, monkeypatch):
    seen = []

    def objective(pairs, values):
        seen.extend(c["id"] for c, _ in pairs)
        return 0.0

    monkeypatch.setattr(accuracy_fit, "objective", objective)
    monkeypatch.setattr(accuracy_fit, "_golden", lambda f, lo, hi, tol: (f((lo + hi) / 2), (lo + hi) / 2)[1])
    got = accuracy_fit.fit(data["case"], data, rounds=1)
    fit_ids = {c["id"] for c in data["case"] if c["role"] == "fit"}
    assert seen and set(seen) <= fit_ids and set(got.rows) == fit_ids


def test_changing_a_held_out_measurement_changes_no_default(data, monkeypatch):
    # the objective the fit minimises, evaluated on the table and on a copy whose held-out rows
    # all measured ten times more: the same numbers, so the same fit
    import copy

    values = {k.name: k.shipped() for k in accuracy_fit.CONSTANTS}
    pairs = accuracy_fit._plans(accuracy_fit.fit_rows(data["case"]), data)
    wild = copy.deepcopy(data)
    for c in wild["case"]:
        if c["role"] == "held_out":
            c["measured"] *= 10
    pairs_wild = accuracy_fit._plans(accuracy_fit.fit_rows(wild["case"]), wild)
    assert accuracy_fit.objective(pairs, values) == accuracy_fit.objective(pairs_wild, values)


def test_the_shipped_defaults_are_what_the_fit_gives(data):
    got = accuracy_fit.fit(data["case"], data)
    for k in accuracy_fit.CONSTANTS:
        assert got.values[k.name] == round(k.shipped(), k.decimals), k.name


def _result(cid: str, role: str, error: float, serve: bool = False) -> dict:
    case = {"id": cid, "role": role, "group": "g", "metric": "step_time", "measured": 1.0, "source": "s",
            "mesh": {"tp": 1}, "schedule": {"micro_batch": 1, "global_batch": 8}}
    if serve:
        case["serve"] = {"prompt_tokens": 1}
        case["metric"] = "output_tokens_per_node_s"
    return {"case": case, "spec": "generated", "value": 1 + error, "error": error, "peak": 1.0, "capacity": 2.0,
            "errors": [], "plan": None}


def test_the_document_leads_with_the_held_out_error_of_each_kind():
    results = [_result("a", "held_out", 0.20), _result("b", "held_out", -0.10), _result("c", "fit", 0.05),
               _result("d", "held_out", 0.30, serve=True)]
    s = accuracy.summary(results, [("t", "within 0.5%")])
    assert s["groups"][("held_out", "training")][:2] == (pytest.approx(0.15), pytest.approx(0.20))
    assert s["groups"][("held_out", "serving")][:2] == (pytest.approx(0.30), pytest.approx(0.30))
    assert s["groups"][("fit", "serving")] is None
    data = {"clusters": {}, "models": {}}
    text = accuracy.render(data, results, [("t", "within 0.5%")], [])
    assert text == accuracy.render(data, results, [("t", "within 0.5%")], [])    # byte-identical
    first = text.index("## Held-out and fit rows")
    assert first < text.index("## Where parc's defaults come from") < text.index("## Measured rows")
    table = [ln for ln in text[first:].splitlines() if ln.startswith("| training") or ln.startswith("| serving")]
    assert table[0].startswith("| training | held-out | 2 | 15.0% | 20.0% |")   # held out first
    assert table[1].startswith("| training | fit | 1 | 5.0% | 5.0% |")
    assert table[2].startswith("| serving | held-out | 1 | 30.0% | 30.0% |")
