"""SGLang under a scheduler (parc/targets/engines.py): the sglang target's files, the script every
node runs, and the same launch as runs of pods.

* files: what ``parc compile --target sglang`` emits. One server (over one node or several) is
  launch.sh (serve.sh on one node) on every node with its node rank and node 0's address. Several
  servers each need their own first node's address (``--dist-init-addr``) and, where the sglang
  target puts one in front, router.sh with every server's first node; a disaggregated plan needs
  its pools' scripts placed node by node. Those are node.sh (:mod:`parc.targets.pooled`): each node
  runs its server's script with its node rank and its server's first node as ``MASTER_ADDR``,
  node 0 the router too;
* runs: one per server as the sglang target lays servers out (``layout``: ``size`` its nodes,
  ``replicas`` the servers, each node the server's GPUs over its nodes), the commands
  ``python3 -m sglang.launch_server`` with the sglang target's options (``server_lines``), a
  worker's node rank its rank in its server; a pool's servers repeat for each instance.
"""
from __future__ import annotations

from functools import partial

from parc.targets.base import Cat, File, Var, settings
from parc.targets.engines import Front, NodeLaunch, Run, flat
from parc.targets.pooled import host, node_file, pools_text, with_node_sh


def _run(plan, sub, replicas: int, side: str | None = None) -> Run:
    """The run of one server launching ``sub`` (a pool's instance, on ``side``)."""
    from parc.targets.sglang import PORT, TARGET, layout, server_lines

    lay = layout(sub)
    head = ("python3", "-m", "sglang.launch_server", "--model-path", settings(plan, TARGET).get("model", ""))
    leader = (head + flat(server_lines(sub, 0, side)),)
    worker = (head + flat(server_lines(sub, Var("node_rank"), side)),) if lay.nnodes > 1 else None
    return Run(lay.nnodes, lay.servers * replicas, lay.tp_size * lay.pp_size * lay.dp_size // lay.nnodes, leader,
               worker, (), settings(plan, TARGET).get("port", PORT), side, sub)


def runs(plan) -> tuple[Run, ...]:
    from parc.model.pools import pool_plans

    if plan.pools:
        return tuple(_run(plan, pp, pool.instances, pool.name) for pool, pp in pool_plans(plan))
    return (_run(plan, plan, 1),)


def _router(hosts: dict[str, list[str]]) -> tuple[tuple, tuple]:
    return ("bash", Cat((Var("dir"), "/router.sh")), *hosts["prefill"], *hosts["decode"]), ()


def _servers(script: str, nodes: list[int], nnodes: int, multi: bool, what: str) -> dict[int, list[tuple[str, str]]]:
    """node.sh's commands for the servers of one script over ``nodes`` (allocation indices, in the
    script's node order): each node runs it with its rank, its server's first node as MASTER_ADDR
    where a server spans several nodes."""
    out: dict[int, list[tuple[str, str]]] = {}
    for j, node in enumerate(nodes):
        first = nodes[j // nnodes * nnodes]
        cmd = (f"MASTER_ADDR={host(first)} " if nnodes > 1 else "") + f'bash "$here/{script}"' + (f" {j}" if multi else "")
        out.setdefault(node, []).append((cmd, f"{what} server {j // nnodes}" + (f", its node {j % nnodes}"
                                                                               if nnodes > 1 else "")))
    return out


def node_commands(plan) -> dict[int, list[tuple[str, str]]]:
    """Each node's commands in node.sh: its servers' scripts, and on node 0 router.sh with the
    first node of every server (prefill's, then decode's)."""
    from parc.model.pools import instances, slot_of
    from parc.targets.sglang import layout, pool_layouts, pool_slots, router

    out: dict[int, list[tuple[str, str]]] = {}
    firsts: list[int] = []
    if plan.pools:
        placed = instances(plan)
        for side, _, lay in pool_layouts(plan):
            slots = pool_slots(plan, side)
            if slots:   # instances on part of a node: one server each, its script given its slot
                for inst in (i for i in placed if i.pool == side):
                    cmd = f'bash "$here/{side}.sh"' + (f" {slot_of(plan, inst)}" if slots["count"] > 1 else "")
                    out.setdefault(inst.nodes[0], []).append((cmd, f"{side} server {inst.index}"))
                    firsts.append(inst.nodes[0])
                continue
            nodes = [n for i in placed if i.pool == side for n in i.nodes]
            for node, cmds in _servers(f"{side}.sh", nodes, lay.nnodes, lay.nodes > 1, side).items():
                out.setdefault(node, []).extend(cmds)
            firsts += nodes[::lay.nnodes]
    else:
        lay = layout(plan)
        out = _servers("launch.sh", list(range(lay.nodes)), lay.nnodes, lay.nodes > 1, "SGLang")
        firsts = list(range(0, lay.nodes, lay.nnodes))
    if plan.pools or router(plan):
        out.setdefault(0, []).append(('bash "$here/router.sh" ' + " ".join(host(n) for n in firsts),
                                      "the router in front of the servers"))
    return out


def dispatched(plan) -> bool:
    """Whether the plan needs node.sh: pools, or several servers that need each their own first
    node's address or the router in front."""
    from parc.targets.sglang import layout, router

    lay = layout(plan)
    return bool(plan.pools) or (lay.servers > 1 and (lay.nnodes > 1 or router(plan)))


def _nodes(plan) -> int:
    from parc.model.pools import nodes_needed
    from parc.targets.sglang import layout

    return nodes_needed(plan) if plan.pools else layout(plan).nodes


def _files(plan) -> tuple[File, ...]:
    from parc.targets.sglang import build, layout

    files = build(plan)
    if not dispatched(plan):
        return tuple(files)
    what = pools_text(plan) if plan.pools else f"{layout(plan).servers} SGLang servers"
    return with_node_sh(files, node_file(plan, _nodes(plan), node_commands(plan), "the SGLang plan", what))


def node_launch(plan) -> NodeLaunch:
    from parc.targets.sglang import PORT, ROUTER_PORT, TARGET, _pd_router_script, layout, pool_layouts, router

    s = settings(plan, TARGET)
    front = None
    if plan.pools:
        apart = (lambda: File("router.sh", _pd_router_script(plan, pool_layouts(plan), apart=True), True))
        front = Front("router.sh", s.get("router_port", ROUTER_PORT), _router, apart)
    if dispatched(plan):
        script = "node.sh"
    else:
        script = "launch.sh" if layout(plan).nodes > 1 else "serve.sh"
    # clients reach the router where one stands in front of the servers, else the one server
    port = s.get("router_port", ROUTER_PORT) if plan.pools or router(plan) else s.get("port", PORT)
    return NodeLaunch(TARGET, partial(_files, plan), script, _nodes(plan), runs(plan),
                      "python3 -m sglang.launch_server", hosts=dispatched(plan), front=front, port=port)
