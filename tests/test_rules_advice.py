"""P5xx advice: warnings for plans that run but that an expert would not write."""
from __future__ import annotations

from support.specs import assert_fires, assert_quiet, spec

L70 = "from = llama3_70b"
SERVE = "max_model_len = 4096"


def test_p501_pipeline_for_online_serving(check_spec):
    bad = spec(L70, mesh="pp = 2; tp = 4", serve=SERVE)
    d = assert_fires(check_spec, bad, "P501", "pp = 2", severity="warning")
    assert "tp = 8 without pp" in d.message
    assert_quiet(check_spec, spec(L70, mesh="tp = 8", serve=SERVE), "P501")


def test_p501_quiet_when_pipeline_spans_nodes(check_spec):
    # 405B: TP already fills a node, so pipeline parallelism across nodes is the recommended layout
    assert_quiet(check_spec, spec("from = llama3_405b", nodes=2, mesh="pp = 2; tp = 8", serve=SERVE), "P501")


def test_p502_sequence_parallel_without_tp(check_spec):
    bad = spec(mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64",
               train="zero = 3; sequence_parallel = true")
    assert_fires(check_spec, bad, "P502", "sequence_parallel = true", severity="warning")
    assert_quiet(check_spec, bad.replace("dp = 8", "dp = 4\n  tp = 2"), "P502")


def test_p503_tp_across_nodes_on_purpose(check_spec):
    bad = spec(L70, nodes=2, gpn=4, mesh="tp = 8", placement="tp on inter_node", serve=SERVE)
    d = assert_fires(check_spec, bad, "P503", "tp on inter_node", severity="warning")
    assert "9× slower" in d.message  # 450 GB/s NVLink over 400 Gb/s = 50 GB/s InfiniBand
    assert "tp = 4" in d.help
    assert_quiet(check_spec, bad.replace("tp = 8", "pp = 2\n  tp = 4").replace("tp on inter_node", "pp on inter_node"),
                 "P503")


def test_p504_schedule_in_a_serving_spec(check_spec):
    bad = spec(L70, mesh="tp = 8", schedule="micro_batch = 4", serve=SERVE)
    d = assert_fires(check_spec, bad, "P504", "micro_batch = 4", severity="warning")
    assert "`micro_batch`" in d.message
    assert_quiet(check_spec, spec(L70, mesh="tp = 8", serve=SERVE), "P504")


def test_p504_zero_without_data_parallelism(check_spec):
    bad = spec(nodes=1, mesh="tp = 8", schedule="micro_batch = 1; global_batch = 8", train="zero = 3")
    d = assert_fires(check_spec, bad, "P504", "zero = 3", severity="warning")
    assert "dp = 1" in d.message
    assert_quiet(check_spec, bad.replace("tp = 8", "dp = 2\n  tp = 4"), "P504")


def test_p504_pipeline_schedule_without_pipeline(check_spec):
    bad = spec(mesh="dp = 8", schedule="pipeline = gpipe; micro_batch = 1; global_batch = 64", train="zero = 1")
    assert_fires(check_spec, bad, "P504", "pipeline = gpipe", severity="warning")
    assert_quiet(check_spec, bad.replace("dp = 8", "pp = 2\n  dp = 4"), "P504")


def test_p505_module_placements_ignored_by_megatron(check_spec):
    text = spec(mesh="dp = 4; tp = 2", placement='"layers.*.attention.wq" = colwise(tp)',
                schedule="micro_batch = 1; global_batch = 64",
                target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    d = assert_fires(check_spec, text, "P505", "layers.*.attention.wq", severity="warning", target="megatron")
    assert "Megatron-LM" in d.message
    assert_quiet(check_spec, text.replace('target megatron {\n  entrypoint = "pretrain_gpt.py"\n}',
                                          'target torchrun {\n  entrypoint = "train.py"\n}'), "P505")


def test_p506_context_parallel_for_short_serving(check_spec):
    bad = spec(L70, mesh="cp = 2; tp = 4", serve=SERVE)
    d = assert_fires(check_spec, bad, "P506", "cp = 2", severity="warning")
    assert "tp = 8" in d.help
    assert_quiet(check_spec, bad.replace(SERVE, "max_model_len = 131072"), "P506")


def test_p507_context_ring_across_nodes_while_dp_inside(check_spec):
    text = spec("from = llama3_8b; seq_len = 65536", nodes=2, mesh="cp = 2; dp = 4; tp = 2",
                schedule="micro_batch = 1; global_batch = 32",
                train="zero = 3; sequence_parallel = true; recompute = full")
    d = assert_fires(check_spec, text, "P507", "cp = 2", severity="warning")
    assert "dp, cp, tp" in d.help
    assert_quiet(check_spec, text.replace("cp = 2\n  dp = 4", "dp = 4\n  cp = 2"), "P507")
