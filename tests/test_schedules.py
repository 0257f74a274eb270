"""The schedule model against torch.distributed.pipelining's own schedules.

torch builds the multi-stage schedules' action tables in their constructors, so they are
compared through mock stages (as torch's own schedule visualiser does). Schedule1F1B's
``pipeline_order`` attribute does not match what it executes in torch 2.13, so the
single-stage schedules are compared by running their ``_step_microbatches`` against a
recording stage with no communication.
"""
from __future__ import annotations

import os

import pytest

from parc.model import schedules as S

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")
from unittest import mock  # noqa: E402

from torch.distributed.pipelining import schedules as ts  # noqa: E402
from torch.distributed.pipelining.stage import PipelineStage  # noqa: E402

KIND = {"F": "F", "B": "B", "I": "I", "W": "W"}


def _mock_stage(pp: int, num_stages: int, rank: int = 0):
    st = mock.create_autospec(PipelineStage, instance=True)
    st.group_rank = rank
    st.group_size = pp
    st.submod = None
    st.num_stages = num_stages
    return st


def _flatten(order) -> list[str]:
    out = []
    for a in order:
        if a is None:
            continue
        if a.computation_type == ts.OVERLAP_F_B:
            out.extend(str(s) for s in a.sub_actions)
        elif a.is_compute_op:
            out.append(str(a))
    return out


def torch_multi_order(pipeline: str, pp: int, n: int, v: int) -> list[list[str]]:
    cls = ts.get_schedule_class(S.torch_schedule_name(pipeline, v))
    per = S.stages_per_rank(pipeline, v)
    stages = [_mock_stage(pp, pp * per) for _ in range(per)]
    sched = cls(stages, n)
    return [_flatten(sched.pipeline_order[r]) for r in range(pp)]


def torch_single_order(pipeline: str, pp: int, n: int) -> list[list[str]]:
    """Run the single-stage schedule's step loop with a stage that only records."""
    cls = ts.get_schedule_class(S.torch_schedule_name(pipeline))
    out = []
    for rank in range(pp):
        st = _mock_stage(pp, pp, rank)
        st.stage_index = rank
        seen: list[str] = []
        st.forward_one_chunk.side_effect = lambda i, *a, _s=seen, _r=rank, **k: _s.append(f"{_r}F{i}")
        st.backward_one_chunk.side_effect = lambda i, *a, _s=seen, _r=rank, **k: _s.append(f"{_r}B{i}")
        for name in ("get_fwd_recv_ops", "get_fwd_send_ops", "get_bwd_recv_ops", "get_bwd_send_ops"):
            getattr(st, name).return_value = []
        sched = cls(st, n)
        sched._initialize_stage = lambda *a, **k: None
        sched._maybe_compute_loss = lambda *a, **k: None
        sched._maybe_get_loss = lambda *a, **k: None
        sched._update_losses = lambda *a, **k: None
        sched._step_microbatches([()] * n, [{}] * n)
        out.append(seen)
    return out


def ours(pipeline: str, pp: int, n: int, v: int = 1) -> list[list[str]]:
    return [[str(a) for a in rank] for rank in S.actions(pipeline, pp, n, v)]


CASES = [(pp, n) for pp in (2, 4) for n in (pp, 2 * pp, 3 * pp)]


@pytest.mark.parametrize("pipeline", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,n", CASES + [(4, 5)])
def test_single_stage_orders_match_torch_execution(pipeline, pp, n):
    assert ours(pipeline, pp, n) == torch_single_order(pipeline, pp, n)


@pytest.mark.parametrize("pipeline,v", [("interleaved_1f1b", 2), ("interleaved_1f1b", 3),
                                        ("zero_bubble", 1), ("zero_bubble", 2), ("zero_bubble", 3),
                                        ("dualpipe_v", 2)])
@pytest.mark.parametrize("pp,n", CASES + [(4, 10)])
def test_multi_stage_orders_match_torch(pipeline, v, pp, n):
    if S.check(pipeline, pp, n, v):
        pytest.skip(S.check(pipeline, pp, n, v))
    assert ours(pipeline, pp, n, v) == torch_multi_order(pipeline, pp, n, v)


def test_every_action_once_and_dependencies_respected():
    for pipeline in S.PIPELINES:
        for pp, n, v in [(2, 4, 2), (4, 8, 2), (3, 6, 2), (6, 14, 1)]:
            if S.check(pipeline, pp, n, v):
                continue
            order = S.actions(pipeline, pp, n, v)
            stages = S.model_stages(pipeline, pp, v)
            flat = [a for rank in order for a in rank]
            fb = [(a.kind, a.microbatch, a.stage) for a in flat if a.kind in "FB"]
            assert sorted(fb) == sorted((k, m, s) for k in "FB" for m in range(n) for s in range(stages))
            held = S.rank_stages(pipeline, pp, v)
            for r, rank in enumerate(order):
                assert all(a.stage in held[r] for a in rank)
            # a split backward is always followed by its weight step on the same rank
            for rank in order:
                for i, a in enumerate(rank):
                    if a.split:
                        assert S.Action("W", a.microbatch, a.stage) in rank[i + 1:]


def test_placements():
    assert S.rank_stages("interleaved_1f1b", 4, 2) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert S.rank_stages("dualpipe_v", 4, 2) == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert S.rank_stages("zero_bubble", 2, 2) == [[0, 3], [1, 2]]
    assert S.rank_stages("zero_bubble", 2, 3) == [[0, 2, 4], [1, 3, 5]]
    assert S.rank_stages("1f1b", 3) == [[0], [1], [2]]


@pytest.mark.parametrize("pipeline", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,n", [(2, 2), (2, 8), (4, 4), (4, 16), (8, 8)])
def test_bubble_matches_closed_form(pipeline, pp, n):
    assert S.bubble(pipeline, pp, n) == pytest.approx((pp - 1) / (n + pp - 1))


def test_interleaving_and_zero_bubble_shrink_the_bubble():
    pp, n = 4, 8
    plain = S.bubble("1f1b", pp, n)
    inter = S.bubble("interleaved_1f1b", pp, n, 2)
    assert inter == pytest.approx((pp - 1) / (2 * n + pp - 1))
    assert S.bubble("zero_bubble", pp, n, 2) < inter < plain
    assert S.bubble("dualpipe_v", pp, n, 2) < plain


def test_timeline_is_consistent():
    slots = S.timeline("zero_bubble", 4, 8, 2)
    for rank in slots:
        for a, b in zip(rank, rank[1:]):
            assert a.end <= b.start
        for s in rank:
            assert s.end - s.start == (1 if s.action.kind != "B" or s.action.split else 2)
    ends = {(s.action.kind, s.action.microbatch, s.action.stage): s for r in slots for s in r}
    for r in slots:
        for s in r:
            a = s.action
            if a.kind == "F" and a.stage:
                assert ends[("F", a.microbatch, a.stage - 1)].end <= s.start


def test_refusals():
    assert "at least pp" in S.check("1f1b", 4, 3)
    assert S.check("interleaved_1f1b", 4, 10, 2) is None
    assert "multiple" in S.check("interleaved_1f1b", 4, 9, 2)
    assert "2·pp" in S.check("dualpipe_v", 4, 6, 2)
    with pytest.raises(ValueError):
        S.actions("1f1b", 4, 2)
    with pytest.raises(ValueError):
        S.actions("bogus", 2, 2)


def _simulated(pipeline, pp, n, v):
    """(idle units of every rank, bubble as a fraction) straight from the timeline."""
    from fractions import Fraction

    slots = S.timeline(pipeline, pp, n, v)
    span = S.makespan(slots)
    idle = {int(span - sum(s.end - s.start for s in rank)) for rank in slots}
    busy = sum(s.end - s.start for rank in slots for s in rank)
    return idle, Fraction(int(pp * span - busy), int(pp * span))


@pytest.mark.parametrize("pipeline", S.PIPELINES)
def test_closed_forms_equal_the_simulated_timeline(pipeline):
    """idle_units (and so bubble) equals the timeline for every pp ≤ 8, m ≤ 24, v ≤ 4 and every
    pp ≤ 5, m ≤ 12, v ≤ 8 that torch runs."""
    from fractions import Fraction

    grid = [(pp, n, v) for pp in range(2, 9) for n in range(1, 25) for v in (1, 2, 3, 4)]
    grid += [(pp, n, v) for pp in range(2, 6) for n in range(1, 13) for v in (5, 6, 7, 8)]
    for pp, n, v in grid:
        if S.check(pipeline, pp, n, v):
            continue
        idle, frac = _simulated(pipeline, pp, n, v)
        assert idle == {S.idle_units(pipeline, pp, n, v)}, (pipeline, pp, n, v)
        busy = 3 * S.stage_passes(pipeline, v) * n
        assert Fraction(S.idle_units(pipeline, pp, n, v), busy + S.idle_units(pipeline, pp, n, v)) == frac
        assert S.bubble(pipeline, pp, n, v) == pytest.approx(float(frac), rel=1e-15)


def test_one_idle_share_for_interleaving_with_few_microbatches():
    """pp 4, interleaved_1f1b, 2 virtual stages, 2 microbatches: the timeline idles 15 of 27 units."""
    assert S.bubble("interleaved_1f1b", 4, 2, 2) == 15 / 27
    assert "15 of 27" in S.bubble_formula("interleaved_1f1b", 4, 2, 2)


def test_zero_bubble_and_dualpipe_v_differ_where_the_timeline_does():
    # with m = 2·pp both idle pp−1 units once the pipeline is full ...
    assert S.idle_units("zero_bubble", 4, 8, 2) == S.idle_units("dualpipe_v", 4, 8, 2) == 3
    # ... but ZBV accepts fewer microbatches, and then idles more, as its timeline does
    assert S.idle_units("zero_bubble", 4, 4, 2) == 6 == _simulated("zero_bubble", 4, 4, 2)[0].pop()
    assert S.check("dualpipe_v", 4, 4, 2)


def test_bubble_array_evaluates_each_triple_once():
    import numpy as np

    pipe = np.array([S.PIPELINES.index("interleaved_1f1b")] * 3 + [S.PIPELINES.index("zero_bubble")])
    got = S.bubble_array(pipe, np.array([4, 4, 8, 3]), np.array([2, 2, 16, 2]), np.array([2, 2, 2, 3]))
    want = [S.bubble("interleaved_1f1b", 4, 2, 2)] * 2 + [S.bubble("interleaved_1f1b", 8, 16, 2),
                                                           S.bubble("zero_bubble", 3, 2, 3)]
    assert got.tolist() == want


def test_warmup_depth_follows_torch_order():
    assert [S.warmup("1f1b", 4, 8, 1, r) for r in range(4)] == [4, 3, 2, 1]
    assert S.warmup("gpipe", 4, 8, 1, 0) == 8


# --- DualPipe (deepseek-ai/DualPipe dualpipe/dualpipe.py; DeepSeek-V3, arXiv:2412.19437 §3.2.1) ---

def test_dualpipe_runs_two_directions_over_two_stages_per_rank():
    # pp 4: rank r holds stage r (microbatches 0 … m/2−1, fed at rank 0) and stage 3−r (m/2 … m−1,
    # fed at rank 3); the model is cut into 4 stages, not 8
    assert S.rank_stages("dualpipe", 4) == [[0, 3], [1, 2], [1, 2], [0, 3]]
    assert S.model_stages("dualpipe", 4) == 4 and S.stages_per_rank("dualpipe") == 2
    order = S.actions("dualpipe", 4, 8)
    # DualPipe.step on rank 0 (half_rank 0, 2 half ranks): step 1 runs (2−0−1)·2 = 2 forwards of
    # phase 0, step 2 one F0 F1 pair, step 3 one B1 (zero bubble) W F1, …
    assert " ".join(str(a) for a in order[0][:8]) == "0F0 0F1 0F2 3F4 3I4 3W4 3F5 0F3"
    # the mirror rank runs the mirror order: rank 3's phase 0 is the reverse direction
    assert " ".join(str(a) for a in order[3][:4]) == "0F4 0F5 0F6 3F0"
    for r, acts in enumerate(order):
        assert sum(a.kind == "F" for a in acts) == 8           # every microbatch passes every rank once


def test_dualpipe_refusals_are_the_asserts_of_dualpipe_step():
    # assert num_ranks % 2 == 0; assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    assert "even number of pipeline ranks" in S.check("dualpipe", 3, 6)
    assert "at least 2·pp = 8" in S.check("dualpipe", 4, 6)
    assert "even number of microbatches" in S.check("dualpipe", 4, 9)
    assert S.check("dualpipe", 4, 8) is None and S.check("dualpipe", 4, 10) is None
    assert not S.in_torch("dualpipe") and S.in_torch("dualpipe_v")


@pytest.mark.parametrize("pp", [2, 4, 6, 8, 10, 16])
def test_dualpipe_bubble_closed_form_equals_its_timeline(pp):
    """Each rank idles pp/2 − 1 units of a 3m-unit step: for pp 16 and m 32, 7/103 of the step
    (1F1B on the same ranks: 45/141)."""
    for n in range(2 * pp, 2 * pp + 20, 2):
        idle, frac = _simulated("dualpipe", pp, n, 1)
        assert idle == {pp // 2 - 1} == {S.idle_units("dualpipe", pp, n)}
        assert S.bubble("dualpipe", pp, n) == pytest.approx(float(frac), rel=1e-15)
    if pp == 16:
        assert S.bubble("dualpipe", 16, 32) == 7 / (3 * 32 + 7)
        assert S.bubble("1f1b", 16, 32) == 45 / (3 * 32 + 45)


@pytest.mark.parametrize("pp,n", [(2, 4), (4, 8), (4, 20), (8, 16), (8, 40)])
def test_dualpipe_holds_pp_plus_one_stage_activations_on_every_rank(pp, n):
    """DeepSeek's table: PP+1 activations per device; in units of a rank's layers (two stages),
    (pp+1)/2. DualPipe's own order peaks there on every rank."""
    for r, acts in enumerate(S.actions("dualpipe", pp, n)):
        live = peak = 0
        for a in acts:
            live += (a.kind == "F") - (a.kind == "B")
            peak = max(peak, live)
        assert peak == pp + 1
        assert S.inflight("dualpipe", pp, n, 1, r) == (pp + 1) / 2
        # steps 1 and 2 run 2(pp/2−h−1) + 2(h+1) = pp forwards (h = min(r, pp−1−r)); where step 3 is
        # empty (h = pp/2−1) step 4's forward comes before the first backward too
        assert S.warmup("dualpipe", pp, n, 1, r) == pp + (min(r, pp - 1 - r) == pp // 2 - 1)


def test_dualpipe_microbatch_share_and_arrays():
    import numpy as np

    assert S.microbatch_share("dualpipe") == 0.5 and S.microbatch_share("1f1b") == 1.0
    pipe = np.array([S.PIPELINES.index("dualpipe"), S.PIPELINES.index("1f1b")])
    assert S.microbatch_share_array(pipe).tolist() == [0.5, 1.0]
    assert S.bubble_array(pipe, np.array([4, 4]), np.array([8, 8]), np.array([1, 1])).tolist() == \
        [S.bubble("dualpipe", 4, 8), S.bubble("1f1b", 4, 8)]
    assert "1/25" in S.bubble_formula("dualpipe", 4, 8)


def test_the_runtime_refuses_dualpipe_and_names_what_runs_it(tmp_path):
    from support.specs import load, spec_text

    from parc.runtime.engine import RunError, check_plan

    plan = load(tmp_path, "dp", spec_text(4, "pp = 4", schedule="pipeline = dualpipe", global_batch=8))
    with pytest.raises(RunError, match="no dualpipe schedule .ScheduleDualPipeV only.*deepseek-ai/DualPipe"):
        check_plan(plan)
    plan.schedule.pipeline, plan.schedule.virtual_stages = "dualpipe_v", 2
    check_plan(plan)


def test_dualpipe_is_drawn_with_both_directions(tmp_path):
    from support.specs import load, spec_text

    from parc.report import svg

    plan = load(tmp_path, "dp", spec_text(4, "pp = 4", schedule="pipeline = dualpipe", global_batch=8))
    pic = svg.schedule(plan)
    assert "deepseek-ai/DualPipe" in pic and "2 stages per rank" in pic
    assert f'data-blocks="{sum(len(r) for r in S.actions("dualpipe", 4, 8))}"' in pic
    assert "darker: microbatches 4–7, fed at rank 3" in pic
    # the picture's idle share is the plan's: 1 idle unit of 3·8 + 1 on each rank
    assert 'data-bubble="0.04"' in pic


def test_dualpipe_layout_holds_stages_r_and_pp_minus_1_minus_r():
    """A uniform 8-layer model (h 1024, 8 heads of 128, 2 KV heads, SwiGLU 2816, vocab 32000, RMSNorm,
    untied) on pp 4. Per layer: q and o 2·1024·1024 = 2,097,152, k and v 2·256·1024 = 524,288, MLP
    3·2816·1024 = 8,650,752, norms 2·1024: 11,274,240. DualPipe cuts it into 4 stages of 2 layers and
    rank r holds stages r and 3−r: 4 layers = 45,096,960 on every rank, twice 1F1B's 2 layers;
    ranks 0 and 3 add the embedding (32000·1024 = 32,768,000), the head (as much) and the final
    norm (1024): 110,633,984, which is 1F1B's rank 0 plus its rank 3."""
    from parc.cost import params as P
    from parc.model.plan import Model

    m = Model(name="u", layers=8, hidden=1024, ffn_hidden=2816, heads=8, kv_heads=2, head_dim=128, vocab=32000,
              params=0, seq_len=2048)
    split = P.split_layers(8, 4, 1)
    dual = P.layouts_of(m, "dualpipe", 4, split)
    plain = P.layouts_of(m, "1f1b", 4, split)
    assert [lay.chunks for lay in dual] == [[0, 3], [1, 2], [1, 2], [0, 3]]
    assert [(lay.embedding, lay.head) for lay in dual] == [(True, True), (False, False), (False, False), (True, True)]

    def count(lay):
        return sum(P.stage_parts(m, lay, 1, 1, 1, 1, 1).values())

    assert [count(lay) for lay in dual] == [110_633_984, 45_096_960, 45_096_960, 110_633_984]
    assert [count(lay) for lay in plain] == [55_316_480, 22_548_480, 22_548_480, 55_317_504]
    assert sum(count(lay) for lay in dual) == 2 * P.param_count(m)


def test_dualpipe_memory_counts_both_stages_through_the_ordinary_model(tmp_path):
    """estimate() has no DualPipe case in its memory: the layout gives the middle ranks twice 1F1B's
    weights and activations of (pp+1)/2 = 2.5 microbatches over twice the layers (1F1B's rank 1: 3)."""
    from support.specs import load, spec_text

    from parc.cost.estimate import estimate

    plans = {p: load(tmp_path, p, spec_text(4, "pp = 4", schedule=f"pipeline = {p}", global_batch=8))
             for p in ("dualpipe", "1f1b")}
    dual, plain = (estimate(plans[p], cache=False) for p in ("dualpipe", "1f1b"))
    assert dual.stages[1].memory.weights == 2 * plain.stages[1].memory.weights
    assert dual.stages[0].memory.weights == plain.stages[0].memory.weights + plain.stages[3].memory.weights
    assert dual.stages[1].inflight == 2.5 and plain.stages[1].inflight == 3
    # 2.5 microbatches of 4 layers against 3 of 2 layers
    assert dual.stages[1].memory.activations == pytest.approx(plain.stages[1].memory.activations * 10 / 6)
    # each microbatch passes one of a rank's two stages: per microbatch a rank computes the mean of
    # 1F1B's stages r and 3−r, so the output head's work is shared by ranks 0 and 3
    for r in range(4):
        assert dual.stages[r].flops_per_microbatch == pytest.approx(
            (plain.stages[r].flops_per_microbatch + plain.stages[3 - r].flops_per_microbatch) / 2)
        # and its seconds too (the same GEMM shapes, so the same rates, on both)
        assert dual.stages[r].time_per_microbatch == pytest.approx(
            (plain.stages[r].time_per_microbatch + plain.stages[3 - r].time_per_microbatch) / 2)
    assert dual.compute_time == pytest.approx(plain.compute_time * max(s.time_per_microbatch for s in dual.stages)
                                              / max(s.time_per_microbatch for s in plain.stages))
    assert dual.bubble_fraction == 1 / 25 and plain.bubble_fraction == 3 / 11
