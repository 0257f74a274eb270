"""What the readers of the serving orchestrators' objects share (a Dynamo DynamoGraphDeployment,
a KServe LLMInferenceService, a Ray Serve LLM application): each names the engine's command of a
worker (or the options it builds it from) and how many of it run, in which role. Each worker
becomes the engine's launch, read by the engine's own reader as any ``vllm serve`` or SGLang
server is: its role (prefill or decode, a pool) and its copies (a pool's instances) travel on the
:class:`parc.importer.launches.Launch`; copies of a plan without pools are data-parallel
replicas (the scheduler's ``replicas``)."""
from __future__ import annotations

import re

# the most copies of a worker read as written: a larger count is a typo or a hostile file, and the
# plan it would make is not the one meant
MAX_COPIES = 4096
QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti)")


def count(v, what: str, src) -> int:
    """A replica or node count of the object: a whole number from 1 to MAX_COPIES (else 1, noted)."""
    if v is None:
        return 1
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COPIES:
        shown = repr(str(v)[:40]) if isinstance(v, (str, int, float)) else f"a {type(v).__name__}"
        src.warnings.append(("P043", f"{src.name} {what}", (f"{shown} is no count from 1 to {MAX_COPIES}: "
                             "read as 1; write the count the deployment runs in the spec")))
        return 1
    return v


def worker(src, script: str, variables: dict, env: dict, role: str | None, copies: int, where: str) -> list:
    """The engine launches of one worker's command (``script``: shell text), with its role and copies."""
    from parc.importer.sh_values import lit
    from parc.importer.sources import shell_launches

    out = shell_launches(src, script, variables, None, extra_env={k: lit(v) for k, v in env.items()},
                         tags=((role or where,),))
    for la in out:
        la.role = role or ""
        la.instances = copies
        la.file = src.name
    return out


def without_option(la, name: str) -> str | None:
    """The value of option ``name`` in the launch's arguments, the option taken out (an option of
    the orchestrator's module that the engine itself does not take)."""
    for i, a in enumerate(la.args):
        v = a.value or ""
        if v == name and i + 1 < len(la.args):
            value = la.args[i + 1].value
            del la.args[i:i + 2]
            return value
        if v.startswith(name + "="):
            del la.args[i]
            return v.partition("=")[2]
    return None


def setting(src, keys: dict, key: str, value, note: str) -> None:
    """A key of the orchestrator's target block, where the spec can hold its value (a string
    with a control character cannot: left out, and said)."""
    from parc.importer.draft import writable

    if isinstance(value, str) and not writable(value):
        src.notes.append(f"{note}: {value[:40]!r} holds a character a spec's string cannot: `{key}` left out")
        return
    keys.setdefault(key, (value, note))


def scheduler(src, doc: dict, target: str, what: str) -> dict:
    """The object's target block (its keys, filled by the reader), with its name and namespace."""
    keys: dict = {}
    src.kind = target
    src.scheduler = {"target": target, "keys": keys, "what": what}
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    for k in ("name", "namespace"):
        if isinstance(meta.get(k), str):
            setting(src, keys, k, meta[k], f"{src.name} metadata.{k}")
    return keys


def pods_facts(src, pods: list[tuple[int, int, int]], what: str) -> None:
    """The cluster facts of the workers' pods: (copies, pods each, GPUs a pod) of each worker."""
    gpus = [g for _, _, g in pods if g]
    if gpus:
        src.facts["gpus_per_node"] = (max(gpus), f"{src.name} {what}: {max(gpus)} GPUs a pod")
    nodes = sum(c * n for c, n, g in pods if g)
    if nodes:
        src.facts["nodes"] = (nodes, f"{src.name}: {nodes} GPU pod(s) in all")


def quantity(v, key: str) -> object:
    """A Kubernetes quantity as the .par's value: ``cpu`` whole cores (an int), ``memory`` binary
    bytes (``16Gi`` as ``16GiB``); None for any other (``500m``, ``16G``)."""
    from parc.importer.draft import Name

    s = str(v).strip() if isinstance(v, (str, int)) and not isinstance(v, bool) else ""
    if key == "cpu":
        return int(s) if s.isdigit() and int(s) > 0 else None
    m = QUANTITY.fullmatch(s)
    return Name(f"{m.group(1)}{m.group(2)}B") if m else None


def replicas(src, copies: int, note: str) -> None:
    """Copies of the one engine of a plan without pools: data-parallel replicas."""
    if copies > 1:
        src.scheduler["replicas"] = (copies, note)
