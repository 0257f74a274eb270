"""Kubeflow Trainer v2: ``trainjob.yaml``, a ``TrainJob`` (trainer.kubeflow.org/v1alpha1) that
runs the plan on a torch training runtime (the ``torch-distributed`` ClusterTrainingRuntime by
default), and a ConfigMap with the resolved plan.

The TrainJob says what the runtime cannot know: ``numNodes`` (the cluster's nodes, one pod each),
``numProcPerNode`` (its GPUs per node), ``resourcesPerNode`` (those GPUs as ``nvidia.com/gpu``,
CPUs and memory), and the command of the engine the block's ``engine`` names
(parc/targets/engines.py: torchrun, torchtitan, megatron or deepspeed), exactly as that target
launches a node, its program's own arguments as the trainer's ``args``. The trainer's torch plugin
puts in every pod what the engine's variables stand for elsewhere: ``PET_NODE_RANK`` (the pod's
Job completion index), ``PET_MASTER_ADDR`` (``<name>-node-0-0.<name>``, the first pod) and
``PET_MASTER_PORT`` (29500), written ``$(NAME)`` for the kubelet to substitute (a literal ``$``
is ``$$``). So the rendezvous is the engine's under a scheduler: torchrun's standalone on one
node, static with each pod's own node rank, or c10d at the master address when restarts are
allowed; DeepSpeed's launcher on every pod with ``--no_ssh`` and the pod's node rank. The
engine's config files (DeepSpeed's ds_config.json and hostfile) travel in the ConfigMap with the
plan.

``runtimePatches`` (Trainer v2.2 and later) add what the runtime's pod template lacks: the plan's
ConfigMap mounted at ``/etc/parc`` (``PARC_PLAN`` points at ``plan.json``), a size-limited
in-memory ``/dev/shm`` for NCCL, and on InfiniBand the ``IPC_LOCK`` capability that pinning
memory needs. The patch names the runtime's replicated job and container ``node``, as every
torch runtime of Kubeflow Trainer does (the torch plugin finds its container by that name).
"""
from __future__ import annotations

from parc.model.targets import spec
from parc.targets.base import Env, File, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.targets.engines import launch, pod_args
from parc.words import count

TARGET = "trainjob"
NAME_MAX = 40            # pods are <name>-node-0-<index>-<suffix>; the headless Service <name>
API_VERSION = "trainer.kubeflow.org/v1alpha1"
# the owner of parc's runtime patch: the webhook wants a domain-prefixed path
MANAGER = "parc/compile"
# what the trainer's torch plugin sets in the trainer container (pkg/constants/constants.go), for
# the variables of the engine's command (parc/targets/engines.py)
PET = {"node_rank": "PET_NODE_RANK", "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT"}


def runtime_facts() -> dict:
    """The torch runtime's job and container names and master port (target.toml's [runtime])."""
    return (spec(TARGET) or {})["runtime"]


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def command(plan, node=None) -> tuple[list[str], list[str]]:
    """The trainer's ``command`` (the engine's launcher, its options, the program) and ``args``
    (the program's own arguments)."""
    from parc.targets.kubernetes import PLAN_DIR

    node = node or launch(plan, TARGET)
    return pod_args(node.runs[0], PET, PLAN_DIR)


def _env(plan, node) -> list:
    from parc.targets.kubernetes import PLAN_DIR, pod_env

    return pod_env([Env("PARC_PLAN", f"{PLAN_DIR}/plan.json"), *node.runs[0].env, *nccl_env(plan)])


def build(plan) -> list[File]:
    from parc.targets.kubernetes import CPU_PER_GPU, MEMORY_PER_GPU, PLAN_DIR, SHM_DEFAULT, quantity
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    rt = runtime_facts()
    name = job_name(plan)
    node = launch(plan, TARGET)
    cmd, args = command(plan, node)
    memory = s.get("memory", MEMORY_PER_GPU * cl.gpus_per_node)
    runtime = s.get("runtime", rt["default"])
    header = [f"Kubeflow TrainJob compiled by parc from {spec_name(plan)}: kubectl apply -f trainjob.yaml "
              f"(Kubeflow Trainer v2.2 or later, with the {runtime} training runtime installed)",
              f"Mesh: {mesh_text(plan)}; {count(cl.nodes, 'pod')} x {count(cl.gpus_per_node, 'GPU')} = "
              f"{count(plan.world_size, 'rank')}; every pod runs the {node.engine} target's command."]
    text = render("trainjob/trainjob.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  runtime=runtime, runtime_kind=s.get("runtime_kind", "ClusterTrainingRuntime"),
                  image=s.get("image"), command=cmd, args=args, env=_env(plan, node), nodes=cl.nodes,
                  gpus=cl.gpus_per_node, cpu=str(s.get("cpu", CPU_PER_GPU * cl.gpus_per_node)),
                  memory=quantity(memory), shm=quantity(s.get("shm_size", min(SHM_DEFAULT, memory))),
                  rdma=s.get("rdma_resource"), rdma_devices=s.get("rdma_devices", 1), manager=MANAGER,
                  job=rt["job"], container=rt["container"], plan_json=plan_json(plan), plan_dir=PLAN_DIR,
                  configs=[f for f in node.files if not f.executable and f.path != "plan.json"])
    return [File("trainjob.yaml", text), File("plan.json", plan_json(plan))]
