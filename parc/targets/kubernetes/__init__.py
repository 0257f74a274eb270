"""Kubernetes: a Kubeflow ``PyTorchJob`` (kubeflow.org/v1) with one pod per node, each asking
for its node's GPUs (``nvidia.com/gpu``), CPUs and memory, with a size-limited ``/dev/shm``.

Every pod runs the launch of the engine the block's ``engine`` names (parc/targets/engines.py:
torchrun, torchtitan, megatron, deepspeed, vllm, sglang): the engine target's own files travel in
a ConfigMap mounted at ``/etc/parc`` and each pod runs its per-node script, ``bash
/etc/parc/launch.sh $(RANK)``, with what the training operator sets in every pod: ``RANK`` (the
pod's node rank: 0 for the master, index + 1 for workers), ``MASTER_ADDR`` (the master pod's
Service) and ``MASTER_PORT`` (the master's port). So a pod runs exactly what that node runs
under the engine target (the degrees, batch and flags of its block), the rendezvous at the master
pod. A plan of several runs, each with its own first node (the pools of a disaggregated plan,
SGLang servers behind a router), is no PyTorchJob of equal pods: P600 refuses it and names lws.

``PARC_PLAN`` points at the ConfigMap's ``plan.json``. ``runPolicy.schedulingPolicy.minAvailable``
asks a gang scheduler (Volcano or the scheduler-plugins coscheduler, when the operator runs with
one) to start all pods or none. On InfiniBand clusters ``rdma_resource`` requests the RDMA device
plugin's resource (and ``IPC_LOCK`` to pin memory) and ``host_network`` runs the pods in the
node's network."""
from __future__ import annotations

import re
from dataclasses import dataclass

from parc.model.targets import spec
from parc.targets.base import Env, File, dns_label, settings, mesh_text, nccl_env, plan_json, spec_name
from parc.targets.engines import launch
from parc.words import count

TARGET = "kubernetes"
NAME_MAX = 40            # pods are named <name>-worker-<index>; services <name>-master-0
NAMESPACE_MAX = 63
# A resource name is a qualified name: an optional DNS-1123 subdomain prefix and '/', then a name
# of at most 63 characters (letters, digits, '-', '_', '.', alphanumeric at both ends).
RESOURCE = re.compile(r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
                      r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
PLAN_DIR = "/etc/parc"
GiB = 2**30
CPU_PER_GPU = 4          # default CPU request per GPU of the node
MEMORY_PER_GPU = 32 * GiB
SHM_DEFAULT = 16 * GiB


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def literal(text: str) -> str:
    """Kubernetes expands $(VAR) in a container's command and env values; $$ is a literal $."""
    return text.replace("$", "$$")


# the variables of an engine's run (parc/targets/engines.py) a pod's environment reads from the
# downward API: the field of the pod that holds each
FIELDS = {"host_ip": "status.podIP"}


@dataclass(frozen=True, slots=True)
class PodEnv:
    """One entry of a container's ``env``: a ``value``, or the pod's ``field`` that holds it."""

    name: str
    value: str | None = None
    field: str | None = None


def pod_env(envs) -> list[PodEnv]:
    """A container's environment: each literal value as the kubelet reads it (:func:`literal`), a
    :class:`~parc.targets.base.Var` as the pod's field that holds it (:data:`FIELDS`)."""
    from parc.targets.base import Var

    return [PodEnv(e.name, field=FIELDS[e.value.name]) if isinstance(e.value, Var)
            else PodEnv(e.name, literal(e.value)) for e in envs]


def image_hint(engine: str) -> str:
    """The image P650's help suggests for ``engine`` (target.toml's [images])."""
    return (spec(TARGET) or {}).get("images", {}).get(engine, "")


def quantity(n: int) -> str:
    """A byte count as a Kubernetes quantity (binary suffix where it divides)."""
    n = int(n)
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    name = job_name(plan)
    node = launch(plan, TARGET)
    scripts = [f for f in node.files if f.path != "plan.json"]
    # the operator's RANK is the pod's node rank; one node needs none
    cmd = ["bash", f"{PLAN_DIR}/{node.script}"] + (["$(RANK)"] if node.nodes > 1 else [])
    roles = [{"kind": "Master", "replicas": 1, "command": cmd}]
    if node.nodes > 1:
        roles.append({"kind": "Worker", "replicas": node.nodes - 1, "command": cmd})
    env = pod_env([Env("PARC_PLAN", f"{PLAN_DIR}/plan.json")] + nccl_env(plan))
    memory = s.get("memory", MEMORY_PER_GPU * cl.gpus_per_node)
    host_network = bool(s.get("host_network", False))
    rdma = s.get("rdma_resource")
    text = render("kubernetes/pytorchjob.yaml.j2", name=name, namespace=s.get("namespace"), image=s["image"],
                  nodes=node.nodes, gpus=cl.gpus_per_node, roles=roles, env=env,
                  plan_json=plan_json(plan), scripts=scripts,
                  cpu=str(s.get("cpu", CPU_PER_GPU * cl.gpus_per_node)), memory=quantity(memory),
                  shm=quantity(s.get("shm_size", min(SHM_DEFAULT, memory))),
                  rdma=rdma, rdma_devices=s.get("rdma_devices", 1), host_network=host_network,
                  queue=s.get("queue"), scheduler=s.get("scheduler_name"),
                  header=[f"Kubeflow PyTorchJob compiled by parc from {spec_name(plan)}: kubectl apply -f job.yaml",
                          f"Mesh: {mesh_text(plan)}; {count(node.nodes, 'pod')} x "
                          f"{count(cl.gpus_per_node, 'GPU')} = {count(plan.world_size, 'rank')}; every pod runs "
                          f"{node.script} ({node.what}) from the ConfigMap."])
    return [File("job.yaml", text), File("plan.json", plan_json(plan))]
