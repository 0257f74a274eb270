"""Kubernetes: a Kubeflow ``PyTorchJob`` (kubeflow.org/v1) with one pod per node, each asking
for its node's GPUs (``nvidia.com/gpu``), CPUs and memory, with a size-limited ``/dev/shm``.

* training: every pod runs torchrun with ``c10d`` rendezvous through a headless Service in
  front of the master pod (which hosts the store: ``is_host=true``); the entry point and its
  arguments are this block's ``entrypoint`` and ``args`` (or target torchrun's);
* serving: every pod runs the vllm target's launch for its node (one ``vllm serve`` per node
  with the multi-node flags); the scripts travel in the ConfigMap and the pod's node rank is
  the ``RANK`` the training operator sets (0 for the master, index + 1 for workers), node 0's
  address its ``MASTER_ADDR``.

The plan travels in a ConfigMap mounted at ``/etc/parc`` (``PARC_PLAN`` points at
``plan.json``). ``runPolicy.schedulingPolicy.minAvailable`` asks a gang scheduler (Volcano or
the scheduler-plugins coscheduler, when the operator runs with one) to start all pods or none.
On InfiniBand clusters ``rdma_resource`` requests the RDMA device plugin's resource (and
``IPC_LOCK`` to pin memory) and ``host_network`` runs the pods in the node's network."""
from __future__ import annotations

import re

from parc.targets.base import Env, File, dns_label, settings, mesh_text, nccl_env, plan_id, plan_json, spec_name
from parc.words import count

TARGET = "kubernetes"
RDZV_PORT = 29400
NAME_MAX = 40            # pods are named <name>-worker-<index>; services <name>-rdzv
NAMESPACE_MAX = 63
# A resource name is a qualified name: an optional DNS-1123 subdomain prefix and '/', then a name
# of at most 63 characters (letters, digits, '-', '_', '.', alphanumeric at both ends).
RESOURCE = re.compile(r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
                      r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
PLAN_DIR = "/etc/parc"
# the images P650's help suggests
IMAGE = '"nvcr.io/nvidia/pytorch:25.01-py3"'
SERVE_IMAGE = '"vllm/vllm-openai:v0.11.0"'
GiB = 2**30
CPU_PER_GPU = 4          # default CPU request per GPU of the node
MEMORY_PER_GPU = 32 * GiB
SHM_DEFAULT = 16 * GiB


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def literal(text: str) -> str:
    """Kubernetes expands $(VAR) in a container's command and env values; $$ is a literal $."""
    return text.replace("$", "$$")


def command(plan, *, is_host: bool | None, name: str) -> list[str]:
    """The torchrun command of a training pod."""
    s = settings(plan, TARGET)
    cl = plan.cluster
    words = ["torchrun", "--nnodes", str(cl.nodes), "--nproc-per-node", str(cl.gpus_per_node)]
    if cl.nodes == 1:
        words.append("--standalone")
    else:
        words += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{name}-rdzv:{RDZV_PORT}",
                  "--rdzv-id", f"{name}-{plan_id(plan)}",
                  "--rdzv-conf", "is_host=" + ("true" if is_host else "false")]
    words += ["--max-restarts", str(s.get("max_restarts", 0)), s["entrypoint"]]
    return [literal(w) for w in words + [str(a) for a in s.get("args") or []]]


def serve_files(plan) -> tuple[list[str], list[File]]:
    """The vllm target's scripts and the command that runs this pod's: ``launch.sh $(RANK)``
    (Kubernetes substitutes the operator's RANK, the pod's node rank), one node runs serve.sh."""
    from parc.targets import vllm

    files = [f for f in vllm.build(plan) if f.path != "plan.json"]
    names = [f.path for f in files]
    if "launch.sh" in names:
        return ["bash", f"{PLAN_DIR}/launch.sh", "$(RANK)"], files
    return ["bash", f"{PLAN_DIR}/serve.sh"], files


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
    scripts: list[File] = []
    if plan.mode == "serve":
        cmd, scripts = serve_files(plan)
        roles = [{"kind": "Master", "replicas": 1, "command": cmd}]
        if cl.nodes > 1:
            roles.append({"kind": "Worker", "replicas": cl.nodes - 1, "command": cmd})
    else:
        roles = [{"kind": "Master", "replicas": 1, "command": command(plan, is_host=True, name=name)}]
        if cl.nodes > 1:
            roles.append({"kind": "Worker", "replicas": cl.nodes - 1,
                          "command": command(plan, is_host=False, name=name)})
    env = [Env(e.name, literal(e.value)) for e in [Env("PARC_PLAN", f"{PLAN_DIR}/plan.json")] + nccl_env(plan)]
    memory = s.get("memory", MEMORY_PER_GPU * cl.gpus_per_node)
    host_network = bool(s.get("host_network", False))
    rdma = s.get("rdma_resource")
    text = render("kubernetes/pytorchjob.yaml.j2", name=name, namespace=s.get("namespace"), image=s["image"],
                  nodes=cl.nodes, gpus=cl.gpus_per_node, rdzv_port=RDZV_PORT, roles=roles, env=env,
                  plan_json=plan_json(plan), scripts=scripts, train=plan.mode != "serve",
                  cpu=str(s.get("cpu", CPU_PER_GPU * cl.gpus_per_node)), memory=quantity(memory),
                  shm=quantity(s.get("shm_size", min(SHM_DEFAULT, memory))),
                  rdma=rdma, rdma_devices=s.get("rdma_devices", 1), host_network=host_network,
                  queue=s.get("queue"), scheduler=s.get("scheduler_name"),
                  header=[f"Kubeflow PyTorchJob compiled by parc from {spec_name(plan)}: kubectl apply -f job.yaml",
                          f"Mesh: {mesh_text(plan)}; {cl.nodes} pod{'s' if cl.nodes > 1 else ''} x "
                          f"{count(cl.gpus_per_node, 'GPU')} = {count(plan.world_size, 'rank')}."])
    return [File("job.yaml", text), File("plan.json", plan_json(plan))]
