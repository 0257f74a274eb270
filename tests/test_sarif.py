"""SARIF 2.1.0 output of `parc lint`: valid against the OASIS schema, and what GitHub code scanning reads."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from parc.cli.main import main

SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"

HEADS = """\
model "m" { from = llama3_8b }

cluster "box" {
  nodes         = 1
  gpus_per_node = 6
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}

mesh { tp = 6 }
"""

UNIT = """\
model "m" { from = llama3_8b }

cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB)
}

mesh {
  dp = 8
  pipeline_parallel = 1
}
"""

STYLE = """\
model "m" {
  from   = llama3_8b
  layers = 32
}

cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}

mesh { dp = 8 }  # parc: ignore[P301]
"""


@pytest.fixture
def sarif(tmp_path, capsys, monkeypatch):
    (tmp_path / "specs" / "serve").mkdir(parents=True)
    (tmp_path / "specs" / "heads.par").write_text(HEADS)
    (tmp_path / "specs" / "serve" / "unit.par").write_text(UNIT)
    (tmp_path / "specs" / "style.par").write_text(STYLE)
    monkeypatch.chdir(tmp_path)
    rc = main(["lint", "specs", "--format", "sarif"])
    return rc, json.loads(capsys.readouterr().out)


def test_multi_file_multi_error_sarif_validates_against_the_schema(sarif):
    rc, log = sarif
    assert rc == 1
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    results = log["runs"][0]["results"]
    files = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert files == {"specs/heads.par", "specs/serve/unit.par", "specs/style.par"}
    assert sorted(r["ruleId"] for r in results) == ["P004", "P007", "P102", "P550", "P551", "P552"]


def test_results_carry_what_github_needs(sarif):
    _, log = sarif
    run = log["runs"][0]
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    driver = run["tool"]["driver"]
    from parc import __version__

    assert driver["name"] == "parc" and driver["version"] == __version__
    assert driver["informationUri"].startswith("https://")
    ids = [r["id"] for r in driver["rules"]]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    for r in driver["rules"]:
        for key in ("shortDescription", "fullDescription", "help"):
            assert r[key]["text"].strip(), (r["id"], key)
        assert r["defaultConfiguration"]["level"] in ("error", "warning", "note")
    for res in run["results"]:
        assert ids[res["ruleIndex"]] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note") and res["message"]["text"]
        reg = res["locations"][0]["physicalLocation"]["region"]
        assert {"startLine", "startColumn", "endLine", "endColumn"} <= reg.keys()
        assert (reg["endLine"], reg["endColumn"]) > (reg["startLine"], reg["startColumn"])


def test_regions_point_at_the_text_the_finding_is_about(sarif, tmp_path):
    _, log = sarif
    by_rule = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    for rule, expected in (("P004", "450GB"), ("P007", "pipeline_parallel"), ("P102", "tp = 6"),
                           ("P550", "P301"), ("P552", "layers = 32")):
        loc = by_rule[rule]["locations"][0]["physicalLocation"]
        reg = loc["region"]
        line = (tmp_path / loc["artifactLocation"]["uri"]).read_text().splitlines()[reg["startLine"] - 1]
        assert line[reg["startColumn"] - 1:reg["endColumn"] - 1] == expected
    assert by_rule["P004"]["level"] == "error" and by_rule["P552"]["level"] == "warning"
    assert "help:" in by_rule["P007"]["message"]["text"]
    related = by_rule["P102"]["relatedLocations"][0]
    assert related["message"]["text"] == "heads = 32"


def test_a_clean_run_is_an_empty_result_list(tmp_path, capsys, monkeypatch):
    (tmp_path / "ok.par").write_text(HEADS.replace("6", "8").replace("tp = 8", "dp = 8"))
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "ok.par", "--format", "sarif"]) == 0
    log = json.loads(capsys.readouterr().out)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"]
