"""Slurm's own rules."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.base import settings
from parc.targets.slurm import SAFE, SBATCH_KEYS, TARGET


@rule("P660", "slurm-directive-value", targets=(TARGET,))
def directive_values(plan, c):
    s = settings(plan, TARGET)
    for key in SBATCH_KEYS + ("job_name",):
        v = s.get(key)
        if v is not None and not SAFE.fullmatch(v):
            c.report(c.at(f"target.slurm.{key}", "target.slurm"),
                     f"`{key}` goes into an #SBATCH line, which takes no spaces, quotes, newlines or shell "
                     "characters", help="use letters, digits and . _ : @ + / , = -")
