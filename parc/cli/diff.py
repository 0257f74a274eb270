"""parc diff: what a change to a spec does to the plan, old → new, for a terminal or a PR comment."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

DESCRIPTION = """Compare two versions of a spec: the settings that changed and what they do to the plan —
degrees, world size, per-GPU memory, communication, bubble and step time — old → new with
the difference. `--git REV` reads the old version from git (and the files it imports, from
the same revision)."""
EPILOG = """exit status: 0 compared, 1 a version has errors (printed; a plan with memory, topology or
target errors is still compared), 2 usage, I/O or git failure

with --exit-code, as `git diff --exit-code` and diff(1), for CI gates: 0 the plan did not change,
1 it changed (a setting or a metric), 2 trouble (usage, I/O, git, or a version with errors)

examples:
  parc diff old.par new.par
  parc diff --git origin/main specs/llama3-70b-train.par --format markdown >> comment.md"""


def add_arguments(p):
    p.add_argument("specs", nargs="+", metavar="SPEC", help="OLD.par NEW.par (`-` for one of them: read it from stdin), or one SPEC with --git")
    p.add_argument("--git", metavar="REV", help="compare SPEC at git revision REV (the old side) "
                   "with SPEC in the working tree")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="output format (default: text; markdown for a pull-request comment)")
    p.add_argument("--all", action="store_true", help="show unchanged rows too")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the metrics that changed, no header")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when the plan changed and 0 when it did not (2 on trouble), for CI gates")


# ----------------------------------------------------------------------------- loading

class DiffError(Exception):
    def __init__(self, message: str, code: int = 2, diagnostics=()):
        super().__init__(message)
        self.code = code
        self.diagnostics = list(diagnostics)


def old_version(rev: str, spec: str):
    """The reader of the repository holding SPEC at REV, and SPEC's path for it; DiffError if
    there is no such revision or SPEC is not a file there that parc may read."""
    from parc.resolve.git import GitError, GitRevision, git
    from parc.resolve.reader import ReadFailure

    try:
        top = git(["rev-parse", "--show-toplevel"], os.path.dirname(os.path.abspath(spec))).strip()
    except GitError as e:
        raise DiffError(f"parc diff: {e}") from None
    rel = os.path.relpath(os.path.realpath(spec), os.path.realpath(top)).replace(os.sep, "/")
    try:
        git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top)
    except GitError:
        raise DiffError(f"parc diff: `{rev}` is not a revision of the repository at {top}") from None
    reader = GitRevision(rev, top)
    path = os.path.join(top, *rel.split("/"))
    try:
        if rel.startswith("../") or reader.entry(rel) is None:
            raise DiffError(f"parc diff: {spec} does not exist at {rev}")
        reader.read(path)
    except GitError:
        raise DiffError(f"parc diff: {spec} does not exist at {rev}") from None
    except ReadFailure as e:
        raise DiffError(f"parc diff: cannot read {spec} at {rev}: {e.reason}") from None
    return reader, path


@dataclass
class Side:
    name: str
    plan: dict
    estimate: dict
    errors: list  # findings that leave an estimate (P3 topology, P4 memory, P6 target)


def load(path: str, root=None, shown: str | None = None, reader=None) -> Side:
    """The plan and estimate of a spec (read through ``reader``, the working tree by default).
    A spec whose shapes do not resolve or divide (P0-P2 errors) has no plan to compare:
    DiffError with its diagnostics."""
    from parc.api import check_file
    from parc.report.diagnostics.text import render_text as render_diags

    from parc.resolve.reader import READ_CODE, STDIN, STDIN_NAME, read_stdin

    try:
        if path == STDIN:
            shown = shown or STDIN_NAME
            r = check_file(STDIN_NAME, root=root, text=read_stdin())
        else:
            shown = shown or path
            r = check_file(path, root=root, reader=reader, shown=shown if reader else None)
    except OSError as e:
        raise DiffError(f"parc: cannot read {path}: {getattr(e, 'reason', None) or e.strerror or e}") from None
    unread = [d for d in r.diagnostics if d.code == READ_CODE]
    if unread:
        raise DiffError(render_diags(unread, r.sources).rstrip("\n"), diagnostics=unread)
    blocking = [d for d in r.errors if d.code[:2] in ("P0", "P1", "P2")]
    est = None
    if r.plan is not None and not blocking:
        from parc.cost.estimate import estimate

        try:
            est = estimate(r.plan).to_json()
        except (ArithmeticError, ValueError):
            est = None
    if est is None:
        text = render_diags(blocking or r.errors, r.sources)
        text = text.replace(r.file, shown)
        raise DiffError(f"parc diff: {shown} has errors, so there is no plan to compare:\n{text}", 1,
                        blocking or r.errors)
    for d in r.errors:
        if d.span.file == r.file:
            d.span = type(d.span)(shown, *(getattr(d.span, f) for f in ("line", "column", "end_line",
                                                                           "end_column", "start", "end")))
    return Side(shown, r.plan.to_dict(), est, r.errors)


def _error_lines(sides) -> list[str]:
    from parc.printable import printable

    out = []
    for s in sides:
        for d in s.errors:
            out.append(printable(f"{d.span.file}:{d.span.line}:{d.span.column}: {d.code} {d.message}"))
    return out


def run(args) -> int:
    try:
        if args.git:
            if len(args.specs) != 1:
                raise DiffError("parc diff: with --git give one SPEC (its old version comes from git)")
            new_path = args.specs[0]
            if not os.path.isfile(new_path):
                raise DiffError(f"parc: cannot read {new_path}: No such file or directory")
            reader, old_path = old_version(args.git, new_path)
            old = load(old_path, root=reader.top, shown=f"{args.git}:{new_path}", reader=reader)
        else:
            if len(args.specs) != 2:
                raise DiffError("parc diff: give OLD.par NEW.par, or --git REV SPEC")
            old = load(args.specs[0], root=args.root)
            new_path = args.specs[1]
        new = load(new_path, root=args.root)
    except DiffError as e:
        print(str(e).rstrip("\n"), file=sys.stderr)
        if args.format == "json":   # JSON on stdout whatever happened
            import json

            first = str(e).split("\n", 1)[0].removeprefix("parc diff: ").removeprefix("parc: ")
            print(json.dumps({"ok": False, "error": first, "diagnostics": [d.to_json() for d in e.diagnostics]},
                             indent=2, ensure_ascii=False))
        return 2 if args.exit_code else e.code
    from parc.report.diff.metrics import compare, setting_changes

    rows = compare(old.estimate, new.estimate)
    changes = setting_changes(old.plan, new.plan)
    errors = _error_lines((old, new))
    if args.format == "json":
        from parc.report.diff.json import render_json

        sys.stdout.write(render_json(old, new, changes, rows))
    elif args.format == "markdown":
        from parc.report.diff.markdown import render_markdown

        sys.stdout.write(render_markdown(old.name, new.name, rows, changes, show_all=args.all, errors=errors))
    else:
        from parc.report.term import use_color
        from parc.report.diff.text import render_text

        sys.stdout.write(render_text(old.name, new.name, rows, changes, color=use_color(sys.stdout),
                                     show_all=args.all, quiet=args.quiet))
        for line in errors:
            print(line, file=sys.stderr)
    if args.exit_code:
        if errors:
            return 2
        return 1 if changes or any(r["verdict"] != "same" for r in rows) else 0
    return 1 if errors else 0
