"""P2xx: batch sizes and pipeline schedules."""
from __future__ import annotations

from . import rule
from .util import join, nearest_multiples


@rule("P201", "global-batch-divisible")
def global_batch(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or m.dp <= 0:
        return
    per = s.micro_batch * m.dp
    if s.global_batch % per == 0:
        return
    near = nearest_multiples(s.global_batch, per)
    c.report(c.at("schedule.global_batch"),
             f"global_batch = {s.global_batch} is not divisible by micro_batch · dp = "
             f"{s.micro_batch} · {m.dp} = {per}",
             help=f"the nearest global batches that work are {join(near)} "
                  f"({join([n // per for n in near])} microbatches per step)",
             related=[(c.at("schedule.micro_batch"), f"micro_batch = {s.micro_batch}"),
                      (c.at("mesh.dp"), f"dp = {m.dp}")])


@rule("P204", "virtual-stages-need-pp")
def virtual_without_pp(plan, c):
    s, m = plan.schedule, plan.mesh
    if s.virtual_stages > 1 and m.pp == 1:
        c.report(c.at("schedule.virtual_stages"),
                 f"virtual_stages = {s.virtual_stages} needs pipeline parallelism, but pp = 1",
                 help="set `pp` > 1 in the mesh, or remove `virtual_stages` (and use a non-interleaved schedule)")


@rule("P203", "interleaved-microbatches")
def interleaved_microbatches(plan, c):
    s, m = plan.schedule, plan.mesh
    if plan.mode != "train" or s.pipeline != "interleaved_1f1b" or m.pp <= 1 or not s.microbatches:
        return
    mb, p = s.microbatches, m.pp
    if mb >= p and (mb % p == 0 or mb % p >= p):
        return
    per = s.micro_batch * m.dp
    good = [x for x in range(p, 8 * p + 1, p)]
    near = sorted({x * per for x in good if x >= mb}, key=lambda g: abs(g - s.global_batch))[:3]
    c.report(c.at("schedule.global_batch"),
             f"the interleaved schedule needs the microbatch count to be a multiple of pp = {p}, "
             f"but global_batch / (micro_batch · dp) = {s.global_batch} / {per} = {mb}",
             help=f"use global_batch = {join(sorted(near))} ({join(sorted(g // per for g in near))} microbatches)")
