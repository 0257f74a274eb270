"""`parc plan -o` writes a spec that compiles for the target it was searched for: `--target`, or
by default the engine a serving search models (vLLM), with the model's Hugging Face id from its
preset; `--target` with a preset model finds plans instead of refusing every one for the
missing id (P602)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "examples" / "clusters" / "dgx-h100-1node.par"


def parc(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "parc", *map(str, args)], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("target", [None, "vllm", "sglang"])
def test_a_serving_plan_compiles_for_its_engine(tmp_path, target):
    out = tmp_path / "best.par"
    extra = ["--target", target] if target else []
    r = parc("plan", "--model", "llama3_70b", "--cluster", CLUSTER, "--serve", *extra, "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    engine = target or "vllm"
    assert f"target {engine} {{" in text and 'model = "meta-llama/Meta-Llama-3-70B"' in text, text
    c = parc("compile", out, "--target", engine)
    assert c.returncode == 0, c.stderr
    assert "meta-llama/Meta-Llama-3-70B" in c.stdout


def test_a_deployment_compiles_for_its_engine(tmp_path):
    out = tmp_path / "serve.par"
    r = parc("plan", "--model", "llama3_8b", "--cluster", CLUSTER, "--serve", "--objective", "min-gpus",
             "--concurrency", "64", "--tpot", "60ms", "--no-pools", "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert parc("compile", out, "--target", "vllm").returncode == 0


def test_target_with_a_preset_model_finds_plans():
    r = parc("plan", "--model", "llama3_70b", "--cluster", CLUSTER, "--serve", "--target", "vllm", "--top", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no plan fits" not in r.stdout and "P602" not in r.stdout


def test_a_training_plan_compiles_for_the_named_target(tmp_path):
    out = tmp_path / "train.par"
    r = parc("plan", "--model", "llama3_8b", "--cluster", CLUSTER, "--global-batch", "64", "--target", "megatron",
             "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "target megatron" in out.read_text()
    assert parc("compile", out, "--target", "megatron").returncode == 0


def test_a_key_only_the_user_knows_is_asked_for_not_invented(tmp_path):
    # torchrun starts the user's script: parc cannot know it, so the written spec names the block
    # and the note says what to add; every plan is still searched
    out = tmp_path / "train.par"
    r = parc("plan", "--model", "llama3_8b", "--cluster", CLUSTER, "--global-batch", "64", "--target", "torchrun",
             "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "entrypoint" in r.stderr and "target torchrun" in r.stderr
    assert "entrypoint" not in out.read_text()
