"""A spec assembled from parts, for the planner: a model or a cluster given alone, a spec that
leaves fields to a search, blocks from several files merged into one plan.

:class:`PartialSpec` loads files and texts into one document the way ``load`` does (the same
diagnostics), tells which keys the spec gives, completes what a plan needs but a part leaves
out, hands the searched ``auto`` fields to the caller, and resolves the rest into a plan.
"""
from __future__ import annotations

import os
from pathlib import Path

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic
from parc.model.plan import Plan
from parc.resolve.build import resolve_document
from parc.resolve.loader import Loader, SpecReader, find_root

# What a plan needs but a model alone or a cluster alone does not give: the smallest block
# that resolves, so that the part given can be resolved and taken out of the plan.
_STUB = {"model": 'model "stub" {\n  layers = 1\n  hidden = 8\n  heads = 1\n  vocab = 8\n}\n',
         "cluster": 'cluster "stub" {\n  gpus_per_node = 1\n  gpu = h100_sxm\n}\n'}


class PartialSpec:
    """Files and texts loaded into one document, resolved on demand; ``anchor`` is a path the
    root is found from (``find_root``) when ``root`` is not given."""

    def __init__(self, anchor: str | os.PathLike, root: str | os.PathLike | None = None,
                 reader: SpecReader | None = None):
        self._loader = Loader(find_root(Path(anchor), root), reader)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return self._loader.diags

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self._loader.diags if d.severity == ERROR]

    @property
    def sources(self) -> dict[str, str]:
        return self._loader.sources

    def add(self, path: str | os.PathLike, text: str | None = None, shown: str | None = None) -> str:
        """Load a file (or ``text`` under the name ``path``) and its imports; the name the file is
        shown under (``shown``, else its path from the working folder)."""
        p = Path(path)
        if shown is None:
            shown = str(path) if text is not None else self._loader.display(p.resolve())
        self._loader.load_file(p, shown, text=text)
        return shown

    @property
    def files(self) -> list[str]:
        """The names of the files loaded so far, in load order (imports after their importer)."""
        return list(self._loader.files)

    def add_text(self, shown: str, text: str) -> str:
        """Load spec text that is no file (a preset named on the command line, say)."""
        return self.add(Path(shown), text=text, shown=shown)

    def has(self, kind: str) -> bool:
        return kind in self._loader.doc.blocks

    def complete(self, *kinds: str) -> None:
        """Add a stand-in ``model`` or ``cluster`` block where the spec has none, so that the
        blocks it does have can be resolved."""
        text = "".join(_STUB[k] for k in kinds if not self.has(k))
        if text:
            self.add_text("<stub>", text)

    def given(self) -> dict[str, set[str]]:
        """The keys each block sets."""
        return {kind: set(b.assigns) for kind, b in self._loader.doc.blocks.items()}

    def order(self, kind: str) -> list[str]:
        """The keys of ``kind`` in the order the spec writes them (empty if it has no such block)."""
        b = self._loader.doc.blocks.get(kind)
        return list(b.order) if b else []

    def take_autos(self, searchable: dict[str, str]) -> set[str]:
        """Remove every ``key = auto`` where ``searchable`` maps the key to its block (a search
        fills those fields); their dotted paths."""
        out = set()
        for kind, b in self._loader.doc.blocks.items():
            for key, a in list(b.assigns.items()):
                if isinstance(a.value, S.Auto) and searchable.get(key) == kind:
                    del b.assigns[key]
                    out.add(f"{kind}.{key}")
        return out

    def target_text(self) -> dict[str, str]:
        """The source text of each ``target`` block, by ``target.<name>``."""
        out = {}
        for name, b in self._loader.doc.targets.items():
            src = self._loader.sources.get(b.span.file)
            if src is not None:
                out[f"target.{name}"] = src[b.span.start:b.span.end]
        return out

    def resolve(self, shown: str) -> Plan | None:
        """The plan, with ``shown`` as its file; None if it has errors (see ``errors``)."""
        if self.errors:
            return None
        plan = resolve_document(self._loader, shown)
        return None if plan is None or self.errors else plan


def load_partial(anchor: str | os.PathLike, root: str | os.PathLike | None = None,
                 reader: SpecReader | None = None) -> PartialSpec:
    """An empty :class:`PartialSpec` whose root is found from ``anchor`` (or is ``root``)."""
    return PartialSpec(anchor, root, reader)
