"""LeaderWorkerSet: ``lws.yaml``, a ``LeaderWorkerSet`` (leaderworkerset.x-k8s.io/v1) that serves
the plan in groups of pods, and a ``Service`` in front of the groups' leaders.

One group is one serving engine: ``size`` pods (its nodes), the leader first; ``replicas`` groups
are the plan's data-parallel replicas, each an independent server behind the Service. A replica
(tp·pp·cp GPUs) larger than a node takes ``size`` = replica / gpus_per_node whole nodes, one pod
each; a replica that fits in a node is a group of one pod with the replica's GPUs (the scheduler
packs several on a node). An expert-parallel plan with dp > 1 is one engine: vLLM's experts span
dp·cp·tp, so one group holds every node and vLLM's own data parallelism.

The pods run the command of the engine the target key ``engine`` names: the vllm target's
(``parc.targets.vllm.serve_lines``; the default) or the sglang target's
(``parc.targets.sglang.server_lines``), with what LeaderWorkerSet injects into every container in
place of the node rank and node 0's address: ``LWS_WORKER_INDEX`` (0 for the leader) and
``LWS_LEADER_ADDRESS`` (the leader pod's DNS name), written ``$(NAME)`` for Kubernetes to
substitute (a literal ``$`` is ``$$``). The leader serves the API; its readiness probe asks the
engine's health endpoint (``/health`` on its port), so the Service sends requests only to groups
that have loaded the model. ``startupPolicy`` is LeaderCreated: the engine's leader waits for its
workers (vLLM's, and SGLang's at ``--dist-init-addr``), so a LeaderReady start would never come.
``restartPolicy`` RecreateGroupOnPodRestart restarts a group whole, as a lost worker breaks the
group's NCCL world. Every pod asks for its GPUs (``nvidia.com/gpu``), CPUs and memory, with a
size-limited in-memory ``/dev/shm`` for NCCL and the engine's shared buffers. The plan travels
in a ConfigMap mounted at ``/etc/parc`` (``PARC_PLAN`` points at ``plan.json``), as with the
kubernetes target.

With SGLang a group is one SGLang server as the sglang target lays servers out
(``parc.targets.sglang.layout``): ``size`` is the server's nodes (``--nnodes``, the worker index
its ``--node-rank``, ``--dist-init-addr`` the leader's address), ``replicas`` the servers, each
pod the server's GPUs over its nodes (its own ``--dp-size`` replicas, or attention data
parallelism, inside). The engine's rules are the ones that run (target.toml's ``engine``); each
engine's image and health path are data in target.toml.

A prefill/decode-disaggregated plan is one LeaderWorkerSet per pool, ``<name>-prefill`` and
``<name>-decode``, each with its Service: with vLLM a group is one instance of the pool
(``size`` its nodes, ``replicas`` the pool's instances, each pod the instance's GPUs on a node)
running the vllm target's options for that pool (its KV connector, its API on the pool's port);
with SGLang a group is one server of the pool as the sglang target lays the pool out. In front
of them a Deployment ``<name>-proxy`` runs the engine target's proxy.sh (vLLM) or router.sh
(SGLang) from the ConfigMap, pointed at every group leader's DNS name (``<set>-<group>.<set>``,
LeaderWorkerSet's headless Service), with a Service ``<name>-proxy`` for the API. vLLM's proxy
is the toy proxy of vLLM's source, which its image does not hold: set ``VLLM_PROXY`` in the
Deployment to where your image has it.
"""
from __future__ import annotations

import dataclasses
import shlex

from parc.model.targets import display, spec
from parc.targets.base import Cat, Env, File, Var, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.words import count

TARGET = "lws"
NAME_MAX = 40            # pods are <name>-<group>-<worker>; the Service <name>-leader
API_VERSION = "leaderworkerset.x-k8s.io/v1"
# what LeaderWorkerSet sets in every container (api/leaderworkerset/v1/leaderworkerset_types.go;
# its LWS_GROUP_SIZE is the group's size, which the commands write as a number)
LEADER_ADDRESS, WORKER_INDEX = "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"
# the labels LeaderWorkerSet puts on every pod: the set's name and the pod's index in its group
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# the engine targets' shell variables, as LeaderWorkerSet provides them
K8S_VARS = {"master_addr": LEADER_ADDRESS, "node_rank": WORKER_INDEX, "port": "PARC_PORT"}


@dataclasses.dataclass(frozen=True)
class Groups:
    """How the plan is cut into LeaderWorkerSet groups."""

    size: int         # pods per group (the nodes one engine spans), the leader included
    replicas: int     # groups: independent servers behind the Service
    gpus: int         # GPUs each pod asks for
    plan: object      # the plan one group serves (its nodes = size, its dp what one engine holds)


def engine(plan) -> str:
    """The engine the pods run: the block's ``engine``, else target.toml's default."""
    from parc.model.targets import engine as named

    return named(TARGET, settings(plan, TARGET))


def engine_facts(plan) -> dict:
    """The engine's image, health path and container name (target.toml's [engines])."""
    return (spec(TARGET) or {}).get("engines", {}).get(engine(plan), {})


def one_engine(plan) -> bool:
    """Whether the whole plan is one engine: expert parallelism spans dp (vLLM's ep = dp·cp·tp)."""
    return plan.model.is_moe and plan.mesh.ep > 1 and plan.mesh.dp > 1


def groups(plan) -> Groups:
    if engine(plan) == "sglang":
        return _sglang_groups(plan)
    from parc.targets.vllm import replica

    me, cl = plan.mesh, plan.cluster
    g = cl.gpus_per_node
    if one_engine(plan):
        gpus = g if cl.nodes > 1 else plan.world_size
        return Groups(cl.nodes, 1, gpus, plan)
    r = replica(plan)
    size = -(-r // g)
    gpus = g if size > 1 else r
    sub = dataclasses.replace(plan, mesh=dataclasses.replace(me, dp=1),
                              cluster=dataclasses.replace(cl, nodes=size, gpus_per_node=gpus))
    return Groups(size, me.dp, gpus, sub)


def _sglang_groups(plan) -> Groups:
    """One group per SGLang server: its nodes are the group's pods, each with the server's
    GPUs (tp_size · pp_size · dp_size) over them."""
    from parc.targets.sglang import layout

    lay = layout(plan)
    return Groups(lay.nnodes, lay.servers, lay.tp_size * lay.pp_size * lay.dp_size // lay.nnodes, plan)


def serve_port(plan, pool: str | None = None) -> int:
    """The port the leader serves on: the engine target's ``port`` (vLLM 8000, SGLang 30000); a
    vLLM pool's instances serve on the pool's port, as the vllm target's scripts and proxy have it."""
    if engine(plan) == "vllm" and pool:
        from parc.targets.vllm import POOL_PORTS

        return POOL_PORTS[pool]
    if engine(plan) == "sglang":
        from parc.targets.sglang import PORT

        return settings(plan, "sglang").get("port", PORT)
    return settings(plan, "vllm").get("port", 8000)


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def _word(w) -> str:
    """One word of a container command: the engine target's shell variables become what
    LeaderWorkerSet injects, ``$(NAME)`` (in a word made of parts too); any other ``$`` is
    literal (``$$``)."""
    from parc.targets.kubernetes import literal

    if isinstance(w, Var):
        return f"$({K8S_VARS[w.name]})"
    if isinstance(w, Cat):
        return "".join(_word(p) for p in w.parts)
    return literal(str(w))


def _sh(words: list, tail: str = "") -> str:
    """A ``sh -c`` script that runs ``words`` (each quoted for the shell, after Kubernetes'
    substitution) and then ``tail`` (shell text written for it)."""
    return " ".join(shlex.quote(_word(w)) for w in words) + tail


def commands(plan, grp: Groups, pool: str | None = None) -> tuple[list[str], list[str] | None]:
    """The leader's command and the workers' (None for a group of one pod); ``pool`` the pool of
    a disaggregated plan whose instance the group runs (``grp.plan`` its instance plan)."""
    if engine(plan) == "sglang":
        return _sglang_commands(plan, grp, pool)
    from parc.targets.vllm import RAY_PORT, launch_mode, serve_lines

    sub = grp.plan
    head = ["vllm", "serve", settings(plan, "vllm")["model"]]
    mode = launch_mode(sub)
    flat = (lambda lines: [w for ln in lines for w in ln])
    if mode == "single":
        return [_word(w) for w in head + flat(serve_lines(sub, None, pool))], None
    leader = head + flat(serve_lines(sub, 0, pool))
    if mode == "ray":
        # node 0 starts the Ray head, then serves; the others join it (vLLM waits for their GPUs)
        start = ["ray", "start", "--head", "--port", RAY_PORT]
        return (["sh", "-c", _sh(start) + " && exec " + _sh(leader)],
                ["ray", "start", "--address", f"$({LEADER_ADDRESS}):{RAY_PORT}", "--block"])
    worker = head + flat(serve_lines(sub, Var("node_rank"), pool))
    if mode == "dp":
        # a worker's first data-parallel rank is its index times the replicas a pod holds
        i = worker.index(Var("start_rank"))
        local = worker[worker.index("--data-parallel-size-local") + 1]
        tail = f" $$(({WORKER_INDEX} * {local}))" + ("" if i + 1 == len(worker) else " " + _sh(worker[i + 1:]))
        return [_word(w) for w in leader], ["sh", "-c", "exec " + _sh(worker[:i]) + tail]
    return [_word(w) for w in leader], [_word(w) for w in worker]


def _sglang_commands(plan, grp: Groups, side: str | None = None) -> tuple[list[str], list[str] | None]:
    """SGLang's server on each pod of a group: the sglang target's options, the worker's node
    rank its LWS_WORKER_INDEX and ``--dist-init-addr`` the leader's address (a group of one pod
    has neither)."""
    from parc.targets.sglang import server_lines

    head = ["python3", "-m", "sglang.launch_server", "--model-path", settings(plan, "sglang")["model"]]
    flat = (lambda lines: [_word(w) for ln in lines for w in ln])
    leader = [_word(w) for w in head] + flat(server_lines(grp.plan, 0, side))
    if grp.size == 1:
        return leader, None
    return leader, [_word(w) for w in head] + flat(server_lines(grp.plan, Var("node_rank"), side))


def _env(plan) -> list[Env]:
    from parc.targets.kubernetes import PLAN_DIR, literal
    from parc.targets.vllm import uneven_partition

    env = []
    part = uneven_partition(plan) if engine(plan) == "vllm" else None
    if part:
        env.append(Env("VLLM_PP_LAYER_PARTITION", ",".join(map(str, part))))
    plan_env = Env("PARC_PLAN", f"{PLAN_DIR}/plan.json")
    return [Env(e.name, literal(e.value)) for e in [plan_env] + env + nccl_env(plan)]


def _set(plan, grp: Groups, name: str, pool: str | None = None, env: list[Env] | None = None) -> dict:
    """One LeaderWorkerSet (and its Service) as the template writes it: ``grp``'s groups running
    the engine's commands (of ``pool``'s instances for a disaggregated plan)."""
    from parc.targets.kubernetes import CPU_PER_GPU, MEMORY_PER_GPU, SHM_DEFAULT, quantity

    s = settings(plan, TARGET)
    leader, worker = commands(plan, grp, pool)
    memory = s.get("memory", MEMORY_PER_GPU * grp.gpus)
    roles = [{"key": "leaderTemplate" if worker else "workerTemplate", "command": leader, "leader": True}]
    if worker:
        roles.append({"key": "workerTemplate", "command": worker, "leader": False})
    return {"name": name, "replicas": grp.replicas, "size": grp.size, "gpus": grp.gpus, "roles": roles,
            "env": env if env is not None else _env(plan), "port": serve_port(plan, pool),
            "cpu": str(s.get("cpu", CPU_PER_GPU * grp.gpus)), "memory": quantity(memory),
            "shm": quantity(s.get("shm_size", min(SHM_DEFAULT, memory)))}


def build(plan) -> list[File]:
    from parc.targets.kubernetes import PLAN_DIR
    from parc.targets.render import render

    s = settings(plan, TARGET)
    facts = engine_facts(plan)
    name = job_name(plan)
    if plan.pools:
        from parc.targets.lws.pools import pooled

        sets, proxy, scripts, what = pooled(plan, name)
    else:
        grp = groups(plan)
        sets, proxy, scripts = [_set(plan, grp, name)], None, []
        what = (f"Mesh: {mesh_text(plan)}; {count(grp.replicas, 'group')} of {count(grp.size, 'pod')} x "
                f"{count(grp.gpus, 'GPU')}; the Service {name}-leader sends requests to the groups' leaders.")
    header = [f"LeaderWorkerSet compiled by parc from {spec_name(plan)}: kubectl apply -f lws.yaml "
              "(the LeaderWorkerSet controller must be installed)", what]
    text = render("lws/lws.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  image=s.get("image", facts["image"]), container=facts["container"], health=facts["health"],
                  engine=display(engine(plan)), sets=sets, proxy=proxy, scripts=scripts,
                  rdma=s.get("rdma_resource"), rdma_devices=s.get("rdma_devices", 1), name_label=NAME_LABEL,
                  worker_label=WORKER_LABEL, plan_json=plan_json(plan), plan_dir=PLAN_DIR)
    return [File("lws.yaml", text), File("plan.json", plan_json(plan))]
