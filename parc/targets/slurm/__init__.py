"""Slurm: ``job.sbatch`` allocates the nodes and runs one task per node with ``srun``; the node
rank is ``SLURM_NODEID`` and the first node of the allocation hosts the rendezvous (its address
is ``MASTER_ADDR``). What each task runs is the launch of the engine the block's ``engine`` names
(parc/targets/engines.py: torchrun, torchtitan, megatron, deepspeed, vllm, sglang), the engine
target's own files, unchanged: its script takes the node rank from ``SLURM_NODEID``. A plan of
several runs placed node by node (a prefill/decode-disaggregated plan; SGLang servers behind a
router) runs ``node.sh`` (:mod:`parc.targets.pooled`) on every node, and the job hands it every
node's address (``PARC_HOSTS``). Why one job and not a heterogeneous one is said there.

The folder must be on a filesystem every node mounts: srun starts the scripts from it on each
node and they read ``plan.json`` beside them."""
from __future__ import annotations

import re

from parc.targets.base import File, dns_label, settings, mesh_text, spec_name
from parc.targets.engines import launch
from parc.targets.pooled import pools_text
from parc.words import count

TARGET = "slurm"
SBATCH_KEYS = ("partition", "account", "time")
SAFE = re.compile(r"[A-Za-z0-9._:@+/,=-]+")


def job_name(plan) -> str:
    return settings(plan, TARGET).get("job_name") or dns_label(plan.model.name)


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    node = launch(plan, TARGET)
    nodes = node.nodes
    layout = pools_text(plan) if plan.pools else "Mesh: " + mesh_text(plan)
    sbatch = render("slurm/job.sbatch.j2", job_name=job_name(plan), nodes=nodes, gpus=cl.gpus_per_node,
                    cpus=s.get("cpus_per_task"), task=node.script, pooled=node.hosts,
                    sbatch_extra=[(k, s[k]) for k in SBATCH_KEYS if k in s],
                    header=[f"Slurm job compiled by parc from {spec_name(plan)}: sbatch job.sbatch",
                            f"{layout}; {count(nodes, 'node')} x {count(cl.gpus_per_node, 'GPU')} = "
                            f"{count(plan.world_size, 'rank')}; srun runs {node.script} ({node.what}) once per node.",
                            "Keep this folder on a filesystem every node mounts (a shared home or project "
                            "folder): each node runs the scripts and reads plan.json from it."])
    return [File("job.sbatch", sbatch, True)] + list(node.files)
