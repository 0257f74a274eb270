"""How a wrapper runs an engine: the one interface between the targets that start a launch on
nodes a scheduler gives them (slurm, kubernetes, trainjob, skypilot, lws: the wrappers) and the
targets whose launch every node runs (torchrun, torchtitan, megatron, deepspeed, vllm, sglang:
the engines).

A wrapper's target.toml declares its engine key (``engine = { key, default }``) and the engines it
can run (the key's ``choices``); which one a plan runs is :func:`parc.model.targets.engine_of`'s.
The wrapper calls :func:`launch`, which imports the engine's folder and calls its
``node_launch(plan, settings)`` (``settings``: the engine's block as the wrapper hands it): no wrapper names an engine and no engine names a wrapper, so a new one of
either is a folder and nothing else. What comes back, :class:`NodeLaunch`, is the engine's launch
in the two forms a scheduler can start:

* **files and a script**: ``files`` are the engine's scripts and configs with plan.json last, what
  ``parc compile --target ENGINE`` emits; ``script`` is the one every node runs as
  ``bash SCRIPT NODE_RANK`` with node 0's address in ``MASTER_ADDR`` (and the scheduler's
  rendezvous port in ``MASTER_PORT`` where it has one). With ``hosts`` it is node.sh
  (:mod:`parc.targets.pooled`), which needs ``PARC_HOSTS`` (every node's address in node order):
  the plan is several runs placed node by node (the pools of a disaggregated plan, SGLang servers
  behind a router). Slurm, SkyPilot and the Kubernetes PyTorchJob start this form;
* **commands**: ``runs``, the same launch as the command each node of a run executes (a training
  job is one run; a serving plan may be several independent servers, each a run of ``size`` nodes).
  A command is a tuple of steps (argv tuples run in turn, the last in the shell's place); in a word,
  a :class:`~parc.targets.base.Var` stands for what the scheduler gives each node, and
  :class:`Product` for a multiple of one: ``node_rank`` (the node's rank in its run),
  ``master_addr`` (the run's first node), ``master_port`` (the rendezvous port), ``port`` (a pool
  instance's API port), ``dir`` (the folder holding ``files``) and ``host_ip`` (the node's or
  pod's own address, which an environment value may hold: a pod's IP from the downward API). A wrapper whose pods run a
  command (trainjob, lws) writes it with its own variables (:func:`pod_command`).

The engine's own target block sets what it runs (degrees, batch, schedule, flags), exactly as for
``parc compile --target ENGINE``, and the engine's rules judge the plan (the wrapper brings them as
a rule family). Only the rendezvous is the scheduler's: each node's rank and node 0's address come
from it, so an engine's ``rdzv_endpoint`` or DeepSpeed's ssh launch (``hosts``, ``launcher``) are
for launches without one. A wrapper that inherits an engine's keys (slurm's ``entrypoint``,
``args`` and ``max_restarts`` are torchrun's) hands its values to that engine (:func:`engine_settings`).
"""
from __future__ import annotations

import dataclasses
import importlib
import shlex
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from parc.targets.base import Cat, Env, File, Var

# the variables an engine's command leaves to the scheduler (module doc)
VARS = ("node_rank", "master_addr", "master_port", "port", "dir", "host_ip")


@dataclass(frozen=True, slots=True)
class Product:
    """One word: variable ``var`` times ``factor`` (a node's first data-parallel rank)."""

    var: Var
    factor: int


@dataclass(frozen=True)
class Run:
    """One run of the engine: the training job, or one serving instance, over ``size`` nodes."""

    size: int                      # nodes (pods) it spans, its first node (the leader) first
    replicas: int                  # identical runs: independent servers behind one address
    gpus: int                      # GPUs each of its nodes uses
    leader: tuple                  # the command of its first node: steps, each an argv tuple
    worker: tuple | None           # the command of its other nodes (None: a run of one node)
    env: tuple[Env, ...] = ()      # what the commands need in their environment
    port: int | None = None        # a server's API port on its leader
    pool: str | None = None        # the pool of a disaggregated plan whose instance it is
    plan: object = None            # the plan one run launches
    args_from: int | None = None   # where the program's own arguments begin in the last step (a
                                   # container writes them as its args), None: nowhere apart


@dataclass(frozen=True)
class Front:
    """What stands in front of the runs of a disaggregated plan: the engine's proxy or router
    (``file``, one of the launch's files, for runs placed by node.sh, where instances sharing a node
    listen on ports of their own), started with the leaders' addresses of each pool; ``apart``
    writes it for runs that each have an address of their own (a pod each, on its pool's port)."""

    file: str
    port: int
    command: Callable[[dict[str, list[str]]], tuple[tuple, tuple[Env, ...]]]   # hosts -> (argv, env)
    apart: Callable[[], File]


@dataclass(frozen=True)
class NodeLaunch:
    """An engine's launch on the nodes a scheduler gives it (module doc). Its files are written
    when first asked for (``make``): a rule reads its runs without loading the template engine."""

    engine: str
    make: Callable[[], tuple[File, ...]]
    script: str                    # the file every node runs with its node rank
    nodes: int                     # the nodes it takes
    runs: tuple[Run, ...]
    what: str                      # what the nodes run, in words ("torchrun", "vllm serve")
    hosts: bool = False            # script needs PARC_HOSTS: every node's address
    front: Front | None = None
    port: int | None = None        # where clients reach a served plan (node 0)

    @cached_property
    def files(self) -> tuple[File, ...]:
        """The engine's files, plan.json last."""
        return tuple(self.make())

    def file(self, path: str) -> File:
        return next(f for f in self.files if f.path == path)


def engine_settings(plan, wrapper: str, name: str) -> dict:
    """Engine ``name``'s block as it runs under ``wrapper``: its own settings, and where the
    wrapper carries the engine's keys (it inherits them: slurm's entrypoint, args and
    max_restarts are torchrun's), the wrapper's values of them."""
    from parc.model.targets import inherits, stands_in

    own = plan.target_settings(name)
    if not stands_in(wrapper, name):
        return own
    theirs = plan.target_settings(wrapper)
    return {**own, **{k: theirs[k] for k in inherits(wrapper)[1] if k in theirs}}


def launch(plan, wrapper: str) -> NodeLaunch:
    """The launch of the engine ``wrapper`` runs for ``plan``: its folder's
    ``node_launch(plan, settings)``, ``settings`` its block's (:func:`engine_settings`)."""
    from parc.model.targets import engine_of

    name = engine_of(plan, wrapper)
    module = importlib.import_module(f"parc.targets.{name}")
    return module.node_launch(plan, engine_settings(plan, wrapper, name))


def engine_config(plan, wrapper: str, pool: str | None = None) -> tuple[dict, list[Env]]:
    """The engine ``wrapper`` runs for ``plan`` as keyword arguments and environment, for a
    wrapper that builds the engine itself rather than running its command (Ray Serve LLM): its
    folder's ``engine_config(plan, settings, pool)``; ``plan`` is the plan of one run (a
    :class:`Run`'s), ``pool`` the pool whose instance it is."""
    from parc.model.targets import engine_of

    name = engine_of(plan, wrapper)
    module = importlib.import_module(f"parc.targets.{name}")
    return module.engine_config(plan, engine_settings(plan, wrapper, name), pool)


def flat(lines) -> tuple:
    """Option lines (one option and its values a line) as one argv."""
    return tuple(w for line in lines for w in line)


def one_run(plan, command: tuple, env=(), args_from: int | None = None) -> Run:
    """The run of a launch whose every node runs the same ``command`` (one step) with its own
    node rank: a training job over the cluster's nodes (its program's own arguments from
    ``args_from`` on)."""
    cl = plan.cluster
    return Run(cl.nodes, 1, cl.gpus_per_node, (command,), (command,) if cl.nodes > 1 else None, tuple(env),
               plan=plan, args_from=args_from)


# --- a command in a container whose runtime substitutes $(NAME) ---------------------------------
def pod_args(run: Run, names: dict[str, str], folder: str) -> tuple[list[str], list[str]]:
    """(command, args) of a pod running ``run``'s leader, the program's own arguments apart
    (:func:`pod_command`)."""
    words = pod_command(run.leader, names, folder)
    if run.args_from is None or len(run.leader) > 1 or words[:2] == ["sh", "-c"]:
        return words, []
    return words[:run.args_from], words[run.args_from:]


def pod_command(steps: tuple, names: dict[str, str], folder: str) -> list[str]:
    """A run's command as a container's ``command``: each :class:`Var` as ``$(NAME)`` of the
    environment variable ``names`` gives it (the kubelet substitutes it; a literal ``$`` is
    ``$$``), ``dir`` as ``folder``. Several steps, or a :class:`Product`, need a shell:
    ``sh -c 'STEP && ... && exec LAST'``."""
    def word(w) -> str:
        if isinstance(w, Var):
            return folder if w.name == "dir" else f"$({names[w.name]})"
        if isinstance(w, Cat):
            return "".join(word(p) for p in w.parts)
        return str(w).replace("$", "$$")

    def shell(step) -> str:
        return " ".join(f"$$(({names[w.var.name]} * {w.factor}))" if isinstance(w, Product) else shlex.quote(word(w))
                        for w in step)

    if len(steps) == 1 and not any(isinstance(w, Product) for w in steps[0]):
        return [word(w) for w in steps[0]]
    return ["sh", "-c", "".join(shell(s) + " && " for s in steps[:-1]) + "exec " + shell(steps[-1])]
