"""Faults around a run: no rank outlives its parent, the first rank to die is the one named,
a stopped rank ends the run within the collective timeout."""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from support.specs import spec_text  # noqa: E402
from support.timing import scaled  # noqa: E402

from parc.runtime.launch import RunFailed, prepare_env, run_function  # noqa: E402

prepare_env()

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
       "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(d))
    return out


def _wait_gone(pids, seconds: float) -> list[int]:
    end = time.time() + seconds
    while time.time() < end:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _reap(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


SLEEPERS = textwrap.dedent("""
    import os, sys, time
    from parc.runtime.launch import prepare_env, run_function
    prepare_env()
    folder = sys.argv[1]
    def fn(rank):
        with open(os.path.join(folder, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    run_function(fn, 2, timeout=600)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_no_rank_outlives_its_parent(tmp_path, sig):
    parent = subprocess.Popen([sys.executable, "-c", SLEEPERS, str(tmp_path)], env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = []
    try:
        end = time.time() + scaled(120)
        while time.time() < end and len(pids) < 2:
            pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid") if p.read_text()]
            time.sleep(0.2)
        assert len(pids) == 2, "the ranks did not start"
        parent.send_signal(sig)
        parent.wait(scaled(30))
        gone = scaled(10)
        left = _wait_gone(pids, gone)
        assert left == [], f"ranks {left} still run {gone:.0f} s after {sig.name} to their parent"
    finally:
        parent.kill()
        parent.wait()
        _reap(pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_parc_run_kills_every_rank(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    parent = subprocess.Popen([sys.executable, "-m", "parc", "run", str(spec), "--rehearse", "--steps", "100000"],
                              env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids = []
    try:
        end = time.time() + scaled(150)
        while time.time() < end and len(kids) < 2:
            kids = _children(parent.pid)
            time.sleep(0.3)
        assert len(kids) >= 2, "the ranks did not start"
        time.sleep(2)
        kids = _children(parent.pid)
        parent.kill()
        parent.wait(scaled(30))
        gone = scaled(10)
        left = _wait_gone(kids, gone)
        assert left == [], f"ranks {left} still run {gone:.0f} s after SIGKILL to parc run"
    finally:
        parent.kill()
        parent.wait()
        _reap(kids)


def test_the_first_rank_to_die_is_named_with_its_signal():
    import torch.distributed as dist

    def fn(rank):
        dist.barrier()
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()        # rank 0 waits for a peer that is gone
        time.sleep(30)

    with pytest.raises(RunFailed) as err:
        run_function(fn, 2, timeout=scaled(20), deadline=time.time() + scaled(60))
    assert err.value.rank == 1, str(err.value)
    assert "rank 1 ended with signal SIGKILL" in str(err.value)
    assert multiprocessing.active_children() == []


def test_a_stopped_rank_ends_the_run_within_the_timeout():
    import torch.distributed as dist

    timeout = 6

    def fn(rank):
        # a group other than the world group, created without a timeout as device meshes create
        # theirs: every group gets the run's timeout
        group = dist.new_group([0, 1])
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        if rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.all_reduce(t, group=group)
        return float(t)

    t0 = time.time()
    with pytest.raises(RunFailed) as err:
        run_function(fn, 2, timeout=timeout)      # no deadline: the group's timeout ends it
    took = time.time() - t0
    assert took < scaled(timeout + 30), f"took {took:.0f} s"
    assert err.value.rank == 1
    assert "rank 1 was stopped" in str(err.value)
    assert multiprocessing.active_children() == []


class _DiesBetweenLooks:
    """A rank that is alive at the launcher's first look and has failed by its second: what a
    loaded machine does to two ranks that fail at once."""

    pid = 0

    def __init__(self, *args, **kwargs):
        self.looks = 0
        self.sentinel, end = os.pipe()     # at end of file: the launcher's wait returns at once
        os.close(end)

    def start(self):
        pass

    @property
    def exitcode(self):
        self.looks += 1
        return None if self.looks == 1 else 1


def test_ranks_that_fail_between_two_looks_are_a_failure(monkeypatch, tmp_path):
    from parc.runtime import launch

    class Ctx:
        Process = _DiesBetweenLooks

        @staticmethod
        def Value(kind, value):
            return multiprocessing.Value(kind, value)

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Ctx)
    with pytest.raises(RunFailed, match="exit status 1"):
        launch._launch(2, None, str(tmp_path), "gloo", 1.0, None, None)
