"""What ``parc diff`` compares: the estimate's metrics old → new (with which way is better) and
the resolved settings that differ."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Metric:
    key: str          # dotted path into estimate(plan).to_json()
    label: str
    kind: str         # count | params | bytes | seconds | fraction | rate
    better: int = 0   # -1 lower is better, +1 higher is better, 0 neutral
    group: str = ""


METRICS: tuple[Metric, ...] = (
    Metric("world_size", "world size (GPUs)", "count", 0, "mesh"),
    Metric("mesh.pp", "pp", "count", 0, "mesh"),
    Metric("mesh.dp", "dp", "count", 0, "mesh"),
    Metric("mesh.cp", "cp", "count", 0, "mesh"),
    Metric("mesh.tp", "tp", "count", 0, "mesh"),
    Metric("mesh.ep", "ep", "count", 0, "mesh"),
    Metric("microbatches", "microbatches per step", "count", 0, "mesh"),
    Metric("params.most_loaded_gpu", "parameters on the busiest GPU", "params", -1, "mesh"),
    Metric("memory_per_gpu.weights", "weights", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.grads", "gradients", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.optimizer", "optimizer state", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.activations", "activations", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.kv_cache", "KV cache", "bytes", 0, "memory per GPU"),
    Metric("memory_per_gpu.total", "total", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.capacity", "capacity", "bytes", 0, "memory per GPU"),
    Metric("kv_cache.capacity_tokens", "KV cache capacity (tokens)", "count", +1, "memory per GPU"),
    Metric("comm_per_step.tp", "tp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.cp", "cp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.dp", "dp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.pp", "pp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.ep", "ep", "bytes", -1, "communication per step"),
    Metric("bubble_fraction", "pipeline bubble", "fraction", -1, "time"),
    Metric("tokens_per_step", "tokens per step", "count", 0, "time"),
    Metric("step_time", "step time", "seconds", -1, "time"),
    Metric("tokens_per_second", "throughput (tokens/s)", "rate", +1, "time"),
    Metric("mfu", "MFU", "fraction", +1, "time"),
)

HEADLINE = {"step_time": "step time", "memory_per_gpu.total": "memory per GPU", "world_size": "GPUs"}


def _get(d: dict, key: str):
    cur = d
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _with_derived(est: dict) -> dict:
    est = dict(est)
    if "tokens_per_second" not in est and est.get("step_time"):
        est["tokens_per_second"] = est.get("tokens_per_step", 0) / est["step_time"]
    return est


def compare(old: dict, new: dict) -> list[dict]:
    """One row per metric: key, label, group, kind, old, new, delta, relative (None if old is 0),
    and verdict (better | worse | changed | same)."""
    old, new = _with_derived(old), _with_derived(new)
    rows = []
    for m in METRICS:
        a, b = _get(old, m.key), _get(new, m.key)
        if a is None and b is None:
            continue
        a = a or 0
        b = b or 0
        delta = b - a
        same = abs(delta) <= 1e-12 * max(abs(a), abs(b), 1)
        rel = None if a == 0 else delta / a
        if same:
            verdict = "same"
        elif m.better == 0:
            verdict = "changed"
        else:
            verdict = "better" if (delta > 0) == (m.better > 0) else "worse"
        rows.append({"key": m.key, "label": m.label, "group": m.group, "kind": m.kind, "old": a, "new": b,
                     "delta": 0 if same else delta, "relative": None if same else rel, "verdict": verdict})
    return rows


def setting_changes(old_plan: dict, new_plan: dict) -> list[dict]:
    """The resolved settings that differ, as dotted paths (``mesh.tp``: 8 → 4)."""
    a, b = _flatten(old_plan), _flatten(new_plan)
    out = []
    for k in sorted(set(a) | set(b), key=_setting_order):
        if k in ("file",) or k.startswith("targets.") and k.endswith(".name"):
            continue
        if a.get(k) != b.get(k):
            out.append({"path": k, "old": a.get(k), "new": b.get(k)})
    return out


_BLOCK_ORDER = ("model", "cluster", "mesh", "placement", "schedule", "train", "serve", "mode", "targets")


def _setting_order(k: str):
    head = k.split(".", 1)[0]
    return (_BLOCK_ORDER.index(head) if head in _BLOCK_ORDER else len(_BLOCK_ORDER), k)


def _flatten(d, prefix="") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out
