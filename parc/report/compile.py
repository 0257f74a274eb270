"""What ``parc compile`` prints: the files of a target (text), or one JSON object, and the
lines that say what was written or why nothing was."""
from __future__ import annotations

import json

from parc.words import count


# The resolved plan every launch writes beside its files for the runtime to read; the launch
# files on stdout are for reading, so it is left to `-o DIR` (and to `--target json`).
RECORD = "plan.json"


def shown_files(files) -> list:
    """The files ``parc compile`` prints without ``-o``: the launch files, not the record."""
    return [f for f in files if f.path != RECORD] or list(files)


def render_stdout(files) -> str:
    """One file as it is; several each under a ``==> path <==`` heading."""
    files = shown_files(files)
    if len(files) == 1:
        return files[0].text
    return "\n".join(f"==> {f.path} <==\n{f.text}" for f in files)


def left_out(files) -> str | None:
    """The line that says what the printout leaves out, or None."""
    if len(shown_files(files)) == len(files):
        return None
    return f"parc: {RECORD} (the resolved plan the launch reads) is written with -o DIR, or printed by --target json"


def which_target(plan, known) -> str:
    """Why a spec that names no single target cannot be compiled without ``--target``."""
    named = list(plan.targets)
    which = f"it names {', '.join(named)}" if named else "it names none"
    return f"say which target to compile for with --target ({which}; targets: {', '.join(known)})"


def refused(r) -> str:
    return f"parc: not compiled: {count(len(r.errors), 'error')} in {r.file}"


def wrote(files, target: str, folder: str) -> str:
    return (f"wrote {count(len(files), 'file')} for {target} to {folder}: "
            + ", ".join(f.path for f in files[:6]) + (", ..." if len(files) > 6 else ""))


def render_json(r, target, files, output=None, error=None) -> str:
    """``{"file", "target", "ok", "files", "diagnostics"}`` (with ``output`` and ``error`` when
    given); ``ok`` when ``files`` were built (None: not)."""
    out = {"file": r.file, "target": target, "ok": files is not None, "files": [],
           "diagnostics": [d.to_json() for d in r.diagnostics]}
    if output is not None:
        out["output"] = output
    if error is not None:
        out["error"] = error
    if files is not None:
        out["files"] = [{"path": f.path, "executable": bool(f.executable), "text": f.text} for f in files]
    return json.dumps(out, indent=2, ensure_ascii=False)
