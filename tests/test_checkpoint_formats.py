"""How a checkpoint is stored (``model.checkpoint_format``) apart from how the GEMMs run
(``dtype``): the weight memory follows the stored format, --quantization is written only where the
engine quantizes at load, and the quantization the engines refuse is a rule (P619, P622). With the
memory terms of training that this round adds: torchtitan's per-op selective checkpointing and
FP8 weights (``fp8_param_gather``)."""
from __future__ import annotations

import pytest

from parc.cost import estimate as cm
from parc.cost.params import model_weight_bytes, part_weight_bytes
from parc.model.checkpoints import engine_accepts, load_quantization, storage
from support.specs import assert_fires, assert_quiet, spec

SERVE = dict(nodes=2, gpn=8, mesh="dp = 2; tp = 8", serve="max_model_len = 8192")
LINEAR = ("attention", "mlp", "experts", "mtp")


def _serve(check_spec, model: str, target: str = "vllm", extra: str = ""):
    body = 'model = "org/model"' + (f"\nextra_args = [{extra}]" if extra else "")
    return check_spec(spec(model=model, target={target: body}, **SERVE), (target,))


@pytest.mark.parametrize("preset, fmt, dtype", [("deepseek_v3", "fp8_block", "fp8"), ("deepseek_r1", "fp8_block", "fp8"),
                                                ("kimi_k2", "fp8_block", "fp8"), ("gpt_oss_120b", "mxfp4", "bf16"),
                                                ("llama3_70b", "bf16", "bf16")])
def test_presets_say_how_their_checkpoints_are_stored(check_spec, preset, fmt, dtype):
    r = _serve(check_spec, f"from = {preset}")
    assert (r.plan.model.checkpoint_format, r.plan.model.dtype) == (fmt, dtype)


def test_fp8_block_weights(check_spec):
    """DeepSeek-V3's FP8 checkpoint: its layers' linear weights 1 byte plus one fp32 scale per
    128 x 128 block, embedding, head, norms and router bf16."""
    r = _serve(check_spec, "from = deepseek_v3")
    st = cm.estimate(r.plan).stages[0]
    want = sum(n * (1 + 4 / 16384 if p in LINEAR else 2) for p, n in st.parts.items())
    assert st.memory.weights == pytest.approx(want)
    assert st.memory.weights < 1.02 * st.params      # not the 2 bytes a parameter of a bf16 copy


def test_mxfp4_experts(check_spec):
    """gpt-oss-120b's MXFP4 experts (0.5 byte and an e8m0 scale per 32) and bf16 rest fit on one
    80 GB GPU, as its README says."""
    r = _serve(check_spec, "from = gpt_oss_120b")
    m = r.plan.model
    assert part_weight_bytes(m, "experts") == 0.5 + 1 / 32 and part_weight_bytes(m, "attention") == 2
    total = model_weight_bytes(m)
    assert 60e9 < total < 80e9, total


def test_online_fp8_quantizes_the_linear_layers(check_spec):
    """A bf16 checkpoint served with dtype = fp8: the engine quantizes the linear weights at load
    (--quantization fp8); the embedding and head stay bf16, and the KV cache under `auto` is the
    activations' bf16, as vLLM's --kv-cache-dtype auto follows --dtype."""
    fp8 = _serve(check_spec, "from = llama3_70b\ndtype = fp8")
    bf16 = _serve(check_spec, "from = llama3_70b")
    assert storage(fp8.plan.model) == "online_fp8" and load_quantization(fp8.plan.model) == "fp8"
    a, b = cm.estimate(fp8.plan).stages[0], cm.estimate(bf16.plan).stages[0]
    assert a.memory.weights == sum(n * (1 if p in LINEAR else 2) for p, n in a.parts.items())
    assert a.kv_bytes_per_token == b.kv_bytes_per_token


def _model_lines(plan, target: str) -> list[list]:
    if target == "vllm":
        from parc.targets.vllm import model_lines, options

        return model_lines(plan, options(plan))
    from parc.targets.sglang import model_lines

    return model_lines(plan)


@pytest.mark.parametrize("target", ["vllm", "sglang"])
def test_quantization_only_where_the_engine_quantizes(check_spec, target):
    def words(r):
        return [str(w) for ln in _model_lines(r.plan, target) for w in ln]

    # --dtype is left to the engine's `auto` (the checkpoint's dtype) wherever that is what runs
    assert words(_serve(check_spec, "from = deepseek_v3", target)) == []
    assert words(_serve(check_spec, "from = gpt_oss_120b", target)) == []
    assert words(_serve(check_spec, "from = llama3_70b\ndtype = fp8", target)) == ["--quantization", "fp8"]


@pytest.mark.parametrize("target", ["vllm", "sglang"])
@pytest.mark.parametrize("model, written", [
    ("from = llama3_70b", None), ("from = llama3_70b\ndtype = bf16", "bf16"),
    ("from = llama3_70b\ndtype = fp16", "fp16"),
    ("from = llama3_70b\ncheckpoint_format = fp16", None),
    ("from = llama3_70b\ncheckpoint_format = fp16\ndtype = bf16", "bf16"),
    ("from = llama3_70b\ncheckpoint_format = fp32\ndtype = bf16", "bf16"),
    ("from = llama3_70b\ncheckpoint_format = fp32", "fp32")])
def test_dtype_only_where_auto_runs_another(check_spec, target, model, written):
    """``--dtype`` is written where the spec states a 16- or 32-bit dtype, else only where the
    engine's ``auto`` would run another dtype than the plan's: auto keeps a 16-bit checkpoint's
    dtype and casts a 32-bit one to bfloat16 (vLLM 0.33 config/model.py _resolve_auto_dtype: the
    platform's first supported dtype) or float16 (SGLang 0.5.23 configs/model_config.py
    _get_and_verify_dtype, Gemma aside)."""
    from parc.model.checkpoints import auto_dtype, engine_dtype

    assert (auto_dtype("fp32", "vllm"), auto_dtype("fp32", "sglang"), auto_dtype("mxfp4", "vllm")) == (
        "bf16", "fp16", "bf16")
    r = _serve(check_spec, model, target)
    want = written[target] if isinstance(written, dict) else written
    assert engine_dtype(r.plan.model, target, "dtype" in model) == want
    words = [str(w) for ln in _model_lines(r.plan, target) for w in ln]
    assert (words[words.index("--dtype") + 1] if "--dtype" in words else None) == (
        {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[want] if want else None)


def test_engine_methods():
    """What each engine reads from a quantized checkpoint and accepts beside it: its own method,
    any where the checkpoint's method replaces the user's (ModelOpt's), a compatible one."""
    assert engine_accepts("fp8_block", "vllm", "fp8") and engine_accepts("bf16", "vllm", "fp8")
    assert engine_accepts("modelopt_fp8", "vllm", "fp8") and engine_accepts("nvfp4", "sglang", "fp8")
    assert not engine_accepts("fbgemm_fp8", "vllm", "fp8") and not engine_accepts("mxfp4", "sglang", "fp8")
    assert not engine_accepts("compressed_tensors_fp8", "vllm", "fp8")
    assert engine_accepts("compressed_tensors_fp8", "sglang", "w8a8_fp8")     # SGLang's compatible methods


@pytest.mark.parametrize("target, fmt", [("vllm", "fbgemm_fp8"), ("vllm", "compressed_tensors_fp8"),
                                         ("sglang", "compressed_tensors_fp8")])
def test_p619_extra_quantization_against_the_checkpoint(check_spec, target, fmt):
    text = spec(model=f"from = llama3_70b\ncheckpoint_format = {fmt}",
                target={target: 'model = "org/model"\nextra_args = ["--quantization", "fp8"]'}, **SERVE)
    d = assert_fires(check_spec, text, "P619", "extra_args", target=target, targets=(target,))
    assert "does not match" in d.message
    assert_quiet(check_spec, text.replace('\n  extra_args = ["--quantization", "fp8"]', ""), "P619", (target,))
    # a ModelOpt FP8 checkpoint: both engines keep its own method over --quantization fp8
    assert_quiet(check_spec, text.replace(fmt, "modelopt_fp8"), "P619", (target,))


def test_fbgemm_needs_vllms_deprecated_switch(check_spec):
    from parc.targets.vllm import model_lines, options

    r = _serve(check_spec, "from = llama3_70b\ncheckpoint_format = fbgemm_fp8")
    assert ["--allow-deprecated-quantization"] in model_lines(r.plan, options(r.plan))


@pytest.mark.parametrize("target", ["vllm", "sglang"])
def test_p619_fp8_on_a_4_bit_checkpoint(check_spec, target):
    text = spec(model="from = gpt_oss_120b\ndtype = fp8", target={target: 'model = "org/model"'}, **SERVE)
    assert_fires(check_spec, text, "P619", "dtype = fp8", target=target, targets=(target,))
    assert_quiet(check_spec, text.replace("\n  dtype = fp8", ""), "P619", (target,))


def test_p619_format_sglang_cannot_load(check_spec):
    text = spec(model="from = llama3_70b\ncheckpoint_format = fbgemm_fp8", target={"sglang": 'model = "org/model"'},
                **SERVE)
    assert_fires(check_spec, text, "P619", "checkpoint_format", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("sglang", "vllm"), "P619", ("vllm",))


@pytest.mark.parametrize("target", ["vllm", "sglang"])
def test_p622_fp8_checkpoint_in_bf16(check_spec, target):
    text = spec(model="from = deepseek_v3\ndtype = bf16", target={target: 'model = "org/model"'}, **SERVE)
    assert_fires(check_spec, text, "P622", "dtype = bf16", target=target, targets=(target,))
    assert_quiet(check_spec, text.replace("dtype = bf16", "dtype = bf16\n  checkpoint_format = bf16"), "P622",
                 (target,))


def test_explain_names_the_stored_format(check_spec):
    from parc.report.explain import _weights_note

    assert _weights_note(_serve(check_spec, "from = deepseek_v3").plan).startswith("fp8_block checkpoint")
    assert "quantized to fp8 at load" in _weights_note(_serve(check_spec, "from = llama3_70b\ndtype = fp8").plan)


# --- training memory ----------------------------------------------------------------------------

def test_op_sac_keeps_half_the_matmul_outputs():
    """Llama 3 8B under torchtitan's per-op checkpointing: the block input, q·k·v, w1, w2 and the
    attention output, 2 bytes each, and the fp32 log-sum-exp: 65,664 bytes per token, against
    147,456 without recompute."""
    kw = dict(ffn=14336, mlp="swiglu", kv_heads=8, head_dim=128, flash=True)
    assert cm.activation_bytes_per_layer(1, 1, 4096, 32, recompute="selective_op", **kw) == 65_664
    assert cm.activation_bytes_per_layer(1, 1, 4096, 32, **kw) == 147_456
    # sequence parallelism splits all of it over tp, tensor parallelism only the column outputs
    assert cm.activation_bytes_per_layer(1, 1, 4096, 32, recompute="selective_op", t=2, sp=True, **kw) == 32_832
    # half the matmuls' forward again, not the attention core, and the elementwise forward
    assert cm.recompute_factors("selective_op") == (7 / 6, 1.0, 1.0)


def test_op_sac_in_the_estimate(check_spec):
    r = check_spec(spec(model="from = llama3_8b", mesh="dp = 4; tp = 2", schedule="micro_batch = 2; global_batch = 64",
                        train="zero = 3; sequence_parallel = true; recompute = selective_op",
                        target={"torchtitan": ""}), ("torchtitan",))
    assert r.ok, [d.message for d in r.errors]
    assert cm.layer_activation_bytes(r.plan) == 32_832 * 8192 * 2


def test_fp8_param_gather_keeps_fp8_weights(check_spec):
    """--fp8-param-gather: the linear weights in FP8, 1 byte instead of 2, and only their
    transpose cached (1 more byte instead of the copy and transpose's 2)."""
    def est(train):
        r = check_spec(spec(model="from = llama3_8b", mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64",
                            train=train, target={"megatron": ""}), ("megatron",))
        return cm.estimate(r.plan).stages[0]

    plain = est("zero = 1; precision = fp8")
    fp8p = est("zero = 1; precision = fp8; fp8_param_gather = true")
    linear = cm.linear_params(plain.parts)
    assert plain.memory.weights - fp8p.memory.weights == linear
    assert (plain.memory.fp8_weights, fp8p.memory.fp8_weights) == (2 * linear, linear)
