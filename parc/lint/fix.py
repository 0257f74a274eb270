"""``parc lint --fix``: apply the safe fixes, each only if the file then lints no worse.

A diagnostic's safe fix (:attr:`Diagnostic.safe_fix`) is the one change its ``help`` names. Each
is tried on the text in turn and kept only when the file, linted again, no longer reports that
finding and reports nothing new where the edit was (nor an unclosed block, P002, anywhere; a
layout the edit leaves is fixed in turn, by P551's fix): a rename that would duplicate a key, or a brace that would nest the next block, is
left with the reason. Findings that only appear because an earlier error no longer stops the
checks (a preset name fixed, so the memory rules run; a syntax error fixed, so the parser reads
on to the next one) are not the fix's doing and stay reported.

A file written in the canonical layout stays in it: after each edit it is formatted again
(``parc fmt``, which keeps every comment), so a renamed key realigns its block; the layout fix
(P551) goes first, so a file it formats is then kept formatted. Files are written atomically,
only when something changed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from parc.language.diagnostics import Diagnostic, ParcError, apply_edits
from parc.lint.discover import imported, read_files
from parc.lint.engine import LintResult, Selector, lint_texts

MAX_FIXES = 100  # fixes tried in one file: each costs a lint of it
LAYOUT = "P551"  # the canonical layout: fixed first, then kept by formatting after each fix
UNCLOSED = "P002"  # a fix that brings this anywhere is refused: braces that no longer balance


@dataclass
class FileFix:
    """One file's fixes: its text before and after, what was fixed and what was left (and why)."""

    file: str
    before: str
    after: str
    fixed: list[Diagnostic] = field(default_factory=list)
    left: list[tuple[Diagnostic, str]] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)  # what the fixed text still reports

    @property
    def changed(self) -> bool:
        return self.after != self.before


def _key(d: Diagnostic) -> tuple[str, str]:
    return d.code, d.message


def _formatted(text: str, file: str) -> str | None:
    from parc.language.fmt import format_text

    try:
        return format_text(text, file)
    except (ParcError, ValueError):
        return None


class _Linter:
    """Lints one file's candidate texts under the same selection and import graph."""

    def __init__(self, file: str, selector: Selector, targets, root, used: set[str]):
        self.file, self.selector, self.targets, self.root, self.used = file, selector, targets, root, used

    def __call__(self, text: str) -> list[Diagnostic]:
        res: LintResult = lint_texts({self.file: text}, select=self.selector, targets=self.targets,
                                     root=self.root, used=self.used)
        return [d for d in res.diagnostics if d.span.file == self.file]


def why_left(d: Diagnostic) -> str:
    """Why ``--fix`` leaves a finding that it did not try."""
    if not d.fixes:
        return "no fix to apply"
    if len(d.fixes) > 1:
        return (f"{len(d.fixes)} alternatives ({'; '.join(f.message for f in d.fixes)}): choose one "
                "(an editor offers each as a code action)")
    return f"not applied unasked: {d.fixes[0].message}"


def _introduced(before: list[Diagnostic], after: list[Diagnostic], lines: range) -> list[Diagnostic]:
    """Findings of ``after`` that ``before`` did not have, at the edited ``lines`` (or P002)."""
    have: dict[tuple, int] = {}
    for d in before:
        have[_key(d)] = have.get(_key(d), 0) + 1
    out = []
    for d in after:
        k = _key(d)
        if d.code == LAYOUT:
            continue  # the layout a fix leaves is itself fixed, by the layout fix
        if have.get(k, 0):
            have[k] -= 1
            continue
        spans = [d.span, *(r.span for r in d.related)]
        if d.code == UNCLOSED or any(s.line in lines or s.end_line in lines for s in spans):
            out.append(d)
    return out


def _edited_lines(text: str, d: Diagnostic) -> range:
    """The lines (of the text after the fix) that the fix's edits wrote."""
    shift, lo, hi = 0, None, None
    for e in sorted(d.safe_fix.edits, key=lambda e: e.span.start):
        a = e.span.start + shift
        b = a + len(e.text)
        shift += len(e.text) - (e.span.end - e.span.start)
        la, lb = text.count("\n", 0, a) + 1, text.count("\n", 0, b) + 1
        lo, hi = min(lo or la, la), max(hi or lb, lb)
    return range(lo or 1, (hi or 1) + 1)


def fix_text(file: str, text: str, lint) -> FileFix:
    """Apply the safe fixes of ``file`` (its ``text``), each re-checked with ``lint`` (text ->
    diagnostics of the file)."""
    canonical = _formatted(text, file) == text
    out = FileFix(file, text, text)
    diags = lint(text)
    tried: set[tuple] = set()
    for _ in range(MAX_FIXES):
        todo = [d for d in diags if d.safe_fix and _key(d) not in tried]
        d = next((d for d in todo if d.code == LAYOUT), todo[0] if todo else None)
        if d is None:
            break
        tried.add(_key(d))
        if any(e.span.file != file for e in d.safe_fix.edits):
            out.left.append((d, "the fix edits another file: fix that file"))
            continue
        try:
            edited = apply_edits(out.after, d.safe_fix.edits)
        except ValueError:
            out.left.append((d, "the fix no longer applies to the text"))
            continue
        new = (_formatted(edited, file) or edited) if canonical else edited
        got = lint(new)
        worse = _introduced(diags, got, _edited_lines(edited, d))
        if sum(_key(x) == _key(d) for x in got) >= sum(_key(x) == _key(d) for x in diags):
            out.left.append((d, "the fix does not remove the finding"))
        elif worse:
            w = worse[0]
            out.left.append((d, f"the fix would bring {w.code} at line {w.span.line}: {w.message}"))
        else:
            out.after, diags = new, got
            out.fixed.append(d)
            canonical = canonical or d.code == LAYOUT
    left = {_key(d) for d, _ in out.left}
    out.left += [(d, why_left(d)) for d in diags if d.fixes and _key(d) not in left and _key(d) not in tried]
    out.remaining = diags
    return out


def fix_files(files: Sequence[str], *, select=None, ignore=None, targets: Sequence[str] = (),
              root=None) -> tuple[list[FileFix], list[Diagnostic]]:
    """The fixes of each readable file (nothing written), and the P030 of those not read."""
    selector = select if isinstance(select, Selector) else Selector(select, ignore)
    texts, failed = read_files(files, root)
    used = imported(texts)
    return [fix_text(f, t, _Linter(f, selector, targets, root, used)) for f, t in texts.items()], failed
