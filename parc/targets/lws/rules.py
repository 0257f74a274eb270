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


# ------------------------------------------------------------------------------------ P720

@rule("P720", "lws-disaggregated-set-without-pools", targets=(TARGET,))
def lws_dset_pools(plan, c):
    """A DisaggregatedSet has at least two roles (its CRD's spec.roles minItems 2): the pools of a
    prefill/decode-disaggregated plan. (A pooled plan is judged pool by pool, each pool's plan
    without pools: the spec's pool blocks say it has them.)"""
    if plan.mode != "serve" or plan.pools or any(p in plan.spans for p in ("prefill", "decode")):
        return
    if not settings(plan, TARGET).get("disaggregated_set"):
        return
    c.report(c.at(f"target.{TARGET}.disaggregated_set", f"target.{TARGET}"),
             "`disaggregated_set = true` makes the pools of a prefill/decode-disaggregated plan the roles of a "
             "DisaggregatedSet, and this plan has no pools: it serves every request on one kind of instance "
             "(a DisaggregatedSet needs at least 2 roles)",
             help="remove `disaggregated_set = true` (one LeaderWorkerSet serves the plan), or split the serve "
                  "block into `prefill { }` and `decode { }` pools with `kv_transfer`")


# ------------------------------------------------------------------------------------ P721

@rule("P721", "lws-disaggregated-set-router-addresses", targets=(TARGET,), whole=True)
def lws_dset_router(plan, c):
    """The SGLang router names each server it routes to, and a decode server fetches the KV cache
    from the prefill server's address the router tells it (its bootstrap port): it needs every
    server's own address. A DisaggregatedSet names its LeaderWorkerSets after a hash of the roles,
    known once it is created (pkg/utils/disaggregatedset/utils.go GenerateName), so parc reaches a
    role's leaders through one Service, which names a single server only when the pool has one
    instance."""
    from parc.targets.lws import disaggregated

    if not disaggregated(plan) or engine(plan) != "sglang":
        return
    for pool in plan.pools:
        if pool.instances == 1:
            continue
        c.report(c.at(f"target.{TARGET}.disaggregated_set", f"target.{TARGET}"),
                 f"the {pool.name} pool has {count(pool.instances, 'instance')}, and in a DisaggregatedSet parc can "
                 "reach them only through one Service (the controller names their pods after a hash of the roles): "
                 "the SGLang router must name each server, and a decode server asks the prefill server the router "
                 "names for the KV cache, so a request could be prefilled on one server and fetched from another",
                 help="remove `disaggregated_set = true` (a LeaderWorkerSet per pool, whose leaders have names), or "
                      f"serve the {pool.name} pool with `instances = 1`",
                 related=[(c.at(f"serve.{pool.name}", "serve"), f"instances = {pool.instances}")])
        return
