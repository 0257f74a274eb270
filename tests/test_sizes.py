"""Sizes a reader can hold: no module under parc/ over 600 lines, no function over 80 lines
unless its docstring says why.

The reason is a docstring line that starts with ``Long because`` (after indentation), e.g.::

    def render(...):
        \"\"\"The explain page.

        Long because: one template context, built field by field in the order the page reads.
        \"\"\"

docs/architecture.md states the limits; this file enforces them.
"""
from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PARC = ROOT / "parc"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MARKER = "Long because"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_modules() -> list[str]:
    return [f"{p.relative_to(ROOT).as_posix()}: {n} lines"
            for p in sorted(PARC.rglob("*.py")) if (n := _lines(p)) > MAX_MODULE_LINES]


def has_reason(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    doc = ast.get_docstring(fn) or ""
    return any(line.strip().startswith(MARKER) for line in doc.splitlines())


def long_functions_in(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES and not has_reason(node):
                out.append(f"{name}:{node.lineno}: {node.name} is {n} lines")
    return out


def long_functions() -> list[str]:
    return [f for p in sorted(PARC.rglob("*.py"))
            for f in long_functions_in(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]


def test_no_module_over_600_lines():
    bad = long_modules()
    assert not bad, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(bad)


def test_no_function_over_80_lines_without_a_reason():
    bad = long_functions()
    assert not bad, (f"functions over {MAX_FUNCTION_LINES} lines whose docstring has no line starting "
                     f"with {MARKER!r}:\n" + "\n".join(bad))


def test_the_marker_excuses_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    plain = f'def f():\n    """Doc."""\n{body}'
    excused = f'def f():\n    """Doc.\n\n    {MARKER}: one table, row by row.\n    """\n{body}'
    mentioned = f'def f():\n    """Doc that says {MARKER} mid-line."""\n{body}'
    short = 'def f():\n    """Doc."""\n    return 1\n'
    assert long_functions_in(plain, "m.py") == [f"m.py:1: f is {MAX_FUNCTION_LINES + 2} lines"]
    assert long_functions_in(excused, "m.py") == []
    assert long_functions_in(mentioned, "m.py") != []
    assert long_functions_in(short, "m.py") == []
