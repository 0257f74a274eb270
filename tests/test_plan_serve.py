"""`parc plan --serve --objective ...`: serving deployments searched against a latency goal."""
from __future__ import annotations

import json
import textwrap

import pytest

from parc.api import check_file
from parc.cli.main import main
from parc.language.fmt import format_text
from parc.planner.inputs import load_spec, problem
from parc.planner.serve_costs import Shape
from parc.planner.serve_emit import deployment_text
from parc.planner.serve_search import Goal, search_serving, workload_goal
from parc.planner.serve_space import instance_costs

ONE_NODE = "examples/clusters/dgx-h100-1node.par"
TWO_NODES = """cluster "two-h100" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}
"""


@pytest.fixture()
def two_nodes(write_spec):
    return str(write_spec(TWO_NODES, "two.par"))


def _search(model, cluster, seq_len=4096, targets=(), **goal):
    pr = problem(model, cluster, "serve", seq_len=seq_len)
    return search_serving(pr, workload_goal(pr, **goal), targets=targets)


def test_prefill_is_the_cost_kernels_over_the_prompt():
    pr = problem("llama3_8b", ONE_NODE, "serve", seq_len=4096)
    ic = next(c for c in instance_costs(pr, Goal(prompt_tokens=1024))[0] if c.shape == Shape(tp=1))
    # Llama 3 8B, one H100 (989 TFLOP/s at gemm_efficiency 0.803, the H100's measured matmul rate; 3.35 TB/s
    # at hbm_efficiency 0.6):
    # matmul parameters per layer: attention 4096·(4096 + 1024 + 1024 + 4096) = 41,943,040,
    # SwiGLU 3·4096·14336 = 176,160,768; 32 layers: 6,979,321,856. A 1,024-token prompt fits
    # one step (vLLM's 8,192-token budget on an H100): its GEMMs 1024 · 2 · 6,979,321,856 FLOPs
    # at 1024 / (1024 + 375) of the rate (gemm_half_size 375), attention 1024 · 512 (the mean causal context) · 2 · 32
    # heads · (128 + 128) · 32 layers at FlashAttention-3's forward 62% of the peak; the weights'
    # read (16.06 GB at 2.01 TB/s, 7.99 ms) hides under the GEMMs; the norms, residual adds,
    # RoPE and SwiGLU move 188,416 bytes a token a layer at 2.01 TB/s; tp = 1 has no collective.
    assert (pr.profile.gemm_efficiency, pr.profile.gemm_half_size) == (0.803, 375)
    gemm = 1024 * 2 * 6_979_321_856 / (989e12 * 0.803 * 1024 / (1024 + 375))
    attn = 1024 * 512 * 2 * 32 * 256 * 32 / (989e12 * 0.62)
    elementwise = 1024 * 32 * 188_416 / (3350e9 * 0.6)
    assert ic.prefill(1024, 128)["alone"] == pytest.approx(gemm + attn + elementwise, rel=1e-9)
    # one decode step at one sequence reads the weights: 16,060,522,496 B / 2.01e12 B/s = 7.99 ms
    assert float(ic.batcher(1024, 128).step(1.0, 0.0)) == pytest.approx(16_060_522_496 / (3350e9 * 0.6), rel=0.02)


def test_dense_model_takes_the_fewest_gpus_the_tpot_target_allows():
    # one sequence at a time: its decode step reads every weight on its GPU. tp = 1 reads
    # 16.06 GB per token (7.99 ms at 2.01 TB/s), so a 6 ms target needs the weights halved:
    # tp = 2 (4.0 ms plus 64 small all-reduces); a 10 ms target is met by one GPU
    res = _search("llama3_8b", ONE_NODE, objective="min-gpus", concurrency=1, tpot=0.006)
    best = res.best
    assert (best.gpus, best.decode.shape, best.disaggregated) == (2, Shape(tp=2), False)
    assert best.tpot <= 0.006 and res.failed["tpot"] > 0
    loose = _search("llama3_8b", ONE_NODE, objective="min-gpus", concurrency=1, tpot=0.010).best
    assert (loose.gpus, loose.decode.shape) == (1, Shape(tp=1))
    assert 0.0079 < loose.tpot < 0.010


def test_moe_model_spreads_its_experts_over_the_fewest_gpus_that_hold_them():
    # Mixtral 8x7B holds 46.7B parameters, 93.4 GB in bf16: more than 0.9 of an H100's 85.5 GB,
    # so no one-GPU engine loads it; two GPUs hold about half each (the experts, 45 of the 46.7B,
    # split between them; attention, 1.3B, split or copied) with room for KV. At 8 requests and a
    # 50 ms TPOT the fewest GPUs are 2, in one pipeline stage: a 2-stage pipeline passes each
    # token through both GPUs one after the other and ranks behind
    from parc.cost.estimate import param_count
    from parc.planner.inputs import load_model

    total = 2 * param_count(load_model("mixtral_8x7b"))
    res = _search("mixtral_8x7b", ONE_NODE, objective="min-gpus", concurrency=8, tpot=0.05)
    best = res.best
    assert total > 0.9 * 85_520_809_984 and best.gpus == 2 and best.decode.shape.pp == 1
    assert total / 2 <= best.decode.weights < 0.53 * total
    assert res.failed["memory"] >= 1          # the one-GPU layouts
    assert all(d.gpus >= 2 for d in res.plans)
    pp2 = [d for d in res.plans if d.decode.shape.pp == 2 and d.gpus == 2]
    assert pp2 and all(d.tpot > best.tpot for d in pp2)


def test_objectives_move_the_choice_their_way(two_nodes):
    goal = dict(concurrency=64, tpot=0.02, ttft=2.0, prompt_tokens=4000, output_tokens=32)
    few = _search("llama3_8b", two_nodes, seq_len=8192, objective="min-gpus", **goal).best
    rich = _search("llama3_8b", two_nodes, seq_len=8192, objective="tokens-per-gpu", **goal).best
    assert few.gpus <= rich.gpus and rich.tokens_per_gpu >= few.tokens_per_gpu
    assert (few.gpus, rich.tokens_per_gpu) != (rich.gpus, few.tokens_per_gpu)   # not the same plan
    tighter = _search("llama3_8b", two_nodes, seq_len=8192, objective="min-gpus",
                      **{**goal, "tpot": 0.012}).best
    assert tighter.gpus >= few.gpus and tighter.tpot <= 0.012


def test_pools_win_when_prefills_stall_decoding(two_nodes):
    # 4,000-token prompts and 32-token answers: one mesh prefills every request of its ranks
    # between their decode steps, so each output token also waits (b − 1)·t_prefill / 32; pools
    # keep decode steps clean and need fewer GPUs for the same TPOT
    goal = dict(objective="min-gpus", concurrency=64, tpot=0.02, ttft=2.0, prompt_tokens=4000, output_tokens=32)
    both = _search("llama3_8b", two_nodes, seq_len=8192, **goal)
    one = _search("llama3_8b", two_nodes, seq_len=8192, disaggregate=False, **goal)
    assert both.best.disaggregated and both.best.gpus < one.best.gpus
    # one mesh: the mean step mixes prompt chunks in, above a decode-only step of its batch; a
    # decode pool's step is decode only
    c = one.best
    assert c.tpot > 1.2 * float(c.decode.batcher(4000, 32).step(c.batch, 0.0))
    p = both.best
    assert p.tpot == pytest.approx(float(p.decode.batcher(4000, 32).step(p.batch, 0.0)), rel=0.03)


def test_written_specs_check_clean_and_round_trip(two_nodes):
    res = _search("llama3_8b", two_nodes, seq_len=8192, objective="min-gpus", concurrency=64, tpot=0.02,
                  ttft=2.0, prompt_tokens=4000, output_tokens=32)
    assert any(d.disaggregated for d in res.plans) and len(res.plans) >= 3
    for d in res.plans:
        text = deployment_text(res.problem, res.goal, d)
        assert format_text(text, "best.par") == text
        r = check_file("best.par", text=text)
        assert r.errors == [], text
        plan = r.plan
        assert plan.serve.concurrency == 64 and plan.serve.prompt_tokens == 4000
        if d.disaggregated:
            pools = {p.name: p for p in plan.pools}
            for name, ic, n in (("prefill", d.prefill, d.prefill_instances), ("decode", d.decode, d.instances)):
                assert pools[name].instances == n
                assert (pools[name].mesh.tp, pools[name].mesh.pp, pools[name].mesh.dp) == \
                    (ic.shape.tp, ic.shape.pp, ic.shape.dp)
            assert plan.world_size == d.gpus
        else:
            assert plan.world_size == d.gpus and plan.mesh.dp == d.instances


def test_the_spec_targets_judge_every_reported_plan(write_spec):
    spec = write_spec(f"""
        model "m" {{
          from = mixtral_8x7b
        }}
        {textwrap.indent(open(ONE_NODE).read(), '        ').strip()}
        serve {{
          max_model_len = 4096
        }}
        target vllm {{
          model = "mistralai/Mixtral-8x7B-v0.1"
        }}
        """, "partial.par")
    pr = load_spec(str(spec))
    res = search_serving(pr, workload_goal(pr, "tokens-per-gpu", concurrency=32))
    assert res.plans
    for d in res.plans:
        text = deployment_text(res.problem, res.goal, d)
        assert "target vllm" in text
        r = check_file(str(spec.parent / "best.par"), text=text)
        assert r.errors == [], text


def test_cli_writes_the_best_deployment(two_nodes, tmp_path, capsys):
    out = tmp_path / "best.par"
    code = main(["plan", "--model", "llama3_8b", "--cluster", two_nodes, "--serve", "--seq-len", "8192",
                 "--objective", "min-gpus", "--ttft", "2s", "--tpot", "20ms", "--concurrency", "64",
                 "--prompt-tokens", "4000", "--output-tokens", "32", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "best: prefill" in text and "miss the TPOT target" in text
    assert check_file(str(out)).errors == []
    code = main(["plan", "--model", "llama3_8b", "--cluster", two_nodes, "--serve", "--objective", "tokens-per-gpu",
                 "--tpot", "50ms", "--format", "json"])
    got = json.loads(capsys.readouterr().out)
    assert code == 0 and got["objective"] == "tokens-per-gpu" and got["plans"][0]["tpot"] <= 0.05
    assert got["workload"]["prompt_tokens"] == 1024 and got["workload"]["output_tokens"] == 128


def test_an_unreachable_goal_names_the_closest_deployment(capsys):
    code = main(["plan", "--model", "llama3_8b", "--cluster", ONE_NODE, "--serve", "--objective", "min-gpus",
                 "--tpot", "1ms", "--concurrency", "4"])
    text = capsys.readouterr().out
    # no GPU count reads 16 GB of weights in 1 ms: 8 GPUs read 2 GB each, 1.0 ms at 2.01 TB/s
    # before their all-reduces
    assert code == 1 and "no deployment meets TPOT ≤ 1.0ms" in text
    assert "closest: 1 × [tp=8]" in text and "× the target" in text
    main(["plan", "--model", "llama3_8b", "--cluster", ONE_NODE, "--serve", "--objective", "min-gpus",
          "--tpot", "1ms", "--concurrency", "4", "--format", "json"])
    got = json.loads(capsys.readouterr().out)
    assert got["plans"] == [] and got["closest"]["decode"]["tp"] == 8


def test_cli_usage_errors(capsys):
    assert main(["plan", "--model", "llama3_8b", "--cluster", ONE_NODE, "--objective", "min-gpus"]) == 2
    assert "for --serve" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3_8b", "--cluster", ONE_NODE, "--serve", "--objective", "min-gpus"]) == 2
    assert "needs a concurrency" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3_8b", "--cluster", ONE_NODE, "--serve", "--tpot", "fast"]) == 2
    assert "'fast' is not a time" in capsys.readouterr().err


def test_dcp_layouts_are_kept_only_where_they_hold_more_kv():
    # decode context parallelism splits the KV cache over the tp group; a layout with dcp > 1 is
    # worth costing further only if the cost model gives it more tokens of KV cache than the
    # same layout with dcp = 1 (DeepSeek-V3's MLA cache is replicated on every tp rank)
    pr = problem("deepseek_v2_lite", ONE_NODE, "serve", seq_len=8192)
    costs, _ = instance_costs(pr, Goal())
    by_shape = {ic.shape: ic for ic in costs}
    assert any(s.dcp == 1 and s.tp > 1 for s in by_shape)
    for s, ic in by_shape.items():
        if s.dcp > 1:
            twin = by_shape[Shape(tp=s.tp, pp=s.pp, dp=s.dp, ep=s.ep)]
            assert ic.kv_capacity_tokens > twin.kv_capacity_tokens


@pytest.mark.parametrize("disaggregate", [True, False])
def test_explain_gives_every_reported_plan_the_planners_latencies(two_nodes, disaggregate):
    # one model of requests over time (parc.cost.scheduler): the spec the planner writes for a
    # deployment, explained, has the TTFT, TPOT and output tokens/s the planner reports
    from parc.cost.estimate import estimate
    from parc.cost.serving import serve_numbers

    res = _search("llama3_8b", two_nodes, seq_len=8192, objective="min-gpus", concurrency=64, tpot=0.02,
                  ttft=2.0, prompt_tokens=4000, output_tokens=32, disaggregate=disaggregate)
    assert res.plans and all(d.disaggregated == disaggregate for d in res.plans)
    for d in res.plans:
        plan = check_file("best.par", text=deployment_text(res.problem, res.goal, d)).plan
        n = serve_numbers(plan, estimate(plan))
        assert (n.ttft, n.tpot, n.output_tokens_per_s) == pytest.approx((d.ttft, d.tpot, d.throughput), rel=1e-9)
