"""Target torchtitan: the degrees, batch sizes and pipeline options it passes to torchtitan, the
launch it shares with the torchrun target, and its own rules (each fires on a spec torchtitan
0.3.0 refuses and stays quiet on its neighbour that it runs)."""
from __future__ import annotations

import pytest

from support.specs import spec

L8 = "from = llama3_8b\nseq_len = 8192"
SCHED = "micro_batch = 1\nglobal_batch = 64"


def _plan(check_spec, **kw):
    args = dict(model=L8, mesh="dp = 8", schedule=SCHED, train="zero = 3")
    args.update(kw)
    r = check_spec(spec(**args), targets=("torchtitan",))
    return r, r.plan


def _opts(plan) -> dict:
    from parc.targets.torchtitan import overrides

    return {line[0]: (line[1] if len(line) > 1 else True) for line in overrides(plan)}


def _codes(r):
    return {d.code for d in r.diagnostics}


def test_fsdp_degrees_and_batches(check_spec):
    r, plan = _plan(check_spec)
    assert r.ok
    o = _opts(plan)
    # the llama3_8b preset names torchtitan's own config function
    assert (o["--module"], o["--config"]) == ("llama3", "llama3_8b")
    # zero 3 over dp 8: 1 replica x 8 shards, parameters freed after each forward
    assert o["--parallelism.data_parallel_replicate_degree"] == 1
    assert o["--parallelism.data_parallel_shard_degree"] == 8
    assert o["--parallelism.fsdp_reshard_after_forward"] == "always"
    # no pipeline: local batch = micro batch 1; global 64 = 1 x 8 x 8 accumulation steps
    assert (o["--training.local_batch_size"], o["--training.global_batch_size"]) == (1, 64)
    assert o["--training.seq_len"] == 8192
    assert "--parallelism.pipeline_parallel_schedule" not in o and "--training.disable_cuda_graphs" not in o


def test_zero_maps_to_replicate_and_shard(check_spec):
    from parc.targets.torchtitan import degrees

    # zero 0: DDP, the whole dp replicates (replicate 8 x shard 1)
    _, plan = _plan(check_spec, train="zero = 0")
    assert (degrees(plan)["dp_replicate"], degrees(plan)["dp_shard"]) == (8, 1)
    assert "--parallelism.fsdp_reshard_after_forward" not in _opts(plan)
    # zero 1: FSDP that keeps the gathered parameters from forward to backward
    _, plan = _plan(check_spec, train="zero = 1")
    assert _opts(plan)["--parallelism.fsdp_reshard_after_forward"] == "never"
    # HSDP: replicate 2 over dp 8 -> 2 x 4
    r, plan = _plan(check_spec, target={"torchtitan": "replicate = 2"})
    assert r.ok and (degrees(plan)["dp_replicate"], degrees(plan)["dp_shard"]) == (2, 4)


def test_pipeline_options(check_spec):
    # llama3-70b: 80 layers over pp 4 x 2 virtual stages = 10 a stage; 1024 samples over dp 2 with
    # micro batch 1 = 512 microbatches, all of them one local batch (no accumulation)
    r, plan = _plan(check_spec, model="from = llama3_70b\nseq_len = 8192", nodes=8,
                    mesh="pp = 4\ndp = 2\ntp = 8", schedule="pipeline = interleaved_1f1b\nvirtual_stages = 2\n"
                                                          "micro_batch = 1\nglobal_batch = 1024", train="zero = 1")
    o = _opts(plan)
    assert o["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert o["--parallelism.pipeline_parallel_layers_per_stage"] == 10
    assert o["--parallelism.pipeline_parallel_first_stage_less_layers"] == 0
    assert o["--parallelism.pipeline_parallel_microbatch_size"] == 1
    assert o["--training.local_batch_size"] == 512 and o["--training.global_batch_size"] == 1024
    assert o["--training.disable_cuda_graphs"] is True
    # the train block leaves sequence_parallel out (false): torchtitan's default (true) is turned off
    assert o["--parallelism.no_enable_sequence_parallel"] is True


@pytest.mark.parametrize("pipeline,name", [("gpipe", "GPipe"), ("1f1b", "1F1B"), ("interleaved_1f1b", "Interleaved1F1B"),
                                           ("zero_bubble", "ZBVZeroBubble"), ("dualpipe_v", "DualPipeV")])
def test_schedule_names(pipeline, name):
    from parc.targets.torchtitan import _data

    assert _data()["schedules"][pipeline] == name


def test_launch_runs_the_module_through_torchrun(check_spec, tmp_path):
    from backends_support import run_emitted, write_out
    from parc.targets.torchtitan import build

    _, plan = _plan(check_spec)
    d = write_out(build(plan), tmp_path / "out")
    got = run_emitted(d / "launch.sh", tmp_path)
    argv = got["torchrun"]
    k = argv.index("-m")
    assert argv[:k] == ["--nnodes", "1", "--nproc-per-node", "8", "--standalone", "--max-restarts", "0"]
    assert argv[k + 1:k + 6] == ["torchtitan.train", "--module", "llama3", "--config", "llama3_8b"]
    assert got["torchrun.env"]["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"


def test_user_args_follow_parcs(check_spec):
    from parc.targets.torchtitan import build

    _, plan = _plan(check_spec, target={"torchtitan": 'args = ["--training.steps", "100"]'})
    text = build(plan)[0].text
    assert text.index("--training.seq_len") < text.index("--training.steps")


# ------------------------------------------------------------------------ rules, fire and quiet

def test_p630_serving_refused(check_spec):
    r, _ = _plan(check_spec, serve="max_model_len = 4096", mesh="tp = 8")
    assert "P630" in _codes(r)
    assert "P630" not in _codes(_plan(check_spec)[0])


def test_p631_config_needed_without_a_known_preset(check_spec):
    r, _ = _plan(check_spec, model="from = mixtral_8x7b\nseq_len = 4096")
    assert "P631" in _codes(r)
    r, _ = _plan(check_spec, model="from = mixtral_8x7b\nseq_len = 4096",
                 target={"torchtitan": 'module = "my_configs"\nconfig = "mixtral_8x7b"'})
    assert "P631" not in _codes(r)


def test_p632_expert_tensor_parallel(check_spec):
    moe = "from = mixtral_8x7b\nseq_len = 4096"
    cfg = {"torchtitan": 'module = "my_configs"\nconfig = "mixtral"'}
    r, _ = _plan(check_spec, model=moe, mesh="dp = 4\ntp = 2\nep = 4\netp = 2", target=cfg)
    assert "P632" in _codes(r)
    r, _ = _plan(check_spec, model=moe, mesh="dp = 4\ntp = 2\nep = 4", target=cfg)
    assert "P632" not in _codes(r)


def test_p633_replicate_must_divide_dp(check_spec):
    assert "P633" in _codes(_plan(check_spec, target={"torchtitan": "replicate = 3"})[0])
    assert "P633" in _codes(_plan(check_spec, train="zero = 0", target={"torchtitan": "replicate = 2"})[0])
    assert "P633" not in _codes(_plan(check_spec, target={"torchtitan": "replicate = 4"})[0])


def test_p634_ep_inside_one_replica(check_spec):
    moe = "from = mixtral_8x7b\nseq_len = 4096"
    # dp 8, replicate 4 -> shard 2; ep 4 divides dp·tp = 8 (P112 quiet) but not shard·tp = 2
    bad = {"torchtitan": 'module = "m"\nconfig = "c"\nreplicate = 4'}
    r, _ = _plan(check_spec, model=moe, mesh="dp = 8\nep = 4", target=bad)
    assert "P634" in _codes(r) and "P112" not in _codes(r)
    ok = {"torchtitan": 'module = "m"\nconfig = "c"\nreplicate = 2'}
    assert "P634" not in _codes(_plan(check_spec, model=moe, mesh="dp = 8\nep = 4", target=ok)[0])


def test_p635_fp16(check_spec):
    assert "P635" in _codes(_plan(check_spec, train="zero = 3\nprecision = fp16")[0])
    assert "P635" not in _codes(_plan(check_spec, train="zero = 3\nprecision = bf16")[0])


def test_p638_seq_len_divisor(check_spec):
    # seq_len 12 with tp 2 (sequence parallel) and cp 2: 12 % 4 == 0 (P114 quiet) and 12 % 2 == 0
    # (P115 quiet), but torchtitan's Trainer wants 12 % (2 * 2 * 2 = 8) == 0
    sp = "zero = 3\nsequence_parallel = true"
    r, _ = _plan(check_spec, model="from = llama3_8b\nseq_len = 12", mesh="dp = 2\ncp = 2\ntp = 2", train=sp)
    assert "P638" in _codes(r) and not {"P114", "P115"} & _codes(r)
    r, _ = _plan(check_spec, model="from = llama3_8b\nseq_len = 16", mesh="dp = 2\ncp = 2\ntp = 2", train=sp)
    assert "P638" not in _codes(r)


def test_dualpipe_is_refused_like_the_torch_runtime(check_spec):
    """torchtitan builds schedules with torch.distributed.pipelining (ScheduleDualPipeV, no
    DualPipe): P616 refuses `pipeline = dualpipe` and the planner leaves it out, where before the
    spec passed the checks and compile failed looking the schedule up."""
    kw = dict(mesh="pp = 4\ndp = 2", schedule="pipeline = dualpipe\nmicro_batch = 1\nglobal_batch = 32",
              train="zero = 1\nrecompute = full")
    r, _ = _plan(check_spec, **kw)
    assert "P616" in _codes(r)
    r, _ = _plan(check_spec, **dict(kw, schedule="pipeline = dualpipe_v\nvirtual_stages = 2\nmicro_batch = 1\n"
                                                 "global_batch = 32"))
    assert "P616" not in _codes(r)


LPS = "--parallelism.pipeline_parallel_layers_per_stage"


def test_p636_uneven_layers_left_to_torchtitan(check_spec):
    # 32 layers over pp = 3: torchtitan splits them itself, [11, 11, 10] (the embedding and the head
    # count as a layer each); parc passes no layers per stage and expects that split
    r, plan = _plan(check_spec, mesh="pp = 3", gpn=3, schedule="micro_batch = 1\nglobal_batch = 8", train="zero = 1")
    assert "P636" not in _codes(r) and "P104" not in _codes(r), [d.message for d in r.diagnostics]
    assert plan.placement.layers == [11, 11, 10]
    assert LPS not in _opts(plan)
    # interleaved over 3 virtual stages: ceil((32 + 2) / 6) = 6 stages, as the plan asks
    r, plan = _plan(check_spec, mesh="pp = 2", gpn=2, train="zero = 1",
                    schedule="pipeline = interleaved_1f1b\nvirtual_stages = 3\nmicro_batch = 1\nglobal_batch = 8")
    assert "P636" not in _codes(r)
    assert _opts(plan)[LPS] == 6 and plan.placement.layers == [5, 6, 6, 6, 5, 4]
    # 31 layers in 4 × 4 = 16 stages: no layers_per_stage makes ceil(33 / lps) = 16, so torchtitan
    # cannot be told
    r, plan = _plan(check_spec, model=L8 + "\nlayers = 31", mesh="pp = 4", gpn=4, train="zero = 1",
                    schedule="pipeline = interleaved_1f1b\nvirtual_stages = 4\nmicro_batch = 1\nglobal_batch = 8")
    d = next(d for d in r.diagnostics if d.code == "P636")
    assert d.severity == "warning" and "16 stages" in d.message


def test_p636_spec_split_torchtitan_cannot_take(check_spec):
    r, plan = _plan(check_spec, mesh="pp = 2", gpn=2, schedule="micro_batch = 1\nglobal_batch = 8", train="zero = 1",
                    placement="layers = [15, 17]")
    d = next(d for d in r.diagnostics if d.code == "P636")
    assert "[15, 17]" in d.message
    r, plan = _plan(check_spec, mesh="pp = 2", gpn=2, schedule="micro_batch = 1\nglobal_batch = 8", train="zero = 1",
                    placement="layers = [16, 16]")
    assert "P636" not in _codes(r) and _opts(plan)[LPS] == 16


@pytest.mark.parametrize("preset", ["llama3_8b", "llama3_70b"])
def test_fp8_runs_parcs_float8_function_where_torchtitan_ships_none(check_spec, preset):
    """`precision = fp8` without a recipe is torchtitan's Float8 converter at its default recipe
    (Float8LinearConverter.Config.recipe_name = "rowwise", components/quantization/float8.py):
    torchtitan 0.3.0 ships it for neither Llama 3 8B nor 70B, and the converter is part of the
    config function's model_spec, not of the command line. The launch runs a config function of
    parc's own beside it (parc_float8.py: the shipped bf16 function with the converter added), as
    0.3.0's ConfigManager imports one by its module path; a recipe the converter has not (tensorwise)
    stays P620, and so does a model field the bf16 function does not build."""
    from parc.targets.torchtitan import build, module_config, preset_config

    r, plan = _plan(check_spec, model=f"from = {preset}\nseq_len = 8192", train="zero = 3\nprecision = fp8")
    assert "P620" not in _codes(r), [(d.code, d.message) for d in r.diagnostics]
    assert preset_config(plan) is None and module_config(plan) == ("parc_float8", f"{preset}_float8")
    own = next(f for f in build(plan) if f.path == "parc_float8.py").text
    assert f"from torchtitan.models.llama3.config_registry import {preset}" in own
    assert "recipe_name='rowwise'" in own and "filter_fqns=['lm_head']" in own
    r, plan = _plan(check_spec, model=f"from = {preset}\nseq_len = 8192",
                    train="zero = 3\nprecision = fp8\nfp8_recipe = tensorwise")
    assert "P620" in {d.code for d in r.errors}
    r, plan = _plan(check_spec, model=f"from = {preset}\nseq_len = 8192\nlayers = 30", train="zero = 3\nprecision = fp8")
    assert any(d.code == "P620" and "layers = 30" in d.message for d in r.errors)
    r, plan = _plan(check_spec, model=f"from = {preset}\nseq_len = 8192", train="zero = 3\nprecision = bf16")
    assert "P620" not in _codes(r) and not any(f.path == "parc_float8.py" for f in build(plan))


H100, B200 = "gpu           = h100_sxm", "gpu           = b200"


def test_p674_mxfp8_below_sm100(check_spec):
    """torchtitan's MXFP8 converter refuses GPUs below SM100 ("MXFP8 is only supported on SM100 or
    later architectures", components/quantization/mx.py): an error on an H100, quiet on a B200."""
    from support.specs import assert_fires, assert_quiet

    text = spec(model=L8, mesh="dp = 8", schedule=SCHED, train="zero = 3\nprecision = fp8\nfp8_recipe = mxfp8",
                target={"torchtitan": ""})
    assert H100 in text
    d = assert_fires(check_spec, text, "P674", "fp8_recipe", target="torchtitan", targets=("torchtitan",))
    assert "SM100" in d.message and "h100_sxm" in d.message and "9.0" in d.message
    assert_quiet(check_spec, text.replace(H100, B200), "P674", ("torchtitan",))
    # a GPU of its own, whose architecture parc does not know, is not judged
    own = text.replace(H100, "gpu {\n    memory = 96GB\n    flops = 989TFLOPS\n  }")
    assert_quiet(check_spec, own, "P674", ("torchtitan",))
