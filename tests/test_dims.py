"""ParallelDims: the derived sizes, and every invariant at its boundary (quiet on one side, a
fact with the values that would work on the other)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from parc.model.dims import (ParallelDims, auto_degree, batch_divides, expert_dp_of, grid_fits, kv_split, seq_cp_ok,
                             seq_sp_ok, splits)
from parc.model.plan import Mesh, Model, Schedule


def model(**kw) -> Model:
    base = dict(name="m", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, head_dim=None,
                vocab=128000, params=8_000_000_000, seq_len=8192)
    base.update(kw)
    return Model(**base)


MOE = dict(experts=8, top_k=2, moe_ffn_hidden=1024, moe_every=1)


def D(**kw) -> ParallelDims:
    """Dims whose batch divides (global batch 720: a multiple of every dp below)."""
    return ParallelDims(**{"global_batch": 720, **kw})


def codes(d: ParallelDims, md: Model, **kw) -> list[str]:
    return [f.code for f in d.violations(md, **kw)]


def fact(d: ParallelDims, md: Model, code: str, **kw):
    got = [f for f in d.violations(md, **kw) if f.code == code]
    assert len(got) == 1, d.violations(md, **kw)
    return got[0]


# ---------------------------------------------------------------- derived sizes

def test_derived_sizes():
    d = ParallelDims(pp=4, dp=2, cp=2, tp=8, ep=4, etp=2, virtual_stages=2, micro_batch=2, global_batch=64)
    assert d.world == 4 * 2 * 2 * 8
    assert d.region == 2 * 2 * 8
    assert d.expert_dp == 32 // (4 * 2)
    assert replace(d, ep=64).expert_dp == 1
    assert d.replicas == 2
    assert d.per_microbatch == 4
    assert d.microbatches == 16
    assert d.global_batch_for(16) == 64
    assert d.stages == 8
    assert replace(d, global_batch=66).microbatches is None


@pytest.mark.parametrize("cp,tp,sp,want", [
    (1, 8, False, 1),     # nothing splits the sequence
    (1, 8, True, 8),      # sequence parallel: tp
    (2, 8, False, 4),     # load-balanced context parallel: 2·cp
    (2, 4, True, 8),      # both: lcm(2·cp, cp·tp)
    (3, 2, True, 6),
])
def test_sequence_divisor(cp, tp, sp, want):
    assert ParallelDims(cp=cp, tp=tp, sequence_parallel=sp).seq_divisor == want


def test_auto_degree():
    assert auto_degree(64, 4 * 8) == 2
    assert auto_degree(64, 3) == 0
    assert auto_degree(64, 0) == 0


# ---------------------------------------------------------------- invariants at their boundaries

def test_a_valid_plan_has_no_facts():
    d = D(pp=2, dp=2, tp=2, global_batch=8)
    assert d.violations(model(), world=8) == []


def test_world():
    assert codes(D(dp=8), model(), world=8) == []
    f = fact(D(dp=4, tp=4), model(), "world", world=8)
    assert f.values == {"world": 8, "mesh": 16}


def test_heads_tp():
    assert codes(D(tp=32), model()) == []
    f = fact(D(dp=2, tp=3), model(), "heads_tp", world=8)
    assert f.values == {"heads": 32, "tp": 3}
    assert f.alternatives == (1, 2, 4, 8)   # split every width and fit 8 GPUs


def test_kv_heads_split_or_replicated():
    md = model(heads=48, kv_heads=8, ffn_hidden=12288)
    assert "kv_tp" not in codes(D(tp=16), md)            # 16 % 8 == 0: replicated
    assert "kv_tp" not in codes(D(tp=8), md)             # split
    f = fact(D(tp=12), md, "kv_tp")
    assert f.values == {"kv_heads": 8, "tp": 12}
    assert 12 not in f.alternatives and 16 in f.alternatives


def test_kv_heads_replication_refused_where_the_target_does_not_replicate():
    md = model()
    assert codes(D(tp=16), md, replicate_kv=False) == ["kv_tp_replicated"]
    assert codes(D(tp=16), md) == []
    assert codes(D(tp=8), md, replicate_kv=False) == []
    f = fact(D(tp=16), md, "kv_tp_replicated", replicate_kv=False)
    assert f.alternatives == (1, 2, 4, 8)


def test_ffn_width():
    md = model(ffn_hidden=1000)
    assert codes(D(tp=8), md) == []
    f = fact(D(tp=16), md, "width_tp")
    assert f.values == {"name": "ffn_hidden", "width": 1000, "tp": 16}
    assert f.alternatives == (1, 2, 4, 8)


def test_ffn_width_is_not_asked_of_a_model_without_dense_layers():
    md = model(ffn_hidden=1000, **MOE)
    assert "width_tp" not in codes(D(tp=16), md)


def test_shared_expert_width():
    md = model(shared_experts=1, **{**MOE, "moe_ffn_hidden": 1000})
    f = fact(D(tp=16), md, "width_tp")
    assert f.values["width"] == 1000 and f.values["name"].startswith("shared expert width")
    assert codes(D(tp=8), md) == []


def test_vocab():
    md = model(vocab=1000)
    assert codes(D(tp=8), md) == []
    f = fact(D(tp=16), md, "vocab_tp")
    assert f.values == {"vocab": 1000, "tp": 16}
    assert 8 in f.alternatives and 16 not in f.alternatives


def test_expert_axes_without_experts():
    assert codes(D(dp=4, ep=4), model()) == ["ep_without_experts"]
    assert fact(D(dp=4, tp=2, etp=2), model(), "ep_without_experts").values == {"etp": 2}


def test_experts_over_ep():
    md = model(**MOE)
    assert codes(D(dp=4, ep=4), md) == []
    f = fact(D(dp=6, ep=3), md, "experts_ep")
    assert f.values == {"experts": 8, "redundant": 0, "ep": 3}
    assert f.alternatives == (2,)           # divides 8 experts and the 6 ranks of the stage
    # EPLB's redundant copies spread with the experts: 8 + 4 = 12 slots over 3 and 6 ranks
    assert codes(D(dp=6, ep=3, redundant_experts=4), md) == []
    f = fact(D(dp=6, ep=6, redundant_experts=3), md, "experts_ep")
    assert f.values == {"experts": 8, "redundant": 3, "ep": 6}
    assert f.alternatives == ()             # 11 slots: no ep above 1 divides them


def test_expert_grid():
    md = model(**MOE)
    assert codes(D(dp=8, ep=8), md) == []
    f = fact(D(dp=4, ep=8), md, "expert_grid")
    assert f.values == {"ep": 8, "etp": 1, "region": 4}
    assert f.alternatives == (2, 4)
    # quiet while experts % ep reports
    assert codes(D(dp=2, ep=3), md) == ["experts_ep"]


def test_moe_ffn_over_etp():
    md = model(**{**MOE, "moe_ffn_hidden": 1000})
    assert codes(D(dp=2, tp=8, ep=2, etp=8), md) == []
    f = fact(D(dp=2, tp=16, ep=2, etp=16), model(heads=64, kv_heads=16, **{**MOE, "moe_ffn_hidden": 1000}),
             "moe_ffn_etp")
    assert f.values == {"moe_ffn_hidden": 1000, "etp": 16}
    assert 8 in f.alternatives and 16 not in f.alternatives


def test_layers_over_stages():
    md = model()
    assert codes(D(pp=4, virtual_stages=2), md) == []
    f = fact(D(pp=3), md, "layers_stages")
    assert f.values == {"layers": 32, "pp": 3, "virtual_stages": 1}
    assert f.alternatives == (1, 2, 4, 8, 16, 32)
    assert fact(D(pp=3, virtual_stages=2), md, "layers_stages").alternatives == (1, 2, 4, 8, 16)


def test_sequence_over_context_parallel():
    md = model(seq_len=8192)
    assert codes(D(cp=2), md) == []
    f = fact(D(cp=3), md, "seq_cp")
    assert f.values == {"seq_len": 8192, "cp": 3}
    assert f.alternatives == (8190, 8196)
    assert codes(D(cp=3), md, mode="serve") == []


def test_sequence_over_tp_with_sequence_parallel():
    md = model(seq_len=8190)
    assert codes(D(tp=4), md) == []                           # no sequence parallel
    f = fact(D(tp=4, sequence_parallel=True), md, "seq_sp")
    assert f.values == {"seq_len": 8190, "cp": 1, "tp": 4}
    assert f.alternatives == (8188, 8192)
    assert codes(D(tp=2, sequence_parallel=True), md) == []
    # seq_cp reports first; seq_sp stays quiet until it holds
    assert codes(D(cp=4, tp=2, sequence_parallel=True), model(seq_len=8196)) == ["seq_cp"]


def test_batch():
    md = model()
    assert codes(ParallelDims(dp=8, micro_batch=2, global_batch=32), md) == []
    f = fact(ParallelDims(dp=8, micro_batch=2, global_batch=36), md, "batch")
    assert f.values == {"global_batch": 36, "micro_batch": 2, "dp": 8}
    assert f.alternatives == (32, 48)
    assert codes(ParallelDims(dp=8, micro_batch=2, global_batch=36), md, mode="serve") == []
    assert codes(ParallelDims(dp=0, micro_batch=2, global_batch=36), md) == []   # auto without a value


# ---------------------------------------------------------------- the same predicates over arrays

def test_predicates_take_arrays():
    tp = np.array([1, 2, 3, 4, 8, 16])
    cp = np.array([1, 1, 2, 3, 2, 4])
    sp = np.array([0, 1, 1, 1, 0, 1])
    for i in range(len(tp)):
        t, c, s = int(tp[i]), int(cp[i]), int(sp[i])
        assert bool(splits(32, tp)[i]) == splits(32, t)
        assert bool(kv_split(8, tp)[i]) == kv_split(8, t)
        assert bool(kv_split(8, tp, False)[i]) == kv_split(8, t, False)
        assert bool(grid_fits(16 * cp, tp, 1)[i]) == grid_fits(16 * c, t, 1)
        assert bool(seq_cp_ok(8190, cp)[i]) == seq_cp_ok(8190, c)
        assert bool(seq_sp_ok(8190, cp, tp, sp)[i]) == seq_sp_ok(8190, c, t, s)
        assert bool(batch_divides(48, tp, cp)[i]) == batch_divides(48, t, c)
        assert int(expert_dp_of(2, cp, tp, 4, 1)[i]) == expert_dp_of(2, c, t, 4, 1) >= 1


# ---------------------------------------------------------------- its callers agree with it

def _plan(md, **mesh):
    return SimpleNamespace(model=md, mesh=Mesh(order=["pp", "dp", "cp", "tp"], **mesh), schedule=Schedule(),
                           train=None, mode="train")


def test_memory_tp_candidates_are_the_degrees_p106_accepts():
    """The memory fixes offered tp = 16 for a model whose shared experts it does not split
    (the P106 rule refuses it); they now take the degrees from ParallelDims."""
    from parc.rules.memory import _tp_candidates
    from parc.rules.util import tp_ok

    md = model(shared_experts=1, **{**MOE, "moe_ffn_hidden": 1000, "moe_every": 2})
    plan = _plan(md, tp=1)
    assert _tp_candidates(plan) == [2, 4, 8]
    assert all(tp_ok(plan, t) for t in _tp_candidates(plan))


def test_runtime_refuses_a_microbatch_count_the_batch_sizes_do_not_give():
    """check_plan judged the batch by the stated microbatch count alone (12 % (6 · 2) == 0
    passed with micro_batch = 2, which gives 3); it now compares it with ParallelDims'."""
    pytest.importorskip("torch")
    from parc.runtime.engine import RunError, check_plan

    md = model(layers=4, hidden=64, ffn_hidden=128, heads=4, kv_heads=4, vocab=256, seq_len=32)
    plan = _plan(md, dp=2)
    plan.schedule = Schedule(micro_batch=2, global_batch=12, microbatches=3)
    check_plan(plan)
    plan.schedule = Schedule(micro_batch=2, global_batch=12, microbatches=6)
    with pytest.raises(RunError, match=r"microbatches = 6 disagrees with global_batch / \(micro_batch · dp\)"):
        check_plan(plan)
    plan.schedule = Schedule(micro_batch=2, global_batch=12, microbatches=3)
    plan.mesh = Mesh(order=["pp", "dp", "cp", "tp"], dp=2, tp=8)
    with pytest.raises(RunError, match="heads = 4 and kv_heads = 4 must both be divisible by tp = 8"):
        check_plan(plan)
