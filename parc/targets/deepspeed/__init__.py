"""DeepSpeed: ``ds_config.json`` (what ``deepspeed.initialize`` reads), one ``launch.sh`` that
runs the ``deepspeed`` launcher, a ``hostfile`` where the spec names the nodes, and the resolved
plan as ``plan.json`` (``PARC_PLAN`` points at it).

The config (DeepSpeed's ``DeepSpeedConfig``, deepspeed/runtime/config.py):

* ``train_micro_batch_size_per_gpu`` = micro_batch, ``gradient_accumulation_steps`` = the
  microbatches of a step, and ``train_batch_size`` = micro × accumulation × dp = global_batch,
  which ``_batch_assertion`` checks against its data-parallel size ("8 != 2 * 1 * 1"). Without
  tensor parallelism that size is the world over the pipeline stages: ``deepspeed.initialize``
  takes it from ``PipelineModule.mpu()`` with pp > 1 and from the world size otherwise. With
  AutoTP (tp > 1) it is the world unless the script passes an ``mpu``, so parc leaves
  ``train_batch_size`` out and DeepSpeed derives it from the two it is given;
* ``zero_optimization``: the plan's ZeRO stage with ``overlap_comm`` (the gradient reduction under
  the backward: the train block's ``overlap_grad_reduce`` unless the target block's
  ``overlap_comm`` says otherwise), ``contiguous_gradients`` and ``reduce_bucket_size`` (a target
  key, DeepSpeed's default otherwise);
* ``bf16`` or ``fp16`` as the plan's precision says (fp8 trains in bf16 here: DeepSpeed's config
  has no fp8 training; P687 says so);
* ``tensor_parallel.autotp_size`` = tp (AutoTP shards the model's linear layers);
* ``pipeline.stages`` = pp, a record for the script, which builds its ``PipelineModule`` (its
  ``DualPipeVModule`` for dualpipe_v, with ``pipe_partitioned`` and ``grad_partitioned`` off as
  ``DualPipeVEngine`` requires) with ``num_stages`` = pp: DeepSpeed takes the stage count from the
  module, not the config.

Expert parallelism lives in the model code (``deepspeed.moe.layer.MoE(ep_size=...)``); the
launch's header names the ep the script must pass. The launcher line: ``deepspeed --num_nodes N
--num_gpus G`` with ``--hostfile`` (the emitted ``hostfile``, or ``$HOSTFILE``), ``--master_addr``
(``$MASTER_ADDR``, else the first host) and ``--master_port`` on several nodes; the launcher
starts the other nodes itself (pdsh by default), so launch.sh runs on node 0 only. NCCL settings
reach the other nodes because the launcher exports every ``NCCL_*`` variable.
"""
from __future__ import annotations

import json

from parc.targets.base import Cat, Env, File, Var, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.words import count

TARGET = "deepspeed"
MASTER_PORT = 29500
REDUCE_BUCKET = 500_000_000     # DeepSpeedZeroConfig.reduce_bucket_size's default
CONFIG = "ds_config.json"


def options(plan):
    """``F(what)``: the option or ds_config.json key (dotted) the release the plan launches spells
    ``what`` with (flags.toml)."""
    from parc.model.targets import flag, pinned

    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def config(plan, target: str = TARGET, megatron: bool = False) -> dict:
    """The DeepSpeed config as a dict (the order DeepSpeed's documentation lists the keys), each
    key as flags.toml names it; ``target``: the block whose keys set it. ``megatron``: for
    Megatron-DeepSpeed, whose mpu (or PipelineModule topology) gives DeepSpeed the data parallel
    size at any tp, and which splits the layers and stages itself (no AutoTP or pipeline keys)."""
    s = settings(plan, target)
    me, sc, t = plan.mesh, plan.schedule, plan.train
    F = options(plan)
    out: dict = {}

    def put(what: str, value) -> None:
        *path, leaf = F(what).split(".")
        node = out
        for p in path:
            node = node.setdefault(p, {})
        node[leaf] = value

    if me.tp == 1 or megatron:
        put("train_batch_size", sc.global_batch)
    put("train_micro_batch_size_per_gpu", sc.micro_batch)
    put("gradient_accumulation_steps", sc.microbatches)
    if t.precision in ("bf16", "fp8"):
        put("bf16", True)
    elif t.precision == "fp16":
        put("fp16", True)
    put("zero_stage", t.zero)
    if t.zero > 0:
        put("overlap_comm", bool(s.get("overlap_comm", t.overlap_grad_reduce)))
        put("contiguous_gradients", True)
        put("reduce_bucket_size", int(s.get("reduce_bucket_size", REDUCE_BUCKET)))
    if megatron:
        return out
    if me.tp > 1:
        put("autotp_size", me.tp)
    if me.pp > 1:
        put("pipeline_stages", me.pp)
        if sc.pipeline == "dualpipe_v":   # DualPipeVEngine refuses either partitioning
            put("pipe_partitioned", False)
            put("grad_partitioned", False)
    return out


def config_json(plan) -> str:
    return json.dumps(config(plan), indent=2, ensure_ascii=True) + "\n"


def hostfile(plan) -> str | None:
    """DeepSpeed's hostfile (``host slots=N`` a line), where the spec names the hosts."""
    hosts = settings(plan, TARGET).get("hosts")
    if not hosts:
        return None
    return "".join(f"{h} slots={plan.cluster.gpus_per_node}\n" for h in hosts)


def launcher_lines(plan) -> list[list]:
    """The deepspeed launcher's own options, one per line."""
    s = settings(plan, TARGET)
    cl = plan.cluster
    F = options(plan)
    lines: list[list] = []
    if cl.nodes > 1:
        lines.append([F("hostfile"), Var("hostfile")])
        if s.get("launcher"):
            lines.append([F("launcher"), s["launcher"]])
    lines += [[F("num_nodes"), cl.nodes], [F("num_gpus"), cl.gpus_per_node]]
    if cl.nodes > 1:
        lines.append([Var("master[@]")])
    if cl.nodes > 1 or "master_port" in s:
        # one node still opens the rendezvous there (runner.py hands it to deepspeed.launcher.launch)
        lines.append([F("master_port"), s.get("master_port", MASTER_PORT)])
    return lines


def _header(plan, per_node: bool = False) -> list[str]:
    cl, me = plan.cluster, plan.mesh
    lines = [f"DeepSpeed launch compiled by parc from {spec_name(plan)}.",
             f"Mesh: {mesh_text(plan)}; {count(cl.nodes, 'node')} x {count(cl.gpus_per_node, 'GPU')}."]
    if cl.nodes > 1 and per_node:
        lines.append("Every node runs it with its node rank (launch.sh NODE_RANK; else SLURM_NODEID or NODE_RANK), "
                     "MASTER_ADDR set to node 0's address.")
    elif cl.nodes > 1:
        lines.append("Run it on node 0 only: the deepspeed launcher starts every node in the hostfile.")
    if me.pp > 1:
        lines.append(f"The script builds a PipelineModule with num_stages={me.pp} (ds_config.json: pipeline.stages).")
    if plan.model.is_moe and me.ep > 1:
        lines.append(f"The script builds its MoE layers with ep_size={me.ep} (deepspeed.moe.layer.MoE).")
    return lines


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    F = options(plan)
    hosts = hostfile(plan)
    first = (s.get("hosts") or [None])[0]
    env = nccl_env(plan)
    text = render("deepspeed/launch.sh.j2", header=_header(plan), need_here=True, env=env, per_node=False,
                  multi=plan.cluster.nodes > 1, has_hostfile=hosts is not None, first_host=first,
                  launcher_lines=launcher_lines(plan), entrypoint=s["entrypoint"],
                  arg_lines=[[a] for a in s.get("args") or []], config=CONFIG, master_flag=F("master_addr"),
                  ds_flag=F("deepspeed"), ds_config_flag=F("deepspeed_config"))
    files = [File("launch.sh", text, True), File(CONFIG, config_json(plan))]
    if hosts is not None:
        files.append(File("hostfile", hosts))
    return files + [File("plan.json", plan_json(plan))]


def megatron_files(plan, entrypoint: str, arg_lines: list[list], config_file: File, env=()) -> list[File]:
    """The deepspeed launcher's launch.sh of a Megatron-DeepSpeed plan (parc/targets/megatron_deepspeed):
    ``entrypoint`` with its ``arg_lines``, then ``--deepspeed --deepspeed_config``; ``config_file``
    its ds_config.json; ``env`` the variables it needs beside NCCL's."""
    from parc.targets.render import render

    F = options(plan)
    env, extra = list(env), []
    if plan.cluster.nodes > 1 and env:
        # the launcher exports to the other nodes only NCCL_*, PYTHON*, UCX*, MV2*, MLFLOW* and the
        # lines of its environment file (deepspeed/launcher/runner.py EXPORT_ENVS, DS_ENV_FILE)
        extra = [File("deepspeed_env", "".join(f"{e.name}={e.value}\n" for e in env if e.value is not None))]
        env.append(Env("DS_ENV_FILE", Cat((Var("here"), "/deepspeed_env")), "the variables the deepspeed launcher "
                       "exports to every node (deepspeed_env beside this script)", default=False))
    header = [f"Megatron-DeepSpeed launch compiled by parc from {spec_name(plan)}.",
              f"Mesh: {mesh_text(plan)}; {count(plan.cluster.nodes, 'node')} x {count(plan.cluster.gpus_per_node, 'GPU')}."]
    if plan.cluster.nodes > 1:
        header.append("Run it on node 0 only: the deepspeed launcher starts every node in the hostfile.")
    text = render("deepspeed/launch.sh.j2", header=header, need_here=True, env=list(env) + nccl_env(plan),
                  per_node=False, multi=plan.cluster.nodes > 1, has_hostfile=False, first_host=None,
                  launcher_lines=launcher_lines(plan), entrypoint=entrypoint, arg_lines=arg_lines, config=CONFIG,
                  master_flag=F("master_addr"), ds_flag=F("deepspeed"), ds_config_flag=F("deepspeed_config"))
    return [File("launch.sh", text, True), config_file, *extra, File("plan.json", plan_json(plan))]


# --- under a scheduler (parc/targets/engines.py) -------------------------------------------------
def node_lines(plan) -> list[list]:
    """The launcher's options when every node starts its own (a scheduler gives each its node
    rank and node 0's address): ``--no_ssh`` with ``--node_rank``, and a hostfile that only
    gives each node's GPUs (runner.py main: with --no_ssh it reaches no other host, and
    launch.py takes the node's own GPUs from the world info by node rank). One node: the
    standalone launch's options."""
    s = settings(plan, TARGET)
    cl = plan.cluster
    if cl.nodes == 1:
        return launcher_lines(plan)
    return [["--hostfile", Cat((Var("dir"), "/hostfile"))], ["--no_ssh"], ["--node_rank", Var("node_rank")],
            ["--master_addr", Var("master_addr")], ["--master_port", s.get("master_port", Var("master_port"))],
            ["--num_nodes", cl.nodes], ["--num_gpus", cl.gpus_per_node]]


def node_hostfile(plan) -> str:
    """The hostfile of a launch under a scheduler: the spec's hosts, else a name per node."""
    return hostfile(plan) or "".join(f"node-{k} slots={plan.cluster.gpus_per_node}\n" for k in range(plan.cluster.nodes))


def node_launch(plan, s: dict):
    """DeepSpeed under a scheduler: every node runs the deepspeed launcher for itself (its
    node rank from the scheduler, no ssh), with the config the deepspeed target writes (``s``:
    the block's settings, parc/targets/engines.py)."""
    from parc.targets.engines import NodeLaunch, flat, one_run

    multi, F = plan.cluster.nodes > 1, options(plan)
    lines, args = node_lines(plan), [[a] for a in s.get("args") or []]

    def make() -> list[File]:
        from parc.targets.render import render

        text = render("deepspeed/launch.sh.j2", header=_header(plan, per_node=True), need_here=True,
                      env=nccl_env(plan), multi=multi, per_node=multi, nnodes=plan.cluster.nodes,
                      master_port="master_port" not in s, launcher_lines=lines, entrypoint=s["entrypoint"],
                      arg_lines=args, config=CONFIG, master_flag=F("master_addr"), ds_flag=F("deepspeed"),
                      ds_config_flag=F("deepspeed_config"))
        files = [File("launch.sh", text, True), File(CONFIG, config_json(plan))]
        if multi:
            files.append(File("hostfile", node_hostfile(plan)))
        return files + [File("plan.json", plan_json(plan))]

    words = ("deepspeed",) + flat(lines) + (s["entrypoint"],)
    tail = flat(args) + ("--deepspeed", "--deepspeed_config", Cat((Var("dir"), "/" + CONFIG)))
    return NodeLaunch(TARGET, make, "launch.sh", plan.cluster.nodes, (one_run(plan, words + tail, (), len(words)),),
                      "deepspeed")
