"""parc compile: emit the launch plan for a target."""
from __future__ import annotations

import sys

from ..words import count

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
    p.add_argument("spec", metavar="SPEC", help="the .par file")
    from .targets import add_target

    add_target(p, repeatable=False, backends_only=True, short=True,
               help="torchrun, vllm, megatron, slurm, kubernetes or json (may be left out when the spec "
               "names exactly one target)")
    p.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR (default: print them)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default: the files, diagnostics on stderr) or json (one object on stdout)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")


def write_files(out_dir: str, files) -> None:
    """Write every file atomically: each goes to a temporary file in DIR and is renamed over its
    path only when all of them are complete, so an error leaves no file half-written."""
    import os
    import tempfile

    os.makedirs(out_dir, exist_ok=True)
    staged = []
    try:
        for f in files:
            dest = os.path.join(out_dir, f.path)
            os.makedirs(os.path.dirname(dest) or out_dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest) or out_dir, prefix=".parc-", suffix=".tmp")
            staged.append((tmp, dest))
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(f.text)
            os.chmod(tmp, 0o755 if f.executable else 0o644)
        for tmp, dest in staged:
            os.replace(tmp, dest)
        staged = []
    finally:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass


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
    from .. import backends
    from ..api import check_file

    if target is not None and target not in backends.names():
        raise KeyError(target)
    backends.load_checks()
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
    from .. import backends
    from ..compiler.diagnostics import render_text, use_color
    from .common import read_error

    known = backends.names()
    try:
        r, target, files = compile_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if getattr(args, "format", "text") == "json":
        return _run_json(args, r, target, files, known)
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
