"""Kubernetes: a Kubeflow ``PyTorchJob`` (kubeflow.org/v1) with one pod per node, each asking
for its node's GPUs (``nvidia.com/gpu``) and running torchrun with ``c10d`` rendezvous through a
headless Service in front of the master pod (which hosts the store: ``is_host=true``). The plan
travels in a ConfigMap mounted at ``/etc/parc/plan.json``, where ``PARC_PLAN`` points. The
entry point and its arguments are this block's ``entrypoint`` and ``args``."""
from __future__ import annotations

import re

from ...compiler.rules import rule
from ..base import Env, File, dns_label, settings, mesh_text, nccl_env, plan_id, plan_json, spec_name

TARGET = "kubernetes"
RDZV_PORT = 29400
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40            # pods are named <name>-worker-<index>; services <name>-rdzv
NAMESPACE_MAX = 63


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name)


def command(plan, *, is_host: bool | None, name: str) -> list[str]:
    s = settings(plan, TARGET)
    t = s
    cl = plan.cluster
    words = ["torchrun", "--nnodes", str(cl.nodes), "--nproc-per-node", str(cl.gpus_per_node)]
    if cl.nodes == 1:
        words.append("--standalone")
    else:
        words += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{name}-rdzv:{RDZV_PORT}",
                  "--rdzv-id", f"{name}-{plan_id(plan)}",
                  "--rdzv-conf", "is_host=" + ("true" if is_host else "false")]
    words += ["--max-restarts", str(t.get("max_restarts", 0)), s["entrypoint"]]
    return [literal(w) for w in words + [str(a) for a in s.get("args") or []]]


def literal(text: str) -> str:
    """Kubernetes expands $(VAR) in a container's command and env values; $$ is a literal $."""
    return text.replace("$", "$$")


def build(plan) -> list[File]:
    from ..render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    name = job_name(plan)
    roles = [{"kind": "Master", "replicas": 1, "command": command(plan, is_host=True, name=name)}]
    if cl.nodes > 1:
        roles.append({"kind": "Worker", "replicas": cl.nodes - 1,
                      "command": command(plan, is_host=False, name=name)})
    env = [Env(e.name, literal(e.value)) for e in [Env("PARC_PLAN", "/etc/parc/plan.json")] + nccl_env(plan)]
    text = render("kubernetes/pytorchjob.yaml.j2", name=name, namespace=s.get("namespace"), image=s["image"],
                  nodes=cl.nodes, gpus=cl.gpus_per_node, rdzv_port=RDZV_PORT, roles=roles, env=env,
                  plan_json=plan_json(plan),
                  header=[f"Kubeflow PyTorchJob compiled by parc from {spec_name(plan)}: kubectl apply -f job.yaml",
                          f"Mesh: {mesh_text(plan)}; {cl.nodes} pod{'s' if cl.nodes > 1 else ''} x "
                          f"{cl.gpus_per_node} GPUs = {plan.world_size} ranks."])
    return [File("job.yaml", text), File("plan.json", plan_json(plan))]


@rule("P661", "kubernetes-name", targets=(TARGET,))
def names(plan, c):
    s = settings(plan, TARGET)
    for key, limit in (("name", NAME_MAX), ("namespace", NAMESPACE_MAX)):
        v = s.get(key)
        if v is not None and (len(v) > limit or not NAME.match(v)):
            c.report(c.at(f"target.kubernetes.{key}", "target.kubernetes"),
                     f"`{key}` must be a Kubernetes name: lowercase letters, digits and '-', starting with a "
                     f"letter, at most {limit} characters", help=f"for example `{key} = \"{dns_label(v, limit)}\"`")
