"""Kubeflow Trainer v2: ``trainjob.yaml``, a ``TrainJob`` (trainer.kubeflow.org/v1alpha1) that
runs the plan on a torch training runtime (the ``torch-distributed`` ClusterTrainingRuntime by
default), and a ConfigMap with the resolved plan.

The TrainJob says what the runtime cannot know: ``numNodes`` (the cluster's nodes, one pod each),
``numProcPerNode`` (its GPUs per node), ``resourcesPerNode`` (those GPUs as ``nvidia.com/gpu``,
CPUs and memory), and the command: the torchrun target's own launcher options
(``parc.targets.torchrun.launcher_lines``), the entry point and its arguments (this block's
``entrypoint``, ``args`` and ``max_restarts``, or target torchrun's). The trainer's torch plugin
puts in every pod what torchrun's shell variables stand for elsewhere: ``PET_NODE_RANK`` (the
pod's Job completion index), ``PET_MASTER_ADDR`` (``<name>-node-0-0.<name>``, the first pod) and
``PET_MASTER_PORT`` (29500), written ``$(NAME)`` for the kubelet to substitute (a literal ``$``
is ``$$``). So the rendezvous is the torchrun target's: standalone on one node, static with each
pod's own node rank, or c10d at the master address when restarts are allowed.

``runtimePatches`` (Trainer v2.2 and later) add what the runtime's pod template lacks: the plan's
ConfigMap mounted at ``/etc/parc`` (``PARC_PLAN`` points at ``plan.json``), a size-limited
in-memory ``/dev/shm`` for NCCL, and on InfiniBand the ``IPC_LOCK`` capability that pinning
memory needs. The patch names the runtime's replicated job and container ``node``, as every
torch runtime of Kubeflow Trainer does (the torch plugin finds its container by that name).
"""
from __future__ import annotations

from parc.model.targets import spec
from parc.targets.base import Cat, Env, File, Var, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.words import count

TARGET = "trainjob"
NAME_MAX = 40            # pods are <name>-node-0-<index>-<suffix>; the headless Service <name>
API_VERSION = "trainer.kubeflow.org/v1alpha1"
# the owner of parc's runtime patch: the webhook wants a domain-prefixed path
MANAGER = "parc/compile"
# what the trainer's torch plugin sets in the trainer container (pkg/constants/constants.go)
PET = {"node_rank": "PET_NODE_RANK", "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT"}


def runtime_facts() -> dict:
    """The torch runtime's job and container names and master port (target.toml's [runtime])."""
    return (spec(TARGET) or {})["runtime"]


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def _word(w) -> str:
    """One word of the trainer's command: torchrun's shell variables become what the torch
    plugin injects, ``$(PET_...)``; any other ``$`` is literal (``$$``)."""
    from parc.targets.kubernetes import literal

    if isinstance(w, Cat):
        return "".join(_word(p) for p in w.parts)
    if isinstance(w, Var):
        return f"$({PET[w.name]})"
    return literal(str(w))


def command(plan) -> tuple[list[str], list[str]]:
    """The trainer's ``command`` (torchrun, its options, the entry point) and ``args``."""
    from parc.targets.torchrun import launcher_lines, rendezvous

    s = settings(plan, TARGET)
    restarts = s.get("max_restarts", 0)
    lines = launcher_lines(plan, rdzv=rendezvous(plan, None, restarts), endpoint=None, max_restarts=restarts,
                           no_python=bool(s.get("no_python")))
    words = ["torchrun"] + [w for line in lines for w in line] + [s["entrypoint"]]
    return [_word(w) for w in words], [_word(a) for a in s.get("args") or []]


def _env(plan) -> list[Env]:
    from parc.targets.kubernetes import PLAN_DIR, literal

    return [Env(e.name, literal(e.value)) for e in [Env("PARC_PLAN", f"{PLAN_DIR}/plan.json")] + nccl_env(plan)]


def build(plan) -> list[File]:
    from parc.targets.kubernetes import CPU_PER_GPU, MEMORY_PER_GPU, PLAN_DIR, SHM_DEFAULT, quantity
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    rt = runtime_facts()
    name = job_name(plan)
    cmd, args = command(plan)
    memory = s.get("memory", MEMORY_PER_GPU * cl.gpus_per_node)
    runtime = s.get("runtime", rt["default"])
    header = [f"Kubeflow TrainJob compiled by parc from {spec_name(plan)}: kubectl apply -f trainjob.yaml "
              f"(Kubeflow Trainer v2.2 or later, with the {runtime} training runtime installed)",
              f"Mesh: {mesh_text(plan)}; {count(cl.nodes, 'pod')} x {count(cl.gpus_per_node, 'GPU')} = "
              f"{count(plan.world_size, 'rank')}."]
    text = render("trainjob/trainjob.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  runtime=runtime, runtime_kind=s.get("runtime_kind", "ClusterTrainingRuntime"),
                  image=s.get("image"), command=cmd, args=args, env=_env(plan), nodes=cl.nodes,
                  gpus=cl.gpus_per_node, cpu=str(s.get("cpu", CPU_PER_GPU * cl.gpus_per_node)),
                  memory=quantity(memory), shm=quantity(s.get("shm_size", min(SHM_DEFAULT, memory))),
                  rdma=s.get("rdma_resource"), rdma_devices=s.get("rdma_devices", 1), manager=MANAGER,
                  job=rt["job"], container=rt["container"], plan_json=plan_json(plan), plan_dir=PLAN_DIR)
    return [File("trainjob.yaml", text), File("plan.json", plan_json(plan))]
