"""Rules about the release a target block pins (``version``): options in ``extra_args`` that the
pinned release spells otherwise, and degrees whose option the pinned release does not have
(P665), read from each target's ``flags.toml``. The releases a
rule holds for are data (``since``/``until`` in rules.toml), which the registry applies; this
module holds only the checks that read a versioned fact from a target's flags table."""
from __future__ import annotations

from parc.model.targets import display, flag_table, holds, names, span_text, spec
from parc.rules import rule
from parc.targets.base import option_lists, settings


def _spellings(target: str, version: str) -> dict[str, tuple[dict, str | None]]:
    """Every spelling in target's flags.toml that ``version`` does not know -> (its entry, the
    spelling ``version`` uses for the same option, None if it has none)."""
    out = {}
    for entry in flag_table(target).values():
        known = [e["name"] for e in entry["names"] if holds(target, version, e.get("since"), e.get("until"))]
        for e in entry["names"]:
            if e["name"] not in known:
                out[e["name"]] = (e, known[0] if known else None)
    return out


def _versioned(target: str) -> bool:
    """Whether some option of target's flags.toml is spelled differently by some release."""
    return any("since" in e or "until" in e for entry in flag_table(target).values() for e in entry["names"])


def _mesh_options(plan, target: str, version: str):
    """(mesh key, its degree, the flags.toml entry) of each degree the plan sets above 1 whose
    option (an entry keyed ``mesh.X`` that no importer rule reads: the option parc writes for it
    alone) has no spelling in ``version``."""
    for entry in flag_table(target).values():
        key = entry.get("key")
        if not isinstance(key, str) or not key.startswith("mesh.") or "read" in entry or entry.get("emitted", True) is False:
            continue
        degree = getattr(plan.mesh, key.split(".", 1)[1], 1)
        own = [e for e in entry["names"] if not e.get("alias")]
        if isinstance(degree, int) and degree > 1 and not any(holds(target, version, e.get("since"), e.get("until"))
                                                                for e in own):
            yield key.split(".", 1)[1], degree, own[0]


def _late_choices(plan, target: str, version: str):
    """(key, value, the release that first takes it) of each setting of the target block whose
    choice the pinned release's parser does not take yet (target.toml [keys] ``choices_since``)."""
    s = settings(plan, target)
    for key, d in (spec(target) or {}).get("keys", {}).items():
        value = s.get(key)
        since = (d.get("choices_since") or {}).get(value) if isinstance(value, str) else None
        if since and not holds(target, version, since, None):
            yield key, s[key], since


@rule("P665", "target-option-not-in-release", targets=tuple(t for t in names() if _versioned(t)))
def option_not_in_release(plan, c):
    if c.version is None:
        return
    for key, value, since in _late_choices(plan, c.target, c.version):
        c.report(c.at(f"target.{c.target}.{key}", f"target.{c.target}"),
                 f"{c.release} has no {key} `{value}`: its parser takes it from {display(c.target)} {since} on",
                 help=f"choose another {key}, or pin `version = \"{since}\"` or later in `target {c.target}`")
    for name, degree, e in _mesh_options(plan, c.target, c.version):
        c.report(c.at(f"mesh.{name}", "mesh"),
                 f"{c.release} has no option for {name} = {degree}: `{e['name']}` is in "
                 f"{span_text(c.target, e.get('since'), e.get('until'))} only",
                 help=f"remove `{name}`, or pin the release it belongs to with `version` in `target {c.target}`")
    unknown = _spellings(c.target, c.version)
    for key in option_lists(c.target):
        for i, arg in enumerate(settings(plan, c.target).get(key) or []):
            word = str(arg).split("=", 1)[0]
            if word not in unknown:
                continue
            e, other = unknown[word]
            holds_for = span_text(c.target, e.get("since"), e.get("until"))
            msg = (f"{c.release} has no option `{word}` ({holds_for} only): "
                   f"{'it spells it `' + other + '`' if other else 'it has no such option'}")
            c.report(c.at(f"target.{c.target}.{key}.value.{i}", f"target.{c.target}.{key}"), msg,
                     help=(f"write `{other}`" if other else f"remove `{word}`")
                     + f", or pin the release it belongs to with `version` in `target {c.target}`")
