"""The one way parc reads a spec: a regular file inside its root, at most ``MAX_SPEC_BYTES``.

Specs arrive from pull requests, so reading one must not read anything else. Every reader
(``check``, ``lint``, ``diff``, imports, the planner) goes through :func:`read_spec`, which

* opens regular files only: a device (``/dev/zero``), a FIFO, a socket or a folder is refused
  before it is opened, and the open itself never blocks (``O_NONBLOCK``);
* refuses the kernel's pseudo-files (``/proc``, ``/sys``, ``/dev``), which claim to be regular
  files but hold process state such as the environment;
* refuses a path that leads, through links, outside the folder it must stay in (``within``);
* reads at most ``MAX_SPEC_BYTES`` (1 MiB) and refuses a larger file without reading it.

A refusal is a :class:`ReadFailure`, which callers turn into the P030 diagnostic.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

MAX_SPEC_BYTES = 1 << 20  # 1 MiB: a spec or any file it imports
READ_CODE = "P030"  # the diagnostic for a spec or an import that cannot be read
STDIN = "-"  # the argument that reads a spec from standard input
STDIN_NAME = "<stdin>"  # the name standard input is shown under
_PSEUDO = ("/proc", "/sys", "/dev")


class ReadFailure(OSError):
    """A file parc will not or cannot read: ``reason`` says why in the user's words."""

    def __init__(self, path, reason: str, help: str | None = None, errno: int = 0):
        super().__init__(errno, reason)
        self.path = str(path)
        self.reason = reason
        self.help = help


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def size_words(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} bytes"


def _too_large(path, size: int | None) -> ReadFailure:
    what = f"is {size_words(size)}" if size is not None else "is larger than 1 MiB"
    return ReadFailure(path, f"{what}; a spec or an imported file may be at most 1 MiB",
                       help="split it into files that `use` each other, each at most 1 MiB")


def is_within(p: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Whether ``p`` (a real path) lies inside ``root`` (resolved here)."""
    try:
        Path(p).relative_to(Path(root).resolve())
        return True
    except ValueError:
        return False


def check_path(path: str | os.PathLike, within: str | os.PathLike | None = None) -> os.stat_result:
    """The ``stat`` of ``path`` if parc may read it; :class:`ReadFailure` saying why not.

    Nothing is opened here, so a device or a FIFO is refused without a side effect."""
    p = os.fspath(path)
    if "\0" in p:
        raise ReadFailure(path, "the path holds a NUL byte", help="remove the NUL character from the path")
    try:
        real = os.path.realpath(p)
    except (OSError, ValueError) as e:
        raise ReadFailure(path, getattr(e, "strerror", None) or str(e)) from None
    if within is not None and not is_within(real, within):
        raise ReadFailure(path, f"it leads outside the root `{_shown(within)}` (to `{real}`)",
                          help="parc reads only files inside the root (--root DIR, else the git "
                               "checkout, else the spec's folder); copy the file inside it")
    if any(real == d or real.startswith(d + "/") for d in _PSEUDO):
        raise ReadFailure(path, f"`{real}` is a system file, not a spec",
                          help="parc reads only spec files (.par)")
    try:
        st = os.stat(p)
    except OSError as e:
        raise ReadFailure(path, e.strerror or str(e), errno=e.errno or 0) from None
    if not stat.S_ISREG(st.st_mode):
        raise ReadFailure(path, f"it is {_kind(st.st_mode)}", help="parc reads only regular files")
    if st.st_size > MAX_SPEC_BYTES:
        raise _too_large(path, st.st_size)
    return st


def _shown(p) -> str:
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def read_spec(path: str | os.PathLike, within: str | os.PathLike | None = None) -> str:
    """The text of the spec at ``path``; :class:`ReadFailure` if it is not a regular file (inside
    ``within``, when given) of at most ``MAX_SPEC_BYTES``."""
    return decode(read_bytes(path, within))


def read_bytes(path: str | os.PathLike, within: str | os.PathLike | None = None) -> bytes:
    """The bytes of the spec at ``path``, under the rules of :func:`read_spec`."""
    before = check_path(path, within)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.fspath(path), flags)
    except OSError as e:
        raise ReadFailure(path, e.strerror or str(e), errno=e.errno or 0) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise ReadFailure(path, "it changed while it was read (it is no longer the same regular file)")
        chunks, got = [], 0
        while got <= MAX_SPEC_BYTES:
            b = os.read(fd, min(1 << 16, MAX_SPEC_BYTES + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except OSError as e:
        if isinstance(e, ReadFailure):
            raise
        raise ReadFailure(path, e.strerror or str(e), errno=e.errno or 0) from None
    finally:
        os.close(fd)
    if got > MAX_SPEC_BYTES:
        raise _too_large(path, None)
    return b"".join(chunks)


def diagnostic(e: ReadFailure | OSError, shown: str, span=None, what: str = ""):
    """The P030 diagnostic for a file that could not be read, at ``span`` (the ``use`` path of an
    import) or at the start of the file itself."""
    from parc.language.diagnostics import ERROR, Diagnostic, Span

    reason = getattr(e, "reason", None) or e.strerror or str(e)
    return Diagnostic(READ_CODE, ERROR, f"cannot read {what}`{shown}`: {reason}",
                      span if span is not None else Span.point(shown), help=getattr(e, "help", None))


def read_stdin(stream=None) -> str:
    """The spec on standard input (``-``), at most ``MAX_SPEC_BYTES``."""
    return decode(read_stdin_bytes(stream))


def read_stdin_bytes(stream=None) -> bytes:
    """The bytes on standard input, at most ``MAX_SPEC_BYTES``."""
    stream = stream if stream is not None else sys.stdin
    buf = getattr(stream, "buffer", None)
    if buf is not None:
        data = buf.read(MAX_SPEC_BYTES + 1)
    else:
        data = stream.read(MAX_SPEC_BYTES + 1)
        data = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    if len(data) > MAX_SPEC_BYTES:
        raise _too_large(STDIN_NAME, None)
    return data


def source_text(sources: dict[str, str], file: str) -> str | None:
    """A file's text from ``sources``, read (and kept there) on first use; None if unreadable."""
    text = sources.get(file)
    if text is None:
        try:  # the spec reader: never a device, a FIFO or a file over the size limit
            text = read_spec(file)
        except OSError:
            return None
        sources[file] = text
    return text
