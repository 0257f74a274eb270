"""A Slurm batch script's ``#SBATCH`` options (sbatch(1)) and the ``SLURM_*`` variables Slurm gives
the job from them (sbatch(1) and srun(1), OUTPUT ENVIRONMENT VARIABLES)."""
from __future__ import annotations

import re
import shlex

from parc.importer.sh_values import lit, unknown

SHORT = {"-N": "nodes", "-n": "ntasks", "-c": "cpus_per_task", "-p": "partition", "-J": "job_name",
         "-t": "time", "-A": "account", "-o": "output", "-e": "error", "-G": "gpus"}
def sbatch_options(text: str) -> dict:
    """``{option: (value, line)}`` of the script's ``#SBATCH`` lines, by long name (``nodes``,
    ``gpus_per_node``, ``gres`` ...); a switch's value is True. Each line's words are split as
    sbatch splits them (shlex: quotes, a trailing ``# comment``); as sbatch(1) says, the
    directives end at the script's first command."""
    out: dict = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            break
        if not s.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(s[len("#SBATCH"):], comments=True)
        except ValueError:          # an unclosed quote: sbatch refuses the line, so does the reader
            continue
        if words:
            name, value = _option(words)
            out[SHORT.get(name, name.lstrip("-").replace("-", "_"))] = (value, n)
    return out


def _option(words: list[str]) -> tuple[str, object]:
    """(name, value) of one directive: ``--name=value``, ``--name value``, ``-N 2``, ``-N2``, or a
    switch (True)."""
    first = words[0]
    if first.startswith("--"):
        name, eq, v = first.partition("=")
        return name, (v if eq else words[1] if len(words) > 1 else True)
    if re.fullmatch(r"-[A-Za-z]", first):
        return first, words[1] if len(words) > 1 else True
    return first[:2], first[2:]


def value(opts: dict, key: str):
    v = opts.get(key)
    return v[0] if v else None


def count(v) -> int | None:
    """A whole count such as ``4`` (a range ``2-4`` or a placeholder is no count)."""
    return int(v) if isinstance(v, str) and v.isdigit() else None


def gpus_per_node(opts: dict) -> tuple[int | None, str | None]:
    """(GPUs a node, the option that says so): ``--gpus-per-node``, ``--gres=gpu[:type]:N``, or
    ``--gpus-per-task`` times ``--ntasks-per-node``."""
    g = value(opts, "gpus_per_node")
    if g is not None:
        return count(str(g).split(":")[-1]), "gpus-per-node"
    gres = value(opts, "gres")
    if isinstance(gres, str):
        m = re.search(r"gpu(?::[A-Za-z0-9_-]+)?:(\w+)", gres)
        if m:
            return count(m.group(1)), "gres"
    per_task = count(value(opts, "gpus_per_task"))
    if per_task is not None:
        tasks = count(value(opts, "ntasks_per_node")) or 1
        return per_task * tasks, "gpus-per-task"
    return None, None


def gpu_type(opts: dict) -> str | None:
    """The GPU type a ``--gres=gpu:TYPE:N`` or ``--gpus-per-node=TYPE:N`` names."""
    for key in ("gres", "gpus_per_node", "gpus"):
        v = value(opts, key)
        if isinstance(v, str):
            m = re.search(r"(?:gpu:)?([A-Za-z][A-Za-z0-9_-]*):\d+", v)
            if m and m.group(1) != "gpu":
                return m.group(1)
    return None


def slurm_env(opts: dict) -> dict:
    """The variables Slurm sets in the job from its options; a per-node one stays unknown."""
    env = {k: unknown(f"${k}") for k in ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID",
                                          "SLURM_JOB_NODELIST", "SLURMD_NODENAME")}
    nodes = count(value(opts, "nodes"))
    if nodes is not None:
        env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = lit(str(nodes))
    g, _ = gpus_per_node(opts)
    if g is not None:
        env["SLURM_GPUS_ON_NODE"] = lit(str(g))
    for key, var in (("ntasks_per_node", "SLURM_NTASKS_PER_NODE"), ("cpus_per_task", "SLURM_CPUS_PER_TASK"),
                     ("ntasks", "SLURM_NTASKS"), ("job_name", "SLURM_JOB_NAME")):
        v = value(opts, key)
        if isinstance(v, str):
            env[var] = lit(v)
    return env
