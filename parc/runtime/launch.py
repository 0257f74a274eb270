"""Launching ranks: forked local processes for rehearsals, torchrun's environment for real runs.

Forked ranks rendezvous through a FileStore in a private folder (no ports). Each rank writes its
error (message and traceback) to that folder before it exits; the parent watches every child,
and as soon as one fails it stops the others (SIGTERM, then SIGKILL) and reports that rank's
message. A run that outlives its deadline is stopped the same way. The parent never leaves a
child behind.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

from ..compiler.plan import Plan


class RunFailed(Exception):
    """A run that failed on some rank: ``rank`` and the rank's own ``message``."""

    def __init__(self, message: str, rank: Optional[int] = None, detail: str = ""):
        super().__init__(message)
        self.rank, self.message, self.detail = rank, message, detail


def prepare_env(fork: bool = True) -> None:
    """Before torch is imported: for forked ranks one intra-op thread each (forking after the
    thread pool started hangs the children, and ranks share the cores), loopback for gloo."""
    if fork:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo" if sys.platform.startswith("linux") else "lo0")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def quiet() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    for name in ("torch.distributed", "torch.distributed.tensor._redistribute",
                 "torch.distributed.pipelining", "torch.distributed.checkpoint"):
        logging.getLogger(name).setLevel(logging.ERROR)


@dataclass
class Job:
    plan: Plan
    opts: object                      # engine.Options
    reference: object = None          # reference.Reference, computed once in the parent


def _child(rank: int, world: int, body, folder: str, backend: str, timeout: float, counter) -> None:
    code = 0
    try:
        import torch

        torch.set_num_threads(1)
        quiet()
        from . import mesh as M

        M.init_process_group(backend, rank, world, timeout, store_path=os.path.join(folder, "store"))

        def progress(step):
            if counter is not None and rank == 0:
                with counter.get_lock():
                    counter.value += 1

        body(rank, folder, progress)
        M.shutdown()     # only after success: a failing rank must not wait in a barrier
    except BaseException as e:  # noqa: BLE001 - every failure goes to the parent
        _write_json(os.path.join(folder, f"error-{rank}.json"),
                    {"rank": rank, "time": time.time(), "type": type(e).__name__, "message": str(e),
                     "traceback": traceback.format_exc()})
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _launch(world: int, body, folder: str, backend: str, timeout: float, deadline: Optional[float],
            on_progress: Optional[Callable[[int], None]]) -> None:
    """Fork ``world`` ranks running ``body(rank, folder, progress)``; stop them all at the first
    failure or at the deadline and raise :class:`RunFailed`."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    counter = ctx.Value("i", 0)
    procs = [ctx.Process(target=_child, args=(r, world, body, folder, backend, timeout, counter), daemon=False)
             for r in range(world)]
    for p in procs:
        p.start()
    failed = None
    seen = 0
    try:
        while True:
            alive = [p for p in procs if p.exitcode is None]
            if on_progress is not None and counter.value != seen:
                seen = counter.value
                on_progress(seen)
            if any(p.exitcode not in (None, 0) for p in procs):
                failed = "error"
                break
            if not alive:
                break
            if deadline is not None and time.time() > deadline:
                failed = "timeout"
                break
            mp.connection.wait([p.sentinel for p in alive], timeout=0.1)
    finally:
        _stop(procs)
    if failed is not None:
        raise _failure(folder, procs, failed)


def run_forked(jobs: list[Job], backend: str = "gloo", deadline: Optional[float] = None,
               on_progress: Optional[Callable[[int], None]] = None) -> list[dict]:
    """Run one or more plans (same world size) in one set of forked ranks; a report per plan."""
    world = jobs[0].plan.world_size
    if any(j.plan.world_size != world for j in jobs):
        raise ValueError("every plan of one launch needs the same world size")

    def body(rank, folder, progress):
        from . import engine

        for i, job in enumerate(jobs):
            rep = engine.run_rank(job.plan, job.opts, job.reference, progress)
            if rep is not None:
                _write_json(os.path.join(folder, f"report-{i}.json"), rep)

    with tempfile.TemporaryDirectory(prefix="parc-run-") as folder:
        _launch(world, body, folder, backend, jobs[0].opts.timeout, deadline, on_progress)
        reports = []
        for i in range(len(jobs)):
            path = os.path.join(folder, f"report-{i}.json")
            if not os.path.exists(path):
                raise RunFailed("rank 0 ended without writing its report")
            with open(path) as f:
                reports.append(json.load(f))
        return reports


def run_function(fn: Callable[[int], object], world: int, backend: str = "gloo", timeout: float = 60.0,
                 deadline: Optional[float] = None) -> list:
    """Call ``fn(rank)`` on ``world`` forked ranks with torch.distributed initialised (the
    Python API's counterpart of :func:`run_forked`); returns each rank's result (picklable)."""
    import pickle

    def body(rank, folder, progress):
        out = fn(rank)
        with open(os.path.join(folder, f"result-{rank}.pkl"), "wb") as f:
            pickle.dump(out, f)

    with tempfile.TemporaryDirectory(prefix="parc-run-") as folder:
        _launch(world, body, folder, backend, timeout, deadline, None)
        results = []
        for r in range(world):
            with open(os.path.join(folder, f"result-{r}.pkl"), "rb") as f:
                results.append(pickle.load(f))
        return results


def _stop(procs) -> None:
    for p in procs:
        if p.exitcode is None:
            p.terminate()
    end = time.time() + 3
    for p in procs:
        p.join(max(0.0, end - time.time()))
    for p in procs:
        if p.exitcode is None:
            p.kill()
            p.join()


def _failure(folder: str, procs, why: str) -> RunFailed:
    errors = []
    for name in os.listdir(folder):
        if name.startswith("error-") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                errors.append(json.load(f))
    if errors:
        first = min(errors, key=lambda e: e["time"])
        return RunFailed(f"rank {first['rank']} failed: {first['message'] or first['type']}",
                         first["rank"], first["traceback"])
    if why == "timeout":
        return RunFailed("the run did not finish before its deadline; every rank was stopped")
    for r, p in enumerate(procs):
        if p.exitcode not in (None, 0):
            sig = -p.exitcode if p.exitcode < 0 else None
            what = f"signal {signal.Signals(sig).name}" if sig else f"exit status {p.exitcode}"
            return RunFailed(f"rank {r} ended with {what}", r)
    return RunFailed("the run failed")
