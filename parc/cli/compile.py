"""parc compile: emit the launch plan for a target."""
from __future__ import annotations

import sys

from parc.words import count

DESCRIPTION = ("Emit the launch plan for a target: torchrun scripts, vllm serve commands, Megatron-LM "
               "arguments, a Slurm job, a Kubernetes PyTorchJob, or the resolved plan as JSON. A spec with "
               "errors is refused with its diagnostics. The same spec always gives the same bytes.")
EPILOG = """exit status: 0 written, 1 the spec has errors, 2 usage or I/O failure

--format json prints one JSON object on stdout, also when the spec has errors:
  {"file", "target", "ok", "files": [{"path", "executable", "text"}], "diagnostics": [...]}
(with -o DIR, "output": DIR and the files are written there; "error" says why when ok is false
for a reason other than the diagnostics)

examples:
  parc compile examples/llama3-70b-serve.par
  parc compile examples/llama3-70b-train.par --target megatron -o launch/
  parc compile examples/llama3-8b-fsdp.par --target json | jq .mesh"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file (`-`: read it from stdin)")
    from parc.cli.targets import add_target

    add_target(p, repeatable=False, backends_only=True, short=True,
               help="the target to emit files for: torchrun, vllm, megatron, slurm, kubernetes, json or any "
               "other folder of parc/targets (may be left out when the spec names exactly one target)")
    p.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR, swapping the whole set in at once; names "
                   "an earlier compile wrote that this one lacks are removed, other files in DIR stay "
                   "(default: print them)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default: the files, diagnostics on stderr) or json (one object on stdout)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")


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
    import os

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
    import os
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
    import os

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
    import os

    out = []
    for d, _, fs in os.walk(folder):
        for n in fs:
            out.append(os.path.relpath(os.path.join(d, n), folder).replace(os.sep, "/"))
    return sorted(out)


def _settle(out_dir: str) -> None:
    """Remove what is not the current set: the sets in the store other than ``current``'s
    (with the links of their names that the current set does not hold) and temporary links.
    Links go before their set's folder, so a kill in between is finished the next time."""
    import os

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
    import os

    for d, ds, fs in os.walk(path, topdown=False):
        for n in fs:
            os.unlink(os.path.join(d, n))
        for n in ds:
            p = os.path.join(d, n)
            os.unlink(p) if os.path.islink(p) else os.rmdir(p)
    os.rmdir(path)


def _fsync_dir(path: str) -> None:
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def render_stdout(files) -> str:
    if len(files) == 1:
        return files[0].text
    parts = []
    for f in files:
        parts.append(f"==> {f.path} <==\n{f.text}")
    return "\n".join(parts)


def compile_spec(spec, target: str | None = None, root=None):
    """Check ``spec`` with ``target``'s rules and build its files.

    Returns ``(result, target, files)``: ``files`` is None when the spec has errors, and
    ``target`` is None when it was not given and the spec does not name exactly one.
    Raises OSError when the spec cannot be read, KeyError for an unknown target."""
    from parc import targets as backends
    from parc.api import check_file
    from parc.resolve.reader import STDIN, STDIN_NAME, read_stdin

    if target is not None and target not in backends.names():
        raise KeyError(target)
    if spec == STDIN:
        r = check_file(STDIN_NAME, [target] if target else [], root=root, text=read_stdin())
    else:
        r = check_file(spec, [target] if target else [], root=root)
    if r.errors or r.plan is None:
        return r, target, None
    if target is None:
        named = list(r.plan.targets)
        if len(named) != 1:
            return r, None, None
        target = named[0]
    return r, target, backends.get(target).build(r.plan)


def run(args) -> int:
    from parc import targets as backends
    from parc.language.diagnostics import render_text, use_color
    from parc.cli.common import read_error, read_failed, unread

    known = backends.names()
    try:
        r, target, files = compile_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if getattr(args, "format", "text") == "json":
        code = _run_json(args, r, target, files, known)
        return 2 if read_failed(r) else code
    if (code := unread(r)) is not None:
        return code
    if r.diagnostics:
        text = render_text(r.diagnostics, r.sources, color=use_color(sys.stderr))
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
    if files is None and (r.errors or r.plan is None):
        n = len(r.errors)
        print(f"parc: not compiled: {count(n, 'error')} in {r.file}", file=sys.stderr)
        return 1
    if target is None:
        named = list(r.plan.targets)
        which = f"it names {', '.join(named)}" if named else "it names none"
        print(f"parc: say which target to compile for with --target ({which}; targets: {', '.join(known)})",
              file=sys.stderr)
        return 2
    if args.output:
        try:
            write_files(args.output, files)
        except OSError as e:
            print(f"parc: cannot write to {args.output}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"wrote {count(len(files), 'file')} for {target} to {args.output}: "
              + ", ".join(f.path for f in files[:6]) + (", ..." if len(files) > 6 else ""))
        return 0
    sys.stdout.write(render_stdout(files))
    return 0


def _run_json(args, r, target, files, known) -> int:
    """`--format json`: one object on stdout whatever happens after the spec was read."""
    import json

    out = {"file": r.file, "target": target, "ok": False, "files": [],
           "diagnostics": [d.to_json() for d in r.diagnostics]}
    code = 0
    if files is None and (r.errors or r.plan is None):
        code = 1
    elif target is None:
        named = list(r.plan.targets)
        out["error"] = (f"say which target to compile for with --target (it names "
                        f"{', '.join(named) if named else 'none'}; targets: {', '.join(known)})")
        code = 2
    else:
        listed = [{"path": f.path, "executable": bool(f.executable), "text": f.text} for f in files]
        if args.output:
            out["output"] = args.output
            try:
                write_files(args.output, files)
            except OSError as e:
                out["error"] = f"cannot write to {args.output}: {e.strerror or e}"
                code = 2
        if not code:
            out["ok"] = True
            out["files"] = listed
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return code
