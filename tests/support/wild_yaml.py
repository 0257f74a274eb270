"""Launches inside YAML: a SkyPilot task, a LeaderWorkerSet, a Kubeflow PyTorchJob or TrainJob.

Each is read for what its system schedules (nodes, pods, GPUs) and for the command each node or
pod runs, which is run under the recorders with the variables that system sets:

* SkyPilot (sky/skylet/constants.py): ``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS``,
  ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NUM_GPUS_PER_NODE``, and the task's ``envs``; ``setup``
  runs before ``run`` on every node;
* LeaderWorkerSet (its API docs): ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``,
  ``LWS_WORKER_INDEX`` (0 on the leader), substituted by the kubelet as ``$(NAME)``;
* PyTorchJob (training-operator v1): ``MASTER_ADDR``, ``WORLD_SIZE``, ``RANK`` and, for torchrun,
  ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``;
* TrainJob (Trainer v2's torch plugin): the same ``PET_*`` variables, ``PET_NNODES`` from
  ``numNodes`` and ``PET_NPROC_PER_NODE`` from ``numProcPerNode`` (``auto``: the runtime's)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from support.wild_launch import IGNORED, Launch, container_launches, run_node_scripts

GPU = "nvidia.com/gpu"


def _gpus(container: dict) -> int:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        v = (res.get(part) or {}).get(GPU)
        if v is not None:
            return int(v)
    return 0


def _scheduler(fmt: str, d: dict) -> Launch:
    return Launch(fmt, "scheduler", {f"{fmt}.{k}": v for k, v in d.items() if k not in IGNORED.get(fmt, ())})


def _accelerators(acc) -> str:
    if isinstance(acc, dict):     # {H100: 8} or the set {H100:8, H200:8} (keys with no value)
        return ",".join(sorted(k if v is None else f"{k}:{v}" for k, v in acc.items()))
    if isinstance(acc, list):
        return ",".join(sorted(acc))
    return str(acc)


def skypilot(text: str, sandbox: Path, node_rank_only: int | None = None) -> list[Launch]:
    task = yaml.safe_load(text)
    res = task.get("resources") or {}
    acc = _accelerators(res.get("accelerators"))
    gpn = int(acc.split(",")[0].split(":")[1]) if ":" in acc else 0
    nodes = int(task.get("num_nodes", 1))
    sched = {"num_nodes": nodes, "accelerators": acc, **{k: v for k, v in res.items()
                                                         if k not in ("accelerators", "any_of", "ports")}}
    env = {k: "" if v is None else str(v) for k, v in {**(task.get("envs") or {}), **(task.get("secrets") or {})}.items()}
    ips = "\n".join(f"10.0.0.{n + 1}" for n in range(nodes))
    env.update(SKYPILOT_NUM_NODES=str(nodes), SKYPILOT_NUM_GPUS_PER_NODE=str(gpn), SKYPILOT_NODE_IPS=ips,
               SKYPILOT_TASK_ID="wild")
    script = f"{task.get('setup') or ''}\n{task.get('run') or ''}\n"
    out = [_scheduler("skypilot", sched)]
    out += run_node_scripts(script, sandbox, nodes, env, "SKYPILOT_NODE_RANK")
    return out


def _template_mounts(spec: dict, configmaps: dict, sandbox: Path) -> dict:
    """The ConfigMaps a pod mounts, written into the sandbox: {mount path: folder}."""
    vols = {v["name"]: v["configMap"]["name"] for v in spec.get("volumes") or [] if "configMap" in v}
    out = {}
    for c in spec.get("containers") or []:
        for m in c.get("volumeMounts") or []:
            if m["name"] in vols and vols[m["name"]] in configmaps:
                folder = sandbox / "mounts" / m["mountPath"].strip("/").replace("/", "_")
                folder.mkdir(parents=True, exist_ok=True)
                for k, v in configmaps[vols[m["name"]]].items():
                    (folder / k).write_text(v)
                out[m["mountPath"]] = folder
    return out


def _docs(text: str) -> tuple[list[dict], dict]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    cms = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    return docs, cms


def lws(text: str, sandbox: Path) -> list[Launch]:
    docs, cms = _docs(text)
    out = []
    for d in (d for d in docs if d.get("kind") == "LeaderWorkerSet"):
        spec = d["spec"]
        t = spec["leaderWorkerTemplate"]
        size = int(t.get("size", 1))
        leader = (t.get("leaderTemplate") or t["workerTemplate"])["spec"]
        worker = t["workerTemplate"]["spec"]
        out.append(_scheduler("lws", {"replicas": int(spec.get("replicas", 1)), "size": size,
                                      "leader_gpus": _gpus(leader["containers"][0]),
                                      "worker_gpus": _gpus(worker["containers"][0]),
                                      "restart_policy": t.get("restartPolicy"),
                                      "startup_policy": spec.get("startupPolicy")}))
        for idx in range(size):
            pod = leader if idx == 0 else worker
            env = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(idx),
                   "LWS_NAME": d["metadata"]["name"], "LWS_GROUP_INDEX": "0"}
            box = sandbox / f"{d['metadata']['name']}-{idx}"
            mounts = _template_mounts(pod, cms, box)
            for la in container_launches(pod["containers"][0], box, env, mounts):
                la.node = idx
                out.append(la)
    return out


def _torch_env(nodes: int, nproc, rank: int) -> dict:
    return {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(nproc), "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29500", "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500", "JOB_COMPLETION_INDEX": str(rank)}


def pytorchjob(text: str, sandbox: Path) -> list[Launch]:
    docs, cms = _docs(text)
    out = []
    for d in (d for d in docs if d.get("kind") == "PyTorchJob"):
        specs = d["spec"]["pytorchReplicaSpecs"]
        master = int((specs.get("Master") or {}).get("replicas", 0))
        workers = int((specs.get("Worker") or {}).get("replicas", 0))
        pod = (specs.get("Master") or specs["Worker"])["template"]["spec"]
        gpus = _gpus(pod["containers"][0])
        nproc = d["spec"].get("nprocPerNode", "auto")
        out.append(_scheduler("pytorchjob", {"master_replicas": master, "worker_replicas": workers,
                                             "gpus_per_pod": gpus, "nproc_per_node": nproc,
                                             "run_policy": bool(d["spec"].get("runPolicy")),
                                             "elastic": bool(d["spec"].get("elasticPolicy"))}))
        nodes = master + workers
        for rank in range(nodes):
            role = "Master" if rank < master else "Worker"
            p = specs[role]["template"]["spec"]
            env = {**_torch_env(nodes, gpus if nproc == "auto" and gpus else nproc, rank),
                   "WORLD_SIZE": str(nodes), "RANK": str(rank)}
            box = sandbox / f"pod-{rank}"
            for la in container_launches(p["containers"][0], box, env, _template_mounts(p, cms, box)):
                la.node = rank
                out.append(la)
    return out


def trainjob(text: str, sandbox: Path) -> list[Launch]:
    docs, cms = _docs(text)
    out = []
    for d in (d for d in docs if d.get("kind") == "TrainJob"):
        tr = d["spec"].get("trainer") or {}
        nodes = int(tr.get("numNodes", 1))
        limits = ((tr.get("resourcesPerNode") or {}).get("limits") or {})
        gpus = int(limits.get(GPU, 0))
        nproc = tr.get("numProcPerNode", "auto")
        out.append(_scheduler("trainjob", {"num_nodes": nodes, "num_proc_per_node": nproc, "gpus_per_node": gpus,
                                           "runtime": (d["spec"].get("runtimeRef") or {}).get("name")}))
        container = {"command": tr.get("command") or [], "args": tr.get("args") or [], "env": tr.get("env") or []}
        mounts = {}
        for p in d["spec"].get("runtimePatches") or []:
            for job in ((p.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec", {}).get(
                    "replicatedJobs") or []:
                pod = job["template"]["spec"]["template"]["spec"]
                mounts.update(_template_mounts(pod, cms, sandbox / "trainjob"))
        for rank in range(nodes):
            env = _torch_env(nodes, gpus if nproc == "auto" and gpus else nproc, rank)
            for la in container_launches(container, sandbox / f"node-{rank}", env, mounts):
                la.node = rank
                out.append(la)
    return out


def dynamo(text: str, sandbox: Path) -> list[Launch]:
    """A DynamoGraphDeployment, v1alpha1 (``services``: extraPodSpec.mainContainer) or v1beta1
    (``components``: podTemplate's main container): each worker's replicas, pods and GPUs, and
    each pod's command as the operator changes it (tests/support/orchestrators.py)."""
    from support.orchestrators import operator_container

    docs, _ = _docs(text)
    out = []
    for d in (d for d in docs if d.get("kind") == "DynamoGraphDeployment"):
        spec = d["spec"]
        comps = ([dict(c, _container=next(x for x in c["podTemplate"]["spec"]["containers"] if x["name"] == "main"))
                  for c in spec["components"]] if "components" in spec else
                 [dict(s, name=k, type=s.get("componentType"), _container=s["extraPodSpec"]["mainContainer"])
                  for k, s in spec["services"].items()])
        for c in (c for c in comps if c.get("type") not in ("frontend", "planner")):
            nodes = int((c.get("multinode") or {}).get("nodeCount", 1))
            gpus = _gpus(c["_container"]) or int(((c.get("resources") or {}).get("limits") or {}).get("gpu", 0))
            out.append(_scheduler("dynamo", {"replicas": int(c.get("replicas", 1)), "nodes": nodes, "gpus": gpus}))
            for idx in range(nodes):
                command, args = operator_container(spec.get("backendFramework", "vllm"), c["_container"], nodes, idx)
                env = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": str(idx), "LWS_GROUP_SIZE": str(nodes)}
                box = sandbox / f"{d['metadata']['name']}-{c['name']}-{idx}"
                for la in container_launches(dict(c["_container"], command=command, args=args), box, env):
                    la.node = idx
                    out.append(la)
    return out


def kserve(text: str, sandbox: Path) -> list[Launch]:
    """An LLMInferenceService (v1alpha1 or v1alpha2): each workload's replicas, pods and GPUs, and
    the `vllm serve` KServe's preset starts on each pod (tests/support/orchestrators.py)."""
    from support.orchestrators import preset, size, vllm_argv
    from support.wild_launch import from_records

    docs, _ = _docs(text)
    out = []
    for d in (d for d in docs if d.get("kind") == "LLMInferenceService"):
        spec = d["spec"]
        pd = "prefill" in spec
        for w, role in [(spec, "decode")] + ([(spec["prefill"], "prefill")] if pd else []):
            chosen = preset(w, pd, role if pd else None)
            pods = size(w.get("parallelism")) if w.get("worker") is not None else 1
            main = next(c for c in w["template"]["containers"] if c["name"] == "main")
            out.append(_scheduler("kserve", {"replicas": int(w.get("replicas", 1)), "pods": pods,
                                             "gpus": _gpus(main), "preset": chosen}))
            for idx in range(pods):
                argv, env = vllm_argv(spec["model"]["name"], "default", w, chosen, idx, 8000)
                for la in from_records([{"name": "vllm", "argv": ["serve", *argv], "cwd": str(sandbox), "env": {}}],
                                       role if pd else ""):
                    la.node = idx
                    out.append(la)
    return out


def _engine_argv(kwargs: dict) -> list[str]:
    """vLLM's engine keyword arguments as the command line that states them (EngineArgs' fields
    are its options, dashed; a false switch its --no- form)."""
    argv = []
    for k, v in kwargs.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            argv.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, (dict, list)):
            argv += [flag, json.dumps(v)]
        else:
            argv += [flag, str(v)]
    return argv


def rayserve(text: str, sandbox: Path) -> list[Launch]:
    """A Ray Serve config of Ray Serve LLM applications (ray.serve.llm's builders): each LLMConfig
    (inline, or a file the config names beside it) as its replicas, GPU bundles and accelerator, and
    the vLLM engine its replicas build from engine_kwargs, read as the command line that says the same."""
    from support.wild_launch import from_records

    out = []
    for app in yaml.safe_load(text).get("applications") or []:
        args = app.get("args") or {}
        configs = [(c, "") for c in args.get("llm_configs") or []]
        configs += [(args[k], k.split("_")[0]) for k in ("llm_config", "prefill_config", "decode_config") if k in args]
        for c, role in configs:
            if isinstance(c, str):          # a path, relative to where `serve run` starts
                c = yaml.safe_load((sandbox / c).read_text())
            pg = c.get("placement_group_config") or {}
            dep = c.get("deployment_config") or {}
            out.append(_scheduler("rayserve", {
                "builder": app.get("import_path"), "replicas": int(dep.get("num_replicas", 1)),
                "accelerator_type": c.get("accelerator_type"), "strategy": pg.get("strategy"),
                "gpus": sum(int(b.get("GPU", 0)) for b in pg.get("bundles") or [])}))
            model = (c.get("model_loading_config") or {}).get("model_id", "")
            argv = ["serve", model, *_engine_argv(c.get("engine_kwargs") or {})]
            out += from_records([{"name": "vllm", "argv": argv, "cwd": str(sandbox), "env": {}}], role)
    return out


FORMATS = {"skypilot": skypilot, "lws": lws, "pytorchjob": pytorchjob, "trainjob": trainjob, "dynamo": dynamo,
           "kserve": kserve, "rayserve": rayserve}
