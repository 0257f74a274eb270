"""parc compile: emit the launch plan for a target."""
from __future__ import annotations

import sys

from parc.report.targets import target_names, targets_help

DESCRIPTION = (f"Emit the launch plan for a target ({target_names('')}; each listed below). A spec "
               "with errors is refused with its diagnostics. The same spec always gives the same bytes. "
               "Without -o the launch files are printed; -o DIR writes them with plan.json, the "
               "resolved plan the launch reads.")
EPILOG = targets_help() + """

exit status: 0 written, 1 the spec has errors, 2 usage or I/O failure

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
               help="the target to emit files for, one of those listed below (may be left out when the spec "
               "names exactly one target)")
    p.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR, swapping the whole set in at once; names "
                   "an earlier compile wrote that this one lacks are removed, other files in DIR stay; DIR "
                   "is made in a folder that must exist, and is never a symbolic link (default: print them)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default: the files, diagnostics on stderr) or json (one object on stdout)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")


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
    from parc.cli.common import read_error, read_failed, unread
    from parc.report import compile as report
    from parc.report.diagnostics.text import write

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
        write(r.diagnostics, r.sources, sys.stderr)
    if files is None and (r.errors or r.plan is None):
        print(report.refused(r), file=sys.stderr)
        return 1
    if target is None:
        print(f"parc: {report.which_target(r.plan, known)}", file=sys.stderr)
        return 2
    if args.output:
        from parc.cli.output import Unwritten, put_folder, refuse

        try:
            put_folder(args.output, files)
        except Unwritten as e:
            return refuse(e)
        print(report.wrote(files, target, args.output))
        return 0
    sys.stdout.write(report.render_stdout(files))
    if (note := report.left_out(files)):
        print(note, file=sys.stderr)
    return 0


def _run_json(args, r, target, files, known) -> int:
    """`--format json`: one object on stdout whatever happens after the spec was read."""
    from parc.cli.output import Unwritten, put_folder, refuse
    from parc.report import compile as report

    error, code, output = None, 0, None
    if files is None and (r.errors or r.plan is None):
        code = 1
    elif target is None:
        error, code = report.which_target(r.plan, known), 2
    elif args.output:
        output = args.output
        try:
            put_folder(args.output, files)
        except Unwritten as e:
            error, code = str(e), refuse(e)     # said on stderr as every command says it
    print(report.render_json(r, target, None if code else files, output=output, error=error))
    return code
