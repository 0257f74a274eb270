"""The suite runs from any checkout: no test module imports another, only the conformance test
looks beside the checkout, and a test that needs torch says so with ``pytest.importorskip``."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MODULES = sorted(TESTS.glob("test_*.py"))


def _tree(p: Path) -> ast.Module:
    return ast.parse(p.read_text(encoding="utf-8"), str(p))


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
    return out


def test_no_test_module_imports_another():
    bad = [f"{p.name}:{line}: imports {m}" for p in MODULES for line, m in _imports(_tree(p))
           if m.split(".")[0].startswith("test_") or m.startswith("tests.test_")]
    assert not bad, "shared helpers belong in tests/support/:\n" + "\n".join(bad)


SIBLING = "shared"  # the folder beside the checkout that holds the spec's own cases


def test_only_the_conformance_test_reads_beside_the_checkout():
    """No test names the sibling folder (a path into it, or its bare name) but the conformance
    test, which skips when the folder is absent; this test only looks for the name."""
    needle = "/".join(("..", SIBLING))
    bad = []
    for p in MODULES:
        if p.name in ("test_conformance.py", Path(__file__).name):
            continue
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    needle in node.value or node.value == SIBLING):
                bad.append(f"{p.name}:{node.lineno}: {node.value!r}")
    assert not bad, "tests read files outside the checkout; vendor them into tests/data:\n" + "\n".join(bad)


def test_torch_is_imported_only_after_importorskip():
    """A module that imports torch (or parc.runtime's torch modules) calls importorskip first, so
    the suite skips, not errors, where torch is not installed."""
    bad = []
    for p in MODULES:
        text = p.read_text(encoding="utf-8")
        tree = _tree(p)
        for line, m in _imports(tree):
            if m.split(".")[0] == "torch":
                skip_at = [i for i, ln in enumerate(text.splitlines(), 1) if 'importorskip("torch"' in ln]
                if not skip_at or min(skip_at) > line and not _inside_function(tree, line):
                    bad.append(f"{p.name}:{line}: imports {m} before pytest.importorskip('torch')")
    assert not bad, "\n".join(bad)


def _inside_function(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` lies in a function that itself calls importorskip("torch") before it."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.lineno <= line <= fn.end_lineno:
            for call in ast.walk(fn):
                if (isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "importorskip"
                        and call.lineno < line):
                    return True
    return False


def test_benchmarks_import_what_exists():
    """Every `from parc... import name` in bench/ (module or function level) names a module and
    attributes that exist: a benchmark is not run by the suite, so a moved module would break it
    silently."""
    import importlib

    bad = []
    for p in sorted((Path(__file__).resolve().parent.parent / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("parc"):
                try:
                    mod = importlib.import_module(node.module)
                except ImportError as e:
                    if getattr(e, "name", None) not in ("torch", "cairosvg"):   # optional extras
                        bad.append(f"{p.name}:{node.lineno}: {node.module} ({e})")
                    continue
                for alias in node.names:
                    if not hasattr(mod, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ImportError:
                            bad.append(f"{p.name}:{node.lineno}: {node.module} has no {alias.name}")
    assert not bad, "benchmarks import what does not exist:\n" + "\n".join(bad)
