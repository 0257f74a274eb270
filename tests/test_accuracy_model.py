"""The training model's terms that the accuracy table rests on, each through the command that shows
it: flash attention in explain's memory, a GPU block without HBM bandwidth."""
from __future__ import annotations

import json

import pytest

from parc.cli.main import main
from support.specs import KORTHIKANTI_SPEC as SPEC

# Korthikanti et al. 2022's 22B layer shape on one DGX A100 (tests/support/specs.py's
# KORTHIKANTI_SPEC), one microbatch of one sequence, with the flash_attention setting under test
GPT_22B = (SPEC.format(l=48, h=6144, ffn=24576, a=64, nodes=1, p=1, v=1, b=1, B=1, pipeline="1f1b")
           .replace("  sequence_parallel = true\n  recompute = selective\n", "  flash_attention = FLASH\n"))


def _explain(capsys, tmp_path, name: str, text: str) -> dict:
    path = tmp_path / f"{name}.par"
    path.write_text(text)
    rc = main(["explain", str(path), "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_unfused_attention_stores_its_scores_in_explains_memory(capsys, tmp_path):
    # Korthikanti et al. 2022 Table 2, tensor parallel without recompute: sbh(10 + 24/t + 5as/(ht)).
    # The flash kernel never writes the scores, so the difference is 5·a·s²·b/t per layer:
    # 5 · 64 · 2048² · 1 / 8 = 167,772,160 bytes, × 48 layers on the one stage.
    fused = _explain(capsys, tmp_path, "fused", GPT_22B.replace("FLASH", "true"))
    unfused = _explain(capsys, tmp_path, "unfused", GPT_22B.replace("FLASH", "false"))
    per_layer = 5 * 64 * 2048 ** 2 * 1 / 8
    assert unfused["activation_bytes_per_layer"] - fused["activation_bytes_per_layer"] == per_layer
    grown = unfused["memory_per_gpu"]["activations"] - fused["memory_per_gpu"]["activations"]
    assert grown == 48 * per_layer


BOX = """model "m" {{ from = llama3_8b }}
cluster "box" {{
  nodes = 1
  gpus_per_node = 8
  gpu {{
    {gpu}
  }}
}}
mesh {{ dp = 8 }}
schedule {{
  micro_batch = 1
  global_batch = 8
}}
train {{
  zero = 3
  recompute = full
}}
"""


def _check(tmp_path, gpu: str):
    from parc.api import check_file

    path = tmp_path / "box.par"
    path.write_text(BOX.format(gpu=gpu))
    return check_file(path, root=tmp_path)


def test_a_gpu_block_without_hbm_bandwidth_is_timed_at_the_nearest_presets_and_says_so(tmp_path):
    """Never 0 s: the contract's custom GPU (memory and flops only) is valid, so the block is timed
    at the bandwidth of the preset nearest in peak FLOPS, and P033 warns with the figure taken."""
    r = _check(tmp_path, "memory = 80GB\n    flops = 989TFLOPS")
    got = [d for d in r.diagnostics if d.code == "P033"]
    assert len(got) == 1 and got[0].severity == "warning" and got[0].span.line == 5
    assert "3350 GB/s" in got[0].message and "h100" in got[0].message, got[0].message
    assert "hbm_bandwidth = " in got[0].help
    assert r.ok and r.plan.cluster.gpu.hbm_bandwidth == 3350e9
    # the help's fix passes, and every memory-bound cost then takes time
    fixed = _check(tmp_path, "memory = 80GB\n    flops = 989TFLOPS\n    hbm_bandwidth = 3.35TB/s")
    assert fixed.ok and fixed.plan.cluster.gpu.hbm_bandwidth == 3.35e12


def test_a_gpu_block_from_a_preset_takes_the_presets_hbm_bandwidth(tmp_path):
    r = _check(tmp_path, "from = h100_sxm\n    memory = 96GB")
    assert r.ok and not [d for d in r.diagnostics if d.code == "P033"]
    assert r.plan.cluster.gpu.hbm_bandwidth == 3350e9


# --- P518: a calibrated profile used by a plan of another framework or GPU -------------------------

def _with_profile(framework: str, gpu: str = '"h100_sxm"') -> str:
    from support.specs import spec

    return spec(mesh="dp = 8", train="zero = 3\nrecompute = full") + (
        f'profile "lab" {{\n  framework = {framework}\n  gpu = {gpu}\n  gemm_efficiency = 0.6\n}}\n')


def test_p518_fires_on_a_profile_fitted_on_another_framework(check_spec):
    from support.specs import assert_fires

    text = _with_profile("torchtitan")
    d = assert_fires(check_spec, text, "P518", 'profile "lab"', severity="warning")
    assert "torchtitan runs" in d.message and "this plan runs megatron" in d.message
    other_gpu = _with_profile("megatron", '"a100_sxm_80gb"')
    d = assert_fires(check_spec, other_gpu, "P518", 'profile "lab"', severity="warning")
    assert "a100_sxm_80gb GPUs" in d.message and "this plan's GPU is h100_sxm" in d.message


def test_p518_quiet_on_a_profile_of_the_same_runs(check_spec):
    from support.specs import assert_quiet

    assert_quiet(check_spec, _with_profile("megatron"), "P518")
    # a profile that names nothing it was fitted on (written by hand) is not judged
    from support.specs import spec

    assert_quiet(check_spec, spec(mesh="dp = 8", train="zero = 3\nrecompute = full")
                 + 'profile "p" {\n  gemm_efficiency = 0.6\n}\n', "P518")


# --- data: frameworks, kernels, GPU variants ------------------------------------------------------

def test_the_field_tables_name_what_the_data_files_hold():
    from parc.model import fields
    from parc.model.frameworks import frameworks, fp8_recipes
    from parc.resolve.catalog import presets

    assert set(fields.FRAMEWORKS) == set(frameworks())
    assert set(fields.FP8_RECIPES) <= set(fp8_recipes())
    assert {g["arch"] for g in presets("gpus").values()} <= set(fields.GPU_ARCHS)


def test_a_power_limit_takes_the_peak_between_the_datasheets_points(tmp_path):
    # torchtitan's H100s at 500 W: 835 + (500 - 400) / (700 - 400) · (989 - 835) = 886.33 TFLOPS
    r = _check(tmp_path, "from = h100_sxm\n    power_limit = 500W")
    assert r.ok, [d.message for d in r.diagnostics]
    g = r.plan.cluster.gpu
    assert g.flops == pytest.approx(886.333e12, rel=1e-5) and g.power_limit == 500
    assert g.fp8_flops == pytest.approx(1979e12 * 886.333 / 989, rel=1e-5)
    assert _check(tmp_path, "from = h100_sxm\n    power_limit = 700W").plan.cluster.gpu.flops == 989e12
    # an A100 preset has no low-power datasheet point: P034, and its help (the peak itself) passes
    bad = _check(tmp_path, "from = a100_sxm_80gb\n    power_limit = 300W")
    d = [x for x in bad.diagnostics if x.code == "P034"]
    assert len(d) == 1 and d[0].span.line == 7 and "flops = " in d[0].help
    fixed = _check(tmp_path, "from = a100_sxm_80gb\n    power_limit = 300W\n    flops = 280TFLOPS")
    assert fixed.ok and fixed.plan.cluster.gpu.flops == 280e12


def test_the_framework_follows_the_target_and_sets_its_kernels(tmp_path):
    from parc.api import check_file
    from parc.cost.estimate import estimate

    text = BOX.format(gpu="from = h100_sxm").replace("recompute = full", "recompute = selective")
    plain = tmp_path / "plain.par"
    plain.write_text(text)
    tt = tmp_path / "tt.par"
    tt.write_text(text.replace("train {\n  zero = 3", "train {\n  framework = torchtitan\n  zero = 3")
                  .replace("recompute = selective", "recompute = selective_op"))
    a, b = check_file(plain, root=tmp_path).plan, check_file(tt, root=tmp_path).plan
    assert (a.train.framework, b.train.framework) == ("megatron", "torchtitan")
    # the recipe is left unset for the launch (the framework's own), and costed as the framework's
    from parc.model.frameworks import fp8_recipe, fp8_recipes

    assert (a.train.fp8_recipe, b.train.fp8_recipe) == (None, None)
    assert (fp8_recipe(a.train), fp8_recipe(b.train)) == (fp8_recipes()["delayed"], fp8_recipes()["rowwise"])
    ea, eb = estimate(a, cache=False).compute_split(), estimate(b, cache=False).compute_split()
    # torchtitan's eager kernels move more bytes; its attention is FlashAttention-2 (35% of an H100's
    # peak), Megatron-LM's cuDNN's (62% forward)
    assert eb["memory_bound"] > ea["memory_bound"] and eb["attention"] > ea["attention"]
    assert eb["gemm"] > ea["gemm"]   # and its per-op selective recompute repeats every second matmul


def test_a_recipe_that_keeps_the_weight_gradient_in_bf16_runs_a_third_of_the_flops_at_bf16(tmp_path):
    from dataclasses import replace

    from parc.api import check_file
    from parc.cost.gemm import stage_rates

    path = tmp_path / "fp8.par"
    path.write_text(BOX.format(gpu="from = h100_sxm").replace("recompute = full", "precision = fp8\n  fp8_recipe = rowwise"))
    plan = check_file(path, root=tmp_path).plan
    rates = {}
    for name in ("rowwise", "rowwise_with_gw_hp"):
        train = replace(plan.train, fp8_recipe=name)
        rates[name] = stage_rates(plan.model, 8192, 1, 1, 1, plan.cluster.gpu, train, plan.profile)
    bf16 = stage_rates(plan.model, 8192, 1, 1, 1, plan.cluster.gpu, replace(plan.train, precision="bf16"),
                       plan.profile)
    fp8, hp = rates["rowwise"]["dense"], rates["rowwise_with_gw_hp"]["dense"]
    # forward and input gradient in FP8, the weight gradient (as many FLOPs) in BF16
    assert hp == pytest.approx(3 / (2 / fp8 + 1 / bf16["dense"]), rel=1e-12)
    assert bf16["dense"] < hp < fp8
    # and the casts: one pass per tensor (5 bytes an element) against rowwise's two (10)
    assert rates["rowwise_with_gw_hp"]["weights_dense"] == pytest.approx(rates["rowwise"]["weights_dense"] / 2)
