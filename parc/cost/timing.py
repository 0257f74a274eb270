"""Step time: compute stretched by the pipeline's idle share, the communication that compute does
not hide, and the data-parallel reduction around the step.

What a plan overlaps is a setting of its ``train`` block (docs/language.md gives each
framework's default); what it hides is ``min(communication, the compute it runs under) ·
profile.overlap``:

* TP collectives (``tp_comm_overlap``: Megatron-LM ``--tp-comm-overlap`` with Transformer
  Engine's userbuffers, torchtitan's AsyncTP) run under the layer's GEMMs;
* the context-parallel ring always runs under attention (Megatron-LM's p2p ring sends the next
  K/V chunk while the current one is attended to; Liu et al. 2023); a ring that gathers K and V
  at once after a pass's first step (torch's under torchtitan's default "allgather" rotation)
  hides what it gathers under that first step only, 1/cp of the attention, and its gradients,
  still passed step by step, under the rest;
* the expert all-to-all (``ep_comm_overlap``: Megatron-LM ``--overlap-moe-expert-parallel-comm``,
  DeepSeek-V3's DualPipe) runs under another microbatch's compute;
* the gradient reduction (``overlap_grad_reduce``) runs under the last microbatch's backward
  (two thirds of its compute) and the parameter all-gather (``overlap_param_gather``) under the
  next step's first forward (one third).

Pipeline sends stay exposed."""
from __future__ import annotations

from parc.cost import xp as np

BACKWARD_SHARE = 2 / 3  # of a microbatch's compute: the backward is twice the forward


def hidden(comm, under, on, overlap: float):
    """Seconds of ``comm`` that compute of ``under`` seconds hides when overlap is ``on``:
    min(comm, under) · overlap. Scalars or numpy arrays."""
    return np.minimum(comm, under) * (overlap * on)


def exposed_comm(ctime: dict, gemm, attention, reduce, gather, microbatches, train, overlap: float,
                 memory=0.0, zero3=False, cp=1, cp_gathered=0.0) -> dict:
    """Seconds of each axis's communication per step that compute does not hide (module doc),
    for a stage computing ``gemm`` + ``attention`` + ``memory`` (its memory-bound kernels) seconds
    per step whose data-parallel time is ``reduce`` (gradients) + ``gather`` (parameters). Under
    ``zero3`` (FSDP, ZeRO-3) every layer's parameters are gathered ahead of it and its gradients
    reduce-scattered behind it while the next layer computes, so the whole step's compute hides
    them. ``cp_gathered`` is the share of the ring's traffic gathered at once
    (:func:`parc.cost.comm.cp_gathered_share`), hidden under the first of ``cp`` ring steps. Scalars
    or numpy arrays."""
    compute = gemm + attention + memory
    last = compute / microbatches
    first = attention / cp if cp_gathered else 0.0    # a gathering ring's first step
    dp = (reduce - hidden(reduce, BACKWARD_SHARE * last, train.overlap_grad_reduce, overlap)
          + gather - hidden(gather, (1 - BACKWARD_SHARE) * last, train.overlap_param_gather, overlap))
    if zero3 is not False:
        layered = reduce + gather - hidden(reduce + gather, compute, True, overlap)
        dp = np.where(zero3, layered, dp)
    return {"tp": ctime["tp"] - hidden(ctime["tp"], gemm, train.tp_comm_overlap, overlap),
            "cp": ctime["cp"] - hidden(ctime["cp"] * cp_gathered, first, True, overlap)
            - hidden(ctime["cp"] * (1 - cp_gathered), attention - first, True, overlap),
            "ep": ctime["ep"] - hidden(ctime["ep"], compute, train.ep_comm_overlap, overlap),
            "pp": ctime["pp"], "dp": dp}


def step_time(compute, exposed: dict, bubble):
    """Seconds per training step: (compute + the exposed tp, cp, ep and pp communication) /
    (1 − bubble) (the bubble is the idle share of the step, :func:`parc.model.schedules.bubble`),
    plus the exposed data-parallel time (:func:`exposed_comm`). Scalars or numpy arrays."""
    inner = compute + exposed["tp"] + exposed["cp"] + exposed["ep"] + exposed["pp"]
    return inner / (1 - bubble) + exposed["dp"]
