"""The YAML files a launch is deployed with: a SkyPilot task (``run``, ``envs``, ``num_nodes``,
``resources.accelerators``), a LeaderWorkerSet (its leader and worker pod templates), and the
pods of a Kubernetes Deployment, StatefulSet, Job or PyTorchJob; a TrainJob and its runtime
(parc/importer/trainjob.py), and the serving orchestrators' objects, each read by its own module
(parc/importer/dynamo.py, kserve.py, rayserve.py). Each container's
command is read by the shell reader: ``sh -c SCRIPT`` as that script, any other command as its
words (quoted with :func:`shlex.join`, since Kubernetes passes them to the program unsplit);
``$(NAME)`` in a container's command is Kubernetes' own reference to the container's environment
(Container v1 ``command``), replaced before the shell reads it where the file sets ``NAME``."""
from __future__ import annotations

import re
import shlex

from parc.importer.sh_values import lit

# the values read as words: a YAML alias may stand for a structure whose text is exponentially long
SCALARS = (str, int, float, bool)
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "zsh"}
_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# the containers of a pod template, where each kind keeps them
_POD_PATHS = {"Deployment": [("spec", "template")], "StatefulSet": [("spec", "template")],
              "Job": [("spec", "template")], "Pod": [()], "DaemonSet": [("spec", "template")]}
_TARGET = {"LeaderWorkerSet": "lws", "PyTorchJob": "kubernetes", "Deployment": "kubernetes", "StatefulSet": "kubernetes",
           "Job": "kubernetes", "Pod": "kubernetes"}
# the serving orchestrators' objects, each read by its module of parc/importer
_ORCHESTRATORS = {"DynamoGraphDeployment": "dynamo", "LLMInferenceService": "kserve"}


def read_yaml(src, text: str, variables: dict) -> None:
    """The launches and cluster facts of a YAML file, added to ``src``."""
    import yaml

    from parc.importer.sources import ImportError_

    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as e:
        raise ImportError_(f"{src.path}: not YAML ({str(e).splitlines()[0]})") from None
    for doc in docs:
        kind = doc.get("kind")
        if kind is None and ("run" in doc or "resources" in doc):
            _skypilot(src, doc, variables)
        elif kind == "LeaderWorkerSet":
            _lws(src, doc, variables)
        elif kind in ("TrainJob", "ClusterTrainingRuntime", "TrainingRuntime"):
            from parc.importer.trainjob import collect

            collect(src, doc)
        elif kind in _ORCHESTRATORS:
            import importlib

            importlib.import_module(f"parc.importer.{_ORCHESTRATORS[kind]}").read(src, doc, variables)
        elif kind is None and isinstance(doc.get("applications"), list):
            from parc.importer.rayserve import read as rayserve

            rayserve(src, doc, variables)
        elif kind in _TARGET:
            _pods(src, doc, variables, kind)


def _get(d, *path):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _skypilot(src, doc: dict, variables: dict) -> None:
    from parc.importer.sources import shell_launches

    src.kind = "skypilot"
    nodes = doc.get("num_nodes", 1)
    acc = _get(doc, "resources", "accelerators")
    if isinstance(acc, dict):           # {H100: 8}, or a set of choices {H100:8, H200:8} (the first)
        acc = next(iter(acc.items()), None)
        acc = (f"{acc[0]}:{acc[1]}" if acc[1] is not None else str(acc[0])) if acc else None
    elif isinstance(acc, list):
        acc = acc[0] if acc else None
    envs = doc.get("envs") if isinstance(doc.get("envs"), dict) else {}
    env = {str(k): lit(str(v)) for k, v in envs.items() if isinstance(v, SCALARS)}
    env["SKYPILOT_NUM_NODES"] = lit(str(nodes))
    if isinstance(nodes, int):
        src.facts["nodes"] = (nodes, f"{src.name} num_nodes: {nodes}")
    if isinstance(acc, str):
        name, _, count = acc.partition(":")
        if count.isdigit():
            src.facts["gpus_per_node"] = (int(count), f"{src.name} accelerators: {acc}")
            env["SKYPILOT_NUM_GPUS_PER_NODE"] = lit(count)
        src.facts["gpu"] = (name, f"{src.name} accelerators: {acc}")
    src.scheduler = {"target": "skypilot", "keys": {}, "what": "nodes"}
    disk = _get(doc, "resources", "disk_size")
    if isinstance(disk, str) and re.fullmatch(r"\d+\s*GB", disk.strip()):   # SkyPilot takes 1024 or "1024GB"
        disk = int(disk.strip()[:-2])
    if isinstance(disk, int):
        src.scheduler["keys"]["disk_size"] = (disk, f"{src.name} disk_size: {disk}")
    for key in ("cpus", "memory"):      # a number, or "N+" for at least N
        v = _get(doc, "resources", key)
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            src.scheduler["keys"][key] = (str(v), f"{src.name} {key}: {v}")
    run = doc.get("run")
    if isinstance(run, str):
        shell_launches(src, run, variables, None, extra_env=env)


def _container_script(c: dict, env: dict) -> str | None:
    """A container's command and args as shell text, Kubernetes' ``$(NAME)`` replaced."""
    words = [str(w) for part in (c.get("command"), c.get("args")) if isinstance(part, list)
             for w in part if isinstance(w, SCALARS)]
    if not words:
        return None

    def ref(m):
        v = env.get(m.group(1))
        return v if v is not None else m.group(0)
    words = [_K8S_REF.sub(ref, w) for w in words]
    if len(words) >= 3 and words[0] in SHELLS and words[1] in ("-c", "-ec", "-xc", "-lc"):
        return words[2]
    return shlex.join(words)


def _container_env(c: dict) -> dict:
    return {e["name"]: str(e["value"]) for e in c.get("env") or []
            if isinstance(e, dict) and "name" in e and isinstance(e.get("value"), (str, int, float))}


def _pod(src, pod: dict, variables: dict, env: dict, tag: tuple, what: str) -> None:
    """The launches of a pod template's containers, with its GPU count as a fact."""
    from parc.importer.sources import shell_launches

    for c in _get(pod, "spec", "containers") or []:
        if not isinstance(c, dict):
            continue
        cenv = {**env, **_container_env(c)}
        script = _container_script(c, cenv)
        gpus = _get(c, "resources", "limits", "nvidia.com/gpu") or _get(c, "resources", "limits", "amd.com/gpu")
        if gpus is not None and str(gpus).isdigit():
            src.facts.setdefault("gpus_per_node", (int(gpus), f"{src.name} {what} resources.limits: {gpus} GPUs"))
        if c.get("image"):
            src.scheduler["keys"].setdefault("image", (str(c["image"]), f"{src.name} {what} image"))
        if script:
            shell_env = {k: lit(v) for k, v in cenv.items()}
            shell_launches(src, script, variables, None, extra_env=shell_env, tags=tag)


def _lws(src, doc: dict, variables: dict) -> None:
    src.kind = "lws"
    lwt = _get(doc, "spec", "leaderWorkerTemplate") or {}
    size = lwt.get("size", 1)
    env = {"LWS_GROUP_SIZE": str(size)}
    if isinstance(size, int):
        src.facts["nodes"] = (size, f"{src.name} leaderWorkerTemplate.size: {size}")
    src.scheduler = {"target": "lws", "keys": {}, "what": "pods"}
    replicas = _get(doc, "spec", "replicas")
    if isinstance(replicas, int) and replicas > 1:
        src.scheduler["replicas"] = (replicas, f"{src.name} replicas: {replicas}")
    leader, worker = lwt.get("leaderTemplate"), lwt.get("workerTemplate")
    if leader:
        _pod(src, leader, variables, env, (("leader",),), "leaderTemplate")
    if worker:
        _pod(src, worker, variables, env, (("worker",),), "workerTemplate")
    src.notes.append(f"{src.name}: LWS_LEADER_ADDRESS is the leader pod's address, known when the group runs")


def _pods(src, doc: dict, variables: dict, kind: str) -> None:
    src.kind = _TARGET[kind]
    src.scheduler = {"target": _TARGET[kind], "keys": {}, "what": "pods"}
    templates = []
    if kind == "PyTorchJob":
        for role, spec in (_get(doc, "spec", "pytorchReplicaSpecs") or {}).items():
            templates.append((spec.get("template") or {}, role, spec.get("replicas", 1)))
    else:
        for path in _POD_PATHS[kind]:
            templates.append((_get(doc, *path) if path else doc, kind, _get(doc, "spec", "replicas") or 1))
    total = 0
    for pod, role, replicas in templates:
        _pod(src, pod, variables, {}, ((str(role).lower(),),), role)
        total += replicas if isinstance(replicas, int) else 0
    if kind == "PyTorchJob" and total:
        src.facts["nodes"] = (total, f"{src.name}: {total} pods")
