"""P2xx batch and schedule rules: a spec that triggers each, and the same spec made valid."""
from __future__ import annotations

import pytest

from support.specs import assert_fires, assert_quiet, spec

L70 = "from = llama3_70b; seq_len = 4096"
MEG = {"megatron": 'entrypoint = "pretrain_gpt.py"'}
TORCH = {"torchrun": 'entrypoint = "train.py"'}


def pipe(pipeline, gb, v=None, mb=1, target=None, mesh="pp = 4; dp = 2; tp = 8", nodes=8, model=L70):
    sched = f"pipeline = {pipeline}; micro_batch = {mb}; global_batch = {gb}"
    if v:
        sched += f"; virtual_stages = {v}"
    return spec(model, nodes=nodes, mesh=mesh, schedule=sched,
                train="zero = 1; sequence_parallel = true; recompute = full", target=target)


def test_p201_global_batch(check_spec):
    bad = spec(mesh="dp = 8", schedule="micro_batch = 2; global_batch = 100", train="zero = 3")
    d = assert_fires(check_spec, bad, "P201", "global_batch = 100")
    assert "micro_batch · dp = 2 · 8 = 16" in d.message
    assert "96 or 112" in d.help
    assert_quiet(check_spec, bad.replace("global_batch = 100", "global_batch = 96"), "P201")


def test_p201_names_derived_dp_and_micro_batch_alternative(check_spec):
    bad = spec(nodes=2, mesh="dp = auto; tp = 4", schedule="micro_batch = 4; global_batch = 24")
    d = assert_fires(check_spec, bad, "P201", "global_batch = 24")
    assert "dp = world / (pp·cp·tp) = 16 / (1·1·4) = 4" in d.message
    assert "micro_batch = 2" in d.help or "micro_batch = 3" in d.help
    assert_quiet(check_spec, bad.replace("micro_batch = 4", "micro_batch = 2"), "P201")


def test_p202_microbatches_below_pp(check_spec):
    # without a target the plan runs on parc's torch runtime, whose Schedule1F1B refuses it
    bad = pipe("1f1b", 4)
    d = assert_fires(check_spec, bad, "P202", "global_batch = 4")
    assert "Schedule1F1B" in d.message and "number of stages (4)" in d.message
    assert "global_batch = 4 / (1 · 2) = 2" in d.message.replace("global_batch / (micro_batch · dp) = ", "global_batch = ")
    assert_quiet(check_spec, pipe("1f1b", 64), "P202")


def test_p202_megatron_runs_few_microbatches_with_a_bubble(check_spec):
    # Megatron-LM's 1F1B shortens the warm-up to min(pp - rank - 1, m): a warning with the bubble
    bad = pipe("1f1b", 4, target=MEG)
    d = assert_fires(check_spec, bad, "P202", "global_batch = 4", severity="warning")
    assert "Megatron-LM runs it" in d.message and "60%" in d.message and "3/5" in d.message
    assert not check_spec(bad).errors
    # the torch runtime's Schedule1F1B refuses it: an error naming the schedule and Megatron's bubble
    both = pipe("1f1b", 4, target={**MEG, **TORCH})
    d = assert_fires(check_spec, both, "P202", "global_batch = 4")
    assert "Schedule1F1B" in d.message and "Megatron-LM would run it" in d.message
    assert_fires(check_spec, pipe("1f1b", 4, target=TORCH), "P202", "global_batch = 4")
    # torch's GPipe fills and drains any count: a warning
    d = assert_fires(check_spec, pipe("gpipe", 4, target=TORCH), "P202", "global_batch = 4", severity="warning")
    assert "GPipe runs it" in d.message
    # DeepSpeed's TrainSchedule runs it too
    assert_fires(check_spec, pipe("1f1b", 4), "P202", "global_batch = 4", severity="warning",
                 targets=("deepspeed",))


def test_p203_megatron_interleaved_remainder(check_spec):
    bad = pipe("interleaved_1f1b", 12, v=2, target=MEG)
    d = assert_fires(check_spec, bad, "P203", "global_batch = 12", target="megatron")
    assert "6 % 4 = 2" in d.message and "global_batch = 8, 16 or 24" in d.help
    assert_quiet(check_spec, pipe("interleaved_1f1b", 16, v=2, target=MEG), "P203")
    # the torch runtime accepts 6 microbatches over pp = 4 (one round), and so does a plan without a target
    assert_quiet(check_spec, pipe("interleaved_1f1b", 12, v=2, target=TORCH), "P203")


def test_p203_megatron_needs_pp_microbatches(check_spec):
    bad = pipe("interleaved_1f1b", 6, v=2, target=MEG)
    d = assert_fires(check_spec, bad, "P203", "global_batch = 6", target="megatron")
    assert "at least pp = 4" in d.message


def test_p204_virtual_stages_without_pp(check_spec):
    bad = spec(mesh="dp = 8", schedule="pipeline = interleaved_1f1b; virtual_stages = 2; micro_batch = 1; "
                                      "global_batch = 64", train="zero = 3")
    assert_fires(check_spec, bad, "P204", "virtual_stages = 2")
    r = check_spec(bad)
    assert {d.code[:2] for d in r.errors} == {"P2"}
    assert_quiet(check_spec, spec(mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64", train="zero = 3"),
                 "P204")


def test_p204_torchtitan_runs_without_a_pipeline(check_spec):
    # with pp = 1 torchtitan builds no pipeline schedule (parc passes it no pipeline options): the
    # virtual stages have no effect, a warning, where Megatron-LM refuses the plan
    sched = "pipeline = interleaved_1f1b; virtual_stages = 2; micro_batch = 1; global_batch = 64"
    tt = spec(mesh="dp = 8", schedule=sched, train="zero = 3", target={"torchtitan": ""})
    d = assert_fires(check_spec, tt, "P204", "virtual_stages = 2", severity="warning")
    assert "no effect" in d.message
    assert not check_spec(tt).errors
    meg = spec(mesh="dp = 8", schedule=sched, train="zero = 3", target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    assert_fires(check_spec, meg, "P204", "virtual_stages = 2")


def test_p205_torch_rounds(check_spec):
    # 10 microbatches over pp = 4: 2 rounds, 10 % 2 == 0 passes; 9 over pp = 4: 2 rounds, 9 % 2 fails
    bad = pipe("interleaved_1f1b", 18, v=2, target=TORCH)
    d = assert_fires(check_spec, bad, "P205", "global_batch = 18", target="torch")
    assert "2 rounds" in d.message
    assert_quiet(check_spec, pipe("interleaved_1f1b", 20, v=2, target=TORCH), "P205")


def test_p206_single_stage_schedule_with_virtual_stages(check_spec):
    bad = pipe("1f1b", 64, v=2)
    assert_fires(check_spec, bad, "P206", "pipeline = 1f1b")
    assert_quiet(check_spec, pipe("interleaved_1f1b", 64, v=2), "P206")


def test_p206_interleaved_without_virtual_stages(check_spec):
    bad = pipe("interleaved_1f1b", 64)
    d = assert_fires(check_spec, bad, "P206", "pipeline = interleaved_1f1b")
    assert "virtual_stages = 2" in d.help


def test_p207_dualpipe_v(check_spec):
    bad = pipe("dualpipe_v", 12, v=2)
    d = assert_fires(check_spec, bad, "P207", "global_batch = 12")
    assert "2·pp = 8" in d.message
    assert_quiet(check_spec, pipe("dualpipe_v", 16, v=2), "P207")
    d = assert_fires(check_spec, pipe("dualpipe_v", 16), "P207", "pipeline = dualpipe_v")
    assert "virtual_stages = 2" in d.help


def test_p211_dualpipe_microbatches_at_the_boundary(check_spec):
    # pp 4, dp 2, micro_batch 1: global_batch 14 gives 7 microbatches (odd and under 2·pp = 8),
    # 16 gives 8 (the least DualPipe.step accepts), 18 gives 9 (odd)
    d = assert_fires(check_spec, pipe("dualpipe", 14), "P211", "global_batch = 14")
    assert "at least 2·pp = 8" in d.message and "global_batch / (micro_batch · dp) = 14 / (1 · 2) = 7" in d.message
    # the nearest even counts ≥ 8: 8, 10, 12 microbatches of 1 on each of dp = 2
    assert "use global_batch = 16, 20 or 24 (8, 10 or 12 microbatches, even and at least 8)" in d.help
    assert_quiet(check_spec, pipe("dualpipe", 16), "P211")
    d = assert_fires(check_spec, pipe("dualpipe", 18), "P211", "global_batch = 18")
    assert "an even number" in d.message and "global_batch = 16, 20 or 24" in d.help
    assert_quiet(check_spec, pipe("dualpipe", 20), "P211")


def test_p211_dualpipe_needs_an_even_pp(check_spec):
    # llama3_70b has 80 layers; 48 GPUs with tp 8: pp 3 leaves dp 2; pp 2 (dp 3) and pp 4 (not a
    # divisor of 48/8 = 6) -> the even neighbours that split the layers and the GPUs: pp 2 (dp 3)
    bad = pipe("dualpipe", 48, mesh="pp = 3; dp = 2; tp = 8", nodes=6)
    d = assert_fires(check_spec, bad, "P211", "pp = 3")
    assert "even number" in d.message and "num_ranks % 2 == 0" in d.message
    assert d.help.startswith("use pp = 2 (dp = 3)") and "pipeline = 1f1b" in d.help
    assert_quiet(check_spec, pipe("dualpipe", 48, mesh="pp = 2; dp = 3; tp = 8", nodes=6), "P211")


def test_p211_dualpipe_takes_no_virtual_stages(check_spec):
    d = assert_fires(check_spec, pipe("dualpipe", 16, v=2), "P211", "virtual_stages = 2")
    assert "pp−1−r" in d.message and "dualpipe_v" in d.help
    assert_quiet(check_spec, pipe("dualpipe", 16), "P211")


def test_p208_zero_bubble(check_spec):
    d = assert_fires(check_spec, pipe("zero_bubble", 64), "P208", "pipeline = zero_bubble")
    assert "virtual_stages" in d.message
    assert_quiet(check_spec, pipe("zero_bubble", 64, v=2), "P208")
    # with 4 virtual stages it is InterleavedZeroBubble and needs whole rounds: 18 microbatches, 4 rounds
    model = "from = llama3_70b; seq_len = 4096"
    bad = pipe("zero_bubble", 36, v=4, mesh="pp = 4; dp = 2; tp = 8", model=model)
    assert_fires(check_spec, bad, "P208", "global_batch = 36")
    assert_quiet(check_spec, pipe("zero_bubble", 32, v=4, model=model), "P208")


def test_p209_bubble_warning(check_spec):
    bad = pipe("1f1b", 10)   # 5 microbatches over 4 stages: 3/8 idle
    d = assert_fires(check_spec, bad, "P209", "global_batch = 10", severity="warning")
    assert "38%" in d.message and "3/8" in d.message
    assert "27 microbatches" in d.help and "global_batch = 54" in d.help
    assert_quiet(check_spec, pipe("1f1b", 64), "P209")


def test_p210_microbatches_mismatch(check_spec):
    bad = spec(mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64; microbatches = 4", train="zero = 3")
    d = assert_fires(check_spec, bad, "P210", "microbatches = 4")
    assert "64 / (1 · 8) = 8" in d.message and "global_batch = 32" in d.help
    assert_quiet(check_spec, bad.replace("microbatches = 4", "microbatches = 8"), "P210")


def test_serving_has_no_schedule_rules(check_spec):
    r = check_spec(spec(L70, nodes=1, mesh="pp = 2; tp = 4", serve="max_model_len = 4096"))
    assert not [d for d in r.diagnostics if d.code.startswith("P2")]


def test_p616_torch_runtime_refuses_dualpipe_and_names_what_runs_it(check_spec):
    # torch.distributed.pipelining (torch 2.13) has ScheduleDualPipeV and nothing named DualPipe
    tp_ = pytest.importorskip("torch.distributed.pipelining")
    assert hasattr(tp_, "ScheduleDualPipeV") and not [n for n in dir(tp_) if n.lower().replace("_", "") == "scheduledualpipe"]
    d = assert_fires(check_spec, pipe("dualpipe", 16, target=TORCH), "P616", "pipeline = dualpipe", target="torch")
    assert "deepseek-ai/DualPipe" in d.message and "ScheduleDualPipeV" in d.message
    assert "pipeline = dualpipe_v" in d.help and "virtual_stages = 2" in d.help
    assert_quiet(check_spec, pipe("dualpipe_v", 16, v=2, target=TORCH), "P616")
    # without a target nothing launches it, and parc's own numbers still hold: no P616
    assert_quiet(check_spec, pipe("dualpipe", 16), "P616")
    # the message lists what the runtime has, from its table (families.toml [torch.schedules])
    assert "it has gpipe (ScheduleGPipe), 1f1b (Schedule1F1B)" in d.message
    assert "dualpipe_v (ScheduleDualPipeV)" in d.message
    # torchtitan reads its own table (target.toml [schedules]: torchtitan's schedule names)
    titan = {"torchtitan": 'module = "llama3"; config = "llama3_70b"'}
    d = assert_fires(check_spec, pipe("dualpipe", 16, target=titan), "P616", "pipeline = dualpipe",
                     target="torchtitan")
    assert "dualpipe_v (DualPipeV)" in d.message and "zero_bubble (ZBVZeroBubble)" in d.message
    assert_quiet(check_spec, pipe("zero_bubble", 16, v=2, target=titan), "P616")
    # Megatron-LM: P607, whose help no longer sends dualpipe to torchrun as if torch had it
    d = assert_fires(check_spec, pipe("dualpipe", 16, target=MEG), "P607", "pipeline = dualpipe", target="megatron")
    assert "dualpipe_v (DualPipe cut in half" in d.help


def test_pipeline_tables_are_what_each_runtime_has():
    # one table per runtime; the rules and the planner read the same (P607, P616, P688)
    from parc.model.targets import pipelines, runs_pipeline

    assert set(pipelines("torch")) == {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "dualpipe_v"}
    assert set(pipelines("torchtitan")) == set(pipelines("torch"))
    assert set(pipelines("megatron")) == {"1f1b", "interleaved_1f1b"}
    assert set(pipelines("deepspeed")) == {"1f1b", "gpipe", "dualpipe_v"}
    # a target without a table (vllm serves; torchrun brings the torch family) runs any
    assert runs_pipeline("vllm", "dualpipe")
    # the torch table names classes torch.distributed.pipelining really has
    sch = pytest.importorskip("torch.distributed.pipelining.schedules")
    for names in pipelines("torch").values():
        for name in names.split(" / "):
            assert hasattr(sch, name), name
