"""The options of `python -m sglang.launch_server` that a SGLang release accepts, read from its
source without importing it (a release older than the judge environment's cannot be installed
beside it): how parc/targets/sglang/flags.toml is checked against the PyPI wheels of the releases
target.toml knows.

    python tests/judges/sglang_release_options.py sglang-0.5.16-...whl [...]

prints, for each wheel (or site-packages folder holding ``sglang/``), the spellings of every
flags.toml entry that release accepts and those it does not. The options are the string literals
``--x`` given to ``add_argument`` (releases up to 0.5.15, whose parser is written out in
sglang/srt/server_args.py), the ``aliases`` of an ``Arg``, and ``--field-name`` for each annotated
field of the dataclasses and msgspec Structs the parser is generated from (0.5.16 and later:
sglang/srt/arg_groups/fields/*.py, arg_utils.py ``_field_to_cli_name``). It reads more than the
parser takes (a field the parser skips), never less; tests/test_sglang_judge.py holds it to the
parser of the judge environment's release on every spelling of flags.toml."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
import zipfile
from pathlib import Path

OPTION = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
FLAGS = Path(__file__).resolve().parents[2] / "parc" / "targets" / "sglang" / "flags.toml"


def _wanted(name: str) -> bool:
    return name == "sglang/srt/server_args.py" or (name.startswith("sglang/srt/arg_groups/") and name.endswith(".py"))


def sources(where: str):
    """The parser's source files of a wheel or of a folder holding the ``sglang`` package."""
    if where.endswith(".whl"):
        with zipfile.ZipFile(where) as z:
            for n in z.namelist():
                if _wanted(n):
                    yield z.read(n).decode()
        return
    root = Path(where)
    for f in sorted((root / "sglang" / "srt").rglob("*.py")):
        if _wanted(f.relative_to(root).as_posix()):
            yield f.read_text()


def _literals(nodes) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str) and OPTION.match(n.value)}


def options(where: str) -> set[str]:
    out: set[str] = set()
    for text in sources(where):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if fn == "add_argument":
                    out |= _literals(node.args)
                for kw in node.keywords:
                    if kw.arg == "aliases" and isinstance(kw.value, (ast.List, ast.Tuple)):
                        out |= _literals(kw.value.elts)
            elif isinstance(node, ast.ClassDef) and (any("dataclass" in ast.unparse(d) for d in node.decorator_list)
                                                     or any("Struct" in ast.unparse(b) for b in node.bases)):
                out |= {"--" + s.target.id.replace("_", "-") for s in node.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and not s.target.id.startswith("_")}
    return out


def spellings() -> list[str]:
    """Every spelling flags.toml names."""
    with open(FLAGS, "rb") as f:
        table = tomllib.load(f)
    return sorted({n["name"] for e in table.values() for n in e["names"]})


if __name__ == "__main__":
    for where in sys.argv[1:]:
        have = options(where)
        names = spellings()
        print(where)
        print("  accepts:", " ".join(n for n in names if n in have))
        print("  lacks:  ", " ".join(n for n in names if n not in have))
