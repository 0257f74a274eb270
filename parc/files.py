"""Writing files so that a reader never sees half of one: one file (:func:`write_atomic`, used
by every command's output file through parc.cli.output, the parser's table and the runtime's
rank reports) and a whole set of files swapped in at once (:func:`write_files`, ``parc compile
-o``).

A foundation module: it imports nothing from parc, so every layer (the runtime included) may
use it.
"""
from __future__ import annotations

import os


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path, text: str | bytes, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8, newlines as they are; or bytes as they are) to ``path`` so that a
    reader sees the old file or the new one, never half.

    The file gets ``mode`` when given, else the mode of the file it replaces, else the
    permissions the umask gives a new file. Its bytes are synced to the disk before the rename
    and the folder after it, so that a crash leaves the old file or the whole new one, never an
    empty one under the final name (the rename alone does not order the data before the entry
    on every filesystem)."""
    import tempfile

    path = os.fspath(path)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".parc-", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes)
              else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)


STORE = ".parc"     # DIR/.parc: every compiled set in a folder of its own, and `current`
TEMP = ".parc-"     # the prefix of parc's temporary links (DIR/.parc-<pid>-<name>.tmp)


def write_files(out_dir: str, files) -> None:
    """Write the set ``files`` into ``out_dir`` so that the folder always shows one whole set.

    The bytes go to a folder of their own, ``DIR/.parc/<id>`` (named by the set's content),
    and every name in DIR is a relative link through ``DIR/.parc/current``. Replacing the
    ``current`` link (one rename) swaps the whole set at once: a process killed at any point
    leaves the old set or the new one, never a mix. Names of an earlier set that the new one
    does not hold are removed, but only when they are parc's own links; a user's files in DIR
    are never touched. What a killed run left (a set never swapped in, temporary links) is
    removed by the next write. An error before the swap leaves the old set as it was."""
    import fcntl

    names = [_set_name(f.path) for f in files]
    os.makedirs(out_dir, exist_ok=True)
    store = os.path.join(out_dir, STORE)
    dfd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)    # one writer at a time per folder
        made_store = not os.path.isdir(store)
        os.makedirs(store, exist_ok=True)
        try:
            _settle(out_dir)
            vid = _set_id(files)
            if not os.path.isdir(os.path.join(store, vid)):
                _stage(store, vid, files)
            for name in names:
                _link(out_dir, name)
            current = os.path.join(store, "current")
            if not (os.path.islink(current) and os.readlink(current) == vid):
                tmp = os.path.join(store, f".tmp-current-{os.getpid()}")
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                os.symlink(vid, tmp)
                os.replace(tmp, current)       # the swap
                _fsync_dir(store)
        except BaseException:
            _settle(out_dir)
            if made_store and not os.path.lexists(os.path.join(store, "current")):
                _remove_tree(store)
            raise
        _settle(out_dir)
    finally:
        os.close(dfd)


def _set_name(path: str) -> str:
    """A file's path in the set: relative, '/'-separated, normalised, outside the store."""
    import posixpath

    norm = posixpath.normpath(path)
    if (norm != path or path.startswith(("/", "../")) or path in (".", "..")
            or norm.split("/")[0] in (STORE,) or norm.split("/")[-1].startswith(TEMP)):
        raise ValueError(f"not a file name parc writes: {path!r}")
    return norm


def _set_id(files) -> str:
    import hashlib
    import json

    data = json.dumps([[f.path, bool(f.executable), f.text] for f in files], ensure_ascii=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def _stage(store: str, vid: str, files) -> None:
    """Write the set into a temporary folder in the store, then rename it to ``vid``."""
    import tempfile

    tmp = tempfile.mkdtemp(dir=store, prefix=".tmp-")
    for f in files:
        dest = os.path.join(tmp, f.path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(f.text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(dest, 0o755 if f.executable else 0o644)
    _fsync_dir(tmp)
    os.rename(tmp, os.path.join(store, vid))


def _link_target(name: str) -> str:
    import posixpath

    return posixpath.relpath(posixpath.join(STORE, "current", name), posixpath.dirname(name) or ".")


def _link(out_dir: str, name: str) -> None:
    """Make DIR/name parc's link through ``current`` (a new name dangles until the swap)."""
    path = os.path.join(out_dir, name)
    target = _link_target(name)
    if os.path.islink(path) and os.readlink(path) == target:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f"{TEMP}{os.getpid()}-{os.path.basename(name)}.tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _names(folder: str) -> list[str]:
    out = []
    for d, _, fs in os.walk(folder):
        for n in fs:
            out.append(os.path.relpath(os.path.join(d, n), folder).replace(os.sep, "/"))
    return sorted(out)


def _settle(out_dir: str) -> None:
    """Remove what is not the current set: the sets in the store other than ``current``'s
    (with the links of their names that the current set does not hold) and temporary links.
    Links go before their set's folder, so a kill in between is finished the next time."""
    store = os.path.join(out_dir, STORE)
    current = os.path.join(store, "current")
    vid = os.readlink(current) if os.path.islink(current) else None
    keep = set(_names(os.path.join(store, vid))) if vid else set()
    dirs = {os.path.dirname(n) for n in keep} | {""}
    for entry in sorted(os.listdir(store)) if os.path.isdir(store) else []:
        p = os.path.join(store, entry)
        if entry in ("current", vid):
            continue
        if entry.startswith(".tmp-current-"):
            os.unlink(p)
        elif os.path.isdir(p) and not os.path.islink(p):
            for name in _names(p):
                dirs.add(os.path.dirname(name))
                link = os.path.join(out_dir, name)
                if name not in keep and os.path.islink(link) and os.readlink(link) == _link_target(name):
                    os.unlink(link)
            _remove_tree(p)
    for d in sorted(dirs):
        folder = os.path.join(out_dir, d)
        for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            p = os.path.join(folder, entry)
            if entry.startswith(TEMP) and entry.endswith(".tmp") and (os.path.islink(p) or os.path.isfile(p)):
                os.unlink(p)


def _remove_tree(path: str) -> None:
    for d, ds, fs in os.walk(path, topdown=False):
        for n in fs:
            os.unlink(os.path.join(d, n))
        for n in ds:
            p = os.path.join(d, n)
            os.unlink(p) if os.path.islink(p) else os.rmdir(p)
    os.rmdir(path)


def _fsync_dir(path: str) -> None:
    """Sync the folder ``path``'s entries to the disk, where the platform allows: a folder that
    cannot be opened (Windows) or synced (a filesystem that does not support it) is skipped."""
    import errno

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES, errno.EPERM):
            raise
    finally:
        os.close(fd)
