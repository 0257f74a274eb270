"""The programs that run another command (``srun``, ``docker run``, ``sudo``, ``env``, ``nsys
profile``, ...): their own options set aside, the command inside them found (launchers.toml)."""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

from parc.importer.sh_values import Arg

HERE = Path(__file__).resolve().parent
_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@lru_cache(maxsize=1)
def data() -> dict:
    with open(HERE / "launchers.toml", "rb") as f:
        return tomllib.load(f)


def per_node() -> tuple[str, ...]:
    return tuple(data()["per_node"])


def program(a: Arg) -> str | None:
    """A command word's program name (its last path component), None where unknown."""
    v = a.value
    return v.rsplit("/", 1)[-1] if v else None


def unwrap(args: list[Arg]) -> tuple[list[Arg], dict] | None:
    """(the command inside, what the wrapper says: ``{"name", "options", "env"}``) when ``args``
    runs a wrapper of launchers.toml; None otherwise."""
    name = program(args[0]) if args else None
    spec = data()["wrappers"].get(name or "")
    if spec is None:
        return None
    rest = args[1:]
    if "subcommand" in spec:
        if not rest or rest[0].value != spec["subcommand"]:
            return None
        rest = rest[1:]
    options: dict = {}
    env: dict = {}
    valued = set(spec.get("value_options", []))
    i = 0
    while i < len(rest):
        w = rest[i].value
        head = rest[i].text[0] if rest[i].text and isinstance(rest[i].text[0], str) else ""
        if w is None and head.startswith("-") and "=" in head:     # --nodelist=$NODE: the value unknown
            options[head.partition("=")[0]] = rest[i].shown.partition("=")[2]
            i += 1
            continue
        if name == "env" and w is not None and _ENV_WORD.match(w):
            k, _, v = w.partition("=")
            env[k] = _after_eq(rest[i])
            i += 1
            continue
        if w is None or not w.startswith("-") or w == "-":
            break
        if w == "--":
            i += 1
            break
        key, eq, val = w.partition("=")
        if eq:
            options[key] = val
            i += 1
        elif key in valued and i + 1 < len(rest):
            options[key] = rest[i + 1].value if rest[i + 1].value is not None else rest[i + 1].shown
            if name == "docker" and key in ("-e", "--env"):
                k, _, v = options[key].partition("=")
                env[k] = _after_eq(rest[i + 1])
            i += 2
        else:
            options[key] = True
            i += 1
    if spec.get("first_value") and i < len(rest):   # taskset MASK cmd, timeout DURATION cmd
        i += 1
    if spec.get("image") and i < len(rest):          # docker run IMAGE cmd
        options["image"] = rest[i].shown
        i += 1
    return rest[i:], {"name": name, "options": options, "env": env}


def _after_eq(a: Arg):
    """The value part of a NAME=VALUE word, as text (unknown parts kept)."""
    out, seen = [], False
    for p in a.text:
        if not seen and isinstance(p, str) and "=" in p:
            out.append(p.split("=", 1)[1])
            seen = True
        elif seen:
            out.append(p)
    return tuple(x for x in out if x != "")
