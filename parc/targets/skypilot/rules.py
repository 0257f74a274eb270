"""SkyPilot's own rules: a GPU without a SkyPilot name, and the resource fields SkyPilot's task
parser would refuse."""
from __future__ import annotations

import re

from parc.rules import rule
from parc.targets.base import settings, target_span
from parc.targets.skypilot import TARGET, accelerator, infra_pattern


# ------------------------------------------------------------------------------------ P641

@rule("P641", "skypilot-accelerator-unknown", targets=(TARGET,))
def skypilot_accelerator(plan, c):
    if accelerator(plan):
        return
    gpu = plan.cluster.gpu.name
    c.report(c.at("cluster.gpu", "cluster.gpu.memory", "cluster"),
             f"SkyPilot asks clouds for GPUs by name, and parc has no SkyPilot name for the cluster's GPU `{gpu}`",
             help="name it in the target block, as SkyPilot's catalog does: `target skypilot { accelerator = \"H100\" }` "
                  "(`sky show-gpus` lists the names)",
             related=[(target_span(plan, c, TARGET, "cluster"), "target skypilot")])


# ------------------------------------------------------------------------------------ P642

@rule("P642", "skypilot-accelerator-count", targets=(TARGET,))
def skypilot_accelerator_count(plan, c):
    name = settings(plan, TARGET).get("accelerator")
    if not name or ":" not in name:
        return
    c.report(c.at(f"target.{TARGET}.accelerator", f"target.{TARGET}"),
             f"`accelerator = \"{name}\"` holds a count: parc writes `accelerators: <name>:<gpus_per_node>`, and "
             f"SkyPilot refuses `{name}:{plan.cluster.gpus_per_node}` when it parses the task",
             help=f"give the name alone (`accelerator = \"{name.split(':')[0]}\"`); the count is the cluster's "
                  "gpus_per_node")


# ------------------------------------------------------------------------------------ P643

@rule("P643", "skypilot-infra", targets=(TARGET,))
def skypilot_infra(plan, c):
    infra = settings(plan, TARGET).get("infra")
    if infra is None or re.fullmatch(infra_pattern(), infra):
        return
    c.report(c.at(f"target.{TARGET}.infra", f"target.{TARGET}"),
             f"`infra = \"{infra}\"` is not a place SkyPilot launches on: its task schema takes a cloud it knows, "
             "optionally with /region and /zone, `*` for any cloud, or kubernetes (k8s) with an optional /context",
             help="write it as `aws`, `gcp/us-central1`, `k8s/my-context` or `*` (parc/targets/skypilot/target.toml "
                  "lists the clouds)")
