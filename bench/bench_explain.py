"""Cost-model performance: `parc check` + `parc explain --format json` in process, and the rank map.

Targets:
* check + explain (JSON) of a 16,384-GPU spec, in process: median <= 20 ms;
* explain (JSON) of a serving plan with the scheduler model (examples/deepseek-v3-pd.par, two
  pools, examples/llama3-70b-serve.par, one mesh, and examples/llama3-70b-trtllm.par, TensorRT-LLM's
  admission), in process: median <= 20 ms each;
* the rank map of a 131,072-GPU cluster: <= 200 ms.

Each figure is printed beside what it builds on (check alone; a bare numpy arange over the
same ranks), so a regression shows as a ratio as well as a time.

Run: python bench/bench_explain.py [--runs 30]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC_16K = '''
# Llama-3 405B pre-training on 2048 nodes of 8×H100 (16,384 GPUs)
model "llama3-405b" {
  from    = llama3_405b
  seq_len = 8192
}

cluster "h100-16k" {
  nodes         = 2048
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}

mesh {
  pp = 16
  dp = auto
  cp = 1
  tp = 8
}

placement {
  tp on intra_node
  layers = balanced
}

schedule {
  pipeline       = interleaved_1f1b
  virtual_stages = 2
  micro_batch    = 1
  global_batch   = 2048
}

train {
  zero              = 1
  sequence_parallel = true
  recompute         = full
}
'''


def median_times(fn, runs: int) -> tuple[float, float]:
    """(median wall, median CPU) seconds of ``fn``: on a machine other work shares, the CPU time
    is the figure that compares across runs."""
    fn()  # warm: parser tables, numpy import
    walls, cpus = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def median_time(fn, runs: int) -> float:
    return median_times(fn, runs)[0]


def bench_explain(runs: int) -> None:
    from parc.api import check_file
    from parc.report.explain import render_text as render
    from parc.cost.estimate import estimate

    d = Path(tempfile.mkdtemp())
    spec = d / "h100-16k.par"
    spec.write_text(SPEC_16K)
    r = check_file(spec, root=d)
    assert r.ok, [x.message for x in r.errors]
    assert r.plan.world_size == 16384

    def check_only():
        check_file(spec, root=d)

    def check_explain_json():
        res = check_file(spec, root=d)
        json.dumps(estimate(res.plan).to_json())

    def check_explain_text():
        res = check_file(spec, root=d)
        render(res.plan, estimate(res.plan), str(spec))

    def estimate_only():
        estimate(r.plan, cache=False)

    t_check, c_check = median_times(check_only, runs)
    t_json, c_json = median_times(check_explain_json, runs)
    t_text = median_time(check_explain_text, runs)
    t_est = median_time(estimate_only, runs)
    print(f"16,384-GPU spec, median of {runs} (in process):")
    print(f"  check alone                  {t_check * 1e3:7.2f} ms")
    print(f"  check + explain --format json {t_json * 1e3:6.2f} ms   (target <= 20 ms; "
          f"{t_json / t_check:.2f}x check alone)")
    print(f"     CPU: check {c_check * 1e3:.2f} ms, check + explain --format json {c_json * 1e3:.2f} ms "
          f"(target <= 20 ms: {'ok' if c_json <= 0.020 else 'MISSED'})")
    print(f"  check + explain (text)       {t_text * 1e3:7.2f} ms")
    print(f"  estimate() alone, uncached   {t_est * 1e3:7.2f} ms")


def bench_serving(runs: int) -> None:
    """explain of serving plans: the estimate and its serving numbers (the step model and the
    scheduler's closed form), uncached, beside check alone."""
    from parc.api import check_file
    from parc.cost.estimate import estimate

    print(f"serving plans with the scheduler model, median of {runs} (in process):")
    for name in ("deepseek-v3-pd.par", "llama3-70b-serve.par", "deepseek-v3-wide-ep.par", "llama3-70b-trtllm.par"):
        spec = ROOT / "examples" / name
        plan = check_file(spec).plan

        def check_only():
            check_file(spec)

        def explain_json():
            json.dumps(estimate(plan, cache=False).to_json())

        t_check, t_explain = median_time(check_only, runs), median_times(explain_json, runs)
        print(f"  {name:<26} explain --format json {t_explain[0] * 1e3:6.2f} ms   (target <= 20 ms; "
              f"{t_explain[0] / t_check:.2f}x check alone, {t_check * 1e3:.2f} ms); CPU {t_explain[1] * 1e3:.2f} ms")


def bench_rankmap(runs: int) -> None:
    import numpy as np

    from parc.model.rankmap import RankMap

    sizes = dict(pp=16, dp=128, cp=8, tp=8)
    world = 16 * 128 * 8 * 8

    def closed_form():   # what the topology rules and explain use
        rm = RankMap.from_sizes(8, ep=64, etp=1, **sizes)
        for ax in ("pp", "dp", "cp", "tp", "ep", "etp"):
            rm.nodes_spanned(ax)
        rm.summary()

    def all_groups():    # every group of every axis as arrays, node counts from them
        rm = RankMap.from_sizes(8, ep=64, etp=1, **sizes)
        for ax in ("pp", "dp", "cp", "tp", "ep", "etp", ("dp", "cp")):
            rm.groups(ax)
        rm.node_of(np.arange(world))
        rm.coords(np.arange(world))

    def baseline():      # one pass over every rank: the floor for anything per rank
        np.arange(world, dtype=np.int64) // 8

    t_closed = median_time(closed_form, runs)
    t_groups = median_time(all_groups, runs)
    t_base = median_time(baseline, runs)
    print(f"131,072-GPU rank map (pp=16 dp=128 cp=8 tp=8, ep=64), median of {runs}:")
    print(f"  closed form (nodes spanned, links, summary) {t_closed * 1e3:8.3f} ms   (target <= 200 ms)")
    print(f"  every group, node and coordinate as arrays  {t_groups * 1e3:8.3f} ms   "
          f"({t_groups / t_base:.1f}x one numpy pass over the ranks, {t_base * 1e3:.3f} ms)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    bench_explain(args.runs)
    bench_serving(args.runs)
    bench_rankmap(args.runs)


if __name__ == "__main__":
    main()
