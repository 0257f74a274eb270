"""docs/json.md against what the commands print: every key a documented JSON example names is a
key the command prints for a plan of that kind (a serving plan is documented apart from a
training plan), and every command the page documents prints that shape."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "json.md"
LOGS = ROOT / "tests" / "data" / "logs"


def parc_json(*args) -> dict:
    r = subprocess.run([sys.executable, "-m", "parc", *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    return json.loads(r.stdout)


def sections() -> dict[str, list]:
    """Each `## heading` of the page: the JSON examples under it, parsed."""
    out: dict[str, list] = {}
    for part in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        blocks = []
        for b in re.findall(r"```json\n(.*?)```", body, re.S):
            try:
                blocks.append(json.loads(b))
            except json.JSONDecodeError:
                blocks.append(json.loads("{" + b + "}"))   # a fragment: "serving": {...}
        out[head.strip()] = blocks
    return out


OPEN = ("comm",)   # maps whose keys are the plan's axes (`comm`: per axis of size above 1)


def missing(doc, real, path="") -> list[str]:
    """The key paths of ``doc`` that ``real`` lacks ("..." stands for keys left out)."""
    if isinstance(doc, dict):
        if not isinstance(real, dict):
            return [path or "."]
        out = []
        for k, v in doc.items():
            if k == "...":
                continue
            if k in OPEN and k in real:
                continue   # keyed by the plan's own axes: which appear depends on the mesh
            if k not in real:
                out.append(f"{path}.{k}".lstrip("."))
            else:
                out += missing(v, real[k], f"{path}.{k}")
        return out
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):   # some element has every key
        if not isinstance(real, list) or not real:
            return [path]
        return min((missing(doc[0], r, path + "[]") for r in real), key=len)
    return []


def _section(word: str) -> list:
    found = [blocks for head, blocks in sections().items() if word in head]
    assert found, word
    return found[0]


def test_check_json_keys(tmp_path):
    doc, fixes = _section("parc check --format json")
    render = ROOT / "tests" / "data" / "render"
    real = parc_json("check", render / "heads.par", render / "target.par", "--format", "json")
    assert missing(doc, real) == []
    assert missing({"diagnostics": [fixes]}, real) == []   # a diagnostic's fixes, where it has some


def test_explain_json_keys_of_a_training_plan():
    doc = _section("parc explain --format json")[0]
    assert missing(doc, parc_json("explain", ROOT / "examples" / "llama3-70b-train.par", "--format", "json")) == []


@pytest.mark.parametrize("spec", ["llama3-70b-serve.par", "deepseek-v3-wide-ep.par"])
def test_explain_json_keys_of_a_serving_plan(spec):
    # the example is a plan on one mesh (its `pools` empty); the page says in words what a
    # disaggregated plan's pools give instead
    real = parc_json("explain", ROOT / "examples" / spec, "--format", "json")
    for doc in _section("parc explain --format json")[1:]:
        assert missing(doc, real) == [], spec


def test_calibrate_json_keys():
    (doc,) = _section("parc calibrate --format json")
    real = parc_json("calibrate", LOGS / "base.par", LOGS / "runs.csv", LOGS / "torchtitan-pp2-fsdp4-tp2.log",
                     "--format", "json")
    assert missing(doc, real) == []


def test_compile_json_keys():
    (doc,) = _section("parc compile --format json")
    assert missing(doc, parc_json("compile", ROOT / "examples" / "llama3-70b-serve.par", "--format", "json")) == []


def test_plan_and_diff_json_keys(tmp_path):
    ok, refused = _section("parc plan --format json")
    train = ROOT / "examples" / "llama3-70b-train.par"
    assert missing(ok, parc_json("plan", train, "--top", "2", "--format", "json")) == []
    assert missing(refused, parc_json("plan", tmp_path / "none.par", "--format", "json")) == []
    ok, refused = _section("parc diff --format json")
    assert missing(ok, parc_json("diff", train, ROOT / "examples" / "llama3-8b-fsdp.par", "--format", "json")) == []
    bad = tmp_path / "bad.par"
    bad.write_text('model "m" { from = llama3_8b }\n')
    assert missing(refused, parc_json("diff", train, bad, "--format", "json")) == []
