"""A Kubeflow Trainer ``TrainJob`` read with the training runtime it refers to (``spec.runtimeRef``:
a ``ClusterTrainingRuntime`` or a namespaced ``TrainingRuntime``, by name), Trainer v2.3.0.

The runtime's pod template holds the trainer's container (the replicated job ``node``, its
container ``node``: parc/targets/trainjob/target.toml [runtime]) and its ``mlPolicy`` the node
count and, for the torch plugin, the processes a node (``mlPolicy.torch.numProcPerNode``). What
the TrainJob's ``spec.trainer`` sets wins: ``command``, ``args``, ``image``, ``env``,
``numNodes``, ``numProcPerNode``, ``resourcesPerNode``. The torch plugin gives each pod
``PET_NNODES`` and ``PET_NPROC_PER_NODE`` from those, which torchrun reads for ``--nnodes`` and
``--nproc-per-node`` where the command leaves them out.

The runtime is looked for in every file read (the same file or another one given). Where it is
in none and the TrainJob names no command, the command is the runtime's, which the files do not
hold: the launch is a placeholder (``unknown(...)``, P040 in ``parc check``), and the import says
so (P041) instead of guessing a script."""
from __future__ import annotations

from parc.importer.launches import Launch
from parc.importer.orchestrated import scheduler, setting
from parc.importer.yamlfiles import _container_env, _container_script, _get

RUNTIMES = ("ClusterTrainingRuntime", "TrainingRuntime")
DEFAULT_KIND = "ClusterTrainingRuntime"


def collect(src, doc: dict) -> None:
    """Keep a TrainJob or a training runtime of ``src`` for :func:`link` (runtimes may be in another file)."""
    held = src.data if isinstance(src.data, dict) and "trainjobs" in src.data else {"trainjobs": [], "runtimes": []}
    src.data = held
    held["trainjobs" if doc.get("kind") == "TrainJob" else "runtimes"].append(doc)
    if doc.get("kind") == "TrainJob":
        src.kind = "trainjob"


def link(sources: list, variables: dict) -> None:
    """Each TrainJob of the files read with its runtime (module doc): its launches and facts."""
    held = [s for s in sources if isinstance(s.data, dict) and "trainjobs" in s.data]
    runtimes = {}
    for s in held:
        for doc in s.data["runtimes"]:
            name = _get(doc, "metadata", "name")
            if isinstance(name, str):
                runtimes.setdefault((doc.get("kind"), name), (doc, s.name))
    for s in held:
        for job in s.data["trainjobs"]:
            _job(s, job, runtimes, variables)


def _runtime_pod(rt: dict) -> tuple[dict, dict]:
    """(the trainer's container, the mlPolicy) of a runtime."""
    from parc.model.targets import spec

    names = (spec("trainjob") or {}).get("runtime", {})
    jobs = [j for j in (_get(rt, "spec", "template", "spec", "replicatedJobs") or []) if isinstance(j, dict)]
    job = next((j for j in jobs if j.get("name") == names.get("job")), jobs[0] if jobs else {})
    conts = [c for c in (_get(job, "template", "spec", "template", "spec", "containers") or []) if isinstance(c, dict)]
    cont = next((c for c in conts if c.get("name") == names.get("container")), conts[0] if conts else {})
    policy = _get(rt, "spec", "mlPolicy")
    return cont, policy if isinstance(policy, dict) else {}


def _whole(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and 1 <= v <= 4096:
        return v
    return int(v) if isinstance(v, str) and v.isdigit() and 1 <= int(v) <= 4096 else None


def _job(src, job: dict, runtimes: dict, variables: dict) -> None:
    """Long because: each field of the TrainJob over the runtime's, in Trainer's order of precedence."""
    from parc.importer.sources import shell_launches

    trainer = _get(job, "spec", "trainer") or {}
    trainer = trainer if isinstance(trainer, dict) else {}
    ref = _get(job, "spec", "runtimeRef") or {}
    name = ref.get("name") if isinstance(ref.get("name"), str) else None
    kind = ref.get("kind") if ref.get("kind") in RUNTIMES else DEFAULT_KIND
    keys = scheduler(src, job, "trainjob", "pods")
    if name:
        setting(src, keys, "runtime", name, f"{src.name} runtimeRef: {name}")
    if kind != DEFAULT_KIND:
        setting(src, keys, "runtime_kind", kind, f"{src.name} runtimeRef kind")
    found = runtimes.get((kind, name)) if name else None
    cont, policy = _runtime_pod(found[0]) if found else ({}, {})
    where = f"{kind} {name} ({found[1]})" if found else None
    command = trainer.get("command") if isinstance(trainer.get("command"), list) else cont.get("command")
    args = trainer.get("args") if isinstance(trainer.get("args"), list) else cont.get("args")
    image = trainer.get("image") if isinstance(trainer.get("image"), str) else cont.get("image")
    if isinstance(image, str):
        setting(src, keys, "image", image, f"{src.name} trainer image" if "image" in trainer else f"{where} image")
    nodes = _whole(trainer.get("numNodes")) or _whole(policy.get("numNodes"))
    nproc = trainer.get("numProcPerNode", _get(policy, "torch", "numProcPerNode"))
    limits = _get(trainer, "resourcesPerNode", "limits") or _get(cont, "resources", "limits") or {}
    gpus = _whole(limits.get("nvidia.com/gpu") if isinstance(limits, dict) else None)
    if nodes:
        src.facts["nodes"] = (nodes, f"{src.name} numNodes: {nodes}" if "numNodes" in trainer
                              else f"{where} mlPolicy.numNodes: {nodes}")
    per = gpus or _whole(nproc)
    if per:
        src.facts["gpus_per_node"] = (per, f"{src.name} nvidia.com/gpu: {gpus}" if gpus else f"numProcPerNode: {nproc}")
    env = {**_container_env(cont), **_container_env(trainer)}
    env.update({k: str(v) for k, v in (("PET_NNODES", nodes), ("PET_NPROC_PER_NODE", _whole(nproc))) if v})
    script = _container_script({"command": command, "args": args}, env)
    if script:
        from parc.importer.sh_values import lit

        shell_launches(src, script, variables, None, extra_env={k: lit(v) for k, v in env.items()},
                       tags=(("trainer",),))
        return
    if name and not found:
        why, fix = (f"the command of {kind} {name}, which no file given holds",
                    "give the runtime's file to `parc import` beside the TrainJob")
    elif found:
        why, fix = (f"the command of the image {image} ({where} names none)",
                    "set `entrypoint` to the program the image runs")
    else:
        why, fix = "the trainer's command: the TrainJob names neither a command nor a runtime", "set `entrypoint`"
    src.launches.append(Launch("torchrun", [], src.name, 0, launcher="torchrun", tags=(("trainer",),),
                               facts={"trainjob.unknown": (why, f"{src.name} runtimeRef", fix)}))
