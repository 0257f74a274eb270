"""A target is one folder: a new folder under parc/targets, in a copy of the package, is listed
by `parc compile --target`, its keys are accepted (and others refused), its required key is
asked for by P602 in its own words, its own rule runs and is documented, and `parc compile`
emits its files from its own template. Nothing outside the folder is touched."""
from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

import pytest

from support.target_folder import package_with_target, run_parc

ROOT = Path(__file__).resolve().parent.parent

FOLDER = {
    "target.toml": '''
        display = "Echo"
        description = "a script that prints one line on every node"
        modes = ["train", "serve"]
        launch = true
        families = ["torch"]

        [keys]
        message = { kind = "str", doc = "the line the script prints", required = "the line every node prints", example = '"hello"' }
        repeat = { kind = "int", min = 1, doc = "how often it prints it" }
        ''',
    "__init__.py": '''
        """echo: one script that prints the spec's message."""
        from parc.targets.base import File, plan_json, settings

        TARGET = "echo"


        def build(plan):
            from parc.targets.render import render

            s = settings(plan, TARGET)
            text = render("echo/echo.sh.j2", message=s["message"], repeat=s.get("repeat", 1))
            return [File("echo.sh", text, True), File("plan.json", plan_json(plan))]
        ''',
    "echo.sh.j2": '''
        #!/usr/bin/env bash
        for _ in $(seq {{ repeat | q }}); do echo {{ message | q }}; done
        ''',
    "rules.py": '''
        from parc.rules import WARNING, rule
        from parc.targets.base import settings


        @rule("P6990", "echo-shouts", severity=WARNING, targets=("echo",))
        def shouts(plan, c):
            m = settings(plan, "echo").get("message", "")
            if m.isupper():
                c.report(c.at("target.echo.message", "target.echo"), f"`{m}` is all capitals", help="speak softly")
        ''',
    "rules.toml": '''
        [P6990]
        name = "echo-shouts"
        title = "Echo message in capitals"
        severity = "warning"
        doc = "The echo target prints its message as given; a message in capitals shouts on every node."
        ''',
}

SPEC = """
model "tiny" {{
  layers = 4
  hidden = 64
  ffn_hidden = 128
  heads = 4
  kv_heads = 4
  vocab = 256
  seq_len = 32
}}
cluster "one" {{
  nodes = 1
  gpus_per_node = 2
  gpu = h100_sxm
  intra_node = nvlink(450GB/s)
}}
mesh {{
  dp = 2
}}
schedule {{
  micro_batch = 1
  global_batch = 8
}}
train {{ zero = 0 }}
target echo {{ {settings} }}
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A copy of the package with one folder added: parc/targets/echo."""
    return package_with_target(tmp_path_factory.mktemp("pkg"), "echo", FOLDER)


def parc(package, tmp_path, *args, settings='message = "hello"'):
    return run_parc(package, tmp_path, SPEC.format(settings=settings), *args, with_spec="rules" not in args)


def test_only_the_folder_was_added(package):
    """The copy differs from the package by the new folder alone."""
    def walk(top):
        return {p.relative_to(top).as_posix() for p in top.rglob("*") if "__pycache__" not in p.parts}

    ours, theirs = walk(ROOT / "parc"), walk(package / "parc")
    assert theirs - ours == {"targets/echo"} | {f"targets/echo/{n}" for n in FOLDER}
    assert not ours - theirs
    for rel in ours:
        if (ROOT / "parc" / rel).is_file():
            assert filecmp.cmp(ROOT / "parc" / rel, package / "parc" / rel, shallow=False), rel


def test_listed_and_compiled(package, tmp_path):
    r = parc(package, tmp_path, "compile", "--target", "nope")
    assert r.returncode == 2 and "echo" in r.stderr                         # listed among the targets
    r = parc(package, tmp_path, "compile", "--target", "echo", "--format", "json",
             settings='message = "hello"; repeat = 2')
    assert r.returncode == 0, r.stderr
    files = {f["path"]: f for f in json.loads(r.stdout)["files"]}
    assert sorted(files) == ["echo.sh", "plan.json"] and files["echo.sh"]["executable"]
    out = subprocess.run(["bash", "-c", files["echo.sh"]["text"]], capture_output=True, text=True, timeout=30)
    assert out.stdout == "hello\nhello\n"


def test_keys_checked(package, tmp_path):
    r = parc(package, tmp_path, "check", settings='message = "hello"; colour = "red"')
    assert r.returncode == 1 and "P007" in r.stdout + r.stderr and "colour" in r.stdout + r.stderr
    r = parc(package, tmp_path, "check", settings="repeat = 0")
    assert r.returncode == 1 and "P017" in r.stdout + r.stderr and "`repeat` must be at least 1" in r.stdout + r.stderr
    r = parc(package, tmp_path, "check", settings="repeat = 2")
    text = r.stdout + r.stderr
    assert r.returncode == 1 and "P602" in text and "the line every node prints" in text and 'message = "hello"' in text


def test_own_rule_and_families_run(package, tmp_path):
    r = parc(package, tmp_path, "check", "--format", "json", settings='message = "HELLO"')
    assert "P6990" in {d["code"] for d in json.loads(r.stdout)["diagnostics"]}
    rules = parc(package, tmp_path, "rules", "--target", "echo")
    assert rules.returncode == 0 and "P6990" in rules.stdout
    assert "P610" in rules.stdout          # families = ["torch"]: the torch runtime's rules come along
    page = parc(package, tmp_path, "rules", "P6990")
    assert "Echo message in capitals" in page.stdout and "parc/targets/echo/rules.py" in page.stdout
