"""The one Jinja2 environment every backend renders with.

Every ``{{ ... }}`` in a template must go through a quoting filter; the environment's
``finalize`` refuses any other value, so an unquoted interpolation is a bug caught the first
time the template renders, never a shell injection:

* ``q``: one shell word, ``shlex.quote`` semantics (a :class:`Var` becomes ``"${name}"``, a
  :class:`Cat` the concatenation of its quoted parts);
* ``qjoin``: a list of shell words joined by spaces, each quoted as ``q`` does;
* ``c``: text for a ``#`` comment, with control characters escaped so it stays on its line;
* ``y``: a YAML scalar (a JSON string, which YAML reads as a double-quoted scalar; numbers and
  booleans as themselves);
* ``yblock(n)``: a multi-line text as the body of a YAML literal block, indented ``n`` spaces.
"""
from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

from parc.targets.base import Cat, Var

HERE = Path(__file__).resolve().parent


class Quoted(str):
    """Text that a quoting filter produced: the only thing a template may interpolate."""

    __slots__ = ()


def shell_word(v) -> str:
    if isinstance(v, Cat):
        return "".join(shell_word(p) for p in v.parts)
    if isinstance(v, Var):
        return '"${' + v.name + '}"'
    if isinstance(v, bool):
        v = "true" if v else "false"
    return shlex.quote(str(v))


def q(v) -> Quoted:
    return Quoted(shell_word(v))


def qjoin(vs) -> Quoted:
    return Quoted(" ".join(shell_word(v) for v in vs))


def c(v) -> Quoted:
    s = json.dumps(str(v), ensure_ascii=False)[1:-1]
    return Quoted("".join(ch if ch.isprintable() else "\\u%04x" % ord(ch) for ch in s))


def _yaml_escape(ch: str) -> str:
    n = ord(ch)
    if 0xD800 <= n <= 0xDFFF:
        raise ValueError(f"a lone surrogate (U+{n:04X}) cannot be written as YAML")
    return f"\\U{n:08X}" if n > 0xFFFF else f"\\u{n:04X}"


def y(v) -> Quoted:
    """A YAML double-quoted scalar: JSON's escapes, every character outside printable ASCII as
    ``\\uXXXX`` or, beyond the BMP, ``\\UXXXXXXXX`` (JSON's surrogate pairs would be read back
    by YAML as two lone surrogates)."""
    if isinstance(v, bool):
        return Quoted("true" if v else "false")
    if isinstance(v, int):
        return Quoted(str(v))
    s = json.dumps(str(v), ensure_ascii=False)
    return Quoted("".join(ch if " " <= ch <= "~" else _yaml_escape(ch) for ch in s))


def yblock(v, n: int) -> Quoted:
    text = str(v)
    if any((not ch.isprintable() and ch != "\n") or ord(ch) > 127 for ch in text):
        raise ValueError("a YAML literal block takes printable ASCII lines only")
    pad = " " * n
    return Quoted("\n".join(pad + line if line else line for line in text.rstrip("\n").split("\n")))


def yaml_lines(v, indent: int = 0) -> list[str]:
    """``v`` (dicts, lists, scalars) as block YAML lines, every key and scalar quoted (:func:`y`;
    a float as Python writes it): the files a target writes as data rather than from a template."""
    pad = " " * indent
    out = []
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out += [f"{pad}{y(k)}:"] + yaml_lines(x, indent + 2)
            else:
                out.append(f"{pad}{y(k)}: {_scalar(x)}")
    else:
        for x in v:
            inner = yaml_lines(x, indent + 2) if isinstance(x, (dict, list)) and x else [f"{pad}  {_scalar(x)}"]
            out.append(f"{pad}- {inner[0].lstrip()}")
            out += inner[1:]
    return out


def _scalar(x) -> str:
    if isinstance(x, (dict, list)):
        return "{}" if isinstance(x, dict) else "[]"
    if isinstance(x, float):
        return repr(x)
    return str(y(x))


def _finalize(v):
    if isinstance(v, Quoted):
        return v
    raise TypeError(f"template interpolates {v!r} without a quoting filter (q, qjoin, c, y, yblock)")


@lru_cache(maxsize=1)
def environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters.update(q=q, qjoin=qjoin, c=c, y=y, yblock=yblock)
    return env


def render(template: str, **ctx) -> str:
    """Render ``template`` (a path under parc/targets, like ``torchrun/launch.sh.j2``)."""
    return environment().get_template(template).render(**ctx)
