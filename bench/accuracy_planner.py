"""Published plans against parc's planner: for the largest published runs of the accuracy table,
the planner searches the same model on the same cluster for the same global batch (the run's
precision, framework, FP8 recipe and pipeline schedule kept, everything else searched) and the
published plan is placed in its ranking.

A published plan within 5% of the planner's best step time agrees with it. Where parc's best is
more than 5% faster, the section says why, from parc's own numbers: how far parc's prediction of
the published run is from its measurement (a plan parc already predicts too slow loses for that
reason), and the cost on which the published plan loses (compute, bubble, each axis's exposed
communication; ``SearchResult.lost_on``'s breakdown).

docs/accuracy.md's section is written by :func:`planner_section`; run alone it prints it.
"""
from __future__ import annotations

import sys
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the published plans compared: the largest runs of their groups
ROWS = ("llama3-405b-8k-8192", "llama3-405b-128k", "deepseek-v3", "megatron-h100-462b", "bridge-h100-llama31-405b",
        "narayanan-t2-530b-ptdp-2240", "torchtitan-h100-405b-3d-interleaved")
WITHIN = 0.05
KEYS = ("pp", "dp", "cp", "tp", "ep", "v", "mb", "zero", "recompute", "sp")


def _published_key(plan) -> tuple:
    from parc.planner.space import RECOMPUTE

    m, s, t = plan.mesh, plan.schedule, plan.train
    return (m.pp, m.dp, m.cp, m.tp, m.ep, s.virtual_stages, s.micro_batch, t.zero, RECOMPUTE.index(t.recompute),
            int(bool(t.sequence_parallel) and m.tp > 1))


def compare(case: dict, plan, est) -> dict:
    """The planner's search for ``plan``'s model, cluster and batch, and where the published plan
    stands in it."""
    import numpy as np

    from parc.planner.inputs import Problem
    from parc.planner.search import breakdown, search_problem
    from parc.planner.plans import Candidate

    tr = replace(plan.train, zero=0, recompute="none", sequence_parallel=False)
    # the run's pipeline schedule is kept (what its framework runs); mesh, virtual stages, micro
    # batch, ZeRO stage, recompute and sequence parallelism are searched
    pr = Problem(model=plan.model, cluster=plan.cluster, mode="train", global_batch=plan.schedule.global_batch,
                 train=tr, profile=plan.profile, fixed={"schedule.pipeline": plan.schedule.pipeline})
    res = search_problem(pr, top=1)
    out = {"case": case, "published": est.step_time, "best": None, "rank": None, "of": res.valid, "lost": None}
    if not res.plans:
        return out
    best = res.plans[0]
    out["best"], out["best_plan"] = best.step_time, best
    cols = res.columns
    want = _published_key(plan)
    hit = np.ones(len(cols["pp"]), dtype=bool)
    for k, v in zip(KEYS, want):
        hit &= cols[k] == v
    where = np.nonzero(hit & (cols["pipeline"] == _pipeline_index(plan.schedule.pipeline)))[0]
    if len(where):
        out["rank"] = int(where[0]) + 1
    pub = Candidate(rank=0, pp=plan.mesh.pp, dp=plan.mesh.dp, cp=plan.mesh.cp, tp=plan.mesh.tp,
                    step_time=est.step_time, bubble=est.bubble_fraction, compute_time=est.compute_time,
                    comm_exposed=dict(est.comm_exposed))
    a, b = breakdown(best), breakdown(pub)
    k = max(a, key=lambda x: (b[x] - a[x], x))
    out["lost"] = (k, b[k] - a[k])
    t = plan.train
    mine = {"pp": plan.mesh.pp, "dp": plan.mesh.dp, "cp": plan.mesh.cp, "tp": plan.mesh.tp,
            "v": plan.schedule.virtual_stages, "mb": plan.schedule.micro_batch, "zero": t.zero,
            "recompute": t.recompute}
    theirs = {"pp": best.pp, "dp": best.dp, "cp": best.cp, "tp": best.tp, "v": best.virtual_stages,
              "mb": best.micro_batch, "zero": best.zero, "recompute": best.recompute}
    out["differs"] = [f"{k} {mine[k]} → {theirs[k]}" for k in mine if mine[k] != theirs[k]]
    return out


def _pipeline_index(name: str) -> int:
    from parc.planner.space import PIPELINES

    return PIPELINES.index(name)


def _line(r: dict, error: float | None) -> list[str]:
    c, pub, best = r["case"], r["published"], r["best"]
    mesh = " ".join(f"{k}{v}" for k, v in c["mesh"].items() if v != 1 or k == "tp")
    if best is None:
        return [f"`{c['id']}`", mesh, "—", "no plan fits parc's estimate", ""]
    ratio = pub / best - 1
    rank = f"#{r['rank']:,} of {r['of']:,}" if r["rank"] else f"not among the {r['of']:,} that fit parc's estimate"
    b = r["best_plan"]
    bmesh = f"pp{b.pp} dp{b.dp} cp{b.cp} tp{b.tp}" + (f" ep{b.ep}" if b.ep > 1 else "") + \
        f", {b.pipeline} v{b.virtual_stages}, mb {b.micro_batch}, zero {b.zero}, {b.recompute}"
    if ratio < 0:
        why = "no plan parc finds is faster"
    elif ratio <= WITHIN:
        why = "within 5% of parc's best"
    else:
        what, by = r["lost"]
        why = f"loses {by:.2f} s a step on {what}; parc's best differs in {', '.join(r['differs'])}"
        if error is not None:
            slow = error < 0 if c["metric"] != "step_time" else error > 0
            why += (f"; parc predicts this run {abs(error):.0%} too {'slow' if slow else 'fast'} against its "
                    "measurement")
            if slow and abs(error) >= ratio:
                why += ", as much as the gap: the published plan loses for parc's error, not by being slower"
    return [f"`{c['id']}`", mesh, f"{ratio:+.1%} ({rank})", bmesh, why]


def planner_section(results: list[dict]) -> list[str]:
    """The lines of docs/accuracy.md's "Published plans against the planner" section, from the
    accuracy run's ``results`` (each with its case, plan and error)."""
    from parc.cost.estimate import estimate

    by_id = {r["case"]["id"]: r for r in results}
    rows = []
    for cid in ROWS:
        r = by_id.get(cid)
        if r is None or r["plan"] is None:
            continue
        got = compare(r["case"], r["plan"], estimate(r["plan"], cache=False))
        rows.append(_line(got, r["error"]))
    head = ["case", "published plan", "its step against parc's best", "parc's best", "why"]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(x) + " |" for x in rows]


def main() -> int:
    from bench.accuracy import CASES, run_case

    data = tomllib.loads(CASES.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as d:
        results = [run_case(c, data, Path(d)) for c in data["case"] if c["id"] in ROWS]
    print("\n".join(planner_section(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
