"""The launches in what parc emits for a target, read by the corpus's own readers.

Shell launches run under the recorders (``wild_shell``) the way their headers say to start them:
``launch.sh NODE_RANK`` on every node, ``serve.sh`` once, a pool's script once per instance
(its slot, or its node rank), ``deepspeed``'s ``launch.sh`` on node 0 only, ``sbatch job.sbatch``.
YAML is read as any published manifest is (``wild_yaml``). The node counts come from the
``plan.json`` parc writes beside every launch."""
from __future__ import annotations

import json
from pathlib import Path

from support import wild_launch, wild_shell, wild_yaml
from support.wild_launch import Launch

MASTER = {"MASTER_ADDR": "10.0.0.1"}


def _write(files, box: Path) -> None:
    box.mkdir(parents=True, exist_ok=True)
    for f in files:
        p = box / f.path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f.text)
        if f.executable:
            p.chmod(0o755)


def _run(files, box: Path, name: str, args=(), env=None, role: str = "", node: int = 0) -> list[Launch]:
    _write(files, box)
    text = (box / name).read_text()
    out = wild_launch.from_records(wild_shell.run(text, box, [str(a) for a in args], {**MASTER, **(env or {})}), role)
    for la in out:
        la.node = node
    return out


def _sample(nodes: int) -> list[int]:
    """The nodes whose launch is run: every node, or, past 8, the first two and the last (every
    node runs the same script; only its rank differs, and the comparison sets the rank aside)."""
    return list(range(nodes)) if nodes <= 8 else [0, 1, nodes - 1]


def _pool_runs(plan: dict, pool: dict, paths: set) -> list[tuple[str, list, int]]:
    """(script, args, node) for every instance of a pool: a slot on a shared node, or each node
    rank of an instance of whole nodes."""
    gpn = plan["cluster"]["gpus_per_node"]
    m = pool["mesh"]
    size = m["tp"] * m["pp"] * m["cp"] * m["dp"]
    name = pool["name"]
    out = []
    serve, launch, plain = f"{name}-serve.sh", f"{name}-launch.sh", f"{name}.sh"
    if serve in paths:
        per = max(1, gpn // size)
        out = [(serve, [i % per], i) for i in range(pool["instances"])]
    elif launch in paths:
        k = max(1, size // gpn)
        out = [(launch, [r], i * k + r) for i in range(pool["instances"]) for r in range(k)]
    elif plain in paths:   # SGLang: NODE_RANK counts the pool's own nodes
        nodes = max(1, -(-pool["instances"] * size // gpn))
        out = [(plain, [r], r) for r in range(nodes)]
    return out


def launches(target: str, files, sandbox: Path) -> list[Launch]:
    """Every launch the files start.

    Long because: one branch per kind of output, each saying how its files are started."""
    by = {f.path: f for f in files}
    plan = json.loads(by["plan.json"].text) if "plan.json" in by else None
    nodes = plan["cluster"]["nodes"] if plan else 1
    box = sandbox / "emitted"
    paths = set(by)
    if target in ("kubernetes", "lws", "trainjob", "skypilot"):
        name = {"kubernetes": "job.yaml", "lws": "lws.yaml", "trainjob": "trainjob.yaml", "skypilot": "task.yaml"}[target]
        fmt = {"kubernetes": "pytorchjob"}.get(target, target)
        _write(files, box)
        return wild_yaml.FORMATS[fmt](by[name].text, box)
    if target == "slurm":
        out = [Launch("slurm", "scheduler", wild_launch.sbatch_settings(by["job.sbatch"].text))]
        _write(files, box)
        hosts = " ".join(f"10.0.0.{n + 1}" for n in range(nodes))
        # what sbatch gives the job: its node list (the scontrol recorder expands it to WILD_HOSTS)
        recs = wild_shell.run(by["job.sbatch"].text, box, env={**MASTER, "PARC_LAUNCH_DIR": str(box),
                                                                 "SLURM_NNODES": str(nodes), "SLURM_JOB_ID": "1",
                                                                 "SLURM_JOB_NODELIST": f"node[0-{nodes - 1}]",
                                                                 "WILD_HOSTS": hosts, "PARC_HOSTS": hosts})
        engines = wild_launch.from_records(recs)
        for i, la in enumerate(engines):
            la.node = i if len(engines) == nodes else la.node
        return out + engines
    if target == "deepspeed":
        return _run(files, box, "launch.sh")
    out = []
    if plan and plan.get("pools"):
        for pool in plan["pools"]:
            for script, args, node in _pool_runs(plan, pool, paths):
                out += _run(files, box / f"{script}-{node}", script, args, role=pool["name"], node=node)
    elif "serve.sh" in paths:
        out = _run(files, box, "serve.sh")
    else:
        for n in _sample(nodes):
            out += _run(files, box / f"node{n}", "launch.sh", [n], node=n)
    if "router.sh" in paths:   # one address a server: the servers are those that serve an API
        servers = [la for la in out if la.settings.get("sglang.node_rank", 0) == 0]
        hosts = [f"10.0.0.{i + 1}" for i in range(max(1, len(servers)))]
        out += _run(files, box / "router", "router.sh", hosts, role="router")
    return out
