"""The targets as help and docs name them, from their folders' data (``target.toml``:
``description``, ``modes``, ``[keys]``, ``[versions]``; ``parc/targets/judges.toml``: what judges
each), so that ``parc compile --help``, the README's command table, docs/language.md's table of
target keys and docs/targets.md's launcher matrix list every target there is."""
from __future__ import annotations

import textwrap


def target_names(quote: str = "`") -> str:
    """Every target, ``torchrun``, ..., or ``json``: as the README's command table lists them."""
    from parc.model.targets import names

    shown = [f"{quote}{n}{quote}" for n in names()]
    return ", ".join(shown[:-1]) + " or " + shown[-1]


def targets_help(width: int = 100) -> str:
    """``parc compile --help``'s list: each target, the modes it takes and what it writes."""
    from parc.model.targets import names, spec

    out = ["targets (--target T):"]
    for n in names():
        s = spec(n) or {}
        modes = "/".join(s.get("modes", []))
        head = f"  {n:<11} "
        text = f"({modes}) {s.get('description', '')}".strip()
        lines = textwrap.wrap(text, width - len(head))
        out += [head + lines[0]] + [" " * len(head) + ln for ln in lines[1:]]
    return "\n".join(out)


def _key(name: str, d: dict) -> str:
    choices = d.get("choices") if d.get("kind") == "enum" else None
    return f"`{name}`" + (f" ({', '.join(f'`{c}`' for c in choices)})" if choices else "")


def keys_table() -> str:
    """docs/language.md's table: each target, the modes it takes and the keys its block takes
    (an enum key with its choices; `version`, which every target takes, left to the text)."""
    from parc.model.targets import keys, names, spec

    rows = ["| target | modes | keys |", "|---|---|---|"]
    for n in names():
        ks = [_key(k, d) for k, d in keys(n).items() if k != "version"]
        modes = ", ".join((spec(n) or {}).get("modes", []))
        rows.append(f"| `{n}` | {modes} | {', '.join(ks) or '(none)'} |")
    return "\n".join(rows)


def _releases(name: str) -> str:
    """A target's releases as target.toml's [versions] lists them: ``0.26 – 0.33`` (oldest to
    newest), one, or a dash for a target without [versions]."""
    from parc.model.targets import spec

    known = ((spec(name) or {}).get("versions") or {}).get("known") or []
    return "–" if not known else known[0] if len(known) == 1 else f"{known[0]} – {known[-1]}"


def launchers_table() -> str:
    """docs/targets.md's launcher matrix: each target with each engine it can run (a wrapper's
    ``engine`` choices; an engine runs itself), the releases of both, and what judges the output
    in the tests (parc/targets/judges.toml): the target's own judge, then the engine's."""
    import tomllib
    from pathlib import Path

    from parc.model.targets import names, spec

    with open(Path(__file__).resolve().parent.parent / "targets" / "judges.toml", "rb") as f:
        judged = tomllib.load(f)
    rows = ["| target | engine | releases | its output judged by | the engine's launch judged by |",
            "|---|---|---|---|---|"]
    for n in names():
        s = spec(n) or {}
        by = judged.get(n, {}).get("by", "not judged")
        if not s.get("engine"):
            rows.append(f"| `{n}` | – | {_releases(n)} | {by} | – |")
            continue
        for e in s["keys"]["engine"]["choices"]:
            rows.append(f"| `{n}` | `{e}` | {n} {_releases(n)}; {e} {_releases(e)} | {by} | as `{e}`'s own |")
    return "\n".join(rows)
