"""Megatron-LM keys that reach the launch: target megatron's attention_backend, the model's RoPE
scaling and Megatron-FSDP's gradient dtype; with the rules that keep them consistent with what
parc checks (P025: extra_args repeating an option a key sets; P026: attention_backend against
flash_attention; P620: a RoPE scaling Megatron-LM's arguments cannot build). tests/test_megatron_judge.py
runs the same launches through Megatron-LM's own parser."""
from __future__ import annotations

import pytest

from support.specs import assert_fires, assert_quiet, spec

SMALL = dict(model="from = llama3_8b", mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64")


def _spec(target: str, train: str = "zero = 1", model: str = "from = llama3_8b") -> str:
    """llama3_8b on 8 GPUs, recomputing every layer so that it fits (80 GB)."""
    return spec(**{**SMALL, "model": model}, train=train + "; recompute = full", target={"megatron": target})


def _argv(check_spec, text: str) -> list[str]:
    from parc.targets.megatron import arg_lines

    r = check_spec(text, ("megatron",))
    assert r.ok, [d.message for d in r.errors]
    return [str(w) for line in arg_lines(r.plan) for w in line]


# --- attention_backend --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["auto", "flash", "fused"])
def test_attention_backend_reaches_the_launch(check_spec, backend):
    argv = _argv(check_spec, _spec(f"attention_backend = {backend}"))
    assert argv[argv.index("--attention-backend") + 1] == backend
    assert argv.count("--attention-backend") == 1


def test_attention_backend_left_out_is_megatrons_default(check_spec):
    assert "--attention-backend" not in _argv(check_spec, _spec(""))
    argv = _argv(check_spec, _spec("", train="zero = 1; flash_attention = false"))
    assert argv[argv.index("--attention-backend") + 1] == "unfused"
    argv = _argv(check_spec, _spec("attention_backend = unfused", train="zero = 1; flash_attention = false"))
    assert argv.count("--attention-backend") == 1 and argv[argv.index("--attention-backend") + 1] == "unfused"


def test_attention_backend_local_is_not_a_choice(check_spec):
    """--attention-backend local needs --spec local, Megatron-LM's layers without Transformer Engine."""
    r = check_spec(_spec("attention_backend = local"), ("megatron",))
    assert r.errors and "local" in r.errors[0].message and "fused" in r.errors[0].help


def test_p025_fires_on_extra_args_repeating_attention_backend(check_spec):
    text = _spec('attention_backend = fused\n  extra_args = ["--attention-backend", "flash"]')
    d = assert_fires(check_spec, text, "P025", '"--attention-backend"')
    assert "attention_backend" in d.message and "--attention-backend" in d.help


def test_p025_fires_on_the_equals_spelling(check_spec):
    text = _spec('attention_backend = fused\n  extra_args = ["--attention-backend=flash"]')
    assert_fires(check_spec, text, "P025", '"--attention-backend=flash"')


def test_p025_quiet_without_the_key_or_the_option(check_spec):
    assert_quiet(check_spec, _spec('extra_args = ["--attention-backend", "fused"]'), "P025")
    assert_quiet(check_spec, _spec('attention_backend = fused\n  extra_args = ["--manual-gc"]'), "P025")


def test_p026_fires_on_unfused_with_flash_attention(check_spec):
    d = assert_fires(check_spec, _spec("attention_backend = unfused"), "P026", "attention_backend = unfused")
    assert "flash_attention = false" in d.help


def test_p026_fires_on_a_fused_backend_without_flash_attention(check_spec):
    text = _spec("attention_backend = flash", train="zero = 1; flash_attention = false")
    d = assert_fires(check_spec, text, "P026", "attention_backend = flash")
    assert d.related and "unfused" in d.help


@pytest.mark.parametrize("target, train", [("attention_backend = unfused", "zero = 1; flash_attention = false"),
                                           ("attention_backend = fused", "zero = 1"),
                                           ("", "zero = 1; flash_attention = false")])
def test_p026_quiet_where_they_agree(check_spec, target, train):
    assert_quiet(check_spec, _spec(target, train=train), "P026")


# --- RoPE scaling ---------------------------------------------------------------------------------
def test_p620_fires_on_llama3_scaling_from_other_positions(check_spec):
    model = "from = llama3_8b\n  rope_scaling = llama3\n  rope_factor = 8\n  rope_original_positions = 4096"
    d = assert_fires(check_spec, _spec("", model=model), "P620", "rope_original_positions = 4096",
                     target="megatron", targets=("megatron",))
    assert "8,192" in d.message


def test_p620_quiet_on_llama3_scaling_as_llama_31(check_spec):
    model = "from = llama3_8b\n  rope_scaling = llama3\n  rope_factor = 8\n  rope_original_positions = 8192"
    assert_quiet(check_spec, _spec("", model=model), "P620", ("megatron",))
    argv = _argv(check_spec, _spec("", model=model))
    assert "--use-rope-scaling" in argv and argv[argv.index("--rope-scaling-factor") + 1] == "8"


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_p620_fires_on_scalings_megatron_lacks(check_spec, kind):
    model = f"from = llama3_8b\n  rope_scaling = {kind}\n  rope_factor = 4"
    assert_fires(check_spec, _spec("", model=model), "P620", f"rope_scaling = {kind}", target="megatron",
                 targets=("megatron",))


def test_p620_fires_on_mla_yarn_from_other_positions(check_spec):
    model = "from = deepseek_v2_lite\n  rope_original_positions = 8192"
    d = assert_fires(check_spec, spec(model=model, mesh="dp = 8", train="zero = 1", target={"megatron": ""}),
                     "P620", "rope_original_positions = 8192", target="megatron", targets=("megatron",))
    assert "4,096" in d.message


def test_deepseek_v3_yarn_as_megatrons_own_script_writes_it(check_spec):
    """examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: --rotary-scaling-factor 40 --mscale 1.0
    --mscale-all-dim 1.0 (multi-latent attention's YaRN; its original 4,096 positions are its config's)."""
    text = spec(model="from = deepseek_v3", nodes=16, mesh="dp = 128; ep = 8", train="zero = 1",
                target={"megatron": ""})
    from parc.targets.megatron import arg_lines

    r = check_spec(text, ("megatron",))
    a = {str(line[0]): [str(x) for x in line[1:]] for line in arg_lines(r.plan)}
    assert (a["--rotary-scaling-factor"], a["--mscale"], a["--mscale-all-dim"]) == (["40"], ["1"], ["1"])
    assert a["--position-embedding-type"] == ["rope"] and "--yarn-original-max-position-embeddings" not in a


# --- Megatron-FSDP's main gradients -------------------------------------------------------------
@pytest.mark.parametrize("main_grads", ["fp32", "bf16"])
def test_fsdp_writes_its_own_main_grads_dtype(check_spec, main_grads):
    argv = _argv(check_spec, _spec("", train=f"zero = 3; main_grads = {main_grads}"))
    assert argv[argv.index("--megatron-fsdp-main-grads-dtype") + 1] == main_grads
    assert "--grad-reduce-in-bf16" not in argv
    argv = _argv(check_spec, _spec("", train=f"zero = 1; main_grads = {main_grads}"))
    assert ("--grad-reduce-in-bf16" in argv) == (main_grads == "bf16")
    assert "--megatron-fsdp-main-grads-dtype" not in argv
