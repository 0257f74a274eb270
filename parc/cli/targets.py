"""The `--target` option every command shares. An unknown name is a usage error (exit 2) with a
suggestion, never a target whose rules silently do not run."""
from __future__ import annotations

import argparse


def backend_targets() -> list[str]:
    """The targets `parc compile` emits files for."""
    from parc.model.targets import names

    return names()


def rule_targets() -> list[str]:
    """The targets whose rules a spec can be judged by: every backend, plus the rule families
    without a backend of their own (`torch`, parc's runtime)."""
    from parc.model.targets import rule_targets as every

    return every()


def unknown_target(name: str, known: list[str]) -> str:
    """The one-line message for an unknown target, with the nearest known name."""
    import difflib

    near = difflib.get_close_matches(name, known, n=1)
    return (f"unknown target `{name}`" + (f"; did you mean `{near[0]}`?" if near else "")
            + f" (targets: {', '.join(known)})")


def validate_target(name: str, known: list[str]) -> str:
    """``name`` if it is a known target; ArgumentTypeError (a usage error) otherwise."""
    if name not in known:
        raise argparse.ArgumentTypeError(unknown_target(name, known))
    return name


def _checker(known_fn):
    def check(name: str) -> str:
        return validate_target(name, known_fn())

    check.__name__ = "target"  # argparse names the type in its messages
    return check


def add_target(p, *, repeatable: bool = True, backends_only: bool = False, short: bool = False,
               help: str | None = None):
    """Add `--target T` to parser ``p``: repeatable for the commands that apply several targets'
    rules, a single backend for `compile`."""
    known_fn = backend_targets if backends_only else rule_targets
    flags = ("--target", "-t") if short else ("--target",)
    kw = dict(metavar="T", type=_checker(known_fn),
              help=help or "also apply this target's rules (repeatable)")
    if repeatable:
        p.add_argument(*flags, action="append", default=[], **kw)
    else:
        p.add_argument(*flags, **kw)
