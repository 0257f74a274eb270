"""The command line says only what is true: unknown targets, JSON on errors, counts and plurals."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from parc.cli import main

EXAMPLES = ROOT / "examples"
TRAIN = ROOT / "tests" / "data" / "explain" / "llama3-70b-train.par"
SERVE = ROOT / "tests" / "data" / "explain" / "llama3-70b-serve.par"

# --- an unknown --target is a usage error in every command that takes one --------------------------

TARGET_COMMANDS = [
    ["check", str(SERVE)],
    ["lint", str(SERVE)],
    ["explain", str(SERVE)],
    ["draw", str(SERVE)],
    ["plan", str(SERVE)],
    ["rules"],
    ["compile", str(SERVE)],
]


@pytest.mark.parametrize("argv", TARGET_COMMANDS, ids=lambda a: a[0])
def test_unknown_target_is_a_usage_error(capsys, argv):
    rc = main([*argv, "--target", "vllmm"])
    cap = capsys.readouterr()
    assert rc == 2
    assert "unknown target `vllmm`" in cap.err and "did you mean `vllm`?" in cap.err
    assert cap.out == ""


@pytest.mark.parametrize("argv", TARGET_COMMANDS[:-1], ids=lambda a: a[0])
def test_rule_families_are_targets_too(capsys, argv):
    # `torch` (parc's runtime) and `deepspeed` have rules of their own, not a backend
    rc = main([*argv, "--target", "deepspeed", *(["--format", "json"] if argv[0] != "draw" else ["-q"])])
    assert rc in (0, 1)  # judged, not refused as usage
    assert "unknown target" not in capsys.readouterr().err


def test_compile_refuses_a_rule_family_that_has_no_backend(capsys):
    assert main(["compile", str(SERVE), "--target", "deepspeed"]) == 2
    err = capsys.readouterr().err
    assert "unknown target `deepspeed`" in err and "vllm" in err
