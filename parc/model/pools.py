"""The pools of a prefill/decode-disaggregated serving plan, each as the plan one of its
instances runs.

A disaggregated spec (`serve { prefill { ... }  decode { ... } }`) describes two kinds of engine
on one cluster: prefill instances that process prompts and hand their KV cache over
(``serve.kv_transfer``), and decode instances that generate. Every engine instance is an ordinary
serving plan with its pool's mesh, so the checks, the estimate and the launch files of a pool are
those of that plan: :func:`pool_plan` builds it, and every command asks here rather than
re-deriving a pool's layout."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from parc.model.params import resolve_split
from parc.model.plan import Plan, Pool

_MESH_KEYS = ("pp", "dp", "cp", "tp", "ep", "etp", "dcp")


# --- the GPUs of an engine instance: the one owner ------------------------------------------------

def replica_gpus(mesh) -> int:
    """GPUs of one data-parallel rank of a serving engine, the unit that holds its own requests
    and KV cache: pp · cp · tp (vLLM's and SGLang's replica; ``mesh`` any object with those
    degrees)."""
    return mesh.pp * mesh.cp * mesh.tp


def instance_gpus(mesh) -> int:
    """GPUs of one engine instance: every data-parallel rank of its mesh, pp · dp · cp · tp (a
    pool's instance; the engine of ``dp_attention`` or of vLLM's data parallelism). Every
    command that counts an instance's GPUs (explain's pools, the pictures, the launchers, the
    rules, ``parc plan --serve``) asks here."""
    return replica_gpus(mesh) * mesh.dp


def pool_cluster(plan: Plan, pool: Pool):
    """The hosts one instance of ``pool`` runs on: whole nodes when it is larger than a node,
    else the part of one node it takes (the rank map and the launchers see exactly those GPUs)."""
    cl = plan.cluster
    gpus = instance_gpus(pool.mesh)
    if gpus >= cl.gpus_per_node:
        return dataclasses.replace(cl, nodes=math.ceil(gpus / cl.gpus_per_node))
    return dataclasses.replace(cl, nodes=1, gpus_per_node=gpus)


def pool_plan(plan: Plan, pool: Pool) -> Plan:
    """The serving plan one instance of ``pool`` runs: the spec with the pool's mesh on the GPUs
    of :func:`pool_cluster`, its ``role`` the pool's side (what the engine's start-up reads:
    :func:`parc.cost.engine.server_role`); a diagnostic about its mesh points at the pool's keys."""
    spans = dict(plan.spans)
    head = plan.spans.get(pool.name)
    for key in _MESH_KEYS:
        s = plan.spans.get(f"{pool.name}.{key}", head)
        if s is not None:
            spans[f"mesh.{key}"] = s
        v = plan.spans.get(f"{pool.name}.{key}.value")
        if v is not None:
            spans[f"mesh.{key}.value"] = v
        else:
            spans.pop(f"mesh.{key}.value", None)
    if head is not None:
        spans["mesh"] = head
    serve = plan.serve
    if pool.max_num_seqs is not None and serve is not None:
        serve = dataclasses.replace(serve, max_num_seqs=pool.max_num_seqs)
        spans["serve.max_num_seqs"] = plan.spans.get(f"{pool.name}.max_num_seqs", head)
    out = dataclasses.replace(plan, mesh=pool.mesh, cluster=pool_cluster(plan, pool), pools=[], spans=spans,
                              placement=dataclasses.replace(plan.placement), serve=serve, role=pool.name)
    resolve_split(out)    # the pool's own pipeline, split as its engine splits it
    return out


def pool_plans(plan: Plan) -> list[tuple[Pool, Plan]]:
    """Each pool with the plan of one of its instances, prefill first; empty for one mesh."""
    return [(p, pool_plan(plan, p)) for p in plan.pools]


@dataclass(frozen=True, slots=True)
class Instance:
    """Where one engine instance of a pool runs: ``nodes`` (indices into the cluster's nodes,
    in order) and, on each of them, the local GPUs ``first`` .. ``first + gpus_per_node - 1``."""
    pool: str
    index: int             # among its pool's instances
    nodes: tuple[int, ...]
    first: int             # first local GPU on each node
    gpus_per_node: int     # GPUs it takes on each of its nodes

    @property
    def devices(self) -> str:
        """Its CUDA_VISIBLE_DEVICES on each of its nodes, like ``4,5,6,7``."""
        return ",".join(str(g) for g in range(self.first, self.first + self.gpus_per_node))


def instances(plan: Plan) -> list[Instance]:
    """Every engine instance of every pool, placed on the cluster: an instance of a node or more
    takes whole nodes of its own; smaller ones share nodes, each on the next free GPUs of the
    node the previous one left room on (so two pools may share a node, as vLLM's and SGLang's
    one-node disaggregation examples do). The launch files and P117 read this placement."""
    per = plan.cluster.gpus_per_node
    out: list[Instance] = []
    next_node, node, used = 0, None, 0     # the node small instances fill, and its GPUs in use
    for pool in plan.pools:
        g = instance_gpus(pool.mesh)
        for i in range(pool.instances):
            if g >= per:
                n = math.ceil(g / per)
                out.append(Instance(pool.name, i, tuple(range(next_node, next_node + n)), 0, per))
                next_node += n
                continue
            if node is None or used + g > per:
                node, used = next_node, 0
                next_node += 1
            out.append(Instance(pool.name, i, (node,), used, g))
            used += g
    return out


def nodes_needed(plan: Plan) -> int:
    """The nodes every instance of every pool together takes (:func:`instances`)."""
    return max((max(i.nodes) + 1 for i in instances(plan)), default=0)


def placements(plan: Plan, pool: str) -> list[Instance]:
    """The places the instances of ``pool`` take on their nodes, one per first GPU, in GPU order:
    the slots of the pool's launch script, each with its own GPUs and ports. Instances on
    different nodes at the same GPUs share a slot; an instance of a node or more has one."""
    seen: dict[int, Instance] = {}
    for inst in instances(plan):
        if inst.pool == pool:
            seen.setdefault(inst.first, inst)
    return [seen[k] for k in sorted(seen)]


def slot_of(plan: Plan, inst: Instance) -> int:
    """The slot (:func:`placements`) of instance ``inst`` in its pool's launch script."""
    return [p.first for p in placements(plan, inst.pool)].index(inst.first)


def shares_nodes(plan: Plan, pool: str) -> bool:
    """Whether an instance of ``pool`` leaves GPUs of its node to others (its own pool's or the
    other pool's): it then needs its own GPUs and ports on that node."""
    return any(i.pool == pool and i.gpus_per_node < plan.cluster.gpus_per_node for i in instances(plan))
