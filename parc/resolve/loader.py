"""The files of a spec: the root imports must stay in, `use` followed depth first, cycles,
escapes and over-deep chains refused, each file read once and merged into one document.

Files are read through a reader: :class:`DiskReader` (the default) reads the working tree with
``reader.read_spec``; ``parc diff --git`` passes one that reads a git revision, so the old
version of a spec resolves its imports as they were at that revision.
"""
from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from parc.language import syntax as S
from parc.language.diagnostics import ParcError
from parc.language.parser import parse_text
from parc.resolve.evaluate import did_you_mean, rename
from parc.resolve.merge import Document
from parc.resolve.reader import ReadFailure, diagnostic as read_diagnostic, is_within, read_spec

MAX_IMPORT_DEPTH = 1024  # files in one chain of `use`
MAX_USE_PATH = 255  # characters in the path of one `use`


def find_root(spec: Path, root: str | os.PathLike | None) -> Path:
    """--root, else the top of the git checkout holding the spec, else the spec's folder."""
    if root is not None:
        return Path(root).resolve()
    d = Path(os.path.abspath(spec)).parent.resolve()  # where the name is, not where a link leads
    for p in (d, *d.parents):
        if (p / ".git").exists():
            return p
    return d


def spec_within(path: str | os.PathLike, root: Path) -> Path | None:
    """The folder a spec named by the user must stay in through links: ``root``, when the
    spec's own name lies inside it (a spec named outside the root is read, but not through a
    link that leaves it)."""
    try:
        named = Path(os.path.abspath(path)).parent.resolve() / Path(path).name
    except (OSError, RuntimeError, ValueError):
        return None
    return root if is_within(named, root) else None


def read_spec_file(path: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """The text of a spec named by the user, read as ``parc check`` reads it (regular files of
    at most 1 MiB, never through a link out of the root); ReadFailure otherwise."""
    return read_spec(path, within=spec_within(path, find_root(Path(path), root)))


class SpecReader(Protocol):
    """Where the files of a spec come from."""

    def real(self, path: Path) -> Path: ...  # the one name of a file, to tell files apart
    def exists(self, path: Path) -> bool: ...
    def par_names(self, folder: Path) -> tuple[str, ...]: ...  # for did-you-mean
    def read(self, path: Path, within: Path | None) -> str: ...  # ReadFailure if it may not


class DiskReader:
    """The working tree, read under the rules of ``reader.read_spec``."""

    def real(self, path: Path) -> Path:
        try:
            return path.resolve()
        except (OSError, RuntimeError, ValueError):
            return Path(os.path.abspath(path))

    def exists(self, path: Path) -> bool:
        try:
            return path.is_file() or path.exists()
        except (OSError, ValueError):
            return True  # let the reader say what is wrong

    def par_names(self, folder: Path) -> tuple[str, ...]:
        if not folder.is_dir():
            return ()
        try:
            return tuple(p.name for p in folder.glob("*.par"))
        except OSError:
            return ()

    def read(self, path: Path, within: Path | None) -> str:
        return read_spec(path, within=within)


DISK = DiskReader()


def _bad_import_path(path: str) -> tuple[str, str] | None:
    """Why a `use` path cannot name a spec (the message and the fix), or None if it may."""
    if "\0" in path:
        return "the path holds a NUL character", "remove the NUL character (`\\0`) from the path"
    if len(path) > MAX_USE_PATH:
        return (f"the path is {len(path)} characters long; a `use` path may be at most {MAX_USE_PATH}",
                "move the file closer to the spec, or give it a shorter name")
    if not path.endswith(".par"):
        return ("`use` imports .par files", "name the .par file to import, as in `use \"clusters/box.par\"`")
    return None


# Blocks whose syntax error need not stop the checks of the rest of the spec: nothing else is
# computed from them. A broken `train` block leaves the training defaults (as a bad value there
# does: the rules that read it wait); a broken `target` block leaves that target's rules out.
# Any other block (model, cluster, mesh, serve, ...) or `use` holds what the plan is made of.
RECOVERABLE = ("train", "target")


def _rest_of(failure, stack) -> Any:
    """The document of what parsed in the spec itself (not an import) around its syntax errors,
    when every statement that failed is a block of :data:`RECOVERABLE`; else None."""
    partial = getattr(failure, "partial", None)
    broken = getattr(failure, "broken", [])
    if stack or partial is None or not broken or any(b is None or b[0] not in RECOVERABLE for b in broken):
        return None
    return partial


def _short(path: str) -> str:
    shown = path.replace("\0", "\\0")
    return shown if len(shown) <= 60 else shown[:40] + "..." + shown[-12:]


@dataclass
class _Frame:
    """A file being loaded: its statements not yet walked and the blocks it defines itself."""

    path: Path
    items: Any
    stack: tuple[Path, ...]
    local: list = field(default_factory=list)


class Loader:
    """Loads spec files, and the files they import, into ``doc``; keeps their text (by shown
    name) in ``sources`` and their shown names, in load order, in ``files``."""

    def __init__(self, root: Path, reader: SpecReader | None = None, doc: Document | None = None):
        self.root = root
        self.reader = reader or DISK
        self.doc = doc or Document()
        self.sources: dict[str, str] = {}
        self.files: list[str] = []
        self.loaded: set[Path] = set()  # real paths of the files loaded so far
        self.listed: dict[Path, tuple[str, ...]] = {}  # folders listed for did-you-mean

    @property
    def diags(self):
        return self.doc.diags

    def display(self, path: Path) -> str:
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)

    def load_file(self, path: Path, shown: str, text: str | None = None,
                  stack: tuple[Path, ...] = ()) -> None:
        """Load ``path`` (or ``text`` under its name) and, depth first, every file it imports,
        each file once.

        The walk keeps its own stack (no recursion), so the depth of an import chain is limited
        only by ``MAX_IMPORT_DEPTH``. A file already loaded by an earlier ``use`` is not merged
        again: its blocks are in already, and a file imported twice by each of its importers
        would otherwise be read 2**depth times."""
        if text is None:
            try:
                text = self.reader.read(path, spec_within(path, self.root))
            except ReadFailure as e:
                self.doc.import_failed = True
                self.diags.append(read_diagnostic(e, shown))
                return
        frame = self._open(path, shown, text, stack)
        frames = [frame] if frame is not None else []
        while frames:
            fr = frames[-1]
            child = self._walk(fr)
            if child is not None:
                frames.append(child)
                continue
            frames.pop()
            seen: dict[tuple, S.Block] = {}
            for b in fr.local:
                self.doc.add_block(b, seen)

    def _walk(self, fr: _Frame) -> _Frame | None:
        """Walk ``fr``'s statements up to the next file to load (its frame), or to the end."""
        for st in fr.items:
            if isinstance(st, S.Use):
                child = self._import(st, fr.path, fr.stack)
                if child is not None:
                    return child
            elif isinstance(st, S.Block):
                fr.local.append(st)
            elif isinstance(st, S.Assign):
                self.doc.err("P019", f"`{st.key} = ...` must be inside a block", st.span,
                             help="put it in the block it belongs to, e.g. `model { ... }`")
            elif isinstance(st, S.OnRule):
                self.doc.err("P019", f"`{st.axis} on {st.link}` must be inside the `placement` block",
                             st.span, help="move it into `placement { ... }`")
        return None

    def _open(self, path: Path, shown: str, text: str, stack: tuple[Path, ...]) -> _Frame | None:
        self.sources[shown] = text
        self.files.append(shown)
        real = self.reader.real(path)
        self.loaded.add(real)  # a file that fails to parse is reported once, too
        try:
            doc = parse_text(text, shown)
        except ParcError as e:
            self.diags.append(e.diagnostic)
            self.diags.extend(e.more)
            doc = _rest_of(e, stack)
            if doc is None:
                self.doc.import_failed = True  # what the file would have defined is unknown
                return None
            self.doc.broken += e.broken   # the rest of the spec is checked, these blocks are not
        return _Frame(path, iter(doc.items), stack + (real,))

    def _refuse(self, code: str, message: str, use: S.Use, help: str, fixes=None) -> None:
        self.doc.import_failed = True
        self.doc.err(code, message, use.path_span, help=help, fixes=fixes)

    def _import(self, use: S.Use, importer: Path, stack: tuple[Path, ...]) -> _Frame | None:
        """Check one ``use``; the frame of the file to load next, or None (reported, or loaded
        already)."""
        bad = _bad_import_path(use.path)
        if bad is not None:
            return self._refuse("P031", f"`use \"{_short(use.path)}\"`: {bad[0]}", use, bad[1])
        resolved = self.reader.real(importer.parent / use.path)
        if not is_within(resolved, self.root):
            return self._refuse(
                "P015", f"import `{use.path}` points outside the project root `{self.display(self.root)}`", use,
                "imports stay inside the root (--root DIR, else the git checkout, else the spec's folder); "
                "copy the file inside it")
        if resolved in stack:
            chain = " -> ".join(self.display(p) for p in (*stack, resolved))
            return self._refuse("P014", f"import cycle: {chain}", use,
                                "remove one of the `use` lines so the files no longer import each other")
        if resolved in self.loaded:
            return None  # imported before: its blocks are merged already
        if len(stack) >= MAX_IMPORT_DEPTH:
            return self._refuse(
                "P032", f"imports nested more than {MAX_IMPORT_DEPTH} files deep: "
                f"{self.display(stack[0])} -> ... -> {self.display(stack[-1])} -> {use.path}", use,
                "import the shared files from one spec instead of chaining them; "
                f"a chain of `use` may hold at most {MAX_IMPORT_DEPTH} files")
        if not self.reader.exists(resolved):
            near = did_you_mean(resolved.name, self._par_names(resolved.parent))
            fixed = near and json.dumps(posixpath.join(posixpath.dirname(use.path), near), ensure_ascii=False)
            return self._refuse("P013", f"imported file `{use.path}` not found", use,
                                f"did you mean `{near}`?" if near else
                                f"paths are relative to {self.display(importer.parent) or '.'}/",
                                rename(use.path_span, fixed, f'"{use.path}"'))
        try:
            text = self.reader.read(resolved, self.root)
        except ReadFailure as e:
            self.doc.import_failed = True
            self.diags.append(read_diagnostic(e, use.path, use.path_span, what="imported file "))
            return None
        return self._open(resolved, self.display(resolved), text, stack)

    def _par_names(self, folder: Path) -> tuple[str, ...]:
        """The .par files of ``folder`` (listed once per load)."""
        got = self.listed.get(folder)
        if got is None:
            got = self.listed[folder] = self.reader.par_names(folder)
        return got
