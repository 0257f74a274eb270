"""The targets as help and docs name them, from their folders' data (``target.toml``:
``description``, ``modes``, ``[keys]``), so that ``parc compile --help``, the README's command
table and docs/language.md's table of target keys list every target there is."""
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
