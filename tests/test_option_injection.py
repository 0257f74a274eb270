"""P690: a spec value that lands where a launcher reads options and begins with '-' is refused
(`entrypoint = "--standalone"` would make torchrun start a one-node world; `--master-addr=...`
would point every rank at another host). Option lists (`args`, `extra_args`) stay free."""
from __future__ import annotations

import re

import pytest

from backends_support import ROOT

TRAIN = (ROOT / "tests/data/specs/slurm-kubernetes.par").read_text()
MEGATRON = (ROOT / "examples/gpt3-175b-train.par").read_text()
SERVE = (ROOT / "examples/llama3-70b-serve.par").read_text()

# (spec text, the quoted value in it to make hostile, the target's key, targets to check with)
CASES = [
    (TRAIN, '"train.py"', "target torchrun", "entrypoint", "--standalone"),
    (TRAIN, '"train.py"', "target torchrun", "entrypoint", "--master-addr=attacker.example"),
    (TRAIN, '"train.py"', "target slurm", "entrypoint", "-m"),
    (TRAIN, '"train.py"', "target kubernetes", "entrypoint", "--nnodes=1"),
    (TRAIN, '"nvcr.io/nvidia/pytorch:25.01-py3"', "target kubernetes", "image", "--privileged"),
    (TRAIN, '"gpu"', "target slurm", "partition", "--gres=gpu:64"),
    (TRAIN, '"ml-research"', "target slurm", "account", "-A"),
    (MEGATRON, '"pretrain_gpt.py"', "target megatron", "entrypoint", "--use-cpu-initialization"),
    (SERVE, '"meta-llama/Meta-Llama-3-70B-Instruct"', "target vllm", "model", "--trust-remote-code"),
]


def _hostile(text, quoted, block, value):
    head = text.index(block)
    at = text.index(quoted, head)
    return text[:at] + '"' + value + '"' + text[at + len(quoted):], at


@pytest.mark.parametrize("text,quoted,block,key,value", CASES, ids=[f"{c[2].split()[1]}.{c[3]}={c[4]}" for c in CASES])
def test_a_value_that_reads_as_an_option_is_refused(text, quoted, block, key, value, check_spec):
    spec, at = _hostile(text, quoted, block, value)
    r = check_spec(spec)
    found = [d for d in r.errors if d.code == "P690"]
    assert len(found) == 1, [(d.code, d.message) for d in r.diagnostics]
    d = found[0]
    # the span is the value, quotes included
    assert (d.span.start, d.span.end) == (at, at + len(value) + 2)
    assert spec[d.span.start:d.span.end] == f'"{value}"'
    assert f"`{key}`" in d.message and value in d.message and "option" in d.message
    assert d.help and "./" in d.help


def test_the_trusted_example_targets_stay_clean(check_spec):
    for text in (TRAIN, MEGATRON, SERVE):
        assert "P690" not in {d.code for d in check_spec(text).diagnostics}


def test_option_lists_may_hold_options(check_spec):
    """args and extra_args are passed after the script (or to vllm serve) as options: a value
    beginning with '-' there is what they are for."""
    spec = TRAIN.replace('args         = ["--config", "configs/llama3_8b.toml"]\n  max_restarts = 2\n}',
                         'args         = ["--standalone", "-x"]\n  max_restarts = 2\n}', 1)
    assert '"--standalone", "-x"' in spec
    r = check_spec(spec)
    assert "P690" not in {d.code for d in r.diagnostics}
    r = check_spec(SERVE.replace("port  = 8000", 'port  = 8000\n  extra_args = ["--enable-prefix-caching"]'))
    assert "P690" not in {d.code for d in r.diagnostics}


def test_compile_refuses_it(tmp_path, write_spec):
    from parc.cli.compile import compile_spec

    spec, _ = _hostile(TRAIN, '"train.py"', "target torchrun", "--standalone")
    r, _, files = compile_spec(write_spec(spec), "torchrun", root=tmp_path)
    assert files is None and "P690" in {d.code for d in r.errors}


def test_the_rule_doc_lists_every_checked_position():
    """rules.toml's P690 entry names every target key the rule checks, and no other."""
    from parc.targets.base import dash_keys
    from parc.rules import rule_docs

    doc = rule_docs()["P690"]["doc"]
    listed = set(re.findall(r"`(\w+)\.(\w+)`", doc))
    assert listed == set(dash_keys()), listed ^ set(dash_keys())
