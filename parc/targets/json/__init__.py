"""json: the resolved plan, exactly what ``plan.json`` holds beside every launch."""
from __future__ import annotations

from parc.targets.base import File, plan_json


def build(plan) -> list[File]:
    return [File("plan.json", plan_json(plan))]
