"""From files to a typed plan: reader, loader (imports), merge, evaluate, build.

``load``, ``resolve_text``, ``known_targets``, ``presets``, ``target_spec`` and the other entry
points of ``parc.resolve.resolver`` are importable from here; they load on first use, so that
importing one part of the package does not import the rest."""
from __future__ import annotations

_PUBLIC = ("Resolution", "load", "resolve_text", "root_relative", "resolve_document", "presets", "target_spec",
           "known_targets", "did_you_mean", "find_root", "spec_within", "read_spec_file", "Loader",
           "DiskReader", "SpecReader", "MAX_IMPORT_DEPTH", "MAX_USE_PATH", "MAX_WORLD", "MAX_MAGNITUDE",
           "PartialSpec", "load_partial")


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'parc.resolve' has no attribute {name!r}")
    import importlib

    if name in ("PartialSpec", "load_partial"):
        return getattr(importlib.import_module("parc.resolve.partial"), name)
    return getattr(importlib.import_module("parc.resolve.resolver"), name)
