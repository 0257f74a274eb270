"""An NVIDIA Dynamo ``DynamoGraphDeployment`` read back (the inverse of parc/targets/dynamo): the
v1beta1 API parc writes by default and Dynamo's own templates use (``spec.components``: ``type``,
the ``main`` container of its ``podTemplate`` with its ``nvidia.com/gpu`` limit,
``sharedMemorySize``), and the v1alpha1 API of older operators (``spec.services``:
``componentType``, ``extraPodSpec.mainContainer``, ``resources.limits.gpu`` per pod,
``envFromSecret``, ``sharedMemory.size``; read back as the target's ``api_version = v1alpha1``),
ai-dynamo 1.6.1 (tests/data/dynamo).

The frontend serves the API (its ``--http-port`` is the target's ``port``); each worker runs
Dynamo's module for the engine (``python3 -m dynamo.vllm`` with vLLM's engine options and
``--model``, ``python3 -m dynamo.sglang`` with SGLang's), read by the engine's reader. A worker's
``--disaggregation-mode prefill|decode`` (dynamo.vllm's own option; SGLang's is the engine's) is
its pool; its ``replicas`` a pool's instances, or the data-parallel replicas of an aggregated
worker; ``multinode.nodeCount`` its pods, each with the node's GPUs. A multinode vLLM worker runs
over Ray, which the operator starts itself (``ray start --head && ARGS`` on the leader)."""
from __future__ import annotations

from parc.importer.orchestrated import (
    count,
    pods_facts,
    replicas,
    scheduler,
    setting,
    without_option,
    worker,
)
from parc.importer.yamlfiles import SCALARS, _container_env, _container_script, _get

SKIPPED = ("frontend", "planner")
ROLES = ("prefill", "decode")
# the role switches of dynamo.vllm before --disaggregation-mode replaced them
OLD_ROLES = {"--is-prefill-worker": "prefill", "--is-decode-worker": "decode"}


def _components(spec: dict) -> list[dict]:
    """Each component as {name, type, replicas, nodes, container, env, gpus} (either API)."""
    out = []
    if isinstance(spec.get("components"), list):
        for c in spec["components"]:
            if not isinstance(c, dict):
                continue
            conts = _get(c, "podTemplate", "spec", "containers") or []
            conts = [x for x in conts if isinstance(x, dict)]
            main = next((x for x in conts if x.get("name") == "main"), conts[0] if conts else {})
            out.append({**c, "type": c.get("type") or c.get("componentType"), "container": main})
    elif isinstance(spec.get("services"), dict):
        for name, s in spec["services"].items():
            if isinstance(s, dict):
                main = _get(s, "extraPodSpec", "mainContainer") or {}
                out.append({**s, "name": str(name), "type": s.get("componentType"), "container": main})
    return out


def _gpus(c: dict) -> int:
    for v in (_get(c, "container", "resources", "limits", "nvidia.com/gpu"), _get(c, "resources", "limits", "gpu"),
              _get(c, "resources", "requests", "gpu")):
        if v is not None and str(v).isdigit():
            return int(v)
    return 0


def _env(c: dict) -> dict:
    env = {str(e["name"]): str(e["value"]) for e in c.get("envs") or []
           if isinstance(e, dict) and "name" in e and isinstance(e.get("value"), SCALARS)}
    return {**env, **_container_env(c["container"] if isinstance(c["container"], dict) else {})}


def _secret(c: dict) -> str | None:
    if isinstance(c.get("envFromSecret"), str):
        return c["envFromSecret"]
    for e in _get(c, "container", "envFrom") or []:
        name = _get(e, "secretRef", "name")
        if isinstance(name, str):
            return name
    return None


def read(src, doc: dict, variables: dict) -> None:
    """The workers of a DynamoGraphDeployment, added to ``src`` (module doc)."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    keys = scheduler(src, doc, "dynamo", "workers")
    if doc.get("apiVersion") == "nvidia.com/v1alpha1":   # v1beta1 is the target's default
        from parc.importer.draft import Name

        setting(src, keys, "api_version", Name("v1alpha1"), f"{src.name}: apiVersion nvidia.com/v1alpha1")
    pods, launches = [], []
    for c in _components(spec):
        kind = str(c.get("type") or "").lower()
        ctr = c["container"] if isinstance(c["container"], dict) else {}
        if isinstance(ctr.get("image"), str):
            setting(src, keys, "image", ctr["image"], f"{src.name} {c['name']} image")
        secret = _secret(c)
        if secret:
            setting(src, keys, "secret", secret, f"{src.name} {c['name']}: the Secret of its environment")
        script = _container_script(ctr, _env(c))
        if kind == "frontend":
            _frontend(src, script, keys)
            continue
        if kind in SKIPPED or not script:
            continue
        copies = count(c.get("replicas"), f"{c['name']}.replicas", src)
        nodes = count(_get(c, "multinode", "nodeCount"), f"{c['name']}.multinode.nodeCount", src)
        found = worker(src, script, variables, _env(c), None, copies, c["name"])
        for la in found:
            role = (_vllm_role(src, la) if la.engine == "vllm" else _sglang_role(la)) or kind
            la.role = role if role in ROLES else ""
        launches += found
        if found:
            pods.append((copies, nodes, _gpus(c)))
            _requests(src, c, keys)
    roles = {la.role for la in launches}
    if "prefill" in roles and "" in roles:      # the frontend sends prefills to the prefill workers
        src.notes.append(f"{src.name}: the workers without a role beside prefill workers are read as the decode pool")
        for la in launches:
            la.role = la.role or "decode"
    if launches and not any(la.role for la in launches) and pods:
        replicas(src, pods[0][0], f"{src.name}: the worker's replicas: {pods[0][0]}")
    pods_facts(src, pods, "worker resources.limits")


def _vllm_role(src, la) -> str | None:
    """dynamo.vllm's role option, taken out of vLLM's options: --disaggregation-mode, or the
    switches of Dynamo releases before it (--is-prefill-worker, --is-decode-worker), noted."""
    role = without_option(la, "--disaggregation-mode")
    for a in list(la.args):
        old = OLD_ROLES.get(a.value or "")
        if old:
            la.args.remove(a)
            role = role or old
            src.notes.append(f"{src.name}: {a.value} is an older Dynamo's spelling of --disaggregation-mode {old}, "
                             "which parc writes (the spelling of Dynamo 1.6.1)")
    return role


def _requests(src, c: dict, keys: dict) -> None:
    """A worker's CPU and memory requests (the component's, else its container's) and its
    shared memory (v1alpha1's sharedMemory.size, v1beta1's sharedMemorySize; "0", no /dev/shm
    volume, is not a size): the target's cpu, memory and shm_size."""
    from parc.importer.orchestrated import quantity

    for k in ("cpu", "memory"):
        raw = _get(c, "resources", "requests", k) or _get(c, "container", "resources", "requests", k)
        if raw is not None:
            v = quantity(raw, k)
            if v is None:
                src.notes.append(f"{src.name} {c['name']} requests {k}: {str(raw)[:40]!r} is not read: `{k}` left out")
            else:
                setting(src, keys, k, v, f"{src.name} {c['name']} requests: {k}")
    shm = _get(c, "sharedMemory", "size")
    shm = c.get("sharedMemorySize") if shm is None else shm       # v1beta1's spelling
    if shm is not None and str(shm) != "0" and quantity(shm, "memory") is not None:
        setting(src, keys, "shm_size", quantity(shm, "memory"), f"{src.name} {c['name']} shared memory size")


def _sglang_role(la) -> str | None:
    words = [a.value for a in la.args]
    return words[words.index("--disaggregation-mode") + 1] if "--disaggregation-mode" in words[:-1] else None


def _frontend(src, script: str | None, keys: dict) -> None:
    """The frontend's HTTP port (``--http-port``), the target's ``port``."""
    import shlex

    try:
        words = shlex.split(script or "")
    except ValueError:
        return
    if "--http-port" in words[:-1]:
        port = words[words.index("--http-port") + 1]
        if port.isdigit() and 1 <= int(port) <= 65535:
            setting(src, keys, "port", int(port), f"{src.name} Frontend --http-port {port}")
