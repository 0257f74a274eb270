"""torchrun: one ``launch.sh`` that every node runs (it takes the node's rank as its argument, or
from ``SLURM_NODEID`` or ``NODE_RANK``, where the rendezvous needs one), and the resolved plan as
``plan.json`` beside it (``PARC_PLAN`` points at it).

Rendezvous (the three ways every node joins one world):

* one node: ``--standalone`` (a local c10d store on a free port);
* ``rdzv_endpoint`` set: ``c10d`` at that endpoint with one ``--rdzv-id`` shared by all nodes
  (torchrun assigns node ranks; every node's ranks stay consecutive, so a group that fits in a
  node still does);
* ``max_restarts`` above 0 without ``rdzv_endpoint``: ``c10d`` at ``$MASTER_ADDR:$MASTER_PORT``
  (node 0 hosts the store) with the shared ``--rdzv-id``. A static rendezvous cannot restart a
  world: the failed node's agent restarts its workers and waits for a new round that the other
  nodes never join. Under c10d every agent sees the waiting node and restarts its own workers,
  so the whole world meets again;
* otherwise ``static``: node 0 at ``$MASTER_ADDR:$MASTER_PORT`` hosts it and every node passes
  its own ``--node-rank``, so ``RANK = node_rank · nproc_per_node + local_rank`` is exactly the
  rank map ``parc explain`` prints.

Never emitted: ``--standalone`` or a ``localhost`` endpoint with several nodes, ``c10d``
without a shared id, ``static`` without a node rank — the combinations under which nodes
start separate worlds.
"""
from __future__ import annotations

from parc.targets.base import (Cat, Env, File, Var, device_env, mesh_text, nccl_env, need, plan_id, plan_json, settings,
                               spec_name)
from parc.words import count

TARGET = "torchrun"


def rendezvous(plan, endpoint: str | None, max_restarts: int = 0) -> str:
    """standalone | c10d | static (see the module doc)."""
    if plan.cluster.nodes == 1:
        return "standalone"
    return "c10d" if endpoint or max_restarts > 0 else "static"


def launcher_lines(plan, *, rdzv: str, endpoint: str | None, max_restarts: int,
                   python_module: bool = False, no_python: bool = False) -> list[list]:
    """torchrun's own options, one per line; ``python_module``: the entry point is a Python module
    (``-m``, as ``python -m``), such as torchtitan's ``torchtitan.train``; ``no_python``: it is a
    program torchrun runs as it is (``--no-python``, the block's ``no_python``)."""
    from parc.model.targets import flag

    def F(what: str) -> str:      # torchrun's options (flags.toml; torchrun has no pinned release)
        return flag(TARGET, what, None)

    cl = plan.cluster
    lines: list[list] = [[F("nnodes"), cl.nodes], [F("nproc_per_node"), cl.gpus_per_node]]
    if rdzv == "standalone":
        lines.append([F("standalone")])
    elif rdzv == "c10d":
        at = endpoint or Cat((Var("master_addr"), ":", Var("master_port")))
        lines += [[F("rdzv_backend"), "c10d"], [F("rdzv_endpoint"), at],
                  [F("rdzv_id"), "parc-" + plan_id(plan)]]
    else:
        lines += [[F("node_rank"), Var("node_rank")], [F("rdzv_backend"), "static"],
                  [F("master_addr"), Var("master_addr")], [F("master_port"), Var("master_port")]]
    lines.append([F("max_restarts"), max_restarts])
    if no_python:
        lines.append([F("no_python")])
    if python_module:
        lines.append([F("module")])
    return lines


def launch_env(plan, extra: list[Env] = ()) -> list[Env]:
    return list(extra) + device_env(plan) + nccl_env(plan)


def header(plan, what: str) -> list[str]:
    cl = plan.cluster
    return [f"{what}, compiled by parc from {spec_name(plan)}.",
            f"Mesh: {mesh_text(plan)}; {cl.nodes} node{'s' if cl.nodes > 1 else ''} x "
            f"{cl.gpus_per_node} processes = {count(plan.world_size, 'rank')}.",
            "Keep plan.json beside this script: the program reads it through PARC_PLAN."]


WHAT = {"standalone": "torchrun launch for the one node",
        "c10d": "torchrun launch for every node of {n} (torchrun numbers the nodes as they join)",
        "static": "torchrun launch for any node of {n} (launch.sh NODE_RANK)"}


def script(plan, *, entrypoint: str, arg_lines: list[list], endpoint: str | None = None,
           max_restarts: int = 0, env: list[Env] = (), what: str | None = None,
           python_module: bool = False, no_python: bool = False, path_here: bool = False) -> str:
    """The torchrun launch every node runs; under the static rendezvous it takes the node's rank
    from its first argument, ``SLURM_NODEID`` or ``NODE_RANK``. ``python_module``: the entry
    point is a module torchrun runs as ``python -m`` does; ``path_here``: the program imports a
    module emitted beside the script (its folder goes first on PYTHONPATH)."""
    from parc.targets.render import render

    cl = plan.cluster
    rdzv = rendezvous(plan, endpoint, max_restarts)
    return render("torchrun/launch.sh.j2", header=header(plan, what or WHAT[rdzv].format(n=cl.nodes)),
                  need_here=True, rdzv=rdzv, master=rdzv == "static" or (rdzv == "c10d" and not endpoint),
                  nnodes=cl.nodes, nproc=cl.gpus_per_node, env=launch_env(plan, env),
                  arg_lines=arg_lines, path_here=path_here,
                  launcher_lines=launcher_lines(plan, rdzv=rdzv, endpoint=endpoint, max_restarts=max_restarts,
                                                 python_module=python_module, no_python=no_python),
                  entrypoint=entrypoint)


def node_files(plan, *, entrypoint: str, arg_lines: list[list], endpoint: str | None = None,
               max_restarts: int = 0, env: list[Env] = (), no_python: bool = False) -> list[File]:
    """launch.sh, the one script every node runs (it takes its node rank as its argument, or from
    SLURM_NODEID or NODE_RANK, where the rendezvous needs one), and plan.json."""
    launch = script(plan, entrypoint=entrypoint, arg_lines=arg_lines, endpoint=endpoint,
                    max_restarts=max_restarts, env=env, no_python=no_python)
    return [File("launch.sh", launch, True), File("plan.json", plan_json(plan))]


def user_arg_lines(args) -> list[list]:
    return [[a] for a in (args or [])]


def build(plan) -> list[File]:
    s = settings(plan, TARGET)
    return node_files(plan, entrypoint=s["entrypoint"], arg_lines=user_arg_lines(s.get("args")),
                      endpoint=s.get("rdzv_endpoint"), max_restarts=s.get("max_restarts", 0),
                      no_python=bool(s.get("no_python")))


def scheduled(plan, engine: str, *, entrypoint: str, arg_lines: list[list], max_restarts: int = 0,
              env: list[Env] = (), python_module: bool = False, files: list[File] = (), no_python: bool = False,
              command_lines: list[list] | None = None, path_here: bool = False):
    """The :class:`~parc.targets.engines.NodeLaunch` of an engine that torchrun starts (torchrun,
    torchtitan, megatron) under a scheduler: launch.sh (the rendezvous at the scheduler's node 0,
    never an ``rdzv_endpoint``) with ``files`` and plan.json, and the same torchrun command for
    every node of the one run. ``command_lines``: the arguments as that command writes them,
    where they name a file beside the launch (``Var("dir")`` there, ``Var("here")`` in launch.sh)."""
    from parc.targets.engines import NodeLaunch, flat, one_run

    rdzv = rendezvous(plan, None, max_restarts)
    words = ("torchrun",) + flat(launcher_lines(plan, rdzv=rdzv, endpoint=None, max_restarts=max_restarts,
                                                python_module=python_module, no_python=no_python)) + (entrypoint,)

    def make() -> list[File]:
        text = script(plan, entrypoint=entrypoint, arg_lines=arg_lines, max_restarts=max_restarts, env=env,
                      python_module=python_module, no_python=no_python, path_here=path_here)
        return [File("launch.sh", text, True), *files, File("plan.json", plan_json(plan))]

    return NodeLaunch(engine, make, "launch.sh", plan.cluster.nodes,
                      (one_run(plan, words + flat(arg_lines if command_lines is None else command_lines), [e for e in env if e.value is not None], len(words)),),
                      "torchrun")


def node_launch(plan, s: dict):
    """A script of the spec's own under torchrun, on every node a scheduler gives it (``s``: the
    block's settings as the wrapper hands them, parc/targets/engines.py)."""
    if "entrypoint" not in s:     # a plan its checks refused: P602's diagnostic, not a KeyError
        need(plan, TARGET, "entrypoint")
    return scheduled(plan, TARGET, entrypoint=s["entrypoint"], arg_lines=user_arg_lines(s.get("args")),
                     max_restarts=s.get("max_restarts", 0), no_python=bool(s.get("no_python")))
