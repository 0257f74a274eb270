"""P117–P120: a prefill/decode-disaggregated serving plan as a whole: its pools on the cluster.

Each pool's own mesh is judged by every other rule, on the plan of one of its instances
(:func:`parc.model.pools.pool_plan`); these rules look at the pools together, once."""
from __future__ import annotations

from parc.model.pools import nodes_needed
from parc.rules import WARNING, rule
from parc.rules.util import plural
from parc.words import count


def _pools_desc(plan) -> str:
    return " and ".join(f"{p.name} {p.instances} × {count(p.mesh.product, 'GPU')}" for p in plan.pools)


# ------------------------------------------------------------------------------------ P117

@rule("P117", "pools-fit-cluster", whole=True)
def pools_fit(plan, c):
    if not plan.pools:
        return
    cl = plan.cluster
    need = plan.world_size
    nodes = nodes_needed(plan)
    if need <= cl.world and nodes <= cl.nodes:
        return
    fix = f"ask for `nodes = {nodes}` in the cluster"
    big = max(plan.pools, key=lambda p: p.gpus)
    if big.instances > 1:
        fix += f", or fewer {big.name} `instances`"
    why = (f"{count(need, 'GPU')}" if need > cl.world else
           f"{plural(nodes, 'node')} (an instance of a node or more takes whole nodes of its own)")
    c.report(c.at(f"{big.name}.instances", big.name),
             f"the pools need {why} ({_pools_desc(plan)}) but cluster \"{cl.name}\" has "
             f"{count(cl.world, 'GPU')} on {plural(cl.nodes, 'node')}", help=fix,
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}, gpus_per_node = {cl.gpus_per_node}")])


# ------------------------------------------------------------------------------------ P118

@rule("P118", "pools-idle-gpus", severity=WARNING, whole=True)
def pools_idle(plan, c):
    if not plan.pools:
        return
    cl = plan.cluster
    need = plan.world_size
    if need >= cl.world:
        return
    c.report(c.at("serve"),
             f"the pools use {count(need, 'GPU')} ({_pools_desc(plan)}) of cluster \"{cl.name}\"'s "
             f"{cl.world}: {cl.world - need} would sit idle",
             help="add `instances` to the pool that limits the service (the decode pool when requests "
                  "wait for tokens, the prefill pool when they wait for their first), or ask for fewer nodes")


# ------------------------------------------------------------------------------------ P119

@rule("P119", "pool-instance-whole-nodes", whole=True)
def pool_whole_nodes(plan, c):
    per = plan.cluster.gpus_per_node
    for p in plan.pools:
        g = p.mesh.product
        if g <= per or g % per == 0:
            if g < per and per % g:
                c.report(c.at(p.name),
                         f"a {p.name} instance takes {count(g, 'GPU')}, which does not divide a node's {per}: "
                         f"{per % g} GPUs of every node its instances share would sit idle",
                         help=f"choose an instance size that divides {per}", severity=WARNING)
            continue
        c.report(c.at(p.name),
                 f"a {p.name} instance takes {count(g, 'GPU')}, more than a node's {per} but not a whole "
                 f"number of nodes: the engines give every node of an instance the same number of GPUs",
                 help=f"make the {p.name} mesh a multiple of {per} GPUs ({per * (g // per)} or {per * (g // per + 1)})")


# ------------------------------------------------------------------------------------ P120

@rule("P120", "kv-transfer-needs-pools", severity=WARNING, whole=True)
def kv_transfer_alone(plan, c):
    srv = plan.serve
    if plan.pools or srv is None or srv.kv_transfer is None:
        return
    c.report(c.at("serve.kv_transfer"),
             f"`kv_transfer = {srv.kv_transfer}` moves KV caches between prefill and decode instances, but "
             "this plan serves both on one mesh: nothing uses it",
             help="add `prefill { ... }` and `decode { ... }` pools inside `serve`, or remove `kv_transfer`")
