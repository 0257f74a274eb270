"""Kubeflow TrainJob's own rules: the plans a TrainJob cannot run, and the names and settings
the API server or Kubeflow Trainer's webhook would refuse."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.targets.base import settings, target_span
from parc.targets.kubernetes.rules import check_names
from parc.targets.trainjob import NAME_MAX, TARGET
from parc.words import count


# ------------------------------------------------------------------------------------ P680

SERVES = ("a Kubeflow TrainJob runs training: its pods run torchrun until the job completes, and this spec serves "
          "a model (it has a `serve` block)")
SERVE_HELP = ("serve on Kubernetes with `target lws` (a LeaderWorkerSet) or `target kubernetes`, or replace `serve` "
              "with `train` to train the model")


@rule("P680", "trainjob-trains-only", targets=(TARGET,))
def trainjob_training_only(plan, c):
    if plan.mode == "serve":
        c.report(target_span(plan, c, TARGET, "serve"), SERVES, help=SERVE_HELP,
                 related=[(c.at("serve"), "serving declared here")])


# ------------------------------------------------------------------------------------ P681

@rule("P681", "trainjob-name", targets=(TARGET,))
def trainjob_names(plan, c):
    check_names(plan, c, TARGET, NAME_MAX)
    runtime = settings(plan, TARGET).get("runtime")
    if runtime is not None and not 1 <= len(runtime) <= 253:
        c.report(c.at(f"target.{TARGET}.runtime", f"target.{TARGET}"),
                 f"`runtime` has {len(runtime)} characters: the TrainJob's runtimeRef.name takes 1 to 253",
                 help="name the torch training runtime installed in the cluster, such as `runtime = "
                      "\"torch-distributed\"`")


# ------------------------------------------------------------------------------------ P682

@rule("P682", "trainjob-infiniband-unreachable", severity=WARNING, targets=(TARGET,))
def trainjob_infiniband(plan, c):
    """A pod sees the nodes' InfiniBand adapters only through an RDMA device plugin's resource
    (as P663 says for the PyTorchJob)."""
    cl = plan.cluster
    if plan.mode != "train" or cl.nodes == 1 or cl.inter_node is None or cl.inter_node.kind != "infiniband":
        return
    if settings(plan, TARGET).get("rdma_resource"):
        return
    c.report(c.at("cluster.inter_node", "cluster"),
             f"the TrainJob's {count(cl.nodes, 'pod')} talk over InfiniBand, but a pod sees no InfiniBand device "
             "unless it asks for one: NCCL would fall back to TCP sockets over the pod network",
             help="add `rdma_resource = \"rdma/rdma_shared_device_a\"` (the resource your RDMA device plugin "
                  "advertises) to `target trainjob`",
             related=[(c.at(f"target.{TARGET}"), f"target {TARGET}")] if f"target.{TARGET}" in plan.spans else [])
