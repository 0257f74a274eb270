"""What each training framework runs where frameworks differ (``data/frameworks.toml``) and the
rates of the kernels they run (``data/kernels.toml``): attention kernels by GPU architecture and
the FP8 recipes. Read as data by the resolver (a spec's framework and recipe defaults) and by
the cost model."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
# the training targets and the framework each runs (frameworks.toml): Megatron-DeepSpeed is DeepSpeed's
# engine (its ZeRO and gradient accumulation) around Megatron's model code
TRAINING_TARGETS = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed",
                    "megatron_deepspeed": "deepspeed"}
DEFAULT = "megatron"


@lru_cache(maxsize=None)
def _read(name: str) -> dict:
    import tomllib

    with open(DATA / name, "rb") as f:
        return tomllib.load(f)


def frameworks() -> dict[str, dict]:
    """Every framework's entry of ``frameworks.toml``, by name."""
    return _read("frameworks.toml")


def framework(name: str | None) -> dict:
    """The entry of framework ``name`` (None: the default, Megatron-LM's)."""
    return frameworks()[name or DEFAULT]


def framework_of_targets(targets) -> str:
    """The framework a spec's targets name: the one framework its training targets
    (:data:`TRAINING_TARGETS`) run, else the default (several name none: the default)."""
    named = {fw for t, fw in TRAINING_TARGETS.items() if t in targets}
    return named.pop() if len(named) == 1 else DEFAULT


def fp8_recipes() -> dict[str, dict]:
    return _read("kernels.toml")["fp8"]


def fp8_recipe(train) -> dict:
    """The entry of ``kernels.toml`` for the recipe ``train`` runs FP8 with: its own, else its
    framework's default."""
    return fp8_recipes()[train.fp8_recipe or framework(train.framework)["fp8_recipe"]]


@lru_cache(maxsize=None)
def attention_efficiency(framework_name: str | None, arch: str) -> tuple[float, float, str]:
    """(forward, backward, kernel): the fraction of the BF16 peak the framework's attention kernel
    reaches on architecture ``arch``, and the kernel's name."""
    fw = framework(framework_name)
    kernel = fw["attention"].get(arch, fw["attention"]["default"])
    rates = _read("kernels.toml")["attention"][kernel]
    r = rates.get(arch, rates["default"])
    return float(r["forward"]), float(r["backward"]), kernel


@lru_cache(maxsize=None)
def context_parallel(framework_name: str | None) -> dict:
    """The ring attention framework ``framework_name`` runs under context parallelism: its entry of
    ``kernels.toml`` [context_parallel] (``grad_bytes``, ``merge``) with the framework's
    ``attention_kv_heads`` added as ``kv_heads``."""
    fw = framework(framework_name)
    return {**_read("kernels.toml")["context_parallel"][fw["context_parallel"]], "kv_heads": fw["attention_kv_heads"]}


def fill_train_defaults(train, targets, given=()) -> None:
    """Fill what a `train` block leaves out of how its run was done: the framework from the
    targets (:func:`framework_of_targets`) and, unless ``given`` names it, the FP8 weight caching
    from the framework. The FP8 recipe stays unset where the spec names none: the launch leaves it
    to the framework, and the cost model reads the framework's (:func:`fp8_recipe`)."""
    train.framework = train.framework or framework_of_targets(targets)
    fw = framework(train.framework)
    if "fp8_weight_cache" not in given:
        train.fp8_weight_cache = bool(fw["fp8_weight_cache"])
