"""Run options (no torch: the command line builds them before anything heavy is imported)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from parc.model.plan import Plan

class RunError(RuntimeError):
    """A plan the runtime cannot run, or a failure inside a rank, said in the user's terms."""


class CheckpointError(ValueError):
    """A checkpoint folder parc will not load, said in one line."""


DEFAULT_LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3}


@dataclass
class Options:
    steps: int = 3
    seed: int = 0
    optimizer: Optional[str] = None          # default: the plan's train.optimizer
    lr: Optional[float] = None
    verify: bool = False
    checkpoint: Optional[str] = None
    timeout: float = 60.0                    # process-group timeout, seconds
    rehearsal: bool = True
    device: str = "cpu"                      # cpu | cuda
    fault: Optional[str] = None              # "RANK[:STEP]": raise there (resilience drills)
    hooks: dict = field(default_factory=dict)  # after_build / after_load / after_step (Python API)

    def optimizer_name(self, plan: Plan) -> str:
        """--optimizer, else SGD under --verify, else the train block's optimizer.

        SGD keeps each update proportional to the gradient, so --verify can compare parameters
        to 1e-6; Adam divides each update by the running size of its gradient, so float rounding
        in a gradient near zero can become a learning-rate step, and its parameters compare
        within :func:`reference.param_tolerance`."""
        if self.optimizer:
            return self.optimizer
        if self.verify:
            return "sgd"
        return plan.train.optimizer if plan.train else "adam"

    def learning_rate(self, plan: Plan) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR.get(self.optimizer_name(plan), 1e-3)
