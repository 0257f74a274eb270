"""Ray Serve LLM's own rules: the plans a Ray Serve LLM application cannot serve, and the engine
settings Ray Serve cannot be given."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.base import settings

TARGET = "rayserve"


# ------------------------------------------------------------------------------------ P723

@rule("P723", "rayserve-extra-args", targets=(TARGET,))
def rayserve_extra_args(plan, c):
    """Ray Serve LLM builds vLLM from keyword arguments (engine_kwargs), never from a command line:
    the vllm block's extra_args are command-line words parc cannot turn into fields."""
    extra = settings(plan, "vllm").get("extra_args")
    if plan.mode != "serve" or not extra:
        return
    c.report(c.at("target.vllm.extra_args", "target.vllm"),
             f"Ray Serve LLM builds vLLM from engine_kwargs, not a command line: the {len(extra)} word(s) of "
             "`extra_args` would not reach the engine",
             help="remove `extra_args` from `target vllm` and set what they do through the spec (its serve "
                  "block and `target vllm` keys), which parc writes as engine_kwargs")


# ------------------------------------------------------------------------------------ P724

@rule("P724", "rayserve-executor", targets=(TARGET,))
def rayserve_executor(plan, c):
    """Ray Serve LLM runs vLLM's workers as Ray actors in its placement group and refuses another
    distributed_executor_backend (engines/vllm/vllm_models.py get_initialization_kwargs)."""
    executor = settings(plan, "vllm").get("executor")
    if plan.mode != "serve" or executor in (None, "ray"):
        return
    c.report(c.at("target.vllm.executor", "target.vllm"),
             f"executor = {executor}: Ray Serve LLM runs vLLM's workers as Ray actors and refuses any "
             "distributed executor backend but ray",
             help="remove `executor` from `target vllm` (or set `executor = ray`)")
