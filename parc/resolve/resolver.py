"""Syntax tree → resolved plan: the resolver's entry points.

Imports are merged (cycles and escapes from the root refused: ``loader``, ``merge``), presets
expanded and then overridden, references and arithmetic evaluated exactly, units converted to
base units (``evaluate``), ``auto`` resolved and derived fields filled (``build``). Every P0
problem of a file is reported in one run; a value that failed is poisoned, so nothing computed
from it reports again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from parc.language.diagnostics import Diagnostic
from parc.model.plan import Plan
from parc.resolve.build import MAX_WORLD, resolve_document
from parc.resolve.catalog import _known_targets, known_targets, presets, target_spec
from parc.resolve.evaluate import MAX_MAGNITUDE, did_you_mean
from parc.resolve.loader import (MAX_IMPORT_DEPTH, MAX_USE_PATH, DiskReader, Loader, SpecReader, find_root,
                                 read_spec_file, spec_within)


@dataclass
class Resolution:
    plan: Plan | None
    diagnostics: list[Diagnostic]
    sources: dict[str, str]
    # With ``partial``: the blocks (train, serve) whose errors left defaults in the plan, and
    # those errors; the other checks can still judge the plan (see ``load``).
    partial: frozenset = frozenset()
    partial_errors: tuple = ()


def load(path: str | os.PathLike, root: str | os.PathLike | None = None, text: str | None = None,
         shown: str | None = None, partial: bool = False, reader: SpecReader | None = None) -> Resolution:
    """Read, parse and resolve one spec. A spec that cannot be read gives the P030 diagnostic.

    With ``partial``, a bad value or unknown key in `train` or `serve` leaves that block's
    defaults in the plan, and the Resolution names the block and its errors, so that the checks
    that do not read it can still report the spec's other mistakes in the same run; so does a
    syntax error confined to a `train` or `target` block (named ``target.NAME``). ``reader``
    reads the spec and its imports (the working tree by default)."""
    p = Path(path)
    r = Loader(find_root(p, root), reader)
    if not shown:
        shown = str(path)
        if text is None and p.is_absolute():
            try:
                shown = r.display(p.resolve() if reader is None else r.reader.real(p))
            except (OSError, RuntimeError, ValueError):
                pass
    r.load_file(p, shown, text=text)
    plan = None
    syntax = [d for d in r.diags if d.code in ("P001", "P002", "P030") and d.span.file == shown]
    if partial and r.doc.broken and syntax and all(d.code != "P030" for d in syntax):
        # syntax errors confined to blocks the rest does not read (loader.RECOVERABLE): the
        # rest of the spec is checked, as a bad value in those blocks would leave it
        for kind, label in r.doc.broken:
            r.doc.partial.setdefault(kind if kind != "target" else f"target.{label}", []).extend(syntax)
        syntax = []
    if not syntax:
        plan = resolve_document(r, shown, partial)
        if plan is not None:
            plan.source = shown if text is not None else root_relative(p if reader is None else r.reader.real(p), r.root)
    bad = r.doc.partial if partial else {}
    return Resolution(plan, r.diags, r.sources, frozenset(bad), tuple(d for ds in bad.values() for d in ds))


def root_relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, normalised and '/'-separated (its name alone when it lies
    outside the root): one spelling for every way of naming the file and every working folder."""
    full = path.resolve()
    try:
        return full.relative_to(root.resolve()).as_posix()
    except ValueError:
        return full.name


def resolve_text(text: str, file: str = "<input>", root: str | os.PathLike | None = None) -> Resolution:
    """Resolve spec text that is not on disk (imports are read relative to ``file``)."""
    return load(file, root=root if root is not None else Path(file).resolve().parent, text=text, shown=file)


__all__ = ["Resolution", "load", "resolve_text", "root_relative", "resolve_document", "presets", "target_spec",
           "known_targets", "did_you_mean", "find_root", "spec_within", "read_spec_file", "Loader",
           "DiskReader", "SpecReader", "MAX_IMPORT_DEPTH", "MAX_USE_PATH", "MAX_WORLD", "MAX_MAGNITUDE",
           "_known_targets"]
