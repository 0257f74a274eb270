"""Failures end runs promptly with the failing rank's own message; checkpoints reshard exactly."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from support.specs import load, spec_text  # noqa: E402
from support.timing import scaled  # noqa: E402

from parc.runtime import shrink  # noqa: E402
from parc.runtime.launch import Job, RunFailed, prepare_env, run_forked  # noqa: E402
from parc.runtime.options import Options  # noqa: E402

prepare_env()


def _plan(tmp_path, name, world, mesh, **kw):
    return shrink.rehearse(load(tmp_path, name, spec_text(world, mesh, **kw)))


def test_a_rank_that_raises_stops_every_rank_with_its_message(tmp_path):
    plan = _plan(tmp_path, "fault", 4, "dp = 2\n  tp = 2", zero=3)
    # rank 2 raises after its backward; the others wait for it in the gradient reduction
    collective = scaled(30)   # the timeout the others would wait for, were they not stopped
    opts = Options(steps=2, optimizer="sgd", timeout=collective, fault="2:1")
    t0 = time.time()
    with pytest.raises(RunFailed) as err:
        run_forked([Job(plan, opts)], deadline=time.time() + 3 * collective)
    took = time.time() - t0
    assert err.value.rank == 2
    assert "rank 2 failed: injected fault on rank 2 at step 1" in str(err.value)
    assert took < collective, f"took {took:.1f}s: the other ranks waited for the collective timeout"
    assert multiprocessing.active_children() == []


def test_a_run_past_its_deadline_is_stopped(tmp_path):
    plan = _plan(tmp_path, "slow", 2, "dp = 2")
    # rank 1 never reaches the gradient reduction within the deadline
    slow = scaled(30)
    opts = Options(steps=1, optimizer="sgd", timeout=2 * slow,
                   hooks={"after_build": lambda rk: time.sleep(slow) if rk.meshes.rank == 1 else None})
    t0 = time.time()
    with pytest.raises(RunFailed, match="deadline"):
        run_forked([Job(plan, opts)], deadline=time.time() + 4)
    assert time.time() - t0 < scaled(15)
    assert multiprocessing.active_children() == []


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _save_final(path):
    def hook(rk, step):
        if step != rk.opts.steps:
            return
        full = {n: _full(p.detach()).clone() for n, p in rk.named_parameters()}
        if rk.meshes.rank == 0:
            torch.save(full, path)
    return hook


def _check_loaded(path, seen_dir):
    def hook(rk):
        saved = torch.load(path)
        names = []
        for n, p in rk.named_parameters():
            full = _full(p.detach())
            if not torch.equal(full, saved[n]):
                raise AssertionError(f"{n} differs after loading (max {float((full - saved[n]).abs().max())})")
            names.append(n)
        open(os.path.join(seen_dir, f"rank{rk.meshes.rank}"), "w").write("\n".join(names))
    return hook


def test_checkpoint_saved_under_tp2_loads_bitwise_under_other_plans(tmp_path):
    ck = tmp_path / "ck"
    final = str(tmp_path / "final.pt")
    a = _plan(tmp_path, "a", 2, "tp = 2", sp=True)
    rep = run_forked([Job(a, Options(steps=1, optimizer="sgd", checkpoint=str(ck),
                                     hooks={"after_step": _save_final(final)}))],
                     deadline=time.time() + scaled(120))[0]
    assert rep["checkpoint"]["step"] == 1 and (ck / ".metadata").is_file()
    saved = torch.load(final)

    # the same weights, read back in one process without any process group
    from parc.runtime.model import Config, Transformer

    full = Transformer(Config.from_model(a.model))
    state = full.state_dict()
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load({"model": state}, checkpoint_id=str(ck), no_dist=True)
    for n, t in saved.items():
        assert torch.equal(state[n], t), n

    jobs, seen = [], []
    for name, mesh, kw in [("tp4", "tp = 4", {}), ("dp2tp2", "dp = 2\n  tp = 2", dict(zero=3)),
                           ("pp2dp2", "pp = 2\n  dp = 2", dict(schedule="pipeline = 1f1b"))]:
        d = tmp_path / f"ck-{name}"
        shutil.copytree(ck, d)
        s = tmp_path / f"seen-{name}"
        s.mkdir()
        seen.append(s)
        plan = _plan(tmp_path, name, 4, mesh, **kw)
        assert plan.model == a.model      # rehearsals of these plans have the same shapes
        jobs.append(Job(plan, Options(steps=1, optimizer="sgd", checkpoint=str(d),
                                      hooks={"after_load": _check_loaded(final, str(s))})))
    reps = run_forked(jobs, deadline=time.time() + scaled(180))
    for rep, s in zip(reps, seen):
        assert rep["resumed"]["step"] == 1
        assert rep["checkpoint"]["step"] == 2
        loaded = set()
        for f in s.iterdir():
            loaded |= set(f.read_text().split())
        assert loaded == set(saved), "every parameter was loaded on some rank"


def test_resumed_run_verifies_against_the_checkpoint(tmp_path):
    from parc.runtime.run import run_plan

    ck = str(tmp_path / "ck")
    a = load(tmp_path, "a", spec_text(2, "tp = 2"))
    b = load(tmp_path, "b", spec_text(2, "pp = 2", schedule="pipeline = gpipe"))
    first = run_plan(a, Options(steps=2, optimizer="sgd", checkpoint=ck), rehearse=True, progress=False,
                     deadline_s=scaled(120))
    assert first["checkpoint"]["step"] == 2
    rep = run_plan(b, Options(steps=1, optimizer="sgd", checkpoint=ck, verify=True), rehearse=True,
                   progress=False, deadline_s=scaled(120))
    assert rep["resumed"]["step"] == 2 and [s["step"] for s in rep["steps"]] == [3]
    assert rep["verify"]["passed"], rep["verify"]
