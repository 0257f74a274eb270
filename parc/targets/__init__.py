"""Backends: one package per target, each turning a resolved plan into the files its tool runs.

A backend is a folder ``parc/targets/<name>/`` with ``target.toml`` (the keys a ``target``
block takes), ``__init__.py`` (what the target needs from the plan, its own P6 checks, and
``build(plan) -> list[File]``) and its Jinja2 templates (``*.j2``). Adding a target is a new
folder and one ``register`` line below. Importing this package imports no template engine:
jinja2 is loaded by :mod:`parc.targets.render` when files are built.
"""
from __future__ import annotations

import importlib
from types import ModuleType

_BACKENDS: dict[str, str] = {}


def register(name: str, module: str) -> None:
    _BACKENDS[name] = module


register("json", "parc.targets.json")
register("torchrun", "parc.targets.torchrun")
register("vllm", "parc.targets.vllm")
register("megatron", "parc.targets.megatron")
register("slurm", "parc.targets.slurm")
register("kubernetes", "parc.targets.kubernetes")


def names() -> list[str]:
    return list(_BACKENDS)


def get(name: str) -> ModuleType:
    """The backend module of target ``name`` (KeyError if there is none)."""
    return importlib.import_module(_BACKENDS[name])


def load_checks() -> None:
    """Import every backend so that its P6 rules are registered with the rule registry."""
    for name in _BACKENDS:
        get(name)
