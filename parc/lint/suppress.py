"""``# parc: ignore[CODE]`` comments: finding them, applying them, and the ones that silence nothing.

A suppression silences the diagnostics of the codes it names (or of every code, bare) on its
own line. One that silences nothing is itself reported (P550), so stale comments do not pile
up; its fix removes the comment (or the one code of several that silences nothing). Comments
are the lexer's: the token stream of the parse, shared with ``parc fmt``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.language.diagnostics import WARNING, Diagnostic, Edit, Fix, Span

UNUSED_SUPPRESSION = "P550"
CODE = re.compile(r"^P\d{0,3}$")
_TEXT_CODES = {"P551"}  # checks that run on every file, whatever else failed
_DIRECTIVE = re.compile(r"\bparc:\s*ignore\b(\[([^\]]*)\]?)?")


@dataclass(slots=True)
class Suppression:
    """One ``# parc: ignore[...]`` comment: the codes it names (None: every code on the line)."""

    file: str
    line: int
    span: Span
    codes: list[tuple[str, Span]] | None
    used: set[str] = field(default_factory=set)
    cut: Span | None = None   # what removing the comment removes: it and the blanks before it
    alone: bool = True        # the comment holds nothing but the directive

    def matches(self, code: str) -> str | None:
        if self.codes is None:
            return "*"
        for c, _ in self.codes:
            if code.startswith(c):
                return c
        return None


def suppressions(file: str, text: str) -> list[Suppression]:
    """Every suppression comment in ``text``: the comments of the lexer's token stream, the same
    ones ``parc fmt`` keeps."""
    if "parc:" not in text:
        return []
    from parc.language.parser import comments_of, line_starts

    starts = None
    out = []
    for line, col, comment in comments_of(text, file):
        m = _DIRECTIVE.search(comment)
        if not m:
            continue
        if starts is None:
            starts = line_starts(text)
        base = starts[line - 1] + col - 1  # offset of the `#`

        def span(a: int, b: int) -> Span:
            return Span(file, line, col + a, line, col + b, base + a, base + b)

        whole = span(m.start(), m.end())
        a, b = base, base + len(comment)
        while a > starts[line - 1] and text[a - 1] in " \t":
            a -= 1
        if a == starts[line - 1] and b < len(text) and text[b] == "\n":
            b += 1  # a comment on a line of its own: the line goes
        cut = Span.of(file, text, a, b)
        alone = not comment[1:m.start()].strip() and not comment[m.end():].strip()
        if m.group(1) is None:
            out.append(Suppression(file, line, whole, None, cut=cut, alone=alone))
            continue
        codes = []
        inner = m.group(2) or ""
        at = m.start(2)
        for piece in re.finditer(r"[^,\s]+", inner):
            codes.append((piece.group(0).upper(), span(at + piece.start(), at + piece.end())))
        out.append(Suppression(file, line, whole, codes, cut=cut, alone=alone))
    return out


def apply(diags: list[Diagnostic], sups: list[Suppression]) -> tuple[list[Diagnostic], int]:
    """The diagnostics no suppression on their line silences, and how many were silenced; each
    suppression notes the codes it used."""
    if not sups:
        return list(diags), 0
    at_line = by_line(sups)
    out, silenced = [], 0
    for d in diags:
        hit = None
        for s in at_line.get(d.span.line, ()):
            tok = s.matches(d.code)
            if tok:
                s.used.add(tok)
                hit = s
        if hit is None:
            out.append(d)
        else:
            silenced += 1
    return out, silenced


def by_line(sups: list[Suppression]) -> dict[int, list[Suppression]]:
    at_line: dict[int, list[Suppression]] = {}
    for s in sups:
        at_line.setdefault(s.line, []).append(s)
    return at_line


def stale(sups: list[Suppression], selector, known: set[str], complete: bool) -> tuple[list[Diagnostic], int]:
    """P550 for what each suppression silenced nothing of (``complete``: every rule ran over
    the file), less those a suppression naming P550 on the same line silences."""
    at_line = by_line(sups)
    out, silenced = [], 0
    for s in sups:
        for d in unused(s, selector, known, complete):
            if not selector(d.code):
                continue
            if any(x.matches(d.code) and x.matches(d.code) != "*" for x in at_line.get(d.span.line, ())):
                silenced += 1
                continue
            out.append(d)
    return out, silenced


def _drop(s: Suppression, code: str | None) -> list[Fix]:
    """The fix of an unused suppression: the comment removed, or only ``code`` of its list."""
    if code is None or s.codes is None or len(s.codes) < 2:
        if s.cut is None:
            return []
        return [Fix("remove the comment", (Edit(s.cut, ""),), safe=s.alone)]
    i = next(i for i, (c, _) in enumerate(s.codes) if c == code)
    sp = s.codes[i][1]
    nb = s.codes[i + 1][1] if i + 1 < len(s.codes) else None
    pv = s.codes[i - 1][1] if nb is None else None
    a, b = (sp.start, nb.start) if nb is not None else (pv.end, sp.end)
    cut = Span(sp.file, sp.line, sp.column + a - sp.start, sp.line, sp.column + b - sp.start, a, b)
    return [Fix(f"remove `{code}` from the comment", (Edit(cut, ""),))]


def unused(s: Suppression, selector, known: set[str], complete: bool) -> list[Diagnostic]:
    def diag(span: Span, msg: str, help: str, code: str | None = None) -> Diagnostic:
        return Diagnostic(UNUSED_SUPPRESSION, WARNING, msg, span, help=help, fixes=_drop(s, code))

    if s.codes is None:
        if "*" in s.used or not complete:
            return []
        return [diag(s.span, "`# parc: ignore` suppresses nothing on this line",
                     "remove the comment (and name the codes you mean, as in `# parc: ignore[P501]`)")]
    if not s.codes:
        return [diag(s.span, "`# parc: ignore[]` names no code",
                     "name the codes to silence, as in `# parc: ignore[P501]`, or remove the comment")]
    out = []
    for code, span in s.codes:
        if code in s.used:
            continue
        if not CODE.match(code) or (len(code) == 4 and code not in known) or len(code) < 2:
            out.append(Diagnostic(UNUSED_SUPPRESSION, WARNING, f"`{code}` is not a parc diagnostic code", span,
                                  help="`parc rules` lists the codes; a family prefix such as P5 also works"))
            continue
        if code.startswith(UNUSED_SUPPRESSION) or not selector.covers(code):
            continue  # that code is turned off in this run, so nothing could be reported
        if not complete and code not in _TEXT_CODES:
            continue  # the file has errors, so later checks did not run: nothing to judge
        out.append(diag(span, f"`# parc: ignore[{code}]` suppresses nothing: no {code} on this line",
                        f"remove `{code}` from the comment" if len(s.codes) > 1 else "remove the comment", code))
    return out
