"""Kubernetes' own rules: names and settings the API server or the pods would refuse."""
from __future__ import annotations

from parc.model.targets import display, engine_of
from parc.rules import WARNING, rule
from parc.targets.base import dns_label, is_dns_label, settings
from parc.targets.engines import launch
from parc.targets.kubernetes import NAME_MAX, NAMESPACE_MAX, RESOURCE, TARGET, image_hint
from parc.words import count


@rule("P650", "kubernetes-image-missing", targets=(TARGET,))
def kubernetes_image(plan, c):
    """The entry point is P602's; the container image is what only Kubernetes needs."""
    if "image" not in settings(plan, TARGET):
        engine = engine_of(plan, TARGET)
        c.report(c.at("target.kubernetes"), "target kubernetes needs `image` (the container image every pod runs)",
                 help=f"add `image = \"{image_hint(engine)}\"` (or your own image with {display(engine)}) to "
                      "`target kubernetes { ... }`")


@rule("P661", "kubernetes-name", targets=(TARGET,))
def names(plan, c):
    check_names(plan, c, TARGET, NAME_MAX)


def check_names(plan, c, target: str, name_max: int) -> None:
    """The names and resource keys of a Kubernetes target's block (``name`` at most ``name_max``
    characters): the checks of P661, shared with every target that writes Kubernetes objects."""
    s = settings(plan, target)
    # the object's name becomes Service names (DNS-1035); a namespace is a DNS-1123 label
    for key, limit, rfc, first in (("name", name_max, 1035, "a letter"), ("namespace", NAMESPACE_MAX, 1123,
                                                                         "a letter or digit")):
        v = s.get(key)
        if v is not None and limit < len(v) <= NAMESPACE_MAX and is_dns_label(v, NAMESPACE_MAX, rfc):
            c.report(c.at(f"target.{target}.{key}", f"target.{target}"),
                     f"`{key}` has {len(v)} characters, more than the {limit} parc allows: the API server accepts "
                     f"names of up to {NAMESPACE_MAX}, but the pods and services named after it add suffixes and "
                     f"fail when they start once those names pass {NAMESPACE_MAX} characters (parc is stricter here)",
                     help=f"for example `{key} = \"{dns_label(v, limit)}\"`")
        elif v is not None and not is_dns_label(v, limit, rfc):
            c.report(c.at(f"target.{target}.{key}", f"target.{target}"),
                     f"`{key}` must be a Kubernetes name: lowercase letters, digits and '-', starting with "
                     f"{first} and ending with a letter or digit, at most {limit} characters (no newline)",
                     help=f"for example `{key} = \"{dns_label(v, limit)}\"`")
    rdma = s.get("rdma_resource")
    if rdma is not None and not (RESOURCE.fullmatch(rdma) and len(rdma.partition("/")[0]) <= 253):
        c.report(c.at(f"target.{target}.rdma_resource", f"target.{target}"),
                 "`rdma_resource` must be a Kubernetes resource name (an optional DNS subdomain and '/', then at "
                 "most 63 letters, digits, '-', '_' or '.'): it becomes a key of the pods' resource requests",
                 help="use the name your RDMA device plugin advertises, such as `rdma/rdma_shared_device_a`")


@rule("P663", "kubernetes-infiniband-unreachable", severity=WARNING, targets=(TARGET,))
def infiniband(plan, c):
    """Pods on an InfiniBand cluster see no HCA unless they ask for it."""
    s = settings(plan, TARGET)
    cl = plan.cluster
    if cl.nodes == 1 or cl.inter_node is None or cl.inter_node.kind != "infiniband":
        return
    if s.get("rdma_resource"):
        return
    c.report(c.at("cluster.inter_node", "cluster"),
             f"the {count(cl.nodes, 'node')} are linked by InfiniBand, but a pod sees no InfiniBand device unless it "
             "asks for one: NCCL would fall back to TCP sockets over the pod network",
             help="add `rdma_resource = \"rdma/rdma_shared_device_a\"` (the resource your RDMA device plugin "
                  "advertises) to `target kubernetes`, with `host_network = true` where the HCAs are reached "
                  "through the node's own network",
             related=[(c.at("target.kubernetes"), "target kubernetes")])


@rule("P600", "kubernetes-pooled-serving", targets=(TARGET,), whole=True)
def pooled_serving(plan, c):
    """A PyTorchJob's pods are one world of equal ranks with one master: prefill and decode pools,
    or SGLang servers behind a router, are engines of their own, each with its own leader, which
    is what the lws target emits (a launch that needs every node's address, parc/targets/engines.py)."""
    if plan.mode != "serve" or not launch(plan, TARGET).hosts:
        return
    if plan.pools:
        what = (f"this plan's prefill and decode pools are "
                f"{count(sum(p.instances for p in plan.pools), 'engine instance')} of their own behind a proxy")
        at = c.at("prefill", "serve")
    else:
        runs = launch(plan, TARGET).runs[0]
        what = (f"this plan is {count(runs.replicas, 'server')} of {count(runs.size, 'node')} each, every one with its "
                f"own first node, behind {display(engine_of(plan, TARGET))}'s router")
        at = c.at("mesh.dp", "mesh")
    c.report(at, f"target kubernetes runs one PyTorchJob of equal pods, and {what}",
             help="compile it for target lws (a LeaderWorkerSet per pool or server, and the proxy or router in "
                  "front), or for slurm or skypilot")
