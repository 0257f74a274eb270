"""Targets: one folder per target, each turning a resolved plan into the files its tool runs.

A target is a folder ``parc/targets/<name>/`` and nothing else:

* ``target.toml``: what the rest of parc knows about it (its keys, modes, display name, rule
  families, inherited keys, rank order, audit name), read as data by :mod:`parc.model.targets`;
* ``__init__.py``: ``build(plan) -> list[File]``, the files it emits;
* ``rules.py`` (optional): its own P6 rules, with their documentation in ``rules.toml`` beside it
  (an entry with ``since``/``until`` holds only for those releases of the target);
* ``flags.toml`` (optional): the options it emits whose spelling depends on the release, which
  the builder asks :func:`parc.model.targets.flag` for;
* its Jinja2 templates (``*.j2``), rendered as ``<name>/<template>``.

The folders are discovered (every sub-folder with a ``target.toml``); rules that span several
targets live in :mod:`parc.targets.rules`, the checks of options against the pinned release
in :mod:`parc.targets.releases`. The rule registry never imports a target: whoever
checks a plan for targets calls :func:`load_rules`. Importing this package imports no template
engine: jinja2 is loaded by :mod:`parc.targets.render` when files are built.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from parc.model.targets import FOLDER, names

__all__ = ["names", "get", "load_rules"]


def get(name: str) -> ModuleType:
    """The builder module of target ``name`` (KeyError if there is none)."""
    if name not in names():
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")


def load_rules(only=None) -> dict:
    """Register every target's own rules (and the rules that span targets) with the rule
    registry; returns the registry. Cheap after the first call. ``only``: the targets whose
    folders' rules are wanted (a check registers those of the targets it judges by, since the
    others would not run; ``parc check`` then starts without importing every folder)."""
    from parc.rules import registry

    importlib.import_module(f"{__name__}.rules")
    importlib.import_module(f"{__name__}.releases")
    folders = names()
    for name in folders if only is None else [n for n in folders if n in set(only)]:
        if (FOLDER / name / "rules.py").is_file():
            importlib.import_module(f"{__name__}.{name}.rules")
    return registry()
