"""A spec reader over a git revision: the files of a spec as they were at REV, read under the
rules of the disk reader (regular files only, a link's target never followed, at most 1 MiB).
``parc diff --git`` loads the old version of a spec through it, so the loader resolves that
version's imports at the same revision."""
from __future__ import annotations

import os
from pathlib import Path

from parc.resolve.reader import MAX_SPEC_BYTES, ReadFailure, decode, size_words


class GitError(Exception):
    """git could not be run, or refused the command; the message says which and why."""


def git(args: list[str], cwd: str | os.PathLike, binary: bool = False):
    """The output of ``git ARGS`` run in ``cwd`` (bytes with ``binary``); GitError on failure."""
    import subprocess

    try:
        p = subprocess.run(["git", *args], cwd=cwd or ".", capture_output=True, text=not binary)
    except OSError as e:
        raise GitError(f"cannot run git: {e.strerror or e}") from None
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace") if binary else p.stderr
        msg = (err.strip().splitlines() or ["git failed"])[-1]
        raise GitError(f"git {' '.join(args[:2])}: {msg}")
    return p.stdout


class GitRevision:
    """The files under ``top`` (a repository's top folder) as they were at revision ``rev``."""

    def __init__(self, rev: str, top: str | os.PathLike):
        self.rev = rev
        self.top = Path(top)
        self._entries: dict[str, tuple[str, str, str, str] | None] = {}

    def rel(self, path: Path) -> str | None:
        """``path`` from the top, '/'-separated; None if it lies outside."""
        rel = os.path.relpath(self.real(path), self.top).replace(os.sep, "/")
        return None if rel == ".." or rel.startswith("../") else rel

    def entry(self, rel: str) -> tuple[str, str, str, str] | None:
        """The mode, kind, object and size of ``rel`` at the revision; None if it is not there."""
        if rel not in self._entries:
            out = git(["ls-tree", "-l", "--full-tree", self.rev, "--", rel], self.top).strip()
            meta = out.partition("\t")[0]
            self._entries[rel] = tuple((meta.split() + ["", "", "", ""])[:4]) if out else None
        return self._entries[rel]

    def real(self, path: Path) -> Path:
        return Path(os.path.normpath(os.path.abspath(path)))

    def exists(self, path: Path) -> bool:
        rel = self.rel(path)
        try:
            return rel is not None and self.entry(rel) is not None
        except GitError:
            return False

    def par_names(self, folder: Path) -> tuple[str, ...]:
        rel = self.rel(folder)
        if rel is None:
            return ()
        try:
            out = git(["ls-tree", "--name-only", "--full-tree", self.rev, "--", "" if rel == "." else rel + "/"],
                      self.top)
        except GitError:
            return ()
        return tuple(n.rsplit("/", 1)[-1] for n in out.splitlines() if n.endswith(".par"))

    def read(self, path: Path, within: Path | None = None) -> str:
        """The text of ``path`` at the revision; ReadFailure if it is not a regular file of at
        most 1 MiB there (or not there at all)."""
        rel = self.rel(path)
        try:
            got = self.entry(rel) if rel is not None else None
            if got is None:
                raise ReadFailure(rel or path, f"it does not exist at {self.rev}")
            mode, kind, sha, size = got
            if kind != "blob" or mode not in ("100644", "100755"):
                raise ReadFailure(rel, "it is a link" if mode == "120000" else "it is not a regular file",
                                  help="parc reads only regular files")
            if not size.isdigit() or int(size) > MAX_SPEC_BYTES:
                raise ReadFailure(rel, f"is {size_words(int(size)) if size.isdigit() else 'of unknown size'}; "
                                  "a spec or an imported file may be at most 1 MiB")
            return decode(git(["cat-file", "blob", sha], self.top, binary=True))
        except GitError as e:
            raise ReadFailure(rel or path, str(e)) from None
