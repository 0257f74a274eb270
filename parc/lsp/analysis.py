"""What the language server knows of one open spec, computed from its text (no protocol here).

:func:`analyse` lints the buffer as ``parc lint`` would (every check, style and advice
included) with the lint function it is handed (``parc.lint.engine.lint_texts``: the command
passes it in, since lint/ is a sibling this folder does not import), its imports read through a
reader that prefers the editor's open buffers to the disk; the result keeps the diagnostics, the resolved plan and the files it read (so a change
to one of them re-checks this spec). Hover, definition and formatting read from it; the
numbers of a hover come from ``parc explain``'s estimate, computed once per version of the
text and only when asked.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from parc.language.diagnostics import Diagnostic, Edit, ParcError, Span, diff_edits
from parc.lsp.scan import context


class OverlayReader:
    """The files of a spec: the editor's open buffers first (unsaved text), then the disk."""

    def __init__(self, buffers: dict[str, str]):
        from parc.resolve.loader import DISK

        self.buffers, self.disk = buffers, DISK

    def real(self, path: Path) -> Path:
        return self.disk.real(path)

    def exists(self, path: Path) -> bool:
        return str(self.real(path)) in self.buffers or self.disk.exists(path)

    def par_names(self, folder: Path) -> tuple[str, ...]:
        return self.disk.par_names(folder)

    def read(self, path: Path, within: Path | None) -> str:
        text = self.buffers.get(str(self.real(path)))
        return text if text is not None else self.disk.read(path, within)


@dataclass
class Analysis:
    """One version of one spec: its text, what lint found, its plan (None where it has errors)
    and the real paths of the files it read (itself and its imports)."""

    file: str
    text: str
    diagnostics: list[Diagnostic]
    plan: object | None = None
    reads: set[str] = field(default_factory=set)
    _estimate: object | None = None

    @property
    def estimate(self):
        """``parc explain``'s estimate of the plan (None without a plan), computed once."""
        if self._estimate is None and self.plan is not None:
            from parc.cost.estimate import estimate

            try:
                self._estimate = estimate(self.plan)
            except (ValueError, ZeroDivisionError, ArithmeticError):
                self._estimate = False
        return self._estimate or None


def analyse(lint, file: str, text: str, buffers: dict[str, str] | None = None, root=None) -> Analysis:
    """Lint ``text`` as the spec ``file`` (an absolute path), imports from ``buffers`` or disk;
    ``lint`` is ``parc.lint.engine.lint_texts``."""
    res = lint({file: text}, root=root, reader=OverlayReader(buffers or {}))
    reads = {os.path.realpath(f) for f in res.sources}
    return Analysis(file, text, res.diagnostics, res.plans.get(file), reads | {os.path.realpath(file)})


def fix_all(lint, fix, a: Analysis, buffers: dict[str, str] | None = None) -> tuple[Edit, ...]:
    """The edits of every safe fix of ``a`` that ``parc lint --fix`` would apply (``fix`` is
    ``parc.lint.fix.fix_text``: each fix re-checked to bring no new finding); none when no
    diagnostic has a safe fix."""
    if not any(d.safe_fix for d in a.diagnostics):
        return ()
    real = os.path.realpath(a.file)

    def diagnostics(text: str) -> list[Diagnostic]:
        res = lint({a.file: text}, reader=OverlayReader({**(buffers or {}), real: text}))
        return [d for d in res.diagnostics if os.path.realpath(d.span.file) == real]

    new = fix(a.file, a.text, diagnostics).after
    return diff_edits(a.file, a.text, new) if new != a.text else ()


def formatting(file: str, text: str) -> tuple[Edit, ...] | None:
    """``parc fmt``'s result as edits of ``text``; None when the text does not parse."""
    from parc.language.fmt import format_text

    try:
        new = format_text(text, file)
    except (ParcError, ValueError):
        return None
    return diff_edits(file, text, new)


def definition(a: Analysis, offset: int) -> Span | None:
    """Where the name under the cursor is defined: the file a ``use`` names, the field a
    reference (``cluster.gpus_per_node``) reads, the preset a name stands for."""
    ctx = context(a.text, offset)
    if ctx.in_use:
        return _use_target(a, offset)
    word = ctx.word
    if a.plan is not None and "." in word and word in a.plan.spans:
        return a.plan.spans[word]
    return preset_span(word) if ctx.in_value else None


def _use_target(a: Analysis, offset: int) -> Span | None:
    from parc.language.parser import imports

    for path, span in imports(a.text, a.file):
        if span.start <= offset <= span.end:
            target = os.path.normpath(os.path.join(os.path.dirname(a.file), path))
            return Span.point(target) if os.path.exists(target) else None
    return None


def preset_span(name: str) -> Span | None:
    """The ``[name]`` table of a model or GPU preset in parc's data files."""
    from parc.resolve.catalog import DATA, presets

    for kind in ("models", "gpus"):
        if name in presets(kind):
            path = DATA / f"{kind}.toml"
            text = path.read_text(encoding="utf-8")
            at = text.find(f"[{name}]")
            return Span.of(str(path), text, max(at, 0), max(at, 0) + len(name) + 2)
    return None
