"""What ships for CI and editors: parc schema, shell completion, pre-commit hooks, the documented
GitHub workflow and the TextMate grammar."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from parc.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.par"))


# ------------------------------------------------------------------------------ parc schema

def test_schema_validates_every_examples_plan_and_rejects_a_broken_one(capsys, tmp_path):
    from parc.api import load_plan

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].endswith("2020-12/schema")
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    assert EXAMPLES
    for ex in EXAMPLES:
        data = json.loads(json.dumps(load_plan(ex).to_dict(), default=str))
        errors = list(v.iter_errors(data))
        assert not errors, (ex.name, errors[0].message)
    broken = json.loads(json.dumps(load_plan(EXAMPLES[0]).to_dict(), default=str))
    broken["mesh"]["tp"] = "eight"
    assert list(v.iter_errors(broken))
    out = tmp_path / "plan.schema.json"
    assert main(["schema", "-o", str(out), "--compact"]) == 0
    assert json.loads(out.read_text()) == schema and out.read_text().count("\n") == 1


# ------------------------------------------------------------------------------ completion

def _bash_complete(script: Path, line: str, cwd: Path) -> list[str]:
    import shlex

    words = line.split(" ")
    prog = "\n".join([f"source {shlex.quote(str(script))}",
                      "COMP_WORDS=(" + " ".join(shlex.quote(w) for w in words) + ")",
                      f"COMP_CWORD={len(words) - 1}", "_parc",
                      'printf "%s\\n" "${COMPREPLY[@]}"'])
    p = subprocess.run(["bash", "--norc", "-c", prog], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return sorted(x for x in p.stdout.splitlines() if x)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_commands_options_choices_and_specs(tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "parc.bash"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "a.par").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "specs").mkdir()
    assert set(_bash_complete(script, "parc ", tmp_path)) >= set(COMMANDS)
    assert _bash_complete(script, "parc li", tmp_path) == ["lint"]
    assert _bash_complete(script, "parc lint --format ", tmp_path) == ["github", "json", "sarif", "text"]
    assert "--warnings-as-errors" in _bash_complete(script, "parc lint --w", tmp_path)
    assert {"P5", "P552"} <= set(_bash_complete(script, "parc lint --select P5", tmp_path))
    assert _bash_complete(script, "parc lint ", tmp_path) == ["a.par", "specs"]
    assert _bash_complete(script, "parc completion ", tmp_path) == ["bash", "fish", "zsh"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_parses(tmp_path, capsys):
    main(["completion", "zsh"])
    script = tmp_path / "_parc"
    script.write_text(capsys.readouterr().out)
    assert script.read_text().startswith("#compdef parc")
    p = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion_completes(tmp_path, capsys):
    main(["completion", "fish"])
    script = tmp_path / "parc.fish"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "a.par").write_text("")
    p = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C'parc lint --format '; "
                        "complete -C'parc dif'; complete -C'parc check '"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    words = [ln.split("\t")[0] for ln in p.stdout.splitlines()]
    assert {"text", "json", "sarif", "github", "diff", "a.par"} <= set(words)


def test_an_unknown_shell_is_a_usage_error(capsys):
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice" in capsys.readouterr().err


# ------------------------------------------------------------------------------ pre-commit

def test_pre_commit_hooks_run_the_commands_they_name():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert {"parc-lint", "parc-fmt"} <= set(by_id)
    for h in hooks:
        assert {"id", "name", "entry", "language"} <= h.keys()
        assert h["language"] == "python" and re.search(h["files"], "specs/a.par")
        assert not re.search(h["files"], "a.parquet")
        argv = h["entry"].split()
        assert argv[0] == "parc" and argv[1] in COMMANDS
    assert by_id["parc-lint"]["entry"] == "parc lint"
    assert by_id["parc-fmt"]["entry"] == "parc fmt"


# ------------------------------------------------------------------------------ workflow and docs

def test_the_documented_workflow_is_the_shipped_example_and_uses_real_options():
    example = (ROOT / ".github" / "workflows" / "parc-lint.yml.example").read_text()
    doc = (ROOT / "docs" / "ci.md").read_text()
    block = re.search(r"```yaml\n(# Lint .*?)```", doc, re.S).group(1)
    assert block == example
    wf = yaml.safe_load(example)
    assert wf["permissions"]["security-events"] == "write"
    steps = wf["jobs"]["lint"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)
    runs = "\n".join(s.get("run", "") for s in steps)
    for fmt in ("sarif", "github", "markdown"):
        assert f"--format {fmt}" in runs
    # every parc invocation in the workflow parses with parc's own parser
    from parc.cli.main import command_parser

    for line in runs.splitlines():
        m = re.search(r"\bparc (lint|diff) (.*?)(?:\s*(?:>|\|\||$))", line)
        if m:
            _, p = command_parser(m.group(1))
            args = [a.strip('"') for a in m.group(2).split()]
            p.parse_args(args)


# ------------------------------------------------------------------------------ TextMate grammar

GRAMMAR = ROOT / "editors" / "textmate" / "par.tmLanguage.json"


def _tokenize(line: str) -> list[tuple[str, str]]:
    """A small TextMate-style scanner over one line (earliest match wins, ties by order):
    enough to check what scope the grammar gives each piece of a line."""
    g = json.loads(GRAMMAR.read_text())
    repo = g["repository"]

    def expand(pats):
        out = []
        for p in pats:
            if "include" in p:
                r = repo[p["include"][1:]]
                out.extend(expand(r["patterns"]) if "patterns" in r and "match" not in r and "begin" not in r
                           else [r])
            else:
                out.extend(expand(p["patterns"]) if "patterns" in p and "match" not in p and "begin" not in p
                           else [p])
        return out

    pats = expand(g["patterns"])
    toks: list[tuple[str, str]] = []
    pos = 0
    while pos < len(line):
        best = None
        for p in pats:
            m = re.compile(p.get("match") or p["begin"]).search(line, pos)
            if m and m.end() > m.start() and (best is None or m.start() < best[1].start()):
                best = (p, m)
        if best is None:
            break
        p, m = best
        if "begin" in p:
            end = re.compile(p["end"]).search(line, m.end())
            stop = end.end() if end else len(line)
            toks.append((line[m.start():stop], p["name"]))
            for q in p.get("patterns", []):
                for mm in re.finditer(q["match"], line[m.end():stop]):
                    for k, c in q.get("captures", {}).items():
                        if mm.group(int(k)):
                            toks.append((mm.group(int(k)), c["name"]))
            pos = stop
            continue
        if "captures" in p:
            for k, c in p["captures"].items():
                if m.group(int(k)) is not None:
                    toks.append((m.group(int(k)), c["name"]))
        else:
            toks.append((m.group(0), p["name"]))
        pos = m.end()
    return toks


def test_textmate_grammar_is_valid_and_every_regex_compiles():
    g = json.loads(GRAMMAR.read_text())
    assert g["scopeName"] == "source.par" and "par" in g["fileTypes"]

    def regexes(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("match", "begin", "end"):
                    yield v
                else:
                    yield from regexes(v)
        elif isinstance(node, list):
            for x in node:
                yield from regexes(x)

    for rx in regexes(g):
        re.compile(rx)
    for p in g["patterns"]:
        assert p["include"][1:] in g["repository"]


@pytest.mark.parametrize("line,expected", [
    ('model "llama3-70b" {', [("model", "storage.type.block"), ('"llama3-70b"', "entity.name.section")]),
    ("target vllm {", [("target", "storage.type.block"), ("vllm", "entity.name.section")]),
    ("  intra_node    = nvlink(450GB/s)", [("intra_node", "variable.other.property"),
                                          ("nvlink", "support.function"), ("450", "constant.numeric"),
                                          ("GB/s", "keyword.other.unit")]),
    ("  gpu = h100_sxm  # 80GB", [("gpu", "variable.other.property"), ("h100_sxm", "support.constant.preset"),
                                  ("# 80GB", "comment.line")]),
    ("  pipeline = 1f1b", [("1f1b", "support.constant.preset")]),
    ("  tp on intra_node", [("tp", "variable.parameter.axis"), ("on", "keyword.operator.placement"),
                            ("intra_node", "support.constant.link")]),
    ("  tp = cluster.gpus_per_node / 2", [("cluster", "variable.language.block"),
                                          ("gpus_per_node", "variable.other.member"),
                                          ("/", "keyword.operator.arithmetic"), ("2", "constant.numeric")]),
    ("mesh { dp = auto }  # parc: ignore[P552, P301]", [("mesh", "storage.type.block"),
                                                        ("dp", "variable.other.property"),
                                                        ("auto", "constant.language"),
                                                        ("ignore", "keyword.other.directive.ignore"),
                                                        ("P552, P301", "constant.other.diagnostic-code")]),
    ('use "clusters/pod.par"', [("use", "keyword.control.import"), ('"clusters/pod.par"', "string.quoted")]),
    ("  flops = 989TFLOPS", [("989", "constant.numeric"), ("TFLOPS", "keyword.other.unit")]),
    ('  "layers.*.attention.wq" = colwise(tp)', [('"layers.*.attention.wq"', "variable.other.property.quoted"),
                                                 ("colwise", "support.function")]),
])
def test_textmate_grammar_scopes(line, expected):
    toks = _tokenize(line)
    for text, scope in expected:
        assert any(t == text and s.startswith(scope) for t, s in toks), (text, scope, toks)
