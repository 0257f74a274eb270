"""The cluster block of an imported spec: the one ``--cluster FILE`` gives, else what the files
say (a scheduler's nodes and GPUs, a launcher's node count and processes, a GPU type where one is
named), else a placeholder for each fact they do not say."""
from __future__ import annotations

from parc.importer.draft import Draft, Name, Placeholder
from parc.importer.models import gpu_preset, label


def slurm_facts(batch: dict, name: str) -> dict:
    """Cluster facts of a batch script's #SBATCH options."""
    from parc.importer.slurm import count, gpu_type, gpus_per_node, value

    out = {}
    nodes = value(batch, "nodes")
    if nodes is not None:
        line = batch["nodes"][1]
        out["nodes"] = (count(nodes) if count(nodes) is not None else Placeholder(str(nodes)),
                        f"{name}:{line} #SBATCH --nodes={nodes}")
    g, how = gpus_per_node(batch)
    if how:
        key = {"gpus-per-node": "gpus_per_node", "gres": "gres", "gpus-per-task": "gpus_per_task"}[how]
        raw = value(batch, key)
        out["gpus_per_node"] = (g if g is not None else Placeholder(str(raw)), f"{name}:{batch[key][1]} #SBATCH --{how.replace('_', '-')}={raw}")
    t = gpu_type(batch)
    if t:
        out["gpu"] = (t, f"{name}: #SBATCH gres type {t}")
    for k in ("partition", "account", "time", "job_name", "cpus_per_task"):
        v = value(batch, k)
        if isinstance(v, str):
            out["slurm." + k] = (int(v) if k == "cpus_per_task" and v.isdigit() else v, f"{name}:{batch[k][1]} #SBATCH --{k.replace('_', '-')}={v}")
    return out


def given_facts(given: str | None, facts: dict) -> None:
    """The nodes and GPUs a node of ``--cluster SPEC``'s block, where the files do not say them
    (a launch's sizes derived from the world need it)."""
    import re

    from parc.importer.models import given_block

    if not given:
        return
    text = "\n".join(given_block(given, "cluster"))
    for k in ("nodes", "gpus_per_node"):
        m = re.search(rf"(?m)^\s*{k}\s*=\s*(\d+)", text)
        if m and (k not in facts or isinstance(facts[k][0], Placeholder)):
            facts[k] = (int(m.group(1)), f"--cluster {given}")


def write(draft: Draft, facts: dict, given: str | None, report, name: str | None = None) -> None:
    """The cluster block: ``given`` (a spec whose cluster block is copied), else ``facts``."""
    from parc.importer.models import given_block

    if given:
        draft.raw_blocks["cluster"] = given_block(given, "cluster")
        for k in ("nodes", "gpus_per_node"):
            if k in facts and not isinstance(facts[k][0], Placeholder):
                report.notes.append(f"--cluster {given} states the cluster; the launch says {k} = {facts[k][0]} "
                                    f"({facts[k][1]})")
        return
    draft.labels["cluster"] = label(name or "imported")
    for k in ("nodes", "gpus_per_node"):
        if k in facts:
            v, note = facts[k]
            draft.set("cluster", k, v, note)
        else:
            draft.set("cluster", k, Placeholder({"nodes": "the number of nodes", "gpus_per_node": "the GPUs of a node"}[k]),
                      "not in the launch")
    gpu = facts.get("gpu")
    preset = gpu_preset(str(gpu[0])) if gpu else None
    if preset:
        draft.set("cluster", "gpu", Name(preset), gpu[1])
    else:
        draft.set("cluster", "gpu", Placeholder(f"the GPU preset of {gpu[0]}" if gpu else "the GPU type"),
                  (gpu[1] + ": no GPU preset of that name") if gpu else "not in the launch")
