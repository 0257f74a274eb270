"""Slurm: ``job.sbatch`` allocates the nodes and runs ``launch.sh`` on each with ``srun``; the
node rank is ``SLURM_NODEID`` and the first node of the allocation hosts the rendezvous. The
torchrun launch is the torchrun target's, as one script that takes the node rank from Slurm."""
from __future__ import annotations

import re

from ...compiler.rules import rule
from ..base import File, dns_label, settings, mesh_text, plan_json, spec_name
from .. import torchrun

TARGET = "slurm"
SBATCH_KEYS = ("partition", "account", "time")
SAFE = re.compile(r"^[A-Za-z0-9._:@+/,=-]+$")


def job_name(plan) -> str:
    return settings(plan, TARGET).get("job_name") or dns_label(plan.model.name)


def build(plan) -> list[File]:
    from ..render import render

    s = settings(plan, TARGET)
    t = s
    cl = plan.cluster
    sbatch = render("slurm/job.sbatch.j2", job_name=job_name(plan), nodes=cl.nodes, gpus=cl.gpus_per_node,
                    sbatch_extra=[(k, s[k]) for k in SBATCH_KEYS if k in s],
                    header=[f"Slurm job compiled by parc from {spec_name(plan)}: sbatch job.sbatch",
                            f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x "
                            f"{cl.gpus_per_node} GPUs = {plan.world_size} ranks."])
    launch = torchrun.script(plan, node_rank=None, entrypoint=s["entrypoint"],
                             arg_lines=torchrun.user_arg_lines(s.get("args")),
                             max_restarts=t.get("max_restarts", 0),
                             what=f"torchrun launch for one node of {cl.nodes}; srun runs it on every node")
    return [File("job.sbatch", sbatch, True), File("launch.sh", launch, True), File("plan.json", plan_json(plan))]


@rule("P660", "slurm-directive-value", targets=(TARGET,))
def directive_values(plan, c):
    s = settings(plan, TARGET)
    for key in SBATCH_KEYS + ("job_name",):
        v = s.get(key)
        if v is not None and not SAFE.match(v):
            c.report(c.at(f"target.slurm.{key}", "target.slurm"),
                     f"`{key}` goes into an #SBATCH line, which takes no spaces, quotes or shell characters",
                     help="use letters, digits and . _ : @ + / , = -")
