"""The MoE router and the norm epsilon as model facts: the presets against the published
config.json of each model, the keys' own consistency (P027), each training target's spelling of
them or its P620 where it has none, and the serving engines' --hf-overrides.

Published values (config.json of each checkpoint on Hugging Face):
- deepseek-ai/DeepSeek-V3 and deepseek-ai/DeepSeek-R1: scoring_func "sigmoid", n_group 8,
  topk_group 4, topk_method "noaux_tc", norm_topk_prob true, routed_scaling_factor 2.5,
  rms_norm_eps 1e-06.
- moonshotai/Kimi-K2-Instruct: scoring_func "sigmoid", n_group 1, topk_group 1, topk_method
  "noaux_tc", norm_topk_prob true, routed_scaling_factor 2.827, rms_norm_eps 1e-06.
- deepseek-ai/DeepSeek-V2-Lite: scoring_func "softmax", topk_method "greedy", n_group 1,
  topk_group 1, norm_topk_prob false, routed_scaling_factor 1.0, rms_norm_eps 1e-06.
- deepseek-ai/deepseek-moe-16b-base: scoring_func "softmax", norm_topk_prob false, rms_norm_eps 1e-06.
"""
from __future__ import annotations

import json
import re

import pytest

from parc.resolve.catalog import presets
from support.specs import assert_fires, assert_quiet, spec

PUBLISHED = {
    "deepseek_v3": {"scoring_func": "sigmoid", "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
                    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "rms_norm_eps": 1e-6},
    "kimi_k2": {"scoring_func": "sigmoid", "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
                "norm_topk_prob": True, "routed_scaling_factor": 2.827, "rms_norm_eps": 1e-6},
    "deepseek_v2_lite": {"scoring_func": "softmax", "n_group": 1, "topk_group": 1, "topk_method": "greedy",
                         "norm_topk_prob": False, "routed_scaling_factor": 1.0, "rms_norm_eps": 1e-6},
    "deepseek_moe_16b": {"scoring_func": "softmax", "norm_topk_prob": False, "rms_norm_eps": 1e-6},
}
PUBLISHED["deepseek_r1"] = PUBLISHED["deepseek_v3"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_presets_router_is_the_published_configs(name):
    """Each preset states the router its config.json describes: the score function, the groups,
    the expert bias (topk_method noaux_tc), the scaling factor, the softmax before the top-k
    (norm_topk_prob false with softmax scores) and the norm epsilon."""
    pre, cfg = presets("models")[name], PUBLISHED[name]
    assert pre.get("router_score", "softmax") == cfg["scoring_func"]
    assert pre.get("router_groups", 1) == cfg.get("n_group", 1)
    assert pre.get("router_group_topk", 1) == cfg.get("topk_group", 1)
    assert pre.get("router_expert_bias", False) == (cfg.get("topk_method") == "noaux_tc")
    assert pre.get("router_scale", 1.0) == cfg.get("routed_scaling_factor", 1.0)
    assert pre.get("router_pre_softmax", False) == (cfg["scoring_func"] == "softmax" and not cfg["norm_topk_prob"])
    assert pre["norm_eps"] == cfg["rms_norm_eps"]
    for key, value in cfg.items():   # and its source cites each value
        said = str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) \
            and value < 1e-3 else str(value)
        assert f"{key} {said}" in pre["source"], (name, key, said)


MEGA = dict(nodes=4, gpn=8, mesh="dp = 32; ep = 8", schedule="micro_batch = 1; global_batch = 64",
            train="zero = 1")


def _megatron_args(check_spec, model, target=""):
    from parc.targets.megatron import arg_lines

    r = check_spec(spec(model=model, target={"megatron": target}, **MEGA), ("megatron",))
    assert not [d for d in r.errors if not d.code.startswith("P4")], [d.message for d in r.errors]
    return [str(w) for line in arg_lines(r.plan) for w in line]


def _value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_megatron_writes_deepseek_v3s_router(check_spec):
    argv = _megatron_args(check_spec, "from = deepseek_v3")
    assert (_value(argv, "--moe-router-score-function"), _value(argv, "--moe-router-num-groups"),
            _value(argv, "--moe-router-group-topk"), _value(argv, "--moe-router-topk-scaling-factor"),
            _value(argv, "--norm-epsilon")) == ("sigmoid", "8", "4", "2.5", "1e-06")
    assert "--moe-router-enable-expert-bias" in argv and "--moe-router-pre-softmax" not in argv
    # Megatron-LM's defaults are left to it: no dtype, the alltoall dispatcher parc has always written
    assert "--moe-router-dtype" not in argv and _value(argv, "--moe-token-dispatcher-type") == "alltoall"
    assert "--moe-flex-dispatcher-backend" not in argv


def test_megatron_leaves_an_unstated_router_to_its_defaults(check_spec):
    argv = _megatron_args(check_spec, "from = mixtral_8x7b")
    assert not [a for a in argv if a.startswith("--moe-router-") and a != "--moe-router-topk"]
    assert "--norm-epsilon" not in argv


def test_megatron_writes_the_dispatcher_given(check_spec):
    argv = _megatron_args(check_spec, "from = deepseek_v3", "flex_dispatcher_backend = hybridep\nrouter_dtype = fp32")
    assert (_value(argv, "--moe-token-dispatcher-type"), _value(argv, "--moe-flex-dispatcher-backend"),
            _value(argv, "--moe-router-dtype")) == ("flex", "hybridep", "fp32")


def test_p027_fires_on_expert_bias_without_sigmoid(check_spec):
    text = spec(model="from = mixtral_8x7b\nrouter_expert_bias = true", **MEGA)
    d = assert_fires(check_spec, text, "P027", "router_expert_bias")
    assert "router_score = softmax" in d.message
    assert_quiet(check_spec, spec(model="from = mixtral_8x7b\nrouter_expert_bias = true\nrouter_score = sigmoid",
                                  **MEGA), "P027")


def test_p027_fires_on_groups_that_do_not_split_the_experts(check_spec):
    text = spec(model="from = deepseek_v3\nrouter_groups = 7\nrouter_group_topk = 4", **MEGA)
    d = assert_fires(check_spec, text, "P027", "router_groups")
    assert "256 experts" in d.message
    text = spec(model="from = deepseek_v3\nrouter_group_topk = 9", **MEGA)
    assert "more groups than the 8" in assert_fires(check_spec, text, "P027", "router_group_topk").message
    assert_quiet(check_spec, spec(model="from = deepseek_v3\nrouter_groups = 16\nrouter_group_topk = 4", **MEGA),
                 "P027")


def test_p027_fires_on_a_flex_backend_beside_another_dispatcher(check_spec):
    text = spec(model="from = deepseek_v3", target={"megatron": "token_dispatcher = alltoall\n"
                                                                "flex_dispatcher_backend = hybridep"}, **MEGA)
    assert_fires(check_spec, text, "P027", "flex_dispatcher_backend", targets=("megatron",))
    assert_quiet(check_spec, spec(model="from = deepseek_v3", target={"megatron": "token_dispatcher = flex\n"
                                  "flex_dispatcher_backend = hybridep"}, **MEGA), "P027", ("megatron",))


TT = dict(nodes=8, gpn=8, mesh="dp = 64; ep = 8", schedule="micro_batch = 1; global_batch = 64", train="zero = 3")


def test_p620_where_torchtitans_function_builds_another_epsilon(check_spec):
    """torchtitan's DeepSeek-V3 671B function leaves its norms at RMSNorm.Config's eps 1e-5 and its
    model is not on the command line: the published 1e-6 is P620 at the field, 1e-5 is quiet, and
    a router key the function does not build is P620 too."""
    r = check_spec(spec(model="from = deepseek_v3\nmtp_layers = 0", target={"torchtitan": ""}, **TT),
                   ("torchtitan",))
    [d] = [d for d in r.errors if d.code == "P620"]
    assert "norm_eps" in d.message and "1e-05" in d.message
    r = check_spec(spec(model="from = deepseek_v3\nmtp_layers = 0\nnorm_eps = 0.00001", target={"torchtitan": ""},
                        **TT), ("torchtitan",))
    assert "P620" not in {d.code for d in r.diagnostics}, [d.message for d in r.diagnostics]
    r = check_spec(spec(model="from = deepseek_v3\nmtp_layers = 0\nnorm_eps = 0.00001\nrouter_scale = 3",
                        target={"torchtitan": ""}, **TT), ("torchtitan",))
    assert [d for d in r.errors if d.code == "P620" and "router_scale" in d.message]


def test_serving_overrides_only_what_the_checkpoint_does_not_say(check_spec):
    """vLLM reads the router from config.json: nothing for the preset as published, the changed
    keys as --hf-overrides, and P620 for the expert bias (topk_method noaux_tc is no one key's)."""
    from parc.targets.hf import overrides

    serve = dict(nodes=2, gpn=8, mesh="tp = 16", serve="max_model_len = 4096", train=None,
                 target={"vllm": 'model = "deepseek-ai/DeepSeek-V3"'})
    r = check_spec(spec(model="from = deepseek_v3", **serve), ("vllm",))
    assert overrides(r.plan.model) == ({}, [])
    r = check_spec(spec(model="from = deepseek_v3\nrouter_scale = 3\nnorm_eps = 0.00001\nrouter_groups = 16", **serve),
                   ("vllm",))
    found, _ = overrides(r.plan.model)
    assert json.dumps(found, sort_keys=True) == '{"n_group": 16, "rms_norm_eps": 1e-05, "routed_scaling_factor": 3.0}'
    r = check_spec(spec(model="from = deepseek_v3\nrouter_score = softmax\nrouter_expert_bias = false", **serve),
                   ("vllm",))
    assert [d for d in r.errors if d.code == "P620" and "router_expert_bias" in d.message]


def test_megatron_deepspeed_writes_the_epsilon(check_spec):
    from parc.targets.megatron_deepspeed import arg_lines

    r = check_spec(spec(model="from = llama3_8b\nnorm_eps = 0.000001", **{**MEGA, "mesh": "dp = 32"},
                        target={"megatron_deepspeed": ""}), ("megatron_deepspeed",))
    argv = [str(w) for line in arg_lines(r.plan) for w in line]
    assert _value(argv, "--layernorm-epsilon") == "1e-06"


def test_import_reads_the_router_and_dispatcher_back():
    """`parc import` of Megatron-LM's DeepSeek-V3 script (tests/wild, NVIDIA/Megatron-LM
    examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh): its router is the preset's, the dispatcher
    and router dtype become target megatron's keys, and --moe-router-pre-softmax beside sigmoid
    scores (which it does not change) is not read as a router the model has."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "wild" / "slurm-megatron-deepseek-v3-fsdp" / "sbatch_mfsdp_deepseek_v3.sh"
    out = subprocess.run([sys.executable, "-m", "parc", "import", str(script)], capture_output=True, text=True).stdout
    model = out[out.index("model "):out.index("}")]
    assert "from     = deepseek_v3" in model and "router" not in model and "norm_eps" not in model, model
    for key, value in (("token_dispatcher", "flex"), ("flex_dispatcher_backend", "hybridep"), ("router_dtype", "fp32")):
        assert re.search(rf"^  {key} += {value} ", out, re.M), key
