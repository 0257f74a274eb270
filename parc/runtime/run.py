"""A whole run: pick the launcher, compute the reference once, run the ranks, time the parts.

* Under torchrun (``RANK``/``WORLD_SIZE`` in the environment) this process is one rank;
* a rehearsal (or any plan) with world > 1 outside torchrun runs as forked local processes on
  the CPU with gloo, the reference computed once in this process before the fork;
* a world of one runs in this process, on CUDA when it is there.
"""
from __future__ import annotations

import os
import time
from typing import Optional

from parc.model.plan import Plan
from parc.progress import Progress  # noqa: F401  (the one progress line; `parc run` draws it)
from parc.runtime import shrink
from parc.runtime.launch import Job, RunFailed, prepare_env


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


MAX_RANKS = 64


def default_deadline(opts) -> float:
    """The whole rehearsal's deadline when none is given: every step and the build may each
    wait one collective timeout, with room for the launch."""
    return opts.timeout * (opts.steps + 3) + 60


def run_plan(plan: Plan, opts, *, rehearse: bool, progress: bool = True,
             deadline_s: Optional[float] = None, t_start: Optional[float] = None,
             max_ranks: int = MAX_RANKS, bar: Optional[Progress] = None) -> Optional[dict]:
    """Run ``plan`` (shrunk first when ``rehearse``) and return the report (None on ranks other
    than 0 under torchrun). Raises :class:`RunFailed` with the failing rank's message, and
    :class:`RunError` or ``checkpoint.CheckpointError`` before any rank starts.
    ``t_start``: when the command started (the report's timing counts from there); ``bar``: a
    :class:`Progress` already showing (else one is made when ``progress``); ``deadline_s``: the
    whole run's limit for forked ranks (default :func:`default_deadline`)."""
    t0 = time.perf_counter()
    t_start = t_start if t_start is not None else t0
    world = plan.world_size
    forked = _how_to_run(world, opts, rehearse, max_ranks)
    if bar is None and progress:
        bar = Progress(opts.steps, "parc run")
    phase = bar.phase if bar is not None else (lambda what: None)
    try:
        phase("importing torch")
        prepare_env(fork=forked)
        import torch

        if forked:
            torch.set_num_threads(1)
        from parc.runtime import engine  # noqa: F401 - the heavy imports, timed here
        from parc.runtime import checkpoint as CK
        from parc.runtime import launch
        from parc.runtime import reference as R

        launch.quiet()
        t_imports = time.perf_counter() - t0
        t_check = t0 - t_start
        if rehearse:
            plan = shrink.rehearse(plan)
        opts.rehearsal = rehearse
        cuda = torch.cuda.is_available() and opts.device != "cpu" and not rehearse
        opts.device = "cuda" if cuda else "cpu"
        backend = "nccl" if cuda else "gloo"
        engine.check_plan(plan)
        resume = _resume_from(plan, opts, phase)
        ref, t_ref = None, 0.0
        if opts.verify:
            phase("computing the one-process reference")
            t1 = time.perf_counter()
            ref = R.compute(plan, opts.steps, opts.seed, opts.optimizer_name(plan), opts.learning_rate(plan),
                            checkpoint=resume, start_step=CK.saved_step(resume) if resume else 0)
            t_ref = time.perf_counter() - t1
        job = Job(plan, opts, ref)
        t2 = time.perf_counter()
        if under_torchrun() or world == 1:
            phase("building")
            rep = _in_process(job, backend, bar)
        else:
            phase(f"spawning {world} ranks")
            deadline = time.time() + (deadline_s if deadline_s else default_deadline(opts))
            rep = launch.run_forked([job], backend, deadline=deadline, on_progress=bar)[0]
    finally:
        if bar:
            bar.close()
    if rep is None:
        return None
    t_run = time.perf_counter() - t2
    steps = sum(s["seconds"] for s in rep["steps"])
    rep["timing"] = {"check": t_check, "imports": t_imports, "reference": t_ref, "run": t_run, "steps": steps,
                     "launch_and_build": max(0.0, t_run - steps), "total": time.perf_counter() - t_start}
    notes = serving_notes(plan)
    if notes:
        rep["notes"] = notes
    return rep


def serving_notes(plan: Plan) -> list[str]:
    """What a serving rehearsal runs of the plan and what it cannot: the forward passes are the
    plan's, but no KV cache is kept between them."""
    out = []
    if plan.mode != "serve":
        return out
    if plan.mesh.dcp > 1:
        out.append(f"dcp = {plan.mesh.dcp} is not rehearsed: it splits the KV cache kept between decode "
                   "steps, and these forward passes keep none; the layers and their collectives are the plan's")
    if plan.serve is not None and plan.serve.dp_attention and plan.mesh.ep > 1:
        out.append(f"data-parallel attention: each of the {plan.mesh.dp} dp ranks runs its own sequences "
                   f"through attention, and the expert layers exchange tokens over all {plan.mesh.ep} ranks")
    return out


def _how_to_run(world: int, opts, rehearse: bool, max_ranks: int) -> bool:
    """Refuse what cannot run here (RunError, RunFailed); True when the ranks are forked here."""
    from parc.runtime.options import RunError

    if opts.verify and opts.steps < 1:
        raise RunError("--verify needs at least one step (--steps 0 would compare nothing)")
    if not under_torchrun() and world > 1 and not rehearse:
        raise RunFailed(f"this plan needs {world} processes: launch it with the emitted torchrun script "
                        "(`parc compile SPEC --target torchrun`), or rehearse it here with --rehearse")
    forked = rehearse and world > 1 and not under_torchrun()
    if forked and world > max_ranks:
        raise RunFailed(f"a rehearsal runs every rank as a process on this machine, and this mesh has {world} "
                        f"ranks (more than {max_ranks}); rehearse a smaller mesh with the same axes, launch the "
                        "rehearsal across machines with the torchrun script, or raise --max-ranks")
    return forked


def _resume_from(plan: Plan, opts, phase) -> Optional[str]:
    """The checkpoint folder to resume from (validated against the plan's model), or None."""
    from parc.runtime import checkpoint as CK

    if opts.checkpoint and os.path.exists(opts.checkpoint) and not os.path.isdir(opts.checkpoint):
        raise CK.CheckpointError(f"--checkpoint names {opts.checkpoint}, which is a file: give a folder")
    if opts.checkpoint:
        CK.check_folder(opts.checkpoint)   # read from and written to: regular files of the folder only
    resume = opts.checkpoint if opts.checkpoint and CK.exists(opts.checkpoint) else None
    if resume:
        phase("checking the checkpoint")
        from parc.runtime.model import Config

        CK.validate(resume, Config.from_model(plan.model))
    return resume


def _in_process(job: Job, backend: str, bar) -> Optional[dict]:
    from parc.runtime import engine
    from parc.runtime import mesh as M

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world != job.plan.world_size:
        raise RunFailed(f"the plan's mesh needs {job.plan.world_size} processes but WORLD_SIZE is {world}")
    if job.opts.device == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    M.init_process_group(backend, rank, world, job.opts.timeout)
    try:
        rep = engine.run_rank(job.plan, job.opts, job.reference, bar if rank == 0 else None)
    except BaseException as e:
        raise RunFailed(f"rank {rank} failed: {e}", rank) from e
    M.shutdown()      # only after success: a failing rank exits, and torchrun stops the others
    return rep
