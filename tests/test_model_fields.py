"""The model that is launched is the model that was checked: every field of the deepseek_v3,
llama4_maverick, qwen3_235b_a22b and gpt_oss_120b presets reaches the Megatron-LM, torchtitan,
vLLM and SGLang launch as that engine spells it, or the plan is refused with the field named
(P620); the training setup (recompute, FP8) likewise."""
from __future__ import annotations

import dataclasses
import json

import pytest

from parc.model.params import is_moe_layer
from parc.model.plan import Model
from support.specs import assert_fires, assert_quiet, spec

PRESETS = ("deepseek_v3", "llama4_maverick", "qwen3_235b_a22b", "gpt_oss_120b")
# fields that are not the built model: its name and parameter count, the workload, how it is stored
NOT_BUILT = {"name", "params", "seq_len", "dtype", "checkpoint_format", "preset"}
BIG = dict(nodes=16, gpn=8, mesh="pp = 4; dp = 4; tp = 8; ep = 8", schedule="micro_batch = 1; global_batch = 256",
           train="zero = 1; sequence_parallel = true")


def _plan(check_spec, text, target):
    r = check_spec(text, (target,))
    return r.plan, [d for d in r.diagnostics if d.code == "P620"]


def _argv(lines) -> dict[str, list[str]]:
    """An argument list as {option: the words after it}."""
    out: dict[str, list[str]] = {}
    for line in lines:
        out[str(line[0])] = [str(x) for x in line[1:]]
    return out


# --- Megatron-LM -------------------------------------------------------------------------------

def megatron_model(a: dict[str, list[str]]) -> dict:
    """The fields of parc's model block that Megatron-LM builds from its arguments."""
    def num(flag, default=0):
        return int(a[flag][0]) if flag in a else default

    heads, hidden = num("--num-attention-heads"), num("--hidden-size")
    mla = "--multi-latent-attention" in a
    moe = num("--num-experts")
    freq = eval(a["--moe-layer-freq"][0]) if "--moe-layer-freq" in a else [1] * num("--num-layers")   # noqa: S307
    window = a.get("--window-size", ["-1,0"])[0]
    return {
        "layers": num("--num-layers"), "hidden": hidden, "ffn_hidden": num("--ffn-hidden-size"), "heads": heads,
        "kv_heads": num("--num-query-groups") if "--group-query-attention" in a else heads,
        "head_dim": num("--kv-channels", hidden // heads), "vocab": num("--vocab-size"),
        "tied_embeddings": "--untie-embeddings-and-output-weights" not in a,
        "mlp": "swiglu" if "--swiglu" in a else "gelu", "norm": a["--normalization"][0].lower(),
        "position": "rope" if a["--position-embedding-type"][0] in ("rope", "yarn") else "learned",
        "bias": "--disable-bias-linear" not in a, "qkv_bias": "--add-qkv-bias" in a,
        "experts": moe, "top_k": num("--moe-router-topk"), "moe_ffn_hidden": num("--moe-ffn-hidden-size"),
        "shared_experts": num("--moe-shared-expert-intermediate-size") // max(1, num("--moe-ffn-hidden-size")),
        "moe_pattern": [bool(x) for x in freq] if moe else [False] * num("--num-layers"),
        "q_lora_rank": num("--q-lora-rank") if mla else 0, "kv_lora_rank": num("--kv-lora-rank") if mla else 0,
        "qk_nope_head_dim": num("--qk-head-dim") if mla else 0,
        "qk_rope_head_dim": num("--qk-pos-emb-head-dim") if mla else 0, "v_head_dim": num("--v-head-dim") if mla else 0,
        "mtp_layers": num("--mtp-num-layers"), "qk_norm": "--qk-layernorm" in a and not mla,
        "attention_sinks": a.get("--softmax-type", ["vanilla"])[0] == "learnable",
        "attention_window": int(window.split(",")[0]) + 1, "global_every": num("--window-attn-skip-freq"),
        "rope_theta": num("--rotary-base", 10000), "max_positions": num("--max-position-embeddings"),
        "hybrid": "--hybrid-override-pattern" in a, **megatron_rope(a, mla), **megatron_router(a),
    }


def megatron_router(a: dict[str, list[str]]) -> dict:
    """The router and the norm epsilon Megatron-LM builds (its defaults where no option is given:
    softmax, no groups, bias or scaling, the top-k before the softmax)."""
    def frac(flag):
        return float(a[flag][0]) if flag in a else None

    return {"norm_eps": frac("--norm-epsilon"),
            "router_score": a.get("--moe-router-score-function", ["softmax"])[0],
            "router_groups": int(a.get("--moe-router-num-groups", ["0"])[0]),
            "router_group_topk": int(a.get("--moe-router-group-topk", ["0"])[0]),
            "router_expert_bias": "--moe-router-enable-expert-bias" in a,
            "router_scale": frac("--moe-router-topk-scaling-factor"),
            "router_pre_softmax": "--moe-router-pre-softmax" in a}


def megatron_rope(a: dict[str, list[str]], mla: bool) -> dict:
    """The RoPE scaling Megatron-LM builds from its arguments (rotary_pos_embedding.py: Llama 3.1's
    from 8192 positions; multi-latent attention's YaRN from MLATransformerConfig's 4096)."""
    def frac(flag):
        return float(a[flag][0]) if flag in a else None

    if "--use-rope-scaling" in a:
        return {"rope_scaling": "llama3", "rope_factor": frac("--rope-scaling-factor") or 8.0,
                "rope_original_positions": 8192, "rope_mscale": None, "rope_mscale_all_dim": None}
    if "--rotary-seq-len-interpolation-factor" in a:
        return {"rope_scaling": "linear", "rope_factor": frac("--rotary-seq-len-interpolation-factor"),
                "rope_original_positions": None, "rope_mscale": None, "rope_mscale_all_dim": None}
    yarn = a["--position-embedding-type"][0] == "yarn" or (mla and "--rotary-scaling-factor" in a)
    if not yarn:
        return {"rope_scaling": "none", "rope_factor": 1.0, "rope_original_positions": None, "rope_mscale": None,
                "rope_mscale_all_dim": None}
    original = 4096 if mla else int(a.get("--yarn-original-max-position-embeddings", ["4096"])[0])
    return {"rope_scaling": "yarn", "rope_factor": frac("--rotary-scaling-factor"), "rope_original_positions": original,
            "rope_mscale": frac("--mscale"), "rope_mscale_all_dim": frac("--mscale-all-dim")}


def plan_model(m: Model) -> dict:
    """The same fields of the plan's model (the MoE layers as a pattern, MLA without head_dim)."""
    out = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in NOT_BUILT}
    out["moe_pattern"] = [is_moe_layer(m, i) for i in range(m.layers)]
    out["qkv_bias"] = m.qkv_bias and not m.bias
    for k in ("moe_every", "first_k_dense", "local_attention"):
        out.pop(k)
    if m.is_mla:
        out["head_dim"] = m.hidden // m.heads
    if not m.is_moe:
        out.update(top_k=0, moe_ffn_hidden=0)
    if m.router_groups <= 1:     # one group is no group-limited routing
        out.update(router_groups=0, router_group_topk=0)
    if m.router_scale == 1.0:    # nor is a scaling by 1
        out["router_scale"] = None
    return out


def test_every_model_field_is_checked_somewhere():
    """A field added to the model block must be added to the round trips below."""
    fields = {f.name for f in dataclasses.fields(Model)} - NOT_BUILT
    assert fields - set(plan_model(Model("m", 2, 64, 128, 4, 4, 16, 100, 0))) == {
        "moe_every", "first_k_dense", "local_attention"}   # as moe_pattern, and P620 for chunked


@pytest.mark.parametrize("preset", [p for p in PRESETS if p != "llama4_maverick"])
def test_megatron_builds_the_preset(check_spec, preset):
    """Every field, in options Megatron-LM 0.20's parser defines (tests/data/flags, read from
    megatron/training/arguments.py at d98e8a64ddf3)."""
    from pathlib import Path

    from parc.targets.megatron import arg_lines

    plan, p620 = _plan(check_spec, spec(model=f"from = {preset}", target={"megatron": ""}, **BIG), "megatron")
    assert not p620, [d.message for d in p620]
    a = _argv(arg_lines(plan))
    assert megatron_model(a) == plan_model(plan.model)
    known = Path(__file__).parent / "data" / "flags" / "megatron-core-0.20.0.txt"
    assert set(a) <= {ln.strip() for ln in known.read_text().splitlines() if ln.startswith("--")}


def test_megatron_deepseek_v3_flags(check_spec):
    """DeepSeek-V3 as Megatron-LM's own DeepSeek-R1 configuration spells it
    (examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh): MLA with its ranks, the
    latent norms, three dense layers, a shared expert, and its MTP module."""
    from parc.targets.megatron import arg_lines

    plan, _ = _plan(check_spec, spec(model="from = deepseek_v3", target={"megatron": ""}, **BIG), "megatron")
    a = _argv(arg_lines(plan))
    assert {k: a[k] for k in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
                              "--v-head-dim", "--moe-layer-freq", "--moe-shared-expert-intermediate-size",
                              "--mtp-num-layers")} == {
        "--q-lora-rank": ["1536"], "--kv-lora-rank": ["512"], "--qk-head-dim": ["128"], "--qk-pos-emb-head-dim": ["64"],
        "--v-head-dim": ["128"], "--moe-layer-freq": ["[0]*3+[1]*58"], "--moe-shared-expert-intermediate-size": ["2048"],
        "--mtp-num-layers": ["1"]}
    assert "--multi-latent-attention" in a and "--qk-layernorm" in a


def test_megatron_gpt_oss_attention(check_spec):
    """gpt-oss's sinks and alternating 128-token windows, as Megatron-LM's gpt-oss example writes
    them (examples/gptoss/02_train.sh: --softmax-type learnable --window-size 127,0
    --window-attn-skip-freq 2)."""
    from parc.targets.megatron import arg_lines

    plan, _ = _plan(check_spec, spec(model="from = gpt_oss_120b", target={"megatron": ""}, **BIG), "megatron")
    a = _argv(arg_lines(plan))
    assert (a["--softmax-type"], a["--window-size"], a["--window-attn-skip-freq"]) == (["learnable"], ["127,0"], ["2"])


def test_megatron_refuses_a_hybrid_model(check_spec):
    """parc writes Megatron-LM's GPT model, whose every layer is attention: a hybrid model's
    recurrent layers would not be built, so P620 refuses it rather than train another model."""
    text = spec(model="from = qwen3_30b_a3b", target={"megatron": ""}, **BIG).replace(
        "from = qwen3_30b_a3b", "layers = 48; hidden = 2048; heads = 32; kv_heads = 4; head_dim = 128; "
        "vocab = 151936; experts = 128; top_k = 8; moe_ffn_hidden = 768; hybrid = true")
    d = assert_fires(check_spec, text, "P620", "hybrid = true", target="megatron", targets=("megatron",))
    assert "--hybrid-override-pattern" in d.message
    assert_quiet(check_spec, text.replace("; hybrid = true", ""), "P620", ("megatron",))


def test_megatron_refuses_chunked_attention(check_spec):
    text = spec(model="from = llama4_maverick", target={"megatron": ""}, **BIG)
    d = assert_fires(check_spec, text, "P620", "from = llama4_maverick", target="megatron", targets=("megatron",))
    assert "chunked local attention" in d.message
    assert_quiet(check_spec, text.replace("from = llama4_maverick", "from = llama4_maverick\n  local_attention = sliding"),
                 "P620", ("megatron",))


def test_megatron_moe_layer_freq_patterns():
    from parc.targets.megatron import layer_pattern

    for bits in ([0, 0, 0] + [1] * 58, [0, 1] * 24, [0] + [1, 0] * 3, [1, 1, 0, 1], [0] * 2 + [0, 0, 1] * 5):
        assert eval(layer_pattern(bits)) == bits, layer_pattern(bits)   # noqa: S307
    assert layer_pattern([0, 1] * 24) == "([0]*1+[1]*1)*24"


TRAIN = dict(model="from = llama3_8b", mesh="tp = 8", schedule="micro_batch = 1; global_batch = 64")


def _megatron(check_spec, train: str) -> dict:
    from parc.targets.megatron import arg_lines

    plan, _ = _plan(check_spec, spec(train=train, target={"megatron": ""}, **TRAIN), "megatron")
    return _argv(arg_lines(plan))


def test_megatron_recompute_modules(check_spec):
    """recompute_modules as --recompute-granularity selective --recompute-modules (not
    --recompute-activations, which recomputes core attention whatever the modules say)."""
    a = _megatron(check_spec, "zero = 1; recompute = selective; recompute_modules = [core_attn, mlp, layernorm]")
    assert a["--recompute-granularity"] == ["selective"]
    assert a["--recompute-modules"] == ["core_attn", "mlp", "layernorm"]
    plain = _megatron(check_spec, "zero = 1; recompute = selective")
    assert plain["--recompute-granularity"] == ["selective"] and "--recompute-modules" not in plain
    assert "--recompute-activations" not in a and "--recompute-activations" not in plain


@pytest.mark.parametrize("recipe, fmt", [(None, "hybrid"), ("delayed", "hybrid"), ("tensorwise", "hybrid"),
                                         ("blockwise", "e4m3"), ("mxfp8", "e4m3")])
def test_megatron_fp8_recipes(check_spec, recipe, fmt):
    a = _megatron(check_spec, "zero = 1; precision = fp8" + (f"; fp8_recipe = {recipe}" if recipe else ""))
    assert a["--fp8-format"] == [fmt]
    assert a.get("--fp8-recipe") == ([recipe] if recipe else None)
    assert "--fp8-param-gather" not in a


def test_megatron_bf16_main_grads_reduce_in_bf16(check_spec):
    """`main_grads = bf16` is Megatron-LM's --grad-reduce-in-bf16 (validate_args: the gradient
    buffer accumulates and all-reduces in bf16), as its own example scripts write it; the
    precision-aware optimizer only for `optimizer_state = bf16`."""
    a = _megatron(check_spec, "zero = 1; main_grads = bf16")
    assert "--grad-reduce-in-bf16" in a
    assert not {"--main-grads-dtype", "--use-precision-aware-optimizer"} & set(a)
    a = _megatron(check_spec, "zero = 1; optimizer_state = bf16")
    assert "--use-precision-aware-optimizer" in a and a["--exp-avg-dtype"] == ["bf16"]
    assert "--grad-reduce-in-bf16" not in a


def test_megatron_fp8_param_gather(check_spec):
    a = _megatron(check_spec, "zero = 1; precision = fp8; fp8_param_gather = true")
    assert "--fp8-param-gather" in a and "--use-distributed-optimizer" in a
    text = spec(train="zero = 0\nprecision = fp8\nfp8_param_gather = true", target={"megatron": ""}, **TRAIN)
    assert_fires(check_spec, text, "P621", "fp8_param_gather", target="megatron", targets=("megatron",))
    assert_quiet(check_spec, text.replace("zero = 0", "zero = 1"), "P621", ("megatron",))
    bf16 = spec(train="zero = 1\nfp8_param_gather = true", target={"megatron": ""}, **TRAIN)
    assert_fires(check_spec, bf16, "P621", "fp8_param_gather", target="megatron", targets=("megatron",))


@pytest.mark.parametrize("train, at", [("recompute = selective_op", "recompute"),
                                       ("precision = fp8\nfp8_recipe = rowwise", "fp8_recipe")])
def test_megatron_refuses_torchtitan_settings(check_spec, train, at):
    text = spec(train="zero = 1\n" + train, target={"megatron": ""}, **TRAIN)
    assert_fires(check_spec, text, "P620", at, target="megatron", targets=("megatron",))
    assert_quiet(check_spec, spec(train="zero = 1", target={"megatron": ""}, **TRAIN), "P620", ("megatron",))


# --- torchtitan --------------------------------------------------------------------------------

TT = dict(nodes=8, gpn=8, mesh="dp = 16; tp = 4", schedule="micro_batch = 1; global_batch = 64")


def _torchtitan(check_spec, model: str, train: str = "zero = 1", **kw):
    r = check_spec(spec(model=model, train=train, target={"torchtitan": ""}, **{**TT, **kw}), ("torchtitan",))
    return r, [(d.code, d.message) for d in r.diagnostics if d.code in ("P620", "P631")]


@pytest.mark.parametrize("recompute, word", [("none", "activation-checkpoint:none"), ("full", "activation-checkpoint:full"),
                                             ("selective_op", "activation-checkpoint:selective")])
def test_torchtitan_recompute_is_its_activation_checkpoint(check_spec, recompute, word):
    """The activation_checkpoint subcommand comes last: tyro takes no trainer option after it."""
    from parc.targets.torchtitan import TARGET, overrides, recompute_word

    r, _ = _torchtitan(check_spec, "from = llama3_8b", f"zero = 1; recompute = {recompute}")
    assert recompute_word(r.plan) == [[word]]
    assert word not in [x for line in overrides(r.plan) for x in line]
    from parc.targets import torchtitan

    lines = [ln.strip() for ln in torchtitan.build(r.plan)[0].text.splitlines()]
    assert lines[lines.index(")") - 1] == word        # the last word of launch.sh's argument array
    assert TARGET == "torchtitan"


def test_torchtitan_refuses_module_recompute(check_spec):
    text = spec(model="from = llama3_8b", train="zero = 1\nrecompute = selective", target={"torchtitan": ""}, **TT)
    d = assert_fires(check_spec, text, "P620", "recompute = selective", target="torchtitan", targets=("torchtitan",))
    assert "selective_op" in d.help
    assert_quiet(check_spec, text.replace("recompute = selective", "recompute = selective_op"), "P620", ("torchtitan",))


@pytest.mark.parametrize("model, train, config", [
    ("from = llama3_8b", "zero = 1", "llama3_8b"),
    ("from = llama3_8b", "zero = 1; precision = fp8; fp8_recipe = mxfp8", "llama3_8b_mxfp8"),
    ("from = llama3_405b", "zero = 1; precision = fp8", "llama3_405b"),
    # torchtitan's DeepSeek-V3 builds no MTP module and keeps RMSNorm.Config's eps 1e-5
    ("from = deepseek_v3\n mtp_layers = 0\n norm_eps = 0.00001", "zero = 1; precision = fp8", "deepseek_v3_671b_float8"),
    ("from = deepseek_v3\n mtp_layers = 0\n norm_eps = 0.00001", "zero = 1", "deepseek_v3_671b"),
    ("from = gpt_oss_120b", "zero = 1", "gpt_oss_120b"),
    ("from = qwen3_30b_a3b", "zero = 1", "qwen3_30b_a3b"),
])
def test_torchtitan_picks_the_function_of_the_precision(check_spec, model, train, config):
    from parc.targets.torchtitan import module_config

    r, found = _torchtitan(check_spec, model, train)
    assert not found, found
    assert module_config(r.plan)[1] == config


@pytest.mark.parametrize("model, train, at, says", [
    ("from = deepseek_v3\n norm_eps = 0.00001", "zero = 1", "from = deepseek_v3", "mtp_layers = 0"),
    ("from = deepseek_v3\n mtp_layers = 0", "zero = 1", "from = deepseek_v3", "norm_eps = 1e-05"),
    ("from = llama3_405b", "zero = 1", "train {", "llama3_405b (fp8, rowwise)"),
    ("from = llama3_8b", "zero = 1\nprecision = fp8\nfp8_recipe = tensorwise", "fp8_recipe", "tensorwise"),
    ("from = llama3_8b", "zero = 1\nprecision = fp8\nfp8_recipe = mxfp8\nfp8_param_gather = true", "fp8_param_gather",
     "bfloat16"),
    ("from = llama3_8b\n layers = 40", "zero = 1", "layers = 40", "layers = 32"),
])
def test_torchtitan_refuses_what_its_function_does_not_build(check_spec, model, train, at, says):
    text = spec(model=model, train=train, target={"torchtitan": ""}, **TT)
    d = assert_fires(check_spec, text, "P620", at, target="torchtitan", targets=("torchtitan",))
    assert says in d.message + d.help, (d.message, d.help)


def test_torchtitan_own_config_is_the_specs_word(check_spec):
    """A spec naming its own config function: parc cannot see its model, and takes the model block
    as what it builds (only the training setup is checked)."""
    _, found = _torchtitan(check_spec, "from = deepseek_v3\n norm_eps = 0.00001", "zero = 1")
    assert [c for c, _ in found] == ["P620"]
    r = check_spec(spec(model="from = deepseek_v3", target={"torchtitan": 'module = "deepseek_v3"\nconfig = "mine"'},
                        **TT), ("torchtitan",))
    assert not [d for d in r.diagnostics if d.code == "P620"]


@pytest.mark.parametrize("preset", ["llama4_maverick", "qwen3_235b_a22b"])
def test_torchtitan_ships_no_function_for(check_spec, preset):
    """torchtitan 0.3.0 has no llama4 module and no config function of Qwen3 235B (its 235B-A22B
    flavour is only a model registry entry): the spec names one (P631)."""
    _, found = _torchtitan(check_spec, f"from = {preset}")
    assert [c for c, _ in found] == ["P631"]


# --- vLLM and SGLang ----------------------------------------------------------------------------

SERVE = dict(nodes=2, gpn=8, mesh="tp = 8; pp = 2", serve="max_model_len = 8192")


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 if value else 2
    return None


def _served(check_spec, target: str, model: str):
    from parc.model.targets import flag, pinned

    r = check_spec(spec(model=model, target={target: 'model = "x"'}, **SERVE), (target,))
    if r.plan is None:          # not a model alone (MLA's widths go together)
        return r, None, None
    if target == "vllm":
        from parc.targets.vllm import inexpressible, model_lines

        lines = model_lines(r.plan, lambda what: flag("vllm", what, pinned(r.plan, "vllm")))
    else:
        from parc.targets.sglang import inexpressible, model_lines

        lines = model_lines(r.plan)
    opt = "--hf-overrides" if target == "vllm" else "--json-model-override-args"
    found = _argv(lines)
    return r, (json.loads(found[opt][0]) if opt in found else {}), [p for p, _, _ in inexpressible(r.plan)]


@pytest.mark.parametrize("target", ["vllm", "sglang"])
@pytest.mark.parametrize("preset", PRESETS)
def test_served_preset_is_the_checkpoint(check_spec, target, preset):
    """The preset as published: nothing to override, nothing refused."""
    _, over, refused = _served(check_spec, target, f"from = {preset}")
    assert over == {} and refused == []


@pytest.mark.parametrize("target", ["vllm", "sglang"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_changed_field_is_overridden_or_refused(check_spec, target, preset):
    """Each field of the preset changed alone: the engine is told it in the checkpoint config's own
    key (hf_config.toml), or the plan is refused with that field named."""
    from parc.resolve.resolver import presets
    from parc.targets.hf import key_of

    pre = presets("models")[preset]
    checked = 0
    for f in dataclasses.fields(Model):
        value = _changed(pre.get(f.name, f.default if f.default is not dataclasses.MISSING else 0))
        if f.name in NOT_BUILT or value is None or f.name in ("mlp", "norm", "position", "local_attention"):
            continue
        r, over, refused = _served(check_spec, target, f"from = {preset}\n{f.name} = {str(value).lower()}")
        if r.plan is None:
            continue
        checked += 1
        key = key_of(preset, f.name)
        if key:
            section = over.get("text_config", over)
            assert section.get(key) == value, (f.name, over)
            assert f"model.{f.name}" not in refused
        else:
            assert f"model.{f.name}" in refused, (f.name, refused)
    assert checked >= 20


def test_changed_field_is_p620_at_its_line(check_spec):
    text = spec(model="from = qwen3_235b_a22b\nqk_norm = false", target={"vllm": 'model = "x"'}, **SERVE)
    d = assert_fires(check_spec, text, "P620", "qk_norm = false", target="vllm", targets=("vllm",))
    assert "--hf-overrides" in d.message
    assert_quiet(check_spec, text.replace("qk_norm = false", "layers = 48"), "P620", ("vllm",))


def test_torchtitan_expert_parallel_runs_without_cuda_graphs(check_spec):
    """torchtitan's Trainer.Config refuses CUDA graphs with expert parallelism through its
    all-to-all token dispatcher (it synchronizes with the CPU): the launch turns them off, as it
    does for a pipeline."""
    from parc.targets.torchtitan import overrides

    def words(mesh):
        r, found = _torchtitan(check_spec, "from = qwen3_30b_a3b", "zero = 3; recompute = full", mesh=mesh)
        assert not found, found
        return [w for line in overrides(r.plan) for w in line]

    assert "--training.disable_cuda_graphs" in words("dp = 64; ep = 8")
    assert "--training.disable_cuda_graphs" not in words("dp = 64")
