"""LeaderWorkerSet's own rules: the plans a LeaderWorkerSet cannot serve, and the names and
settings the API server would refuse."""
from __future__ import annotations

from parc.model.targets import engines, spec
from parc.rules import WARNING, rule
from parc.rules.util import join
from parc.targets.base import settings, target_span
from parc.targets.kubernetes.rules import check_names
from parc.targets.lws import NAME_MAX, TARGET, engine, engine_facts
from parc.words import count


# ------------------------------------------------------------------------------------ P675

@rule("P675", "lws-serves-only", targets=(TARGET,))
def lws_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, TARGET, "train"),
                 "a LeaderWorkerSet from parc serves a model: its pods run a serving engine, and this spec trains "
                 "(it has a `train` block)",
                 help="compile training for Kubernetes with `target kubernetes` (a PyTorchJob), or replace `train` "
                      "with `serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


# ------------------------------------------------------------------------------------ P676

@rule("P676", "lws-engine-unavailable", targets=(TARGET,))
def lws_engine(plan, c):
    """Each engine's image and health path are data in target.toml's [engines]; an engine
    without them has no command to put in the pods (a choice of the `engine` key added before
    its facts)."""
    if plan.mode != "serve" or engine_facts(plan):
        return
    known = [e for e in engines(TARGET) if (spec(TARGET) or {}).get("engines", {}).get(e)]
    c.report(c.at(f"target.{TARGET}.engine", f"target.{TARGET}"),
             f"engine = \"{engine(plan)}\" has no command in this parc: a LeaderWorkerSet's pods run the engine "
             f"target's command, with the image and health endpoint parc knows for it",
             help="use one of " + join([f"`engine = \"{e}\"`" for e in known], "or"))


# ------------------------------------------------------------------------------------ P677

@rule("P677", "lws-name", targets=(TARGET,))
def lws_names(plan, c):
    check_names(plan, c, TARGET, NAME_MAX)


# ------------------------------------------------------------------------------------ P678

@rule("P678", "lws-groups-exceed-nodes", targets=(TARGET,))
def lws_groups_fit(plan, c):
    """Ray places a replica that is not a whole number of nodes (vLLM's multiprocessing launch
    cannot: P651), but each of the group's pods takes a whole node, so the groups may need more
    nodes than the cluster has; the LeaderWorkerSet is accepted and its pods wait, unscheduled."""
    from parc.targets.lws import groups

    cl = plan.cluster
    if plan.mode != "serve" or plan.world_size > cl.world:
        return   # P101 says it
    g = groups(plan)
    if g.size == 1 or g.size * g.replicas <= cl.nodes:
        return
    c.report(c.at("mesh"),
             f"the LeaderWorkerSet needs {count(g.replicas, 'group')} of {count(g.size, 'whole node')} "
             f"(each pod asks for {count(g.gpus, 'GPU')}), {g.replicas * g.size} nodes, and the cluster has "
             f"{cl.nodes}: Kubernetes accepts it, and the last groups' pods stay Pending",
             help="choose tp·pp·cp that is a multiple of gpus_per_node, or fewer replicas (dp)",
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}")])


# ------------------------------------------------------------------------------------ P679

@rule("P679", "lws-infiniband-unreachable", severity=WARNING, targets=(TARGET,))
def lws_infiniband(plan, c):
    """A group's pods on different nodes talk over NCCL; a pod sees the nodes' InfiniBand
    adapters only through an RDMA device plugin's resource (as P663 says for the PyTorchJob)."""
    from parc.targets.lws import groups

    cl = plan.cluster
    if plan.mode != "serve" or cl.inter_node is None or cl.inter_node.kind != "infiniband":
        return
    if settings(plan, TARGET).get("rdma_resource") or plan.world_size > cl.world or groups(plan).size == 1:
        return
    c.report(c.at("cluster.inter_node", "cluster"),
             f"each group of the LeaderWorkerSet spans {count(groups(plan).size, 'node')} linked by InfiniBand, but a "
             "pod sees no InfiniBand device unless it asks for one: NCCL would fall back to TCP sockets over the pod "
             "network",
             help="add `rdma_resource = \"rdma/rdma_shared_device_a\"` (the resource your RDMA device plugin "
                  "advertises) to `target lws`",
             related=[(c.at("target.lws"), "target lws")] if "target.lws" in plan.spans else [])
