"""parc plan: the search against brute force, the bulk cost model against estimate(), the plans it
writes against `parc check`, and its choices against published practice."""
from __future__ import annotations

import io
import itertools
import json
import os
import textwrap

import numpy as np
import pytest

from parc.cli.main import main
from parc.cost import estimate as cm
from parc.language.diagnostics import ERROR
from parc.model.plan import GPU, Cluster, Link, Model, Target
from parc.model.rankmap import RankMap
from parc.rules import run_rules
from parc.targets import load_rules
from parc.planner import Problem, build_plan, search, search_problem
from parc.planner.emit import plan_text
from parc.planner.plans import Candidate
from parc.planner.search import _q, breakdown, fill_costs
from parc.planner.space import PIPELINES, RECOMPUTE, SEARCHED_RECOMPUTE, SPLITS, schedule_ok
from parc.model import schedules as S
from parc.planner.vector import schedule_ok_vec, train_costs

load_rules()   # the brute force judges plans by the targets' own rules too, as `parc check` does


# --- fixtures ----------------------------------------------------------------------------------------

def tiny_model(**kw) -> Model:
    base = dict(name="tiny", layers=4, hidden=1024, ffn_hidden=2816, heads=8, kv_heads=2, head_dim=128,
                vocab=32000, params=0, seq_len=2048)
    base.update(kw)
    m = Model(**base)
    m.params = cm.param_count(m)
    return m


def small_cluster(nodes: int, gpn: int, memory: float) -> Cluster:
    """GPUs small enough that memory decides: the bound and the full model both prune. The
    framework overheads are scaled down with the GPU (the defaults alone would fill it), not left
    out, so the search and the brute force are compared with them."""
    return Cluster("lab", nodes, gpn, GPU("small", int(memory), 100e12, 1e12), Link("nvlink", 100e9),
                   Link("infiniband", 25e9) if nodes > 1 else None, cuda_context=int(memory * 0.02),
                   nccl_buffers=int(memory * 0.005))


def h100_cluster(nodes: int) -> Cluster:
    gpu = GPU("h100_sxm", 85520809984, 989e12, 3350e9, 450e9, 64e9)
    return Cluster("h100", nodes, 8, gpu, Link("nvlink", 450e9), Link("infiniband", 50e9))


@pytest.fixture(scope="module")
def llama405():
    """The Llama 3 405B setting of Dubey et al. 2024, Table 4: 16,384 H100s, 8K tokens, 16M-token batches."""
    return search("llama3_405b", h100_cluster(2048), "train", seq_len=8192, global_batch=2048, top=10)


# --- brute force ----------------------------------------------------------------------------------

def rank_key(c: Candidate) -> tuple:
    """The search's documented order: plans within the memory headroom P405 asks for first, then
    time per sequence, memory, then the settings."""
    return (c.memory_total > 0.8 * c.memory_capacity, _q(c.step_time / c.global_batch).item(),
            _q(c.memory_total).item(), c.pp, c.virtual_stages, c.tp,
            c.cp, c.dp, c.ep, c.etp, SPLITS.index(c.layers), PIPELINES.index(c.pipeline), c.micro_batch, c.zero,
            RECOMPUTE.index(c.recompute), int(c.sequence_parallel))


def brute_train(pr: Problem, targets=()) -> list[Candidate]:
    """Every plan of the search space's grid, with no pruning: all degrees 1..world, every schedule
    and virtual stage count, every micro batch, ZeRO stage, recompute and sequence-parallel setting.
    Each is built as a Plan and kept when run_rules finds no error; estimate() costs it."""
    W, L = pr.cluster.world, pr.model.layers
    out = []
    experts = range(1, W + 1) if pr.model.is_moe else [1]
    for pp, dp, cp, tp in itertools.product(range(1, W + 1), repeat=4):
        if pp * dp * cp * tp != W:
            continue
        for ep, etp, pipe, v in itertools.product(experts, experts, PIPELINES, range(1, pr.max_virtual + 1)):
            if pp == 1 and (pipe != "1f1b" or v != 1):      # pp = 1 runs no pipeline
                continue
            if tp % etp:                                      # expert TP inside the TP group
                continue
            split = "even" if L % (pp * v) == 0 else "balanced"
            # per-op selective checkpointing (torchtitan's) only where the spec fixes it
            rcs = RECOMPUTE if "train.recompute" in pr.fixed else SEARCHED_RECOMPUTE
            for mb, zero, rc, sp in itertools.product(range(1, pr.global_batch + 1), range(4), rcs, (False, True)):
                if sp and tp == 1 and "train.sequence_parallel" not in pr.fixed:
                    continue                                  # sequence parallelism needs tp
                if any(pr.fixed.get(k, x) != x for k, x in (("train.zero", zero), ("train.recompute", rc),
                                                             ("train.sequence_parallel", sp))):
                    continue
                m = pr.global_batch // (mb * dp) if pr.global_batch % (mb * dp) == 0 else None
                c = Candidate(rank=0, pp=pp, dp=dp, cp=cp, tp=tp, ep=ep, etp=etp, pipeline=pipe,
                              virtual_stages=v, micro_batch=mb, microbatches=m, global_batch=pr.global_batch,
                              layers=split, zero=zero, recompute=rc, sequence_parallel=sp)
                plan = build_plan(pr, c)
                if any(d.severity == ERROR for d in run_rules(plan, targets)):
                    continue
                out.append(fill_costs(pr, c, plan))
    return sorted(out, key=rank_key)


BRUTE_CASES = {
    # two nodes of two GPUs: TP may not cross, memory bounds and the full model both prune
    "dense": (dict(model=tiny_model(), cluster=small_cluster(2, 2, 1.0e9), global_batch=4, max_virtual=2), ()),
    # more microbatches: the schedule rules that need the count (P202, P207, P208)
    "schedules": (dict(model=tiny_model(layers=8, seq_len=1024), cluster=small_cluster(2, 2, 2e9), global_batch=8,
                       max_virtual=3, fixed={"train.recompute": "selective", "train.sequence_parallel": True}), ()),
    # experts: ep and etp carved out of dp·cp·tp
    "moe": (dict(model=tiny_model(experts=4, top_k=2, moe_ffn_hidden=1024), cluster=small_cluster(1, 4, 2e9),
                 global_batch=4, max_virtual=2, fixed={"train.recompute": "full", "train.zero": 1}), ()),
    # target rules: Megatron-LM's interleaved groups and schedules; torch's KV split, vocab and etp
    "megatron": (dict(model=tiny_model(layers=8, kv_heads=1), cluster=small_cluster(2, 2, 2e9), global_batch=8,
                      max_virtual=2, fixed={"train.recompute": "selective"}), ("megatron",)),
    "torch": (dict(model=tiny_model(vocab=32001, kv_heads=1, tied_embeddings=True, experts=4, top_k=1,
                                    moe_ffn_hidden=512), cluster=small_cluster(1, 4, 3e9), global_batch=4,
                   max_virtual=2, fixed={"train.recompute": "full", "train.zero": 1}), ("torch",)),
    "deepspeed": (dict(model=tiny_model(layers=8), cluster=small_cluster(2, 2, 2e9), global_batch=8, max_virtual=2,
                       fixed={"train.recompute": "selective", "train.sequence_parallel": False},
                       targets={"deepspeed": Target("deepspeed", {"entrypoint": "train.py"})}), ("deepspeed",)),
}


@pytest.mark.parametrize("case", sorted(BRUTE_CASES))
def test_search_equals_brute_force(case):
    fields, targets = BRUTE_CASES[case]
    pr = Problem(mode="train", **fields)
    expected = brute_train(pr, targets)
    res = search_problem(pr, top=None, targets=targets)
    assert expected, "the case should have valid plans"
    assert [c.key() for c in res.plans] == [c.key() for c in expected]   # same set, same order
    assert res.rejected == []          # the search's own model of the rules refused nothing they accept
    assert res.valid == len(expected)
    for got, want in zip(res.plans, expected):
        assert got.step_time == pytest.approx(want.step_time, rel=1e-12)
        assert got.memory_total == want.memory_total


def test_serving_search_equals_brute_force():
    pr = Problem(model=tiny_model(layers=6, hidden=2048, ffn_hidden=5632, heads=16, kv_heads=4, vocab=32000),
                 cluster=small_cluster(2, 4, 1.2e9), mode="serve")
    pr.serve.max_model_len = 2048
    W = pr.cluster.world
    expected = []
    for pp, dp, tp in itertools.product(range(1, W + 1), repeat=3):
        if pp * dp * tp != W:
            continue
        split = "even" if pr.model.layers % pp == 0 else "balanced"
        probe = build_plan(pr, Candidate(rank=0, pp=pp, dp=dp, cp=1, tp=tp, layers=split, max_num_seqs=1))
        seqs = cm.estimate(probe, cache=False).max_concurrent_seqs
        c = Candidate(rank=0, pp=pp, dp=dp, cp=1, tp=tp, layers=split, max_num_seqs=max(1, seqs))
        plan = build_plan(pr, c)
        if seqs < 1 or any(d.severity == ERROR for d in run_rules(plan)):
            continue
        expected.append(fill_costs(pr, c, plan))
    expected.sort(key=lambda c: (-_q(c.tokens_per_second).item(), _q(c.latency).item(), _q(c.memory_total).item(),
                                 c.pp, c.tp, c.dp, c.ep, c.etp))
    res = search_problem(pr, top=None)
    assert len(expected) > 3
    assert [c.key() for c in res.plans] == [c.key() for c in expected]
    assert res.rejected == []


# --- the bulk cost model against the scalar one -------------------------------------------------

def test_inflight_and_bubble_arrays_match_the_schedule_model():
    rows = list(itertools.product(range(len(PIPELINES)), (1, 2, 3, 4, 8), (1, 2, 3, 5, 8, 16, 64), (1, 2, 3, 4),
                                  range(8)))
    pipe, p, m, v, st = (np.array(x) for x in zip(*rows))
    st = np.minimum(st, p - 1)
    got_in = S.inflight_array(pipe, p, m, v, st)
    got_bub = S.bubble_array(pipe, p, m, v)
    for i, (a, b, c, d, e) in enumerate(zip(pipe, p, m, v, st)):
        assert got_in[i] == S.inflight(PIPELINES[a], int(b), int(c), int(d), int(e))
        assert got_bub[i] == S.bubble(PIPELINES[a], int(b), int(c), int(d))


@pytest.mark.parametrize("targets", [(), ("megatron",), ("torch",)])
def test_schedule_rule_forms_agree(targets):
    pr = Problem(model=tiny_model(), cluster=small_cluster(1, 4, 1e9), global_batch=4, extra_targets=targets)
    rows = list(itertools.product(range(len(PIPELINES)), (1, 2, 3, 4, 8), range(1, 40), (1, 2, 3, 4)))
    pipe, p, n, v = (np.array(x) for x in zip(*rows))
    got = schedule_ok_vec(pr, pipe, p, n, v)
    want = [schedule_ok(pr, PIPELINES[a], int(b), int(c), int(d)) for a, b, c, d in rows]
    assert got.tolist() == want


def _candidates_from(cols, idx):
    for i in idx:
        yield Candidate(rank=0, pp=int(cols["pp"][i]), dp=int(cols["dp"][i]), cp=int(cols["cp"][i]),
                        tp=int(cols["tp"][i]), ep=int(cols["ep"][i]), etp=int(cols["etp"][i]),
                        pipeline=PIPELINES[cols["pipeline"][i]], virtual_stages=int(cols["v"][i]),
                        micro_batch=int(cols["mb"][i]), microbatches=int(cols["m"][i]),
                        global_batch=int(cols["gb"][i]), layers=SPLITS[cols["split"][i]], zero=int(cols["zero"][i]),
                        recompute=RECOMPUTE[cols["recompute"][i]], sequence_parallel=bool(cols["sp"][i])), i


@pytest.mark.parametrize("model, cluster, seq, gb", [
    ("llama3_405b", h100_cluster(2048), 8192, 2048),
    ("deepseek_moe_16b", h100_cluster(2), 4096, 64),
    ("gpt3_175b", h100_cluster(8), 2048, 512),
])
def test_bulk_costs_equal_estimate(model, cluster, seq, gb):
    from parc.planner.inputs import problem

    pr = problem(model, cluster, "train", seq_len=seq, global_batch=gb)
    cols = train_costs(pr).cols
    n = len(cols["pp"])
    assert n > 100
    idx = np.random.default_rng(7).choice(n, size=60, replace=False)
    for c, i in _candidates_from(cols, idx):
        e = cm.estimate(build_plan(pr, c), cache=False)
        assert cols["step_time"][i] == pytest.approx(e.step_time, rel=1e-9)
        assert cols["memory"][i] == pytest.approx(e.memory.total, rel=1e-9)
        assert cols["bubble"][i] == pytest.approx(e.bubble_fraction, rel=1e-9, abs=1e-15)
        assert cols["mfu"][i] == pytest.approx(e.mfu, rel=1e-9)
        assert cols["compute"][i] == pytest.approx(e.compute_time, rel=1e-9)
        for ax in ("tp", "cp", "dp", "pp", "ep"):
            assert cols[f"t_{ax}"][i] == pytest.approx(e.comm_time[ax], rel=1e-9, abs=1e-15)


def test_planner_enumerates_dualpipe_and_costs_it_as_estimate_does():
    """DualPipe candidates come out of the same kernels as `parc explain`'s estimate: each rank holds
    two stages (stage 0 of pp 2 holds both halves of Llama 3 8B, 8.03B parameters), the bubble is
    (pp/2 − 1)/(3m + pp/2 − 1), 0 on pp 2, and only even pp with an even m ≥ 2pp is tried."""
    for pp in (2, 4):
        res = search("llama3_8b", h100_cluster(2), "train", seq_len=8192, global_batch=64, top=20,
                     fixed={"schedule.pipeline": "dualpipe", "mesh.pp": pp})
        assert res.plans and {(c.pipeline, c.pp) for c in res.plans} == {("dualpipe", pp)}
        assert all(c.microbatches % 2 == 0 and c.microbatches >= 2 * pp for c in res.plans)
        for c in res.plans:
            plan = build_plan(res.problem, c)
            e = cm.estimate(plan, cache=False)
            assert c.step_time == pytest.approx(e.step_time, rel=1e-9)
            assert c.memory_total == pytest.approx(e.memory.total, rel=1e-9)
            assert e.bubble_fraction == (pp // 2 - 1) / (3 * c.microbatches + pp // 2 - 1)
            if pp == 2 and c.tp == 1:         # before ZeRO-3 sharding: the whole model, on each rank
                assert e.stages[0].layers == 32
                assert sum(cm.params_by_part(plan, 0, sharded=False).values()) == cm.param_count(plan.model)
    # unfixed, the search weighs it against the other schedules; a torch launch cannot run it (P616)
    free = search("llama3_8b", h100_cluster(2), "train", seq_len=8192, global_batch=64, top=20)
    assert "dualpipe" in {c.pipeline for c in free.plans}
    from parc.planner.space import layout_options

    torch_ = Problem(model=res.problem.model, cluster=res.problem.cluster, global_batch=64, extra_targets=("torch",))
    assert PIPELINES.index("dualpipe") in {p for p, _, _ in layout_options(res.problem, 2)}
    assert PIPELINES.index("dualpipe") not in {p for p, _, _ in layout_options(torch_, 2)}


def test_memory_bound_refuses_only_what_cannot_fit(llama405):
    """Candidates refused by the model-state bound: rebuild a sample and check estimate() agrees."""
    pr = llama405.problem
    assert llama405.candidates_evaluated > llama405.costed > llama405.valid > 0
    tc = train_costs(pr)
    assert tc.bounded == llama405.candidates_evaluated - llama405.costed
    # a plan the bound refuses: no ZeRO, no pipeline, TP 8 holds 50 GB of weights alone
    c = Candidate(rank=0, pp=1, dp=2048, cp=1, tp=8, micro_batch=1, microbatches=1, global_batch=2048, zero=0)
    assert cm.estimate(build_plan(pr, c), cache=False).memory.total > pr.cluster.gpu.memory
    cols = tc.cols
    assert not ((cols["pp"] == 1) & (cols["tp"] == 8) & (cols["zero"] == 0)).any()


# --- what it reports --------------------------------------------------------------------------------

def test_llama3_405b_prefers_tp_in_a_node_and_pp_across_nodes(llama405):
    assert len(llama405.plans) == 10
    for c in llama405.plans:
        rm = RankMap.from_sizes(8, pp=c.pp, dp=c.dp, cp=c.cp, tp=c.tp)
        # zero_bubble with 3 chunks per rank idles pp−1 of 9m + pp−1 units (its timeline), which
        # lets tp = 4 with cp = 4 tie tp = 8 within 0.2%: both keep tp inside a node
        assert c.tp in (4, 8) and rm.link("tp") == "intra_node"
        assert c.pp > 1 and rm.link("pp") == "inter_node"
        assert c.memory_total <= c.memory_capacity


def test_llama3_70b_on_four_a100s_serves_with_tp4():
    box = Cluster("a100-box", 1, 4, GPU("a100_sxm_80gb", 85899345920, 312e12, 2039e9, 300e9, 32e9),
                  Link("nvlink", 300e9))
    res = search("llama3_70b", box, "serve", seq_len=8192)
    best = res.best
    assert (best.tp, best.pp, best.dp) == (4, 1, 1)
    assert best.max_num_seqs > 1
    # pipeline stages cost latency: the same 4 GPUs as pp = 4 give each token a longer wait
    pp4 = next(c for c in res.plans if c.pp == 4)
    assert pp4.latency > best.latency and pp4.tokens_per_second < best.tokens_per_second
    assert "P501" in pp4.warnings


def test_every_reported_plan_passes_check(llama405, tmp_path):
    from parc.api import check_file

    for i, c in enumerate(llama405.plans):
        text = plan_text(llama405, i)
        r = check_file(tmp_path / f"p{i}.par", root=tmp_path, text=text)
        assert r.errors == [], text
        p, want = r.plan, build_plan(llama405.problem, c)
        assert (p.mesh.pp, p.mesh.dp, p.mesh.cp, p.mesh.tp) == (c.pp, c.dp, c.cp, c.tp)
        assert p.schedule == want.schedule
        assert p.train == want.train
        assert p.placement.layers == want.placement.layers
        assert cm.estimate(p, cache=False).step_time == pytest.approx(c.step_time, rel=1e-12)


def test_ranking_is_ordered_and_deterministic(llama405):
    cap = llama405.problem.cluster.gpu.memory
    keys = [(c.memory_total > 0.8 * cap, c.step_time / c.global_batch) for c in llama405.plans]
    assert keys == sorted(keys)
    again = search(llama405.problem, top=10)
    assert [c.key() for c in again.plans] == [c.key() for c in llama405.plans]
    cols = llama405.columns
    over = cols["memory"] > 0.8 * cap
    q = _q(cols["step_time"] / cols["gb"])
    assert (np.diff(over.astype(int)) >= 0).all()          # every plan within the headroom first
    assert (np.diff(q[over]) >= 0).all() and (np.diff(q[~over]) >= 0).all()


def test_plans_within_the_headroom_rank_before_faster_ones_above_it():
    # Llama 3 8B on 8 H100s: the fastest candidates use more than 80% of memory, where P405 says
    # runs have run out; the ranking puts every plan that leaves the headroom first
    res = search("llama3_8b", h100_cluster(1), "train", seq_len=8192, global_batch=32, top=5)
    cap = res.problem.cluster.gpu.memory
    cols = res.columns
    over = cols["memory"] > 0.8 * cap
    assert over.any() and (~over).any()
    fastest = np.argmin(cols["step_time"])
    assert over[fastest] and not over[0]                   # the fastest is above it, the first is not
    assert all(c.memory_total <= 0.8 * cap and "P405" not in c.warnings for c in res.plans)


def test_no_plan_fits_names_the_memory_and_the_nodes_that_would_fit():
    from parc.report.plan import render_text

    res = search("llama3_405b", h100_cluster(1), "train", seq_len=8192, global_batch=64, top=3)
    assert not res.plans and res.valid == 0
    # 405B parameters at 18 bytes each over the node's 8 GPUs: 913 GB per GPU at the least
    assert res.least_memory == pytest.approx(405.85e9 * 18 / 8, rel=0.01)
    assert res.fits_on_nodes == 16
    assert search("llama3_405b", h100_cluster(16), "train", seq_len=8192, global_batch=64, top=1).plans
    assert not search("llama3_405b", h100_cluster(8), "train", seq_len=8192, global_batch=64, top=1).plans
    text = render_text(res)
    assert "the leanest plan needs 913 GB per GPU" in text and "a plan fits on 16 nodes of 8 (128 GPUs)" in text


def test_breakdown_adds_up_to_the_step(llama405):
    for c in llama405.plans:
        assert sum(breakdown(c).values()) == pytest.approx(c.step_time, rel=1e-12)
    what, by = llama405.lost_on(1)
    a, b = breakdown(llama405.plans[0]), breakdown(llama405.plans[1])
    assert what == "tie" or (by > 0 and b[what] - a[what] == pytest.approx(by))


def test_records_for_notebooks(llama405):
    recs = llama405.records()
    assert len(recs) == llama405.valid
    first = recs[0]
    best = llama405.best
    assert {k: first[k] for k in ("pp", "tp", "dp", "pipeline", "virtual_stages", "micro_batch", "zero",
                                  "sequence_parallel")} == \
        {"pp": best.pp, "tp": best.tp, "dp": best.dp, "pipeline": best.pipeline,
         "virtual_stages": best.virtual_stages, "micro_batch": best.micro_batch, "zero": best.zero,
         "sequence_parallel": best.sequence_parallel}
    assert [r["rank"] for r in recs[:3]] == [1, 2, 3]
    assert first["step_time"] == pytest.approx(best.step_time, rel=1e-9)


# --- the command line -----------------------------------------------------------------------------

CLUSTER = """
cluster "pod" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}
"""


def test_cli_json(write_spec, capsys):
    cl = write_spec(CLUSTER, "pod.par")
    code = main(["plan", "--model", "llama3_8b", "--cluster", str(cl), "--global-batch", "64", "--top", "3",
                 "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["candidates_evaluated"] >= out["valid"] > 0 and out["seconds"] > 0
    plan = out["plans"][0]
    assert plan["rank"] == 1 and set(plan["mesh"]) == {"pp", "dp", "cp", "tp", "ep"}
    for key in ("virtual_stages", "micro_batch", "schedule", "zero", "recompute", "step_time", "mfu"):
        assert key in plan
    assert plan["memory_per_gpu"]["total"] <= plan["memory_per_gpu"]["capacity"]
    assert [p["rank"] for p in out["plans"]] == [1, 2, 3]


def test_cli_writes_the_best_plan(write_spec, tmp_path, capsys):
    from parc.api import check_file

    cl = write_spec(CLUSTER, "pod.par")
    out = tmp_path / "best.par"
    out.write_text("old\n")
    code = main(["plan", "--model", "llama3_8b", "--cluster", str(cl), "--global-batch", "64", "--top", "4",
                 "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "loses on" in text and "best:" in text and f"wrote {out}" in text
    r = check_file(out, root=tmp_path)
    assert r.errors == []
    assert sorted(os.listdir(tmp_path)) == ["best.par", "pod.par"]   # no temporary file left behind
    assert main(["check", str(out)]) == 0


def test_written_plan_restates_model_and_cluster_exactly(write_spec, tmp_path, capsys):
    """A model from a file (no preset) and a GPU described field by field come back equal."""
    from parc.api import load_plan
    from parc.planner.inputs import load_cluster, load_model

    mf = write_spec("""
        model "custom" {
          layers     = 12
          hidden     = 2048
          ffn_hidden = 5504
          heads      = 16
          vocab      = 50257
          seq_len    = 2048
          norm       = layernorm
          position   = learned
          bias       = true
          tied_embeddings = true
        }
        """, "model.par")
    cf = write_spec("""
        cluster "odd" {
          nodes         = 3
          gpus_per_node = 2
          gpu {
            memory        = 85520809984B
            flops         = 362.5TFLOPS
            hbm_bandwidth = 1.555TB/s
          }
          intra_node = pcie(31.5GB/s)
          inter_node = ethernet(100Gb/s)
        }
        """, "cluster.par")
    out = tmp_path / "best.par"
    assert main(["plan", "--model", str(mf), "--cluster", str(cf), "--global-batch", "12", "--top", "2",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    p = load_plan(out, root=tmp_path)
    assert p.model == load_model(str(mf))
    assert p.cluster == load_cluster(str(cf))


def test_partial_spec_keeps_what_it_gives(write_spec, capsys):
    spec = write_spec(CLUSTER + textwrap.dedent("""
        model "m" {
          from    = llama3_8b
          seq_len = 4096
        }
        mesh {
          dp = auto
          tp = 4
        }
        schedule {
          global_batch = 128
          micro_batch  = auto
        }
        train {
          zero = 1
          recompute = auto
        }
        """), "partial.par")
    code = main(["plan", str(spec), "--top", "5", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["plans"]
    for p in out["plans"]:
        assert p["mesh"]["tp"] == 4 and p["zero"] == 1 and p["global_batch"] == 128
    assert len({(p["mesh"]["pp"], p["micro_batch"], p["recompute"]) for p in out["plans"]}) > 1


def test_spec_takes_missing_blocks_from_the_command_line(write_spec, capsys):
    cl = write_spec(CLUSTER, "pod.par")
    spec = write_spec('model "m" {\n  from = llama3_70b\n}\nmesh {\n  pp = 1\n}\n', "m.par")
    code = main(["plan", str(spec), "--cluster", str(cl), "--serve", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["mode"] == "serve" and out["world_size"] == 16
    assert {p["mesh"]["pp"] for p in out["plans"]} == {1}
    assert all(p["max_num_seqs"] >= 1 and p["latency"] > 0 for p in out["plans"])


def test_cli_errors(write_spec, capsys):
    assert main(["plan"]) == 2
    assert "--model and --cluster" in capsys.readouterr().err
    cl = write_spec(CLUSTER, "pod.par")
    assert main(["plan", "--model", "llama3_8", "--cluster", str(cl)]) == 2
    assert "did you mean `llama3_8b`" in capsys.readouterr().err
    bad = write_spec('model "m" { from = llama3_8b }\nmesh { tp = 3 }\ntrain { zeroo = 1 }\n' + CLUSTER, "bad.par")
    assert main(["plan", str(bad)]) == 1
    assert "P007" in capsys.readouterr().err


def test_no_plan_fits(write_spec, capsys):
    tiny = write_spec('cluster "one" {\n  gpus_per_node = 1\n  gpu = a100_sxm_40gb\n}\n', "one.par")
    code = main(["plan", "--model", "llama3_405b", "--cluster", str(tiny), "--global-batch", "8"])
    assert code == 1
    assert "no plan fits" in capsys.readouterr().out


def test_progress_bar_only_on_a_terminal():
    from parc.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    bar = Progress(stream=quiet, after=0.0)
    bar.fraction(0.5, "costing")
    bar.close()
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = Progress(stream=tty, after=0.0)
    bar.fraction(0.5, "costing")
    assert "50%" in tty.getvalue() and "#" * 15 in tty.getvalue()
    bar.close()
    slow = Tty()
    bar = Progress(stream=slow, after=60.0)   # a search that ends within its first second draws nothing
    bar.fraction(1.0, "costing")
    assert slow.getvalue() == ""
