"""The package reads as the pipeline: every import under parc/ points to an earlier layer.

    language -> model -> resolve -> topo -> cost -> rules -> targets -> report -> planner | lint | runtime | calibrate | doctor | lsp -> cli

An import may point into its own layer or an earlier one, never a later one. Foundations --
``parc/__init__.py``, ``parc/words.py``, ``parc/language/diagnostics.py`` -- may be imported by
anyone and import only one another (a new top-level module, such as a shared number formatter,
is a foundation too). ``parc/api.py`` is the facade: it may import any layer but cli. planner, lint, runtime,
calibrate, doctor and lsp are siblings that do not import one another (cli hands lsp the lint function); runtime imports only model/, cost/ and foundations;
only parc/runtime imports torch. The imports read are the module-level ones, the ones inside
functions, and ``importlib.import_module("parc....")`` with a literal (or f-string) name.
docs/architecture.md explains the rule; this file is its enforcement.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
PARC = ROOT / "parc"

ORDER = ("language", "model", "resolve", "topo", "cost", "rules", "targets", "report",
         "planner|lint|runtime|calibrate|doctor|lsp|importer", "cli")
RANK = {pkg: i for i, group in enumerate(ORDER) for pkg in group.split("|")}
SIBLINGS = {"planner", "lint", "runtime", "calibrate", "doctor", "lsp", "importer"}
FACADE = "parc.api"
RUNTIME_MAY_IMPORT = {"model", "cost", "runtime"}


def _foundations() -> set[str]:
    """parc itself, parc/language/diagnostics.py and every top-level module but the facade and
    __main__ (parc/words.py today; a shared formatter or file helper placed there joins them)."""
    top = {f"parc.{p.stem}" for p in PARC.glob("*.py") if p.stem not in ("__init__", "api", "__main__")}
    return {"parc", "parc.language.diagnostics"} | top


FOUNDATIONS = _foundations()


@dataclass(frozen=True)
class Import:
    file: str      # path relative to the repository root
    line: int
    importer: str  # dotted module name of the file
    target: str    # dotted name imported (a parc module, or the top-level name of another package)

    def __str__(self):
        return f"{self.file}:{self.line}: {self.importer} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_parc_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal_module(call: ast.Call) -> str | None:
    """The module named by ``importlib.import_module(...)`` / ``__import__(...)`` when it is a literal
    or an f-string (its constant head, e.g. ``parc.targets.`` for ``f"parc.targets.{name}"``)."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".")
    return None


def imports_of(path: Path, importer: str | None = None) -> list[Import]:
    """Every import in one file, at any depth, as absolute dotted names (``importer`` names the
    module when the file is not under parc/)."""
    importer = importer or module_name(path)
    is_package = path.name == "__init__.py"
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, importer, is_package)
            # `from parc.rules import mesh` imports the module parc.rules.mesh
            subs = [f"{base}.{a.name}" for a in node.names if _is_parc_module(f"{base}.{a.name}")]
            names = subs or [base]
        elif isinstance(node, ast.Call):
            lit = _literal_module(node)
            names = [lit] if lit else []
        out += [Import(rel, node.lineno, importer, n) for n in names if n]
    return out


def all_imports() -> list[Import]:
    return [i for p in sorted(PARC.rglob("*.py")) for i in imports_of(p)]


def layer(module: str) -> str | None:
    """The layer (top package under parc) of a module; None for foundations, api and parc/__main__."""
    if module in FOUNDATIONS or module == FACADE:
        return None
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in RANK:
        return parts[1]
    if module == "parc.__main__":
        return "cli"
    return None


def why_wrong(imp: Import) -> str | None:
    """Why one import breaks the dependency rule, or None when it keeps it."""
    top = imp.target.split(".")[0]
    src = layer(imp.importer) or ("api" if imp.importer == FACADE else None)
    if top == "torch":
        return None if src == "runtime" else "only parc/runtime imports torch"
    if top != "parc" or imp.target in FOUNDATIONS:
        return None
    if imp.importer in FOUNDATIONS:
        return "a foundation imports only foundations"
    if imp.target == FACADE or imp.target.startswith(FACADE + "."):
        if src == "runtime":
            return "runtime imports only model/, cost/ and foundations, not the facade"
        return None if src in ("cli", "planner", "lint", "api") else f"{src} may not import the facade parc.api"
    dst = layer(imp.target)
    if dst is None or src is None or src == dst:
        return None
    if src == "api":
        return "the facade imports anything but cli" if dst == "cli" else None
    if src == "runtime" and dst not in RUNTIME_MAY_IMPORT:
        return f"runtime imports only model/, cost/ and foundations, not {dst}/"
    if src in SIBLINGS and dst in SIBLINGS:
        return f"{src} and {dst} are siblings and do not import each other"
    if RANK[dst] > RANK[src]:
        return f"{src} comes before {dst} in the pipeline"
    return None


def violations() -> list[str]:
    return [f"{imp}  ({why})" for imp in all_imports() if (why := why_wrong(imp))]


def package_cycles() -> list[str]:
    """Cycles between the layers and the facade, each as `a -> b -> a`."""
    edges: dict[str, set[str]] = {}
    for imp in all_imports():
        a = layer(imp.importer) or ("api" if imp.importer == FACADE else None)
        b = layer(imp.target) or ("api" if imp.target == FACADE else None)
        if a and b and a != b and imp.target.startswith("parc"):
            edges.setdefault(a, set()).add(b)
    return sorted(f"{a} -> {b} -> {a}" for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))


def test_every_import_points_down_the_pipeline():
    bad = violations()
    assert not bad, f"{len(bad)} imports against the pipeline order {' -> '.join(ORDER)}:\n" + "\n".join(bad)


def test_no_two_layers_import_each_other():
    cycles = package_cycles()
    assert not cycles, "layers that import each other:\n" + "\n".join(cycles)


def test_the_reader_sees_every_kind_of_import(tmp_path):
    """The checker itself: module-level, function-level, relative, `from pkg import module` and
    importlib forms are all read, with their lines."""
    mod = tmp_path / "probe.py"
    mod.write_text("import os\nfrom . import mesh\n"
                   "def f():\n    from parc.targets import base\n    import torch\n"
                   "import importlib\nimportlib.import_module('parc.cli.check')\n"
                   "importlib.import_module(f'parc.targets.{os.name}')\n", encoding="utf-8")
    got = {(i.line, i.target) for i in imports_of(mod, "parc.rules.probe")}
    assert {(2, "parc.rules.mesh"), (4, "parc.targets.base"), (5, "torch"), (7, "parc.cli.check"),
            (8, "parc.targets")} <= got
    bad = {i.target: why_wrong(i) for i in [Import("x", n, "parc.rules.probe", t) for n, t in got]}
    assert bad["parc.rules.mesh"] is None and bad["os"] is None
    assert "targets" in bad["parc.targets.base"] and "torch" in bad["torch"] and "cli" in bad["parc.cli.check"]


def test_the_rule_in_examples():
    def why(importer, target):
        return why_wrong(Import("x", 1, importer, target))

    assert why("parc.rules.mesh", "parc.model.plan") is None
    assert why("parc.rules.mesh", "parc.words") is None
    assert why("parc.language.diagnostics", "parc.resolve.reader") is not None
    assert why("parc.language.parser", "parc.language.diagnostics") is None
    assert why("parc.model.plan", "parc.targets") is not None
    assert why("parc.planner.emit", "parc.cli.plan") is not None
    assert why("parc.planner.search", "parc.lint.engine") is not None
    assert why("parc.runtime.engine", "parc.rules.mesh") is not None
    assert why("parc.runtime.engine", "parc.cost.estimate") is None
    assert why("parc.api", "parc.planner.search") is None
    assert why("parc.api", "parc.cli.main") is not None
    assert why("parc.cli.run", "torch") is not None
    assert why("parc.runtime.parallel", "torch") is None


def test_nothing_outside_runtime_loads_torch():
    """Importing every module outside parc/runtime leaves torch unloaded (torch is paid for only
    when a runtime command runs)."""
    import importlib.util

    protocol = importlib.util.find_spec("pygls") is not None  # parc/lsp's server needs the `lsp` extra
    mods = sorted(module_name(p) for p in PARC.rglob("*.py")
                  if "runtime" not in p.relative_to(PARC).parts and p.name != "__main__.py"
                  and (protocol or p.relative_to(PARC).parts[:1] != ("lsp",) or p.stem in ("analysis", "scan")))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "print(loaded[:5])\nsys.exit(1 if loaded else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_parc_check_and_explain_leave_numpy_unloaded():
    """Checking and explaining one plan runs the cost kernels on plain numbers (parc.cost.xp):
    numpy, which takes longer to import than the rest of the command, is the planner's alone."""
    code = ("import sys\nfrom parc.cli.main import main\n"
            "for argv in (['check', 'examples/llama3-70b-train.par'], ['explain', 'examples/mixtral-8x7b-ep-train.par'],\n"
            "             ['check', 'examples/llama3-405b-serve-2node.par']):\n"
            "    rc = main(argv)\n    assert rc in (0, 1), (argv, rc)\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pygls', 'lsprotocol'))\n"
            "print(loaded[:5])\nsys.exit(1 if loaded else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


# What `parc import` of one launch file must not load: the language's parser (the spec is laid
# out without it, parc/importer/draft.py), the expression evaluator, the compile targets' builders,
# the heavy libraries, and the readers of the formats and engines the file is not.
IMPORT_NEVER = ("lark", "parc.language.parser", "parc.language.fmt", "parc.language.syntax", "parc.resolve.evaluate",
                "parc.targets", "parc.rules", "parc.cost", "numpy", "torch", "jinja2", "pydantic")
ENGINE_READERS = ("vllm", "sglang", "megatron", "megatron_deepspeed", "torchtitan", "deepspeed", "torchrun")
FORMAT_READERS = ("yamlfiles", "dynamo", "kserve", "rayserve", "trainjob", "orchestrated")


@pytest.mark.parametrize("path, engine, readers", [
    ("tests/wild/sglang-pd-deepseek-v3-4node/serve.sh", "sglang", ()),
    ("tests/wild/megatron-gpt3-175b/train_gpt3_175b_distributed.sh", "megatron", ()),
    ("tests/wild/lws-vllm-llama3.1-405b/lws.yaml", "vllm", ("yamlfiles",)),
])
def test_parc_import_of_one_file_loads_only_what_it_reads(path, engine, readers, tmp_path):
    """`parc import` is within parc's start-up and a little more (bench/bench_import.py): it
    loads its own engine's reader and its format's, and nothing of the list above, whose
    loading took longer than the import itself."""
    never = (*IMPORT_NEVER, *(f"parc.importer.engines.{e}" for e in ENGINE_READERS if e != engine),
             *(f"parc.importer.{r}" for r in FORMAT_READERS if r not in readers))
    code = ("import sys\nfrom parc.cli.main import main\n"
            f"rc = main(['import', {path!r}, '-o', {str(tmp_path / 'o.par')!r}])\n"
            "assert rc == 0, rc\n"
            f"never = {never!r}\n"
            "loaded = sorted(m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in never))\n"
            f"assert 'parc.importer.engines.{engine}' in sys.modules\n"
            "print(loaded)\nsys.exit(1 if loaded else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
