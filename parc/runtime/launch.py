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

from parc.model.plan import Plan


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


def _die_with_parent(parent: int) -> None:
    """This rank ends when the process that forked it ends, however it ends (SIGINT, SIGTERM,
    SIGKILL): Linux's parent-death signal, else a thread that watches the parent's id."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:       # the parent died before the call
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parc-parent-watch", daemon=True).start()


def _child(rank: int, world: int, body, folder: str, backend: str, timeout: float, counter,
           parent: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):     # not the parent's handlers: a rank just ends
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent(parent)
    code = 0
    try:
        import torch

        torch.set_num_threads(1)
        quiet()
        from parc.runtime import mesh as M

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
    from parc.files import write_atomic

    write_atomic(path, json.dumps(data))


class Stopped(BaseException):
    """This process got SIGTERM (or SIGHUP) while its ranks ran: they are stopped, then it ends."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}; every rank was stopped")
        self.signum = signum


def _on_signal(signum, frame):
    raise Stopped(signum)


def _launch(world: int, body, folder: str, backend: str, timeout: float, deadline: Optional[float],
            on_progress: Optional[Callable[[int], None]]) -> None:
    """Fork ``world`` ranks running ``body(rank, folder, progress)``; stop them all at the first
    failure or at the deadline and raise :class:`RunFailed`. SIGINT, SIGTERM or SIGHUP to this
    process stop every rank before it ends; if it is killed outright, the ranks die with it."""
    import multiprocessing as mp
    import multiprocessing.connection
    import threading

    ctx = mp.get_context("fork")
    counter = ctx.Value("i", 0)
    me = os.getpid()
    procs = [ctx.Process(target=_child, args=(r, world, body, folder, backend, timeout, counter, me),
                         daemon=False)
             for r in range(world)]
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            handlers[sig] = signal.signal(sig, _on_signal)
    deaths: dict[int, tuple[float, int]] = {}     # rank -> (when it was seen ended, exit code)
    failed = None
    seen = 0
    try:
        for p in procs:
            p.start()
        if hasattr(on_progress, "phase"):
            on_progress.phase(f"building on {world} ranks")
        while True:
            now = time.time()
            for r, p in enumerate(procs):
                if r not in deaths and p.exitcode is not None:
                    deaths[r] = (now, p.exitcode)
            if on_progress is not None and counter.value != seen:
                seen = counter.value
                on_progress(seen)
            if any(code != 0 for _, code in deaths.values()):
                failed = "error"
                break
            # from the same look as ``deaths``: a rank that fails after it must not end the
            # run as if every rank had finished
            alive = [p for r, p in enumerate(procs) if r not in deaths]
            if not alive:
                break
            if deadline is not None and now > deadline:
                failed = "timeout"
                break
            multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.1)
        stopped = _stopped_ranks(procs) if failed else []
    finally:
        _stop(procs)
        for sig, old in handlers.items():
            signal.signal(sig, old)
    if failed is not None:
        raise _failure(folder, deaths, stopped, failed, timeout)


def run_forked(jobs: list[Job], backend: str = "gloo", deadline: Optional[float] = None,
               on_progress: Optional[Callable[[int], None]] = None) -> list[dict]:
    """Run one or more plans (same world size) in one set of forked ranks; a report per plan."""
    world = jobs[0].plan.world_size
    if any(j.plan.world_size != world for j in jobs):
        raise ValueError("every plan of one launch needs the same world size")

    def body(rank, folder, progress):
        from parc.runtime import engine

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


def _stopped_ranks(procs) -> list[int]:
    """Ranks stopped by a signal (SIGSTOP, SIGTSTP): alive, but never answering their peers."""
    out = []
    for r, p in enumerate(procs):
        if p.exitcode is None and p.pid:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("T", "t"):
                out.append(r)
    return out


def _stop(procs) -> None:
    for p in procs:
        if p.pid and p.exitcode is None:
            p.terminate()
            try:
                os.kill(p.pid, signal.SIGCONT)     # a stopped rank takes SIGTERM only when continued
            except OSError:
                pass
    end = time.time() + 3
    for p in procs:
        if p.pid:
            p.join(max(0.0, end - time.time()))
    for p in procs:
        if p.pid and p.exitcode is None:
            p.kill()
            p.join()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _failure(folder: str, deaths: dict, stopped: list, why: str, timeout: float) -> RunFailed:
    """The first fault, named: a rank stopped by a signal, else the first rank killed from
    outside (a signal parc did not send: the OOM killer, a scheduler, a user), else the rank
    whose own error came first, else the first rank that ended."""
    if stopped:
        r = stopped[0]
        return RunFailed(f"rank {r} was stopped (SIGSTOP or SIGTSTP) and its peers waited for it in vain "
                         f"(--timeout {timeout:g} s); every rank was stopped", r)
    errors = []
    for name in os.listdir(folder):
        if name.startswith("error-") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                errors.append(json.load(f))
    # ranks killed by a signal: the time they were seen ended (an upper bound on their death)
    killed = sorted((t, r, code) for r, (t, code) in deaths.items()
                    if code < 0 and not any(e["rank"] == r for e in errors))
    external = [k for k in killed if -k[2] not in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)]
    if external:
        _, r, code = external[0]
        return RunFailed(f"rank {r} ended with signal {_signal_name(code)} (sent from outside parc: the "
                         "out-of-memory killer, a job scheduler or a user); every other rank was stopped", r)
    events = [(e["time"], e["rank"], e) for e in errors] + [(t, r, None) for t, r, _ in killed]
    if events:
        _, r, e = min(events, key=lambda x: (x[0], x[1]))
        if e is not None:
            return RunFailed(f"rank {r} failed: {e['message'] or e['type']}", r, e["traceback"])
        return RunFailed(f"rank {r} ended with signal {_signal_name(deaths[r][1])}", r)
    if why == "timeout":
        return RunFailed("the run did not finish before its deadline; every rank was stopped")
    for t, r, code in sorted((t, r, code) for r, (t, code) in deaths.items() if code != 0):
        return RunFailed(f"rank {r} ended with exit status {code}", r)
    return RunFailed("the run failed")
