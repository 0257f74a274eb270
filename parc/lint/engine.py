"""The lint engine behind ``parc lint``: discovery, rule selection and suppression comments.

``parc lint`` runs every check of ``parc check`` plus the style checks (P55x) over many files
in one process, then keeps what ``--select`` / ``--ignore`` let through and what no
``# parc: ignore[CODE]`` comment on the same line silences. A suppression that silences
nothing is itself reported (P550), so stale comments do not pile up.

Files that only hold blocks for others to ``use`` (a shared cluster file: no ``model`` block
and no ``use`` line of its own) are *fragments*: lint checks their syntax and style, and
their other problems through the specs that import them.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from parc.language.diagnostics import ERROR, WARNING, Diagnostic, ParcError, Span, sort_key

UNUSED_SUPPRESSION = "P550"
_TEXT_CODES = {"P551"}  # checks that run on every file, whatever else failed
_SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache",
              ".pytest_cache"}
_GLOB_CHARS = re.compile(r"[*?\[]")
_CODE = re.compile(r"^P\d{0,3}$")
_DIRECTIVE = re.compile(r"\bparc:\s*ignore\b(\[([^\]]*)\]?)?")
# blank space as the lexer skips it ([ \t\f\r]); a label is a string (with escapes) or a name
_BLOCK = re.compile(r'^[ \t\f\r]*(?:(model|cluster)\b[ \t\f\r]*(?:(?:"[^"\\\n]*(?:\\.[^"\\\n]*)*+"|'
                    r'[A-Za-z_][A-Za-z0-9_]*)[ \t\f\r]*)?\{|(use)[ \t\f\r]+")', re.M)
_USE = re.compile(r'^[ \t]*use[ \t]+"([^"\n]+)"', re.M)


class UsageError(ValueError):
    """A bad option value (exit 2)."""


# --------------------------------------------------------------------------- selection

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
            if not _CODE.match(t):
                raise UsageError(f"`{t}` is not a code or a family (P501, P5, P55 or ALL)")
            out.append(t)
    return out


def _known_codes(docs) -> list[str]:
    return [c for c in docs if _CODE.match(c) and len(c) == 4]


# --------------------------------------------------------------------------- discovery

def discover(paths: Sequence[str], exclude: Sequence[str] = ()) -> tuple[list[str], list[Diagnostic]]:
    """The files to lint (as shown to the user) and a P030 diagnostic for each path that
    matches nothing.

    A file is linted whatever its name; a folder gives its ``.par`` files, recursively, skipping
    hidden folders and virtual environments and never following a link to a folder; a glob
    (``specs/**/*.par``) is expanded here, so it works quoted or on shells that do not expand
    it. ``-`` stands for standard input. What each file is (a regular file inside its root) is
    judged when it is read.
    """
    from parc.resolve.reader import STDIN, ReadFailure, diagnostic

    found: list[str] = []
    errors: list[Diagnostic] = []
    seen: set[str] = set()

    def add(p: str):
        if p != STDIN:
            p = os.path.normpath(p)
            if _excluded(p, exclude):
                return
        key = os.path.realpath(p) if p != STDIN else p
        if key not in seen:
            seen.add(key)
            found.append(p)

    def walk(d: str) -> int:
        seen_par = 0
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames[:] = sorted(x for x in dirnames
                                 if x not in _SKIP_DIRS and not x.startswith(".")
                                 and not _excluded(os.path.join(dirpath, x), exclude))
            for f in sorted(filenames):
                if f.endswith(".par"):
                    seen_par += 1
                    add(os.path.join(dirpath, f))
        return seen_par

    def missing(raw: str, why: str, help: str | None = None):
        errors.append(diagnostic(ReadFailure(raw, why, help=help), raw))

    def walk_some(d: str):
        if not walk(d) and not _excluded(os.path.normpath(d), exclude):
            missing(d, "no .par files in this folder", "name the folder that holds the specs")

    for raw in paths:
        if raw == STDIN:
            add(raw)
        elif "\0" in raw:
            missing(raw.replace("\0", "\\0"), "the path holds a NUL byte")
        elif os.path.isdir(raw):
            walk_some(raw)
        elif os.path.lexists(raw):
            add(raw)
        elif _GLOB_CHARS.search(raw):
            hits = sorted(glob.glob(raw, recursive=True))
            if not hits:
                missing(raw, "no files match this pattern", "check the pattern; quote it so that parc "
                        "expands it (`'specs/**/*.par'`)")
            for h in hits:
                if os.path.isdir(h):
                    walk(h)
                else:
                    add(h)
        else:
            missing(raw, "No such file or directory")
    return found, errors
def _excluded(path: str, patterns: Sequence[str]) -> bool:
    if not patterns:
        return False
    from fnmatch import fnmatch

    norm = path.replace(os.sep, "/")
    parts = norm.split("/")
    return any(fnmatch(norm, pat) or any(fnmatch(x, pat) for x in parts) for pat in patterns)


# --------------------------------------------------------------------------- suppressions

@dataclass(slots=True)
class Suppression:
    """One ``# parc: ignore[...]`` comment: the codes it names (None: every code on the line)."""

    file: str
    line: int
    span: Span
    codes: list[tuple[str, Span]] | None
    used: set[str] = field(default_factory=set)

    def matches(self, code: str) -> str | None:
        if self.codes is None:
            return "*"
        for c, _ in self.codes:
            if code.startswith(c):
                return c
        return None


def suppressions(file: str, text: str) -> list[Suppression]:
    """Every suppression comment in ``text`` (comments found with the lexer's own rules)."""
    if "parc:" not in text:
        return []
    from parc.language.parser import comments

    starts = None
    out = []
    for line, col, comment in comments(text):
        m = _DIRECTIVE.search(comment)
        if not m:
            continue
        if starts is None:
            starts = _line_starts(text)
        base = starts[line - 1] + col - 1  # offset of the `#`

        def span(a: int, b: int) -> Span:
            return Span(file, line, col + a, line, col + b, base + a, base + b)

        whole = span(m.start(), m.end())
        if m.group(1) is None:
            out.append(Suppression(file, line, whole, None))
            continue
        codes = []
        inner = m.group(2) or ""
        at = m.start(2)
        for piece in re.finditer(r"[^,\s]+", inner):
            codes.append((piece.group(0).upper(), span(at + piece.start(), at + piece.end())))
        out.append(Suppression(file, line, whole, codes))
    return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


# --------------------------------------------------------------------------- the run

@dataclass
class LintResult:
    files: list[str]
    diagnostics: list[Diagnostic]
    sources: dict[str, str]
    suppressed: int = 0
    io_errors: list[str] = field(default_factory=list)

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
    from parc.api import check_file
    from parc.rules import rule_docs
    from parc.rules.style import linting, text_checks

    selector = select if isinstance(select, Selector) else Selector(select, ignore)
    layout_check = selector("P551")  # formatting every file again is the costly style check
    texts, failed = read_files(files, root)
    imported = _imported(texts)

    sources: dict[str, str] = dict(texts)
    raw: list[Diagnostic] = []
    seen: set[tuple] = set()
    judged: dict[str, bool] = {}  # file -> every rule ran over it without an error

    canon = {os.path.realpath(f): f for f in texts}

    def keep(d: Diagnostic):
        if d.span.file not in texts:  # the same file, named another way by an importer
            same = canon.get(os.path.realpath(d.span.file))
            if same is not None:
                d.span = replace(d.span, file=same)
        k = (d.code, d.span, d.message)
        if k not in seen:
            seen.add(k)
            raw.append(d)

    from parc.language.parser import parse_text, shared_parses

    with shared_parses():
        for f, text in texts.items():
            fragment = _is_fragment(f, text, imported)
            if fragment:
                try:
                    parse_text(text, f)
                except ParcError as e:
                    keep(e.diagnostic)
            else:
                with linting(sources):
                    r = check_file(f, targets, root=root, text=text)
                sources.update(r.sources)
                clean = r.plan is not None and not r.errors
                for name in r.sources:
                    name = canon.get(os.path.realpath(name), name)
                    judged[name] = judged.get(name, True) and clean
                for d in r.diagnostics:
                    keep(d)
            if layout_check:
                for d in text_checks(f, text):
                    keep(d)

    by_file: dict[str, list[Diagnostic]] = {}
    for d in raw:
        if selector(d.code):
            by_file.setdefault(d.span.file, []).append(d)

    docs = rule_docs()
    known = set(_known_codes(docs))
    out: list[Diagnostic] = []
    suppressed = 0
    for f in list(dict.fromkeys([*texts, *by_file])):
        diags = by_file.get(f, [])
        text = sources.get(f)
        sups = suppressions(f, text) if text is not None else []
        if not sups:
            out.extend(diags)
            continue
        at_line: dict[int, list[Suppression]] = {}
        for s in sups:
            at_line.setdefault(s.line, []).append(s)
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
                suppressed += 1
        complete = judged.get(f, False)
        extra: list[Diagnostic] = []
        for s in sups if f in texts else ():  # unused ones only in the files being linted
            extra.extend(_unused(s, selector, known, complete))
        for d in extra:
            if not selector(d.code):
                continue
            if any(s.matches(d.code) and s.matches(d.code) != "*" for s in at_line.get(d.span.line, ())):
                suppressed += 1
                continue
            out.append(d)
    out.extend(failed)  # files that could not be read: reported whatever the selection
    out.sort(key=sort_key)
    return LintResult(list(texts), out, sources, suppressed, [_one_line(d) for d in failed])


def read_files(files: Sequence[str], root=None) -> tuple[dict[str, str], list[Diagnostic]]:
    """The text of each file (``-``: standard input, shown as ``<stdin>``), read by the spec
    reader, and a P030 diagnostic for each that could not be read."""
    from parc.resolve.reader import STDIN, STDIN_NAME, ReadFailure, diagnostic, read_stdin
    from parc.resolve.resolver import read_spec_file

    texts: dict[str, str] = {}
    failed: list[Diagnostic] = []
    for f in files:
        name = STDIN_NAME if f == STDIN else f
        try:
            texts[name] = read_stdin() if f == STDIN else read_spec_file(f, root)
        except ReadFailure as e:
            failed.append(diagnostic(e, name))
        except OSError as e:
            failed.append(diagnostic(e, name))
    return texts, failed


def _one_line(d: Diagnostic) -> str:
    return f"parc: {d.message}"


def _unused(s: Suppression, selector: Selector, known: set[str], complete: bool) -> list[Diagnostic]:
    def diag(span: Span, msg: str, help: str) -> Diagnostic:
        return Diagnostic(UNUSED_SUPPRESSION, WARNING, msg, span, help=help)

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
        if not _CODE.match(code) or (len(code) == 4 and code not in known) or len(code) < 2:
            out.append(diag(span, f"`{code}` is not a parc diagnostic code",
                            "`parc rules` lists the codes; a family prefix such as P5 also works"))
            continue
        if code.startswith(UNUSED_SUPPRESSION) or not selector.covers(code):
            continue  # that code is turned off in this run, so nothing could be reported
        if not complete and code not in _TEXT_CODES:
            continue  # the file has errors, so later checks did not run: nothing to judge
        out.append(diag(span, f"`# parc: ignore[{code}]` suppresses nothing: no {code} on this line",
                        f"remove `{code}` from the comment" if len(s.codes) > 1 else "remove the comment"))
    return out


def _imported(texts: dict[str, str]) -> set[str]:
    """Real paths of the linted files that another linted file imports."""
    out: set[str] = set()
    for f, text in texts.items():
        if "use" not in text:
            continue
        base = os.path.dirname(f)
        for m in _USE.finditer(text):
            out.add(os.path.realpath(os.path.join(base, m.group(1))))
    return out


def _is_fragment(f: str, text: str, imported: set[str]) -> bool:
    """A file of blocks for others to ``use``: no ``use`` of its own and no model (a shared
    cluster file), or imported by another linted file and missing a model or a cluster."""
    kinds = {m.group(1) or m.group(2) for m in _BLOCK.finditer(text)}
    if "use" in kinds:
        return False
    if "model" not in kinds:
        return True
    return "cluster" not in kinds and os.path.realpath(f) in imported


def exit_code(res: LintResult, warnings_as_errors: bool = False, exit_zero: bool = False) -> int:
    from parc.resolve.reader import READ_CODE

    if res.io_errors or any(d.code == READ_CODE for d in res.diagnostics):
        return 2
    if exit_zero:
        return 0
    if res.errors or (warnings_as_errors and res.warnings):
        return 1
    return 0
