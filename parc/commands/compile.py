"""parc compile: emit the launch plan for a target."""
from __future__ import annotations

import sys

DESCRIPTION = ("Emit the launch plan for a target: torchrun scripts, vllm serve commands, Megatron-LM "
               "arguments, a Slurm job, a Kubernetes PyTorchJob, or the resolved plan as JSON. A spec with "
               "errors is refused with its diagnostics. The same spec always gives the same bytes.")
EPILOG = """exit status: 0 written, 1 the spec has errors, 2 usage or I/O failure

examples:
  parc compile examples/llama3-70b-serve.par
  parc compile examples/llama3-70b-train.par --target megatron -o launch/
  parc compile examples/llama3-8b-fsdp.par --target json | jq .mesh"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file (`-`: read it from stdin)")
    p.add_argument("--target", "-t", metavar="T",
                   help="torchrun, vllm, megatron, slurm, kubernetes or json (may be left out when the spec "
                   "names exactly one target)")
    p.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR (default: print them)")
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
    from ..compiler.reader import STDIN, STDIN_NAME, read_stdin

    if target is not None and target not in backends.names():
        raise KeyError(target)
    backends.load_checks()
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
    from .. import backends
    from ..compiler.diagnostics import render_text, use_color
    from .common import read_error, unread

    known = backends.names()
    if args.target is not None and args.target not in known:
        import difflib

        near = difflib.get_close_matches(args.target, known, n=1)
        print(f"parc: unknown target `{args.target}`" + (f"; did you mean `{near[0]}`?" if near else "")
              + f" (targets: {', '.join(known)})", file=sys.stderr)
        return 2
    try:
        r, target, files = compile_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if (code := unread(r)) is not None:
        return code
    if r.diagnostics:
        text = render_text(r.diagnostics, r.sources, color=use_color(sys.stderr))
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
    if files is None and (r.errors or r.plan is None):
        n = len(r.errors)
        print(f"parc: not compiled: {n} error{'s' if n != 1 else ''} in {r.file}", file=sys.stderr)
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
        print(f"wrote {len(files)} file{'s' if len(files) != 1 else ''} for {target} to {args.output}: "
              + ", ".join(f.path for f in files[:6]) + (", ..." if len(files) > 6 else ""))
        return 0
    sys.stdout.write(render_stdout(files))
    return 0
