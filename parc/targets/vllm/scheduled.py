"""vLLM under a scheduler (parc/targets/engines.py): the vllm target's files, the script every
node runs, and the same launch as runs of pods.

* files: what ``parc compile --target vllm`` emits; every node runs launch.sh (serve.sh on one
  node) with its node rank; a disaggregated plan adds node.sh (:mod:`parc.targets.pooled`), which
  starts the pool scripts of the instances placed on each node and the proxy on node 0;
* runs: a replica (tp·pp·cp GPUs) larger than a node is a run of replica / gpus_per_node whole
  nodes, and the plan's dp replicas are that many independent runs (servers behind one address); a
  replica that fits in a node is a run of one node with the replica's GPUs. An expert-parallel plan
  with dp > 1 is one engine (vLLM's experts span dp·cp·tp): one run of every node, with vLLM's
  own data parallelism inside. A pool's instances are runs of the instance's nodes. Each run's
  commands are ``vllm serve`` with the vllm target's options for it (``serve_lines``); with Ray
  the leader starts the Ray head first and the workers join it; a data-parallel worker's first
  rank is its node rank times the replicas a node holds (a :class:`Product`).
"""
from __future__ import annotations

import dataclasses
from functools import partial

from parc.targets.base import Cat, Env, File, Var, settings
from parc.targets.engines import Front, NodeLaunch, Product, Run, flat
from parc.targets.pooled import host, hosts_word, node_file, pools_text, with_node_sh


def one_engine(plan) -> bool:
    """Whether the whole plan is one engine: expert parallelism spans dp (vLLM's ep = dp·cp·tp)."""
    return plan.model.is_moe and plan.mesh.ep > 1 and plan.mesh.dp > 1


def commands(plan, sub, pool: str | None = None) -> tuple[tuple, tuple | None]:
    """(the leader's command, the workers'; None for a run of one node) of a run launching
    ``sub`` (an instance of ``pool`` in a disaggregated plan)."""
    from parc.targets.vllm import RAY_PORT, TARGET, launch_mode, options, serve_lines

    head = ("vllm", "serve", settings(plan, TARGET).get("model", ""))
    mode = launch_mode(sub)
    if mode == "single":
        return (head + flat(serve_lines(sub, None, pool)),), None
    leader = head + flat(serve_lines(sub, 0, pool))
    if mode == "ray":
        # node 0 starts the Ray head, then serves; the others join it (vLLM waits for their GPUs)
        return ((("ray", "start", "--head", "--port", RAY_PORT), leader),
                (("ray", "start", "--address", Cat((Var("master_addr"), f":{RAY_PORT}")), "--block"),))
    worker = head + flat(serve_lines(sub, Var("node_rank"), pool))
    if mode == "dp":
        local = worker[worker.index(options(sub)("data_parallel_size_local")) + 1]
        worker = tuple(Product(Var("node_rank"), local) if w == Var("start_rank") else w for w in worker)
    return (leader,), (worker,)


def _env(plan, pool: str | None = None, whole=None) -> tuple[Env, ...]:
    """The environment of a run of ``plan`` (an instance of ``pool`` of the disaggregated plan
    ``whole``): the pipeline's layer partition, a pool instance's API port and, with
    NixlConnector, its side-channel host, the address of its own node (``host_ip``: every run of
    a scheduler is a node or pod of its own, :func:`parc.targets.vllm.nixl_host`)."""
    from parc.targets.vllm import POOL_PORTS, nixl_host, uneven_partition

    part = uneven_partition(plan)
    out = [Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part)))] if part else []
    if pool:
        out.append(Env("PARC_PORT", str(POOL_PORTS[pool])))
    if pool and nixl_host(whole):
        out.append(Env("VLLM_NIXL_SIDE_CHANNEL_HOST", Var("host_ip")))
    return tuple(out)


def runs(plan) -> tuple[Run, ...]:
    """The plan as runs of pods (the module doc)."""
    from parc.model.pools import pool_plans
    from parc.targets.vllm import POOL_PORTS, TARGET, replica

    if plan.pools:
        out = []
        for pool, pp in pool_plans(plan):
            leader, worker = commands(plan, pp, pool.name)
            out.append(Run(pp.cluster.nodes, pool.instances, pp.cluster.gpus_per_node, leader, worker,
                           _env(pp, pool.name, plan), POOL_PORTS[pool.name], pool.name, pp))
        return tuple(out)
    me, cl = plan.mesh, plan.cluster
    g = cl.gpus_per_node
    if one_engine(plan):
        size, replicas, gpus, sub = cl.nodes, 1, (g if cl.nodes > 1 else plan.world_size), plan
    else:
        r = replica(plan)
        size, replicas = -(-r // g), me.dp
        gpus = g if size > 1 else r
        sub = dataclasses.replace(plan, mesh=dataclasses.replace(me, dp=1),
                                  cluster=dataclasses.replace(cl, nodes=size, gpus_per_node=gpus))
    leader, worker = commands(plan, sub)
    return (Run(size, replicas, gpus, leader, worker, _env(plan), settings(plan, TARGET).get("port", 8000),
                plan=sub),)


def _proxy(hosts: dict[str, list[str]]) -> tuple[tuple, tuple[Env, ...]]:
    return (("bash", Cat((Var("dir"), "/proxy.sh"))),
            (Env("PREFILL_HOSTS", " ".join(hosts["prefill"])), Env("DECODE_HOSTS", " ".join(hosts["decode"]))))


def node_commands(plan, names: set[str]) -> dict[int, list[tuple[str, str]]]:
    """For each node index, node.sh's commands there: every instance's pool script (``names``:
    the vllm target's file names) with its node rank or slot, and on node 0 the proxy with the
    first node of every instance."""
    from parc.model.pools import instances, slot_of
    from parc.targets.vllm import pool_slots

    pools = {p.name: p for p in plan.pools}
    out: dict[int, list[tuple[str, str]]] = {}
    placed = instances(plan)
    for inst in placed:
        launch = f"{inst.pool}-launch.sh"
        for rank, node in enumerate(inst.nodes):
            if launch in names:
                cmd = f'MASTER_ADDR={host(inst.nodes[0])} bash "$here/{launch}" {rank}'
            else:
                cmd = f'bash "$here/{inst.pool}-serve.sh"'
                if pool_slots(plan, pools[inst.pool]) > 1:
                    cmd += f" {slot_of(plan, inst)}"
            out.setdefault(node, []).append((cmd, f"{inst.pool} instance {inst.index}"
                                             + (f", its node {rank}" if len(inst.nodes) > 1 else "")))
    first = {p: [i.nodes[0] for i in placed if i.pool == p] for p in pools}
    out.setdefault(0, []).append((f'PREFILL_HOSTS={hosts_word(first["prefill"])} '
                                  f'DECODE_HOSTS={hosts_word(first["decode"])} bash "$here/proxy.sh"',
                                  "the proxy in front of the instances"))
    return out


def _files(plan) -> tuple[File, ...]:
    from parc.model.pools import nodes_needed
    from parc.targets.vllm import build

    files = build(plan)
    if not plan.pools:
        return tuple(files)
    node_sh = node_file(plan, nodes_needed(plan), node_commands(plan, {f.path for f in files}),
                        "the disaggregated vLLM plan", pools_text(plan))
    return with_node_sh(files, node_sh)


def node_launch(plan) -> NodeLaunch:
    from parc.model.pools import nodes_needed
    from parc.targets.vllm import PROXY_PORT, TARGET, launch_mode
    from parc.targets.vllm import _proxy as proxy_text

    if plan.pools:
        front = Front("proxy.sh", PROXY_PORT, _proxy, lambda: File("proxy.sh", proxy_text(plan, apart=True), True))
        return NodeLaunch(TARGET, partial(_files, plan), "node.sh", nodes_needed(plan), runs(plan),
                          "the pools' vllm serve instances", hosts=True, front=front, port=PROXY_PORT)
    script = "launch.sh" if launch_mode(plan) != "single" else "serve.sh"
    return NodeLaunch(TARGET, partial(_files, plan), script, plan.cluster.nodes, runs(plan), "vllm serve",
                      port=settings(plan, TARGET).get("port", 8000))
