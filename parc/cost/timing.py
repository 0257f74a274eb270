"""Step time: compute stretched by the pipeline's idle share, exposed communication, and the
data-parallel reduction that the last backward does not hide."""
from __future__ import annotations

BACKWARD_SHARE = 2 / 3  # of a microbatch's compute: the backward is twice the forward


def step_time(compute, exposed, bubble, dp_time, microbatches):
    """Seconds per training step: (compute + exposed communication) / (1 − bubble), plus the part
    of the gradient reduction the last microbatch's backward does not overlap (Megatron-LM's
    overlap_grad_reduce: two thirds of a microbatch's compute hide it). Scalars or numpy arrays."""
    step = (compute + exposed) / (1 - bubble)
    rest = dp_time - BACKWARD_SHARE * compute / microbatches
    return step + rest * (rest > 0)
