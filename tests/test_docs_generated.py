"""What the README and docs show of the tool is the tool's: each `$ parc ...` sample is what that
command prints today, the README's command table names every target, and docs/language.md's
table of target keys is the targets' data. Each is a golden test over the doc itself:
``PARC_UPDATE_GOLDEN=1`` rewrites the doc, and the diff says what drifted."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from support.snapshot import assert_snapshot

from parc.report.targets import keys_table, target_names

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LANGUAGE = ROOT / "docs" / "language.md"


def _run(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "parc", command
    r = subprocess.run([sys.executable, "-m", "parc", *argv[1:]], cwd=ROOT, capture_output=True, text=True)
    return r.stdout + r.stderr


def with_samples(text: str) -> str:
    """``text`` with every ```text block that starts `$ parc ...` holding what the command prints."""
    def sample(m: re.Match) -> str:
        command = m.group(1)
        return f"```text\n$ {command}\n{_run(command)}```"

    return re.sub(r"```text\n\$ (parc [^\n]*)\n.*?```", sample, text, flags=re.S)


def test_the_readme_samples_are_what_parc_prints():
    text = README.read_text()
    assert "```text\n$ parc check" in text
    assert_snapshot(README, with_samples(text))


def test_the_readme_command_table_names_every_target():
    text = README.read_text()
    row = re.compile(r"^(\| `parc compile SPEC [^|]*\| launch plan for ).*?( \|)$", re.M)
    assert row.search(text), "the README has no `parc compile` row"
    assert_snapshot(README, row.sub(lambda m: m.group(1) + target_names() + m.group(2), text))


def test_the_language_docs_table_of_target_keys_is_the_targets_data():
    text = LANGUAGE.read_text()
    table = re.compile(r"^\| target \| .*?\n(?=\n)", re.M | re.S)
    assert table.search(text), "docs/language.md has no table of target keys"
    assert_snapshot(LANGUAGE, table.sub(lambda m: keys_table() + "\n", text, count=1))
