"""Every parallel axis against the single-process reference, on forked CPU ranks (gloo).

Each plan is rehearsed (shrunk), its reference computed once in this process, and the plans of
one world size run one after another in one set of forked ranks. For every plan: the losses,
gradients and parameters after a few SGD steps equal the reference's; every rank holds exactly
the parameter bytes that ``parc explain``'s cost model predicts; the pipeline schedule executes
exactly the action order of parc's schedule model.
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from parc.model import schedules  # noqa: E402
from parc.runtime import reference as R  # noqa: E402
from parc.runtime import shrink  # noqa: E402
from parc.runtime.launch import Job, prepare_env, run_forked  # noqa: E402
from parc.runtime.options import Options  # noqa: E402
from support.specs import GPT, MOE, load, spec_text  # noqa: E402
from support.timing import scaled  # noqa: E402

prepare_env()

STEPS = 2
DEADLINE_S = 240

PIPES = {"gpipe": "pipeline = gpipe", "1f1b": "pipeline = 1f1b",
         "interleaved": "pipeline = interleaved_1f1b\n  virtual_stages = 2",
         "zbv": "pipeline = zero_bubble\n  virtual_stages = 2",
         "zb_interleaved": "pipeline = zero_bubble\n  virtual_stages = 3",
         "dualpipe_v": "pipeline = dualpipe_v\n  virtual_stages = 2"}

MATRIX = {
    "dp2-fsdp": (2, "dp = 2", dict(zero=3)),
    "dp2-zero1": (2, "dp = 2", dict(zero=1)),
    "dp2-zero2": (2, "dp = 2", dict(zero=2)),
    "tp2": (2, "tp = 2", {}),
    "tp2-sp": (2, "tp = 2", dict(sp=True)),
    "tp4": (4, "tp = 4", {}),
    "tp4-sp": (4, "tp = 4", dict(sp=True)),
    **{f"pp2-{k}": (2, "pp = 2", dict(schedule=v)) for k, v in PIPES.items() if k != "zb_interleaved"},
    "pp2-zb_interleaved": (2, "pp = 2", dict(schedule=PIPES["zb_interleaved"], layers=12)),
    **{f"pp4-{k}": (4, "pp = 4", dict(schedule=v)) for k, v in PIPES.items() if k != "zb_interleaved"},
    "ep2-top2": (2, "dp = 2\n  ep = 2", dict(model=MOE)),
    "ep4-top2-fsdp": (4, "dp = 4\n  ep = 4", dict(model=MOE, zero=3)),
    "cp2": (2, "cp = 2", {}),
    "cp2-dp2-fsdp": (4, "dp = 2\n  cp = 2", dict(zero=3)),
    # ZeRO-3 shards over the flattened dp·cp mesh in the mesh's order
    "order-cp-dp-fsdp": (4, "cp = 2\n  dp = 2", dict(zero=3)),
    "pp2-dp2-tp2-1f1b": (8, "pp = 2\n  dp = 2\n  tp = 2", dict(zero=3, sp=True, schedule=PIPES["1f1b"])),
    "pp2-dp2-tp2-interleaved": (8, "pp = 2\n  dp = 2\n  tp = 2",
                                dict(zero=3, sp=True, schedule=PIPES["interleaved"], layers=16)),
    "dp2-tp2-ep2-moe": (4, "dp = 2\n  tp = 2\n  ep = 2", dict(model=MOE + "\n  shared_experts = 1", zero=3)),
    "dp2-tp2-sp-ep2-moe-zero1": (4, "dp = 2\n  tp = 2\n  ep = 2",
                                 dict(model=MOE + "\n  moe_every = 2", zero=1, sp=True)),
    "dp4-ep2-etp2-moe-fsdp": (4, "dp = 4\n  ep = 2\n  etp = 2", dict(model=MOE + "\n  bias = true", zero=3)),
    "dp4-ep2-uneven-experts-fsdp": (4, "dp = 4\n  ep = 2",
                                    dict(model="experts = 2\n  top_k = 1\n  moe_ffn_hidden = 1024", zero=3)),
    "gpt-style-cp2-tp2-sp": (4, "cp = 2\n  tp = 2", dict(sp=True, model=GPT)),
    # axis orders other than pp, dp, cp, tp (ranks follow the spec's order)
    "order-tp-dp-fsdp-sp": (4, "tp = 2\n  dp = 2", dict(zero=3, sp=True)),
    "order-dp-pp": (4, "dp = 2\n  pp = 2", dict(zero=3, schedule=PIPES["1f1b"])),
    "serve-pp2-tp2": (4, "pp = 2\n  tp = 2", dict(serve=True, global_batch=8)),
    # data-parallel attention with the experts over all dp · tp GPUs (SGLang's and vLLM's wide EP)
    "serve-dp2-tp2-ep4-dp-attention": (4, "dp = 2\n  tp = 2\n  ep = 4",
                                       dict(serve="dp_attention = true", model=MOE, global_batch=8)),
    "tp2-tied": (2, "tp = 2", dict(tied=True)),
    "pp2-tied": (2, "pp = 2", dict(tied=True, schedule=PIPES["1f1b"])),
    "pp2-dualpipe_v-tied-zero1": (4, "pp = 2\n  dp = 2", dict(tied=True, zero=1, schedule=PIPES["dualpipe_v"])),
    # loop placement: the tied copies sit on two ranks, and ZeRO-1/2 keep a gradient on its owner only
    "pp2-dp2-tied-zero1": (4, "pp = 2\n  dp = 2", dict(tied=True, zero=1, schedule=PIPES["1f1b"])),
    "pp2-dp2-tied-zero2": (4, "pp = 2\n  dp = 2", dict(tied=True, zero=2, schedule=PIPES["1f1b"])),
}

# a reference computed from another seed: verification must fail (the comparison can fail)
WRONG = "dp2-zero1"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matrix")
    jobs: dict[int, list[tuple[str, Job]]] = {}
    for name, (world, mesh, kw) in MATRIX.items():
        plan = shrink.rehearse(load(tmp, name, spec_text(world, mesh, **kw)))
        opts = Options(steps=STEPS, verify=True, optimizer="sgd", timeout=60)
        ref = R.compute(plan, STEPS, opts.seed, "sgd", opts.learning_rate(plan))
        jobs.setdefault(world, []).append((name, Job(plan, opts, ref)))
        if name == WRONG:
            bad = R.compute(plan, STEPS, opts.seed + 1, "sgd", opts.learning_rate(plan))
            jobs[world].append(("wrong-reference", Job(plan, opts, bad)))
    out = {}
    for world in sorted(jobs):
        names = [n for n, _ in jobs[world]]
        got = run_forked([j for _, j in jobs[world]], deadline=time.time() + scaled(DEADLINE_S))
        out.update({n: (j.plan, r) for n, (_, j), r in zip(names, jobs[world], got)})
    return out


@pytest.mark.parametrize("name", list(MATRIX))
def test_matches_single_process(reports, name):
    plan, rep = reports[name]
    v = rep["verify"]
    assert v["ran"]
    assert v["max_loss_diff"] <= R.LOSS_ATOL
    assert v["max_param_diff"] <= R.PARAM_ATOL
    assert v["passed"], v
    assert len(rep["steps"]) == STEPS
    assert rep["world_size"] == MATRIX[name][0] == len(rep["ranks"])


@pytest.mark.parametrize("name", list(MATRIX))
def test_param_bytes_equal_cost_model(reports, name):
    plan, rep = reports[name]
    for r in rep["ranks"]:
        assert r["param_bytes"] == r["predicted_param_bytes"], (name, r)
    assert all(r["param_bytes"] > 0 for r in rep["ranks"])


@pytest.mark.parametrize("name", [n for n in MATRIX if "pp" in MATRIX[n][1] and not MATRIX[n][2].get("serve")])
def test_executed_schedule_equals_schedule_model(reports, name):
    plan, rep = reports[name]
    s = plan.schedule
    want = schedules.actions(s.pipeline, plan.mesh.pp, s.microbatches, s.virtual_stages)
    got = rep["actions"]
    assert got == {str(r): [str(a) for a in acts] for r, acts in enumerate(want)}


def test_serving_runs_forward_passes_only(reports):
    plan, rep = reports["serve-pp2-tp2"]
    assert plan.mode == "serve"
    m = plan.schedule.microbatches
    assert rep["actions"] == {str(r): [f"{r}F{i}" for i in range(m)] for r in range(2)}
    assert rep["verify"]["max_param_diff"] == 0.0          # nothing trains


def test_verification_fails_against_a_different_reference(reports):
    _, rep = reports["wrong-reference"]
    assert rep["verify"]["ran"] and not rep["verify"]["passed"]
    assert rep["verify"]["max_loss_diff"] > 1e-3


def test_report_has_the_contract_keys(reports):
    _, rep = reports["pp2-dp2-tp2-1f1b"]
    assert {"world_size", "mesh", "rehearsal", "steps", "ranks", "verify"} <= set(rep)
    assert {"pp", "dp", "cp", "tp", "ep"} <= set(rep["mesh"])
    assert rep["rehearsal"] is True
    assert set(rep["steps"][0]) >= {"step", "loss", "seconds"}
    r = rep["ranks"][5]
    assert set(r) >= {"rank", "coords", "param_bytes", "predicted_param_bytes", "peak_memory_bytes"}
    assert r["coords"] == {"pp": 1, "dp": 0, "cp": 0, "tp": 1}     # rank 5 = pp1·dp0·tp1
    assert set(rep["verify"]) >= {"ran", "passed", "max_loss_diff", "max_grad_diff", "max_param_diff"}
