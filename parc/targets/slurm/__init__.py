"""Slurm: ``job.sbatch`` allocates the nodes and runs one task per node with ``srun``; the node
rank is ``SLURM_NODEID`` and the first node of the allocation hosts the rendezvous (its address
is ``MASTER_ADDR``). What each task runs is another target's launch, unchanged:

* training: the torchrun target's launch, as one ``launch.sh`` that takes the node rank from
  Slurm;
* serving: the vllm target's files (``launch.sh`` takes the node rank from ``SLURM_NODEID``
  and runs that node's ``vllm serve`` with the multi-node flags; one node runs ``serve.sh``);
* a prefill/decode-disaggregated plan: one allocation of every node its pools take, each
  running ``node.sh`` (:mod:`parc.targets.pooled`), which starts the instances placed on that
  node with the vllm target's pool scripts, and the proxy on the first node; the job hands it
  every node's address (``PARC_HOSTS``). Why one job and not a heterogeneous one is said there.

The folder must be on a filesystem every node mounts: srun starts the scripts from it on each
node and they read ``plan.json`` beside them."""
from __future__ import annotations

import re

from parc.targets.base import File, dns_label, need, settings, mesh_text, plan_json, spec_name
from parc.targets import torchrun
from parc.targets.pooled import pools_text
from parc.words import count

TARGET = "slurm"
SBATCH_KEYS = ("partition", "account", "time")
SAFE = re.compile(r"[A-Za-z0-9._:@+/,=-]+")


def job_name(plan) -> str:
    return settings(plan, TARGET).get("job_name") or dns_label(plan.model.name)


def task_files(plan) -> tuple[str, list[File]]:
    """The script srun runs on every node, and the files it needs (plan.json among them)."""
    s = settings(plan, TARGET)
    cl = plan.cluster
    if plan.pools:
        from parc.targets.pooled import node_files

        return "node.sh", node_files(plan)
    if plan.mode == "serve":
        from parc.targets import vllm

        files = vllm.build(plan)
        names = [f.path for f in files]
        return ("launch.sh" if "launch.sh" in names else "serve.sh"), files
    launch = torchrun.script(plan, entrypoint=need(plan, TARGET, "entrypoint"),
                             arg_lines=torchrun.user_arg_lines(s.get("args")),
                             max_restarts=s.get("max_restarts", 0),
                             what=f"torchrun launch for one node of {cl.nodes}; srun runs it on every node")
    return "launch.sh", [File("launch.sh", launch, True), File("plan.json", plan_json(plan))]


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    task, files = task_files(plan)
    what = "vllm serve" if plan.mode == "serve" else "torchrun"
    nodes = cl.nodes
    if plan.pools:
        from parc.model.pools import nodes_needed

        nodes, what = nodes_needed(plan), "the pools' vllm serve instances"
    sbatch = render("slurm/job.sbatch.j2", job_name=job_name(plan), nodes=nodes, gpus=cl.gpus_per_node,
                    cpus=s.get("cpus_per_task"), task=task, pooled=bool(plan.pools),
                    sbatch_extra=[(k, s[k]) for k in SBATCH_KEYS if k in s],
                    header=[f"Slurm job compiled by parc from {spec_name(plan)}: sbatch job.sbatch",
                            f"{pools_text(plan) if plan.pools else 'Mesh: ' + mesh_text(plan)}; {nodes} node{'s' if nodes > 1 else ''} x "
                            f"{count(cl.gpus_per_node, 'GPU')} = {count(plan.world_size, 'rank')}; srun runs {task} ({what}) "
                            "once per node.",
                            "Keep this folder on a filesystem every node mounts (a shared home or project "
                            "folder): each node runs the scripts and reads plan.json from it."])
    return [File("job.sbatch", sbatch, True)] + files
