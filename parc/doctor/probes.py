"""What parc doctor asks of the node, behind one small interface.

Every check reads the node only through a :class:`Probes`: run a command, read a file, list a
folder, stat a filesystem, resolve a name, bind or connect a port, read the environment, the
resource limits and the installed version of a package. :func:`real` answers from this machine;
tests build a ``Probes`` of fakes (``dataclasses.replace(real(), run=...)`` or all fakes) so each
finding can be produced without the hardware that causes it.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional


@dataclass(frozen=True)
class Ran:
    """What a command printed and its exit status."""
    code: int
    out: str
    err: str = ""


@dataclass(frozen=True)
class Connect:
    """How a connection attempt ended: ``ok`` (something listens), ``refused`` (the host
    answered, nothing listens), or ``unreachable`` (a timeout, no route, a firewall) with why."""
    outcome: str
    why: str = ""


@dataclass(frozen=True)
class Probes:
    """The node as parc doctor sees it. Each field is a function (or the environment mapping).

    run(argv) -> Ran | None          None when the program is not installed
    read(path) -> str | None         a text file, None when it cannot be read
    listdir(path) -> list[str]       names in a folder, [] when there is none
    fs_size(path) -> int | None      total bytes of the filesystem holding path
    resolve(host) -> list[str]       the addresses a name resolves to, [] when it does not
    bind(port, host) -> str | None   None when the TCP port can be bound here (on ``host``, an
                                     address of this node; "": every address), else why not
    connect(host, port) -> Connect
    version(dist) -> str | None      the installed version of a Python distribution
    torch_build() -> dict | None     {"version", "cuda", "hip"} of the installed torch, not imported
    memlock() -> int | None          the soft RLIMIT_MEMLOCK in bytes, None when unlimited
    realpath(path) -> str
    env                              the environment the launch would inherit
    """
    run: Callable[[list[str]], Optional[Ran]]
    read: Callable[[str], Optional[str]]
    listdir: Callable[[str], list[str]]
    fs_size: Callable[[str], Optional[int]]
    resolve: Callable[[str], list[str]]
    bind: Callable[..., Optional[str]]
    connect: Callable[[str, int], Connect]
    version: Callable[[str], Optional[str]]
    torch_build: Callable[[], Optional[dict]]
    memlock: Callable[[], Optional[int]]
    realpath: Callable[[str], str] = os.path.realpath
    env: Mapping[str, str] = field(default_factory=dict)


def _run(argv: list[str]) -> Ran | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Ran(127, "", str(e))
    return Ran(p.returncode, p.stdout, p.stderr)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _fs_size(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _resolve(host: str) -> list[str]:
    try:
        return sorted({ai[4][0] for ai in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except (OSError, UnicodeError):
        return []


def _bind(port: int, host: str = "") -> str | None:
    """Bind the port as a rendezvous store would (SO_REUSEADDR; every address, or ``host``)."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1)
        return None
    except OSError as e:
        return e.strerror or str(e)
    finally:
        s.close()


def _connect(host: str, port: int, timeout: float = 3.0) -> Connect:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return Connect("ok")
    except ConnectionRefusedError:
        return Connect("refused")
    except socket.timeout:
        return Connect("unreachable", f"no answer in {timeout:g} s")
    except OSError as e:
        return Connect("unreachable", e.strerror or str(e))


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _torch_build() -> dict | None:
    """torch's version and the CUDA/ROCm it was built for, read from torch/version.py without
    importing torch (which takes seconds and would touch the GPUs)."""
    from importlib.util import find_spec

    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = _read(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) or ""
    return parse_torch_version(text)


def parse_torch_version(text: str) -> dict:
    """``__version__``, ``cuda`` and ``hip`` from the text of torch/version.py (None where unset)."""
    import ast

    out: dict = {"version": None, "cuda": None, "hip": None}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            key = {"__version__": "version", "cuda": "cuda", "hip": "hip"}.get(target.id)
            if key:
                out[key] = node.value.value
    return out


def _memlock() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def real() -> Probes:
    """This machine."""
    return Probes(run=_run, read=_read, listdir=_listdir, fs_size=_fs_size, resolve=_resolve, bind=_bind,
                  connect=_connect, version=_version, torch_build=_torch_build, memlock=_memlock,
                  realpath=os.path.realpath, env=dict(os.environ))
