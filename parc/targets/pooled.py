"""node.sh: the launch of a plan that is several runs of an engine on one set of nodes (the
instances of a prefill/decode-disaggregated plan's pools; SGLang servers behind a router), which
every node of the allocation runs with its index. It starts the commands its engine places on
that node (each the engine's own script for one instance or server, unchanged) and, on node 0,
the proxy or router in front of them. The engine says what runs where
(``parc.targets.vllm.scheduled``, ``parc.targets.sglang.scheduled``: a shell command per node,
written with :func:`host`); this module writes the script.

The slurm and skypilot targets run it on every node (``srun``; SkyPilot's ``run``), giving it the
addresses of all nodes in node order (``PARC_HOSTS``: from ``scontrol show hostnames`` or
``SKYPILOT_NODE_IPS``), from which each command takes its run's first node (``MASTER_ADDR``) and
the proxy or router the first node of every run. One allocation with a dispatch by node index,
rather than a job per pool or Slurm's heterogeneous job components: instances smaller than a node
share nodes, across pools too (vLLM's and SGLang's one-node disaggregation examples), which node
sets per pool cannot express, and the proxy needs every instance's address, which one node list
gives."""
from __future__ import annotations

from parc.targets.base import File, mesh_text, spec_name
from parc.words import count


def host(node: int) -> str:
    """Node ``node``'s address in node.sh, as one shell word."""
    return f'"${{hosts[{node}]}}"'


def hosts_word(nodes) -> str:
    """The addresses of ``nodes`` as one shell word, separated by spaces."""
    return '"' + " ".join(f"${{hosts[{n}]}}" for n in nodes) + '"'


def node_file(plan, nodes: int, commands: dict[int, list[tuple[str, str]]], what: str, summary: str) -> File:
    """node.sh for ``nodes`` nodes: on each, the shell commands ``commands`` lists for it, each
    with what it is (text parc writes itself: fixed file names, numbers, :func:`host` words).
    ``what`` says what the runs are, ``summary`` their layout (the header)."""
    from parc.targets.render import Quoted, render

    header = [f"The nodes of {what} compiled by parc from {spec_name(plan)}: every node runs node.sh NODE "
              f"(0 to {nodes - 1}), which starts the processes placed on it (and on node 0 the one in front of them).",
              "PARC_HOSTS lists the address of every node in node order (spaces or newlines); without an argument "
              "the node comes from SLURM_NODEID or NODE_RANK.",
              f"{summary}; {count(nodes, 'node')} in all."]
    text = render("_shared/node.sh.j2", header=header, need_here=True, nnodes=nodes,
                  nodes={n: [(Quoted(cmd), w) for cmd, w in cmds] for n, cmds in sorted(commands.items())})
    return File("node.sh", text, True)


def with_node_sh(files: list[File], node_sh: File) -> tuple[File, ...]:
    """The engine's files with node.sh before plan.json (which stays last)."""
    return tuple(files[:-1]) + (node_sh, files[-1])


def pools_text(plan) -> str:
    """The pools of a disaggregated plan in words, for the launch files' headers (their mesh:
    the plan's own mesh is only the defaults the pools inherit)."""
    from parc.model.pools import pool_plans

    return "Pools: " + "; ".join(f"{p.name} {count(p.instances, 'instance')} of {mesh_text(pp)}"
                                 for p, pp in pool_plans(plan))
