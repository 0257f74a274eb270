"""Which files ``parc lint`` reads, and what each is: a spec or a fragment for others to use.

Files that only hold blocks for others to ``use`` (a shared cluster file: no ``model`` block
and no ``use`` line of its own) are *fragments*: lint checks their syntax and style, and
their other problems through the specs that import them. What a file holds is read from its
syntax tree, not from a pattern over its text.
"""
from __future__ import annotations

import os
import re
from typing import Sequence

from parc.language.diagnostics import Diagnostic

_SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache",
              ".pytest_cache"}
_GLOB_CHARS = re.compile(r"[*?\[]")


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
            import glob

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


def imported(texts: dict[str, str]) -> set[str]:
    """Real paths of the linted files that another linted file imports."""
    from parc.language.parser import imports

    out: set[str] = set()
    for f, text in texts.items():
        base = os.path.dirname(f)
        for path, _ in imports(text, f):
            if "\0" not in path:   # a path no file can have (P031 reports it)
                out.add(os.path.realpath(os.path.join(base, path)))
    return out


def is_fragment(f: str, text: str, imported: set[str]) -> bool:
    """A file of blocks for others to ``use``: no ``use`` of its own and no model (a shared
    cluster file), or imported by another linted file and missing a model or a cluster. A file
    with syntax errors is judged by what parsed around them (and the kinds of the blocks that
    did not); one where nothing can be trusted is a fragment: only its syntax is judged."""
    from parc.language import syntax as S
    from parc.language.diagnostics import ParcError
    from parc.language.parser import parse_text

    kinds = set()
    try:
        todo = list(parse_text(text, f).items)
    except ParcError as e:
        if getattr(e, "partial", None) is None:
            return True
        todo = list(e.partial.items)   # what parsed around the syntax errors, and what did not
        kinds = {b[0] for b in e.broken if b}
    while todo:
        st = todo.pop()
        if isinstance(st, S.Use):
            return False
        if isinstance(st, S.Block):
            kinds.add(st.kind)
            todo.extend(st.items)
    if "model" not in kinds:
        return True
    return "cluster" not in kinds and os.path.realpath(f) in imported
