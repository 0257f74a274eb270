"""The train block's overlap keys in the Megatron-LM launch (megatron/training/arguments.py,
core 0.20.0: every switch is off unless given) and the rules that refuse what Megatron-LM asserts
against: P654 (--overlap-param-gather), P655 (--tp-comm-overlap), P659
(--overlap-moe-expert-parallel-comm)."""
from __future__ import annotations

from support.specs import assert_fires, assert_quiet, spec

MEG = {"megatron": 'entrypoint = "pretrain_gpt.py"'}
MIXTRAL = "from = mixtral_8x7b; seq_len = 4096"


def _flags(check_spec, text) -> list[str]:
    from parc.targets.megatron import arg_lines

    r = check_spec(text)
    return [str(w) for line in arg_lines(r.plan) for w in line]


def _moe(train="zero = 1; sequence_parallel = true; ep_comm_overlap = true", mesh="dp = 4; tp = 4; ep = 4",
         schedule="micro_batch = 1; global_batch = 64"):
    return spec(MIXTRAL, nodes=2, mesh=mesh, schedule=schedule, train=train, target=MEG)


def test_defaults_emit_grad_reduce_only(check_spec):
    # parc's defaults: overlap_grad_reduce = true (Megatron-LM's off unless given, so it is written),
    # the others false (Megatron-LM's defaults already), flash_attention = true (attention backend auto)
    args = _flags(check_spec, _moe(train="zero = 1; sequence_parallel = true"))
    assert "--overlap-grad-reduce" in args
    for absent in ("--overlap-param-gather", "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm",
                   "--attention-backend"):
        assert absent not in args, absent


def test_each_key_is_its_flag(check_spec):
    train = ("zero = 1; sequence_parallel = true; overlap_param_gather = true; tp_comm_overlap = true; "
             "ep_comm_overlap = true; flash_attention = false")
    args = _flags(check_spec, _moe(train=train))
    for flag in ("--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
                 "--overlap-moe-expert-parallel-comm"):
        assert args.count(flag) == 1, flag
    assert args[args.index("--attention-backend") + 1] == "unfused"
    # overlap_grad_reduce = false: nothing (Megatron-LM's default is off)
    args = _flags(check_spec, _moe(train="zero = 1; sequence_parallel = true; overlap_grad_reduce = false"))
    assert "--overlap-grad-reduce" not in args


def test_tp_and_ep_overlap_only_where_there_is_something_to_overlap(check_spec):
    # tp = 1: Megatron-LM turns sequence parallelism off and would refuse --tp-comm-overlap
    args = _flags(check_spec, _moe(train="zero = 1; tp_comm_overlap = true; ep_comm_overlap = true",
                                   mesh="dp = 16; ep = 1"))
    assert "--tp-comm-overlap" not in args and "--overlap-moe-expert-parallel-comm" not in args


def test_p654_param_gather_needs_distributed_optimizer_and_grad_reduce(check_spec):
    bad = _moe(train="zero = 0; sequence_parallel = true; overlap_param_gather = true")
    d = assert_fires(check_spec, bad, "P654", "overlap_param_gather = true", target="megatron")
    assert "zero = 0" in d.message and "distributed optimizer" in d.message
    bad = _moe(train="zero = 1; sequence_parallel = true; overlap_param_gather = true; overlap_grad_reduce = false")
    d = assert_fires(check_spec, bad, "P654", "overlap_param_gather = true", target="megatron")
    assert "--overlap-grad-reduce" in d.message
    assert_quiet(check_spec, _moe(train="zero = 1; sequence_parallel = true; overlap_param_gather = true"), "P654")


def test_p655_tp_comm_overlap_needs_sequence_parallel(check_spec):
    bad = _moe(train="zero = 1; tp_comm_overlap = true")
    d = assert_fires(check_spec, bad, "P655", "tp_comm_overlap = true", target="megatron")
    assert "tp = 4" in d.message
    assert_quiet(check_spec, _moe(train="zero = 1; sequence_parallel = true; tp_comm_overlap = true"), "P655")
    # tp = 1: no flag, nothing to refuse
    assert_quiet(check_spec, _moe(train="zero = 1; tp_comm_overlap = true", mesh="dp = 16; ep = 4"), "P655")


def test_p659_ep_overlap_assertions(check_spec):
    ok = _moe()
    assert_quiet(check_spec, ok, "P659")
    # full recompute
    d = assert_fires(check_spec, _moe(train="zero = 1; sequence_parallel = true; ep_comm_overlap = true; "
                                            "recompute = full"), "P659", "recompute = full", target="megatron")
    assert "disable full recomputation" in d.message
    # pp = 2 without virtual stages: Megatron-LM wants the interleaved schedule
    bad = _moe(mesh="pp = 2; dp = 2; tp = 4; ep = 4",
               schedule="pipeline = 1f1b; micro_batch = 1; global_batch = 64")
    d = assert_fires(check_spec, bad, "P659", "pipeline = 1f1b", target="megatron")
    assert "virtual_pipeline_model_parallel_size" in d.message
    # ep = 1: the flag is not written, nothing to refuse
    assert_quiet(check_spec, _moe(train="zero = 1; sequence_parallel = true; ep_comm_overlap = true; "
                                        "recompute = full", mesh="dp = 4; tp = 4"), "P659")
