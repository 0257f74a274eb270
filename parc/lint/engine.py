"""The lint engine behind ``parc lint``: rule selection and the run over many files.

``parc lint`` runs every check of ``parc check`` plus the style checks (P55x) over many files
in one process, then keeps what ``--select`` / ``--ignore`` let through and what no
``# parc: ignore[CODE]`` comment on the same line silences (:mod:`parc.lint.suppress`).
Which files, and which of them are fragments for others to ``use``: :mod:`parc.lint.discover`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from parc.language.diagnostics import ERROR, WARNING, Diagnostic, ParcError, sort_key
from parc.lint.discover import discover, imported, is_fragment, read_files
from parc.lint.suppress import CODE, UNUSED_SUPPRESSION, Suppression, apply, stale, suppressions

__all__ = ["Selector", "UsageError", "LintResult", "lint_paths", "lint_files", "lint_texts", "exit_code", "discover",
           "read_files", "suppressions", "Suppression", "UNUSED_SUPPRESSION"]


class UsageError(ValueError):
    """A bad option value (exit 2)."""


class Selector:
    """``--select`` / ``--ignore`` by code (``P501``) or prefix (``P5``, ``P55``, ``ALL``).

    The most specific match wins, as in ruff: ``--select P5 --ignore P501`` keeps every P5
    code but P501, and ``--ignore P5 --select P552`` keeps only P552 of the family. On a tie,
    ignore wins.
    """

    def __init__(self, select: Iterable[str] | None = None, ignore: Iterable[str] | None = None):
        self.select = _tokens(select) if select else None
        self.ignore = _tokens(ignore) if ignore else []
        self._cache: dict[str, bool] = {}

    def __call__(self, code: str) -> bool:
        hit = self._cache.get(code)
        if hit is None:
            sel = -1 if self.select is not None else 0
            for t in self.select or ():
                if code.startswith(t):
                    sel = max(sel, len(t))
            ign = max((len(t) for t in self.ignore if code.startswith(t)), default=-1)
            hit = self._cache[code] = sel >= 0 and sel > ign
        return hit

    def covers(self, token: str) -> bool:
        """Whether a suppression token names any code this selection keeps."""
        if len(token) == 4:
            return self(token)
        from parc.rules import rule_docs

        return any(self(c) for c in _known_codes(rule_docs()) if c.startswith(token))


def _tokens(values: Iterable[str]) -> list[str]:
    out = []
    for v in values:
        for t in str(v).split(","):
            t = t.strip().upper()
            if not t:
                continue
            if t == "ALL":
                t = "P"
            if not CODE.match(t):
                raise UsageError(f"`{t}` is not a code or a family (P501, P5, P55 or ALL)")
            out.append(t)
    return out


def _known_codes(docs) -> list[str]:
    return [c for c in docs if CODE.match(c) and len(c) == 4]


@dataclass
class LintResult:
    files: list[str]
    diagnostics: list[Diagnostic]
    sources: dict[str, str]
    suppressed: int = 0
    io_errors: list[str] = field(default_factory=list)
    plans: dict = field(default_factory=dict)  # each checked spec's plan (None where it has errors)

    @property
    def named(self) -> int:
        """The files the run was given: those read, and those that could not be (each an error)."""
        return len(self.files) + len(self.io_errors)

    @property
    def errors(self) -> int:
        return sum(d.severity == ERROR for d in self.diagnostics)

    @property
    def warnings(self) -> int:
        return sum(d.severity == WARNING for d in self.diagnostics)


def lint_paths(paths: Sequence[str], *, select=None, ignore=None, targets: Sequence[str] = (),
               root=None, exclude: Sequence[str] = ()) -> LintResult:
    files, errors = discover(paths, exclude)
    res = lint_files(files, select=select, ignore=ignore, targets=targets, root=root)
    res.io_errors[:0] = [_one_line(d) for d in errors]
    res.diagnostics = sorted([*errors, *res.diagnostics], key=sort_key)
    return res


def lint_files(files: Sequence[str], *, select=None, ignore=None, targets: Sequence[str] = (),
               root=None) -> LintResult:
    """Lint ``files`` (already discovered); see the module doc for what runs on each."""
    from parc.language.parser import shared_parses

    texts, failed = read_files(files, root)
    res = lint_texts(texts, select=select, ignore=ignore, targets=targets, root=root)
    res.diagnostics = sorted([*res.diagnostics, *failed], key=sort_key)  # reported whatever the selection
    res.io_errors = [_one_line(d) for d in failed]
    return res


def lint_texts(texts: dict[str, str], *, select=None, ignore=None, targets: Sequence[str] = (), root=None,
               used: set[str] | None = None, reader=None) -> LintResult:
    """Lint specs whose text is given (an editor's unsaved buffer, a fix being tried), each
    under its file name; their imports are read by ``reader`` (``parc.resolve.loader``; the
    disk by default). ``used``: the real paths other specs import (default: those these texts
    import), which tells fragments from specs."""
    from parc.language.parser import shared_parses

    selector = select if isinstance(select, Selector) else Selector(select, ignore)
    run = _Run(texts, selector, reader)
    with shared_parses():  # each text parsed once: for the checks, the layout and its comments
        run.check_all(targets, root, imported(texts) if used is None else used)
        out, suppressed = run.suppress(selector)
    out.sort(key=sort_key)
    return LintResult(list(texts), out, run.sources, suppressed, plans=run.plans)


class _Run:
    """The checks of one lint run: every diagnostic once, the sources read, and which files
    every rule ran over without an error (only there can a suppression be judged unused)."""

    def __init__(self, texts: dict[str, str], selector: Selector, reader=None):
        self.texts, self.reader, self.plans = texts, reader, {}
        self.layout_check = selector("P551")  # formatting every file again is the costly style check
        self.sources: dict[str, str] = dict(texts)
        self.raw: list[Diagnostic] = []
        self.seen: set[tuple] = set()
        self.judged: dict[str, bool] = {}
        self.canon = {os.path.realpath(f): f for f in texts}

    def suppress(self, selector: Selector) -> tuple[list[Diagnostic], int]:
        """The selected diagnostics no suppression silences, the unused suppressions, and how
        many diagnostics were silenced."""
        from parc.rules import rule_docs

        by_file: dict[str, list[Diagnostic]] = {}
        for d in self.raw:
            if selector(d.code):
                by_file.setdefault(d.span.file, []).append(d)
        known = set(_known_codes(rule_docs()))
        out: list[Diagnostic] = []
        suppressed = 0
        for f in list(dict.fromkeys([*self.texts, *by_file])):
            text = self.sources.get(f)
            sups = suppressions(f, text) if text is not None else []
            kept, n = apply(by_file.get(f, []), sups)
            out += kept
            suppressed += n
            if f in self.texts:  # unused suppressions only in the files being linted
                extra, n = stale(sups, selector, known, self.judged.get(f, False))
                out += extra
                suppressed += n
        return out, suppressed

    def keep(self, d: Diagnostic):
        if d.span.file not in self.texts:  # the same file, named another way by an importer
            same = self.canon.get(os.path.realpath(d.span.file))
            if same is not None:
                d.span = replace(d.span, file=same)
        k = (d.code, d.span, d.message)
        if k not in self.seen:
            self.seen.add(k)
            self.raw.append(d)

    def check_all(self, targets, root, used: set[str]):
        from parc.rules.style import text_checks

        for f, text in self.texts.items():
            if is_fragment(f, text, used):
                self.syntax_only(f, text)
            else:
                self.check(f, text, targets, root)
            if self.layout_check:
                for d in text_checks(f, text):
                    self.keep(d)

    def syntax_only(self, f: str, text: str):
        from parc.language.parser import parse_text

        try:
            parse_text(text, f)
        except ParcError as e:
            for d in (e.diagnostic, *e.more):
                self.keep(d)

    def check(self, f: str, text: str, targets, root):
        from parc.api import check_file
        from parc.rules.style import linting

        with linting(self.sources):
            r = check_file(f, targets, root=root, text=text, reader=self.reader)
        self.plans[f] = r.plan
        self.sources.update(r.sources)
        clean = r.plan is not None and not r.errors
        for name in r.sources:
            name = self.canon.get(os.path.realpath(name), name)
            self.judged[name] = self.judged.get(name, True) and clean
        for d in r.diagnostics:
            self.keep(d)


def _one_line(d: Diagnostic) -> str:
    return f"parc: {d.message}"


def exit_code(res: LintResult, warnings_as_errors: bool = False, exit_zero: bool = False) -> int:
    from parc.resolve.reader import READ_CODE

    if res.io_errors or any(d.code == READ_CODE for d in res.diagnostics):
        return 2
    if exit_zero:
        return 0
    if res.errors or (warnings_as_errors and res.warnings):
        return 1
    return 0
