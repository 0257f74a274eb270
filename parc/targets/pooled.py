"""The launch of a prefill/decode-disaggregated vLLM plan on a set of nodes: ``node.sh``, which
every node of the allocation runs with its index, starts the instances
:func:`parc.model.pools.instances` places on that node (each the vllm target's pool script,
unchanged) and, on node 0, the proxy in front of them.

The slurm and skypilot targets run it on every node (``srun``; SkyPilot's ``run``), giving it the
addresses of all nodes in node order (``PARC_HOSTS``: from ``scontrol show hostnames`` or
``SKYPILOT_NODE_IPS``), from which it takes each instance's first node as that instance's
``MASTER_ADDR`` and the proxy's ``PREFILL_HOSTS``/``DECODE_HOSTS``. One allocation with a
dispatch by node index, rather than a job per pool or Slurm's heterogeneous job components:
instances smaller than a node share nodes, across pools too (vLLM's and SGLang's one-node
disaggregation examples), which node sets per pool cannot express, and the proxy needs every
instance's address, which one node list gives."""
from __future__ import annotations

from parc.model.pools import instances, nodes_needed
from parc.targets.base import File, mesh_text, spec_name
from parc.words import count


def _host(node: int) -> str:
    return f'"${{hosts[{node}]}}"'


def node_commands(plan, names: set[str]) -> dict[int, list[tuple[str, str]]]:
    """For each node index, the shell commands node.sh starts there: every instance's pool
    script (``names``: the vllm target's file names) with its node rank or slot, and on node 0
    the proxy with the first node of every instance."""
    from parc.model.pools import slot_of
    from parc.targets.vllm import pool_slots

    pools = {p.name: p for p in plan.pools}
    out: dict[int, list[tuple[str, str]]] = {}
    placed = instances(plan)
    for inst in placed:
        launch = f"{inst.pool}-launch.sh"
        for rank, node in enumerate(inst.nodes):
            if launch in names:
                cmd = f'MASTER_ADDR={_host(inst.nodes[0])} bash "$here/{launch}" {rank}'
            else:
                cmd = f'bash "$here/{inst.pool}-serve.sh"'
                if pool_slots(plan, pools[inst.pool]) > 1:
                    cmd += f" {slot_of(plan, inst)}"
            out.setdefault(node, []).append((cmd, f"{inst.pool} instance {inst.index}"
                                             + (f", its node {rank}" if len(inst.nodes) > 1 else "")))
    hosts = {p: " ".join(f"${{hosts[{i.nodes[0]}]}}" for i in placed if i.pool == p) for p in pools}
    out.setdefault(0, []).append((f'PREFILL_HOSTS="{hosts["prefill"]}" DECODE_HOSTS="{hosts["decode"]}" '
                                 'bash "$here/proxy.sh"', "the proxy in front of the instances"))
    return dict(sorted(out.items()))


def node_files(plan) -> list[File]:
    """The vllm target's files for the pooled ``plan`` and ``node.sh``, which every node runs."""
    from parc.targets import vllm
    from parc.targets.render import Quoted, render

    # the commands are shell text parc writes itself: fixed file names, numbers and ${hosts[i]}
    files = vllm.build(plan)
    n = nodes_needed(plan)
    header = [f"The nodes of the disaggregated vLLM plan compiled by parc from {spec_name(plan)}: every node runs "
              f"node.sh NODE (0 to {n - 1}), which starts the pool instances placed on it "
              "(and on node 0 the proxy).",
              "PARC_HOSTS lists the address of every node in node order (spaces or newlines); without an argument "
              "the node comes from SLURM_NODEID or NODE_RANK.",
              pools_text(plan) + f"; {count(n, 'node')} in all."]
    text = render("_shared/node.sh.j2", header=header, need_here=True, nnodes=n,
                  nodes={n: [(Quoted(cmd), what) for cmd, what in cmds]
                         for n, cmds in node_commands(plan, {f.path for f in files}).items()})
    return files[:-1] + [File("node.sh", text, True), files[-1]]


def pools_text(plan) -> str:
    """The pools of a disaggregated plan in words, for the launch files' headers (their mesh:
    the plan's own mesh is only the defaults the pools inherit)."""
    from parc.model.pools import pool_plans

    return "Pools: " + "; ".join(f"{p.name} {count(p.instances, 'instance')} of {mesh_text(pp)}"
                                 for p, pp in pool_plans(plan))
