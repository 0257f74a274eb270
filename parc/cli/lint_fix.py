"""``parc lint --fix``: the fixes applied (or, with ``--diff``, shown), before the lint report."""
from __future__ import annotations

import sys


def run_fix(args) -> int | None:
    """Apply the fixes and say what changed and what was left; the exit status with ``--diff``
    (1 when there are fixes to apply) and for standard input (whose fixed text is printed: 1
    when it still has errors), None when the lint report of what is left follows."""
    from parc.cli.output import Unwritten, put_file, refuse
    from parc.lint.discover import discover
    from parc.lint.fix import fix_files
    from parc.report.fmt import render_diff
    from parc.resolve.reader import STDIN_NAME

    files, _ = discover(args.paths, args.exclude)  # a path that matches nothing: the lint report says so
    fixes, _ = fix_files(files, select=args.select, ignore=args.ignore, targets=args.target, root=args.root)
    say = sys.stderr if args.diff or args.format != "text" or STDIN_NAME in {f.file for f in fixes} else sys.stdout
    status = 0
    for i, ff in enumerate(fixes):
        if not ff.changed:
            continue
        if args.diff:
            sys.stdout.write(render_diff(ff.before, ff.after, ff.file).replace("(formatted)", "(fixed)"))
        elif ff.file == STDIN_NAME:
            sys.stdout.write(ff.after)
        else:
            try:
                put_file(ff.file, ff.after)
            except Unwritten as e:
                status = refuse(e)
                fixes[i] = _unwritten(ff)
    if not args.quiet:
        for line in _report(fixes, args.diff):
            print(line, file=say)
    if args.diff:
        return status or (1 if any(f.changed for f in fixes) else 0)
    if any(f.file == STDIN_NAME for f in fixes):  # the fixed text went to stdout: its errors decide
        return status or (1 if any(d.severity == "error" for f in fixes for d in f.remaining) else 0)
    return status or None


def _unwritten(ff):
    """``ff`` as it stands when its file could not be written: nothing fixed, every fix left."""
    from dataclasses import replace

    return replace(ff, after=ff.before, fixed=[],
                   left=[(d, "not applied: the file could not be written") for d in ff.fixed] + ff.left)


def _report(fixes, diff: bool) -> list[str]:
    """One line per fix applied and per fixable finding left, then the counts."""
    verb = "would fix" if diff else "fixed"
    out = []
    for ff in fixes:
        for d in ff.fixed:
            out.append(f"{verb} {ff.file}:{d.span.line}:{d.span.column}: {d.code} {d.safe_fix.message}")
        for d, why in ff.left:
            out.append(f"left {ff.file}:{d.span.line}:{d.span.column}: {d.code} {why}")
    n, m = sum(len(f.fixed) for f in fixes), sum(len(f.left) for f in fixes)
    files = sum(f.changed for f in fixes)
    from parc.words import count

    out.append(f"{verb} {count(n, 'finding')} in {count(files, 'file')}; {count(m, 'fixable finding')} left")
    return out
