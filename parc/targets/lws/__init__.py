"""LeaderWorkerSet: ``lws.yaml``, a ``LeaderWorkerSet`` (leaderworkerset.x-k8s.io/v1) that serves
the plan in groups of pods, and a ``Service`` in front of the groups' leaders.

One group is one serving engine: ``size`` pods (its nodes), the leader first; ``replicas`` groups
are the plan's data-parallel replicas, each an independent server behind the Service. A replica
(tp·pp·cp GPUs) larger than a node takes ``size`` = replica / gpus_per_node whole nodes, one pod
each; a replica that fits in a node is a group of one pod with the replica's GPUs (the scheduler
packs several on a node). An expert-parallel plan with dp > 1 is one engine: vLLM's experts span
dp·cp·tp, so one group holds every node and vLLM's own data parallelism.

The pods run the commands of the engine the target key ``engine`` names (parc/targets/engines.py:
vllm, the default, or sglang), as that engine cuts the plan into runs: each run is a group (its
``size`` nodes the group's pods, ``replicas`` the groups), and each pod runs the run's command
with what LeaderWorkerSet injects into every container in place of the node rank and node 0's
address: ``LWS_WORKER_INDEX`` (0 for the leader) and ``LWS_LEADER_ADDRESS`` (the leader pod's DNS
name), written ``$(NAME)`` for Kubernetes to substitute (a literal ``$`` is ``$$``). The leader
serves the API; its readiness probe asks the
engine's health endpoint (``/health`` on its port), so the Service sends requests only to groups
that have loaded the model. ``startupPolicy`` is LeaderCreated: the engine's leader waits for its
workers (vLLM's, and SGLang's at ``--dist-init-addr``), so a LeaderReady start would never come.
``restartPolicy`` RecreateGroupOnPodRestart restarts a group whole, as a lost worker breaks the
group's NCCL world. Every pod asks for its GPUs (``nvidia.com/gpu``), CPUs and memory, with a
size-limited in-memory ``/dev/shm`` for NCCL and the engine's shared buffers. The plan travels
in a ConfigMap mounted at ``/etc/parc`` (``PARC_PLAN`` points at ``plan.json``), as with the
kubernetes target.

With vLLM (parc/targets/vllm/scheduled.py) a replica (tp·pp·cp GPUs) larger than a node takes
``size`` = replica / gpus_per_node whole nodes, one pod each, and the plan's data-parallel
replicas are the groups, each an independent server behind the Service; a replica that fits in a
node is a group of one pod with the replica's GPUs (the scheduler packs several on a node); an
expert-parallel plan with dp > 1 is one engine (vLLM's experts span dp·cp·tp), so one group holds
every node and vLLM's own data parallelism. With SGLang (parc/targets/sglang/scheduled.py) a group
is one SGLang server as the sglang target lays servers out (``--nnodes`` its pods, the worker
index its ``--node-rank``, ``--dist-init-addr`` the leader's address). The engine's rules are the
ones that run (target.toml's ``engine``); each engine's image and health path are data in
target.toml.

A prefill/decode-disaggregated plan is one LeaderWorkerSet per pool, ``<name>-prefill`` and
``<name>-decode``, each with its Service, each group a run of the pool as the engine cuts it (with
vLLM an instance of the pool running the vllm target's options for that pool, its KV connector,
its API on the pool's port; with SGLang a server of the pool). In front of them a Deployment
``<name>-proxy`` runs the engine's front (vLLM's proxy.sh, SGLang's router.sh) from the
ConfigMap, pointed at every group leader's DNS name (``<set>-<group>.<set>``, LeaderWorkerSet's
headless Service), with a Service ``<name>-proxy`` for the API. vLLM's proxy
is the toy proxy of vLLM's source, which its image does not hold: set ``VLLM_PROXY`` in the
Deployment to where your image has it.
"""
from __future__ import annotations

from parc.model.targets import display, engine_of, spec
from parc.targets.base import Env, File, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.targets.engines import Run, launch, pod_command
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
# the labels a DisaggregatedSet's controller puts on the pods of its LeaderWorkerSets: the set's
# name and the pod's role (api/disaggregatedset/v1/disaggregatedset_types.go, SetNameLabelKey and
# RoleLabelKey; pkg/utils/disaggregatedset/utils.go GenerateLabels)
SET_LABEL, ROLE_LABEL = "disaggregatedset.x-k8s.io/name", "disaggregatedset.x-k8s.io/role"
# the engine's variables (parc/targets/engines.py), as LeaderWorkerSet provides them
K8S_VARS = {"master_addr": LEADER_ADDRESS, "node_rank": WORKER_INDEX, "port": "PARC_PORT"}


def engine(plan) -> str:
    """The engine the pods run (parc.model.targets.engine_of)."""
    return engine_of(plan, TARGET)


def engine_facts(plan) -> dict:
    """The engine's image, health path and container name (target.toml's [engines])."""
    return (spec(TARGET) or {}).get("engines", {}).get(engine(plan), {})


def groups(plan) -> Run:
    """The one run of a plan without pools, as the engine cuts it: its ``size`` (pods per
    group), ``replicas`` (groups) and ``gpus`` (per pod)."""
    return launch(plan, TARGET).runs[0]


def job_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def commands(run: Run) -> tuple[list[str], list[str] | None]:
    """The leader's container command and the workers' (None for a group of one pod)."""
    from parc.targets.kubernetes import PLAN_DIR

    return (pod_command(run.leader, K8S_VARS, PLAN_DIR),
            pod_command(run.worker, K8S_VARS, PLAN_DIR) if run.worker else None)


def _env(plan, run: Run) -> list:
    from parc.targets.kubernetes import PLAN_DIR, pod_env

    return pod_env([Env("PARC_PLAN", f"{PLAN_DIR}/plan.json"), *run.env] + nccl_env(plan))


def disaggregated(plan) -> bool:
    """Whether the pools go in one DisaggregatedSet (the key ``disaggregated_set``) rather than a
    LeaderWorkerSet each."""
    return bool(plan.pools) and bool(settings(plan, TARGET).get("disaggregated_set"))


def _set(plan, run: Run, name: str, role: str | None = None) -> dict:
    """One LeaderWorkerSet (and its Service) as the template writes it: ``run``'s groups running
    the engine's commands; with ``role``, the role of that name in the DisaggregatedSet ``name``,
    whose Service selects its leaders by the controller's labels."""
    from parc.targets.kubernetes import CPU_PER_GPU, MEMORY_PER_GPU, SHM_DEFAULT, quantity

    s = settings(plan, TARGET)
    leader, worker = commands(run)
    memory = s.get("memory", MEMORY_PER_GPU * run.gpus)
    roles = [{"key": "leaderTemplate" if worker else "workerTemplate", "command": leader, "leader": True}]
    if worker:
        roles.append({"key": "workerTemplate", "command": worker, "leader": False})
    selector = ([(SET_LABEL, name), (ROLE_LABEL, role)] if role else [(NAME_LABEL, name)]) + [(WORKER_LABEL, "0")]
    return {"name": f"{name}-{role}" if role else name, "role": role, "selector": selector, "replicas": run.replicas, "size": run.size, "gpus": run.gpus, "roles": roles,
            "env": _env(run.plan if plan.pools else plan, run), "port": run.port,
            "cpu": str(s.get("cpu", CPU_PER_GPU * run.gpus)), "memory": quantity(memory),
            "shm": quantity(s.get("shm_size", min(SHM_DEFAULT, memory)))}


def build(plan) -> list[File]:
    from parc.targets.kubernetes import PLAN_DIR
    from parc.targets.render import render

    s = settings(plan, TARGET)
    facts = engine_facts(plan)
    name = job_name(plan)
    node = launch(plan, TARGET)
    if plan.pools:
        from parc.targets.lws.pools import pooled

        sets, proxy, scripts, what = pooled(plan, node, name)
    else:
        run = node.runs[0]
        sets, proxy, scripts = [_set(plan, run, name)], None, []
        what = (f"Mesh: {mesh_text(plan)}; {count(run.replicas, 'group')} of {count(run.size, 'pod')} x "
                f"{count(run.gpus, 'GPU')}; the Service {name}-leader sends requests to the groups' leaders.")
    kind = "DisaggregatedSet" if disaggregated(plan) else "LeaderWorkerSet"
    header = [f"{kind} compiled by parc from {spec_name(plan)}: kubectl apply -f lws.yaml "
              "(the LeaderWorkerSet controller must be installed)", what]
    text = render("lws/lws.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  image=s.get("image", facts["image"]), container=facts["container"], health=facts["health"],
                  engine=display(engine(plan)), sets=sets, proxy=proxy, scripts=scripts,
                  rdma=s.get("rdma_resource"), rdma_devices=s.get("rdma_devices", 1), dset=disaggregated(plan),
                  plan_json=plan_json(plan), plan_dir=PLAN_DIR)
    return [File("lws.yaml", text), File("plan.json", plan_json(plan))]
