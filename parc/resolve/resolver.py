"""Syntax tree → resolved plan.

Imports are merged (cycles and escapes from the root refused), presets expanded and then
overridden, references and arithmetic evaluated exactly, units converted to base units,
``auto`` resolved and derived fields filled. Every P0 problem of a file is reported in one
run; a value that failed is poisoned, so nothing computed from it reports again.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

from parc.model import fields as SC
from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, ParcError, Related, Span
from parc.language.parser import parse_text
from parc.resolve.reader import ReadFailure, diagnostic as read_diagnostic, is_within, read_spec
from parc.model.plan import (GPU, Cluster, Link, Mesh, Model, ModulePlacement, Placement, Plan, Schedule,
                   Serve, Target, Train)
from parc.words import count

DATA = Path(__file__).resolve().parent.parent / "model" / "data"
MAX_WORLD = 2**21  # GPUs; the rank map and the planner are sized for this


@lru_cache(maxsize=None)
def presets(kind: str) -> dict[str, dict]:
    """The built-in presets of ``kind`` (``models`` or ``gpus``) from the data folder."""
    import tomllib

    with open(DATA / f"{kind}.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=64)
def target_spec(name: str) -> dict | None:
    """A backend's declared keys (``parc/targets/<name>/target.toml``), or None if unknown."""
    import tomllib

    if name not in _known_targets():  # an unknown name touches no file
        return None
    path = Path(__file__).resolve().parent.parent / "targets" / name / "target.toml"
    with open(path, "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def _known_targets() -> tuple[str, ...]:
    base = Path(__file__).resolve().parent.parent / "targets"
    return tuple(sorted(p.parent.name for p in base.glob("*/target.toml")))


def known_targets() -> list[str]:
    """The targets parc can emit for (the folder is read once)."""
    return list(_known_targets())


@lru_cache(maxsize=1024)
def _near_target(name: str) -> str | None:
    return did_you_mean(name, _known_targets())


class _Poison(Exception):
    """A value that already failed (and was reported): uses of it stay silent."""


def did_you_mean(word: str, options) -> str | None:
    options = list(options)
    alias = SC.ALIASES.get(word)
    if alias and alias in options:
        return alias
    m = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return m[0] if m else None


def find_root(spec: Path, root: str | os.PathLike | None) -> Path:
    """--root, else the top of the git checkout holding the spec, else the spec's folder."""
    if root is not None:
        return Path(root).resolve()
    d = Path(os.path.abspath(spec)).parent.resolve()  # where the name is, not where a link leads
    for p in (d, *d.parents):
        if (p / ".git").exists():
            return p
    return d


def spec_within(path: str | os.PathLike, root: Path) -> Path | None:
    """The folder a spec named by the user must stay in through links: ``root``, when the
    spec's own name lies inside it (a spec named outside the root is read, but not through a
    link that leaves it)."""
    try:
        named = Path(os.path.abspath(path)).parent.resolve() / Path(path).name
    except (OSError, RuntimeError, ValueError):
        return None
    return root if _is_within(named, root) else None


def read_spec_file(path: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """The text of a spec named by the user, read as ``parc check`` reads it (regular files of
    at most 1 MiB, never through a link out of the root); ReadFailure otherwise."""
    return read_spec(path, within=spec_within(path, find_root(Path(path), root)))


# ------------------------------------------------------------------------------ merged blocks

@dataclass
class _Block:
    kind: str
    label: str | None
    span: Span
    label_span: Span | None
    assigns: dict[str, S.Assign] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    rules: list[S.OnRule] = field(default_factory=list)
    modules: list[S.Assign] = field(default_factory=list)
    children: dict[str, "_Block"] = field(default_factory=dict)


@dataclass
class _Frame:
    """A file being loaded: its statements not yet walked and the blocks it defines itself."""

    path: Path
    items: Any
    stack: tuple[Path, ...]
    local: list = field(default_factory=list)


MAX_IMPORT_DEPTH = 1024  # files in one chain of `use`
MAX_USE_PATH = 255  # characters in the path of one `use`


def _bad_import_path(path: str) -> tuple[str, str] | None:
    """Why a `use` path cannot name a spec (the message and the fix), or None if it may."""
    if "\0" in path:
        return "the path holds a NUL character", "remove the NUL character (`\\0`) from the path"
    if len(path) > MAX_USE_PATH:
        return (f"the path is {len(path)} characters long; a `use` path may be at most {MAX_USE_PATH}",
                "move the file closer to the spec, or give it a shorter name")
    if not path.endswith(".par"):
        return ("`use` imports .par files", "name the .par file to import, as in `use \"clusters/box.par\"`")
    return None


def _short(path: str) -> str:
    shown = path.replace("\0", "\\0")
    return shown if len(shown) <= 60 else shown[:40] + "..." + shown[-12:]


def _par_names(folder: Path, cache: dict) -> tuple[str, ...]:
    """The .par files of ``folder`` (listed once per resolver)."""
    got = cache.get(folder)
    if got is None:
        try:
            got = tuple(p.name for p in folder.glob("*.par"))
        except OSError:
            got = ()
        cache[folder] = got
    return got


@dataclass
class Resolution:
    plan: Plan | None
    diagnostics: list[Diagnostic]
    sources: dict[str, str]
    # With ``partial``: the blocks (train, serve) whose errors left defaults in the plan, and
    # those errors; the other checks can still judge the plan (see ``load``).
    partial: frozenset = frozenset()
    partial_errors: tuple = ()


class Resolver:
    def __init__(self, root: Path, sources: dict[str, str] | None = None):
        self.root = root
        self.diags: list[Diagnostic] = []
        self.sources: dict[str, str] = {} if sources is None else sources
        self.blocks: dict[str, _Block] = {}
        self.targets: dict[str, _Block] = {}
        self.values: dict[str, Any] = {}
        self.spans: dict[str, Span] = {}
        self.evaluating: list[str] = []
        self.import_failed = False
        self.files: list[str] = []
        self.loaded: set[Path] = set()  # real paths of the files loaded so far
        self.listed: dict[Path, tuple[str, ...]] = {}  # folders listed for did-you-mean

    # -- reporting
    def err(self, code, msg, span, help=None, related=None):
        self.diags.append(Diagnostic(code, ERROR, msg, span, help=help, related=related or []))

    # -- files and imports
    def display(self, path: Path) -> str:
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)

    def load_file(self, path: Path, shown: str, text: str | None = None,
                  stack: tuple[Path, ...] = ()) -> None:
        """Load ``path`` and, depth first, every file it imports, each file once.

        The walk keeps its own stack (no recursion), so the depth of an import chain is limited
        only by ``MAX_IMPORT_DEPTH``. A file already loaded by an earlier ``use`` is not merged
        again: its blocks are in already, and a file imported twice by each of its importers
        would otherwise be read 2**depth times."""
        if text is None:
            try:
                text = read_spec(path, within=self._spec_within(path))
            except ReadFailure as e:
                self.import_failed = True
                self.diags.append(read_diagnostic(e, shown))
                return
        frames: list[_Frame] = []
        frame = self._open(path, shown, text, stack)
        if frame is None:
            return
        frames.append(frame)
        while frames:
            fr = frames[-1]
            child = None
            for st in fr.items:
                if isinstance(st, S.Use):
                    child = self._import(st, fr.path, fr.stack)
                    if child is not None:
                        break
                elif isinstance(st, S.Block):
                    fr.local.append(st)
                elif isinstance(st, S.Assign):
                    self.err("P019", f"`{st.key} = ...` must be inside a block", st.span,
                             help="put it in the block it belongs to, e.g. `model { ... }`")
                elif isinstance(st, S.OnRule):
                    self.err("P019", f"`{st.axis} on {st.link}` must be inside the `placement` block",
                             st.span, help="move it into `placement { ... }`")
            if child is not None:
                frames.append(child)
                continue
            frames.pop()
            seen: dict[tuple, S.Block] = {}
            for b in fr.local:
                self.add_block(b, seen)

    def _spec_within(self, path: Path) -> Path | None:
        return spec_within(path, self.root)

    def _open(self, path: Path, shown: str, text: str, stack: tuple[Path, ...]) -> "_Frame | None":
        self.sources[shown] = text
        self.files.append(shown)
        try:
            real = path.resolve()
        except (OSError, RuntimeError, ValueError):
            real = Path(os.path.abspath(path))
        self.loaded.add(real)  # a file that fails to parse is reported once, too
        try:
            doc = parse_text(text, shown)
        except ParcError as e:
            self.diags.append(e.diagnostic)
            self.diags.extend(e.more)
            self.import_failed = True  # what the file would have defined is unknown
            return None
        return _Frame(path, iter(doc.items), stack + (real,))

    def _import(self, use: S.Use, importer: Path, stack: tuple[Path, ...]) -> "_Frame | None":
        """Check one ``use``; the frame of the file to load next, or None (reported, or loaded
        already)."""
        bad = _bad_import_path(use.path)
        if bad is not None:
            self.import_failed = True
            self.err("P031", f"`use \"{_short(use.path)}\"`: {bad[0]}", use.path_span, help=bad[1])
            return None
        target = importer.parent / use.path
        try:
            resolved = target.resolve()
        except (OSError, RuntimeError, ValueError):
            resolved = Path(os.path.abspath(target))
        if not _is_within(resolved, self.root):
            self.import_failed = True
            self.err("P015", f"import `{use.path}` points outside the project root `{self.display(self.root)}`",
                     use.path_span,
                     help="imports stay inside the root (--root DIR, else the git checkout, "
                          "else the spec's folder); copy the file inside it")
            return None
        if resolved in stack:
            self.import_failed = True
            chain = " -> ".join(self.display(p) for p in (*stack, resolved))
            self.err("P014", f"import cycle: {chain}", use.path_span,
                     help="remove one of the `use` lines so the files no longer import each other")
            return None
        if resolved in self.loaded:
            return None  # imported before: its blocks are merged already
        if len(stack) >= MAX_IMPORT_DEPTH:
            self.import_failed = True
            self.err("P032", f"imports nested more than {MAX_IMPORT_DEPTH} files deep: "
                     f"{self.display(stack[0])} -> ... -> {self.display(stack[-1])} -> {use.path}",
                     use.path_span,
                     help="import the shared files from one spec instead of chaining them; "
                          f"a chain of `use` may hold at most {MAX_IMPORT_DEPTH} files")
            return None
        try:
            exists = resolved.is_file() or resolved.exists()
        except (OSError, ValueError):
            exists = True  # let the reader say what is wrong
        if not exists:
            self.import_failed = True
            near = None
            if resolved.parent.is_dir():
                near = did_you_mean(resolved.name, _par_names(resolved.parent, self.listed))
            self.err("P013", f"imported file `{use.path}` not found", use.path_span,
                     help=f"did you mean `{near}`?" if near else
                     f"paths are relative to {self.display(importer.parent) or '.'}/")
            return None
        shown = self.display(resolved)
        try:
            text = read_spec(resolved, within=self.root)
        except ReadFailure as e:
            self.import_failed = True
            self.diags.append(read_diagnostic(e, use.path, use.path_span, what="imported file "))
            return None
        return self._open(resolved, shown, text, stack)

    def add_block(self, b: S.Block, seen: dict) -> None:
        kind = b.kind
        if kind not in SC.TOP_BLOCKS:
            sug = did_you_mean(kind, SC.TOP_BLOCKS)
            self.err("P006", f"unknown block `{kind}`", b.kind_span,
                     help=(f"did you mean `{sug}`?" if sug else
                           "blocks are: " + ", ".join(SC.TOP_BLOCKS)))
            return
        key = (kind, b.label if kind == "target" else None)
        if key in seen:
            first = seen[key]
            what = f"target {b.label}" if kind == "target" else kind
            self.err("P009", f"block `{what}` is defined twice in this file", b.kind_span,
                     help="merge the two blocks into one",
                     related=[Related(first.kind_span, "first defined here")])
            return
        seen[key] = b
        if kind == "target":
            if b.label is None:
                self.err("P021", "a `target` block needs the target's name, e.g. `target vllm { ... }`",
                         b.kind_span, help="targets: " + ", ".join(known_targets()))
                return
            if target_spec(b.label) is None:
                sug = _near_target(b.label)
                self.err("P020", f"unknown target `{b.label}`", b.label_span,
                         help=(f"did you mean `{sug}`?" if sug else
                               "targets: " + ", ".join(known_targets())))
                return
            merged = self.targets.get(b.label)
            if merged is None:
                merged = self.targets[b.label] = _Block(kind, b.label, b.span, b.label_span)
            self.merge_items(merged, b, kind)
            return
        if b.label is not None and SC.LABELS[kind] == "none":
            self.err("P021", f"block `{kind}` takes no label", b.label_span,
                     help=f"write `{kind} {{ ... }}`")
        merged = self.blocks.get(kind)
        if merged is None:
            merged = self.blocks[kind] = _Block(kind, b.label, b.span, b.label_span)
        else:  # an imported block, overridden key by key by this file
            merged.span = b.span
            if b.label is not None:
                merged.label, merged.label_span = b.label, b.label_span
        self.merge_items(merged, b, kind)

    def merge_items(self, merged: _Block, b: S.Block, kind: str) -> None:
        fields = SC.BLOCKS.get(kind)
        if kind == "target":
            fields = {k: SC.F(v.get("kind", "any")) for k, v in target_spec(b.label)["keys"].items()}
        seen: dict[str, S.Assign] = {}
        seen_rules: dict[str, S.OnRule] = {}
        for st in b.items:
            if isinstance(st, S.Assign):
                if st.quoted and kind == "placement":
                    merged.modules.append(st)
                    continue
                if st.key in seen:
                    self.err("P008", f"`{st.key}` is set twice in `{kind}`", st.key_span,
                             help="keep one of them",
                             related=[Related(seen[st.key].key_span, "first set here")])
                    continue
                seen[st.key] = st
                if st.key not in fields or st.quoted:
                    self.unknown_key(f"target {b.label}" if kind == "target" else kind, st, fields)
                    continue
                merged.assigns[st.key] = st
                if st.key not in merged.order:
                    merged.order.append(st.key)
            elif isinstance(st, S.OnRule):
                if kind != "placement":
                    self.err("P019", f"`{st.axis} on {st.link}` belongs in the `placement` block",
                             st.span, help="move it into `placement { ... }`")
                    continue
                if st.axis in seen_rules:
                    self.err("P008", f"axis `{st.axis}` is placed twice", st.axis_span,
                             related=[Related(seen_rules[st.axis].span, "first placed here")])
                    continue
                seen_rules[st.axis] = st
                merged.rules = [r for r in merged.rules if r.axis != st.axis] + [st]
            elif isinstance(st, S.Block):
                if kind == "cluster" and st.kind == "gpu":
                    if "gpu" in seen:
                        self.err("P008", "`gpu` is set twice in `cluster`", st.kind_span,
                                 related=[Related(seen["gpu"].key_span, "first set here")])
                        continue
                    seen["gpu"] = S.Assign("gpu", st.kind_span, S.Auto(st.span), st.span)
                    if st.label is not None:
                        self.err("P021", "block `gpu` takes no label", st.label_span)
                    child = _Block("gpu", None, st.span, None)
                    self.merge_items(child, st, "gpu")
                    merged.children["gpu"] = child
                    merged.assigns.pop("gpu", None)
                    continue
                sug = None
                if st.kind in SC.TOP_BLOCKS:
                    msg = f"block `{st.kind}` cannot be nested inside `{kind}`"
                    sug = f"close the `{kind}` block with `}}` before `{st.kind}`"
                else:
                    msg = f"unknown block `{st.kind}` inside `{kind}`"
                self.err("P006", msg, st.kind_span, help=sug)
            elif isinstance(st, S.Use):
                self.err("P019", "`use` is only allowed at the top of a file", st.span)

    def unknown_key(self, where: str, st: S.Assign, fields) -> None:
        sug = did_you_mean(st.key, fields)
        if sug:
            help = f"did you mean `{sug}`?"
        else:
            help = f"`{where}` takes: " + ", ".join(fields)
        self.err("P007", f"unknown key `{st.key}` in `{where}`", st.key_span, help=help)
        if where in PARTIAL_BLOCKS:
            self.__dict__.setdefault("partial", {}).setdefault(where, []).append(self.diags[-1])

    # -- evaluation
    def assign(self, kind: str, key: str) -> S.Assign | None:
        b = self.blocks.get(kind)
        return b.assigns.get(key) if b else None

    def value(self, kind: str, key: str, default: Any = None, required: bool = False) -> Any:
        """The evaluated value of ``kind.key`` (memoised); raise _Poison if it failed."""
        path = f"{kind}.{key}"
        if path in self.values:
            v = self.values[path]
            if v is _POISON:
                raise _Poison(path)
            return v
        a = self.assign(kind, key)
        if a is None:
            if required:
                self.values[path] = _POISON
                raise _Poison(path)
            return default
        if path in self.evaluating:
            cyc = " -> ".join(self.evaluating[self.evaluating.index(path):] + [path])
            self.err("P012", f"circular reference: {cyc}", a.value.span,
                     help="give one of these fields a value that does not refer back")
            self.values[path] = _POISON
            raise _Poison(path)
        self.evaluating.append(path)
        try:
            f = SC.BLOCKS[kind][key]
            v = self.eval(a.value, f, key, kind)
            v = self.check_range(v, f, key, a.value.span)
        except ParcError as e:
            self.diags.append(e.diagnostic)
            self.values[path] = _POISON
            raise _Poison(path) from None
        except _Poison:
            self.values[path] = _POISON
            raise
        finally:
            self.evaluating.pop()
        self.values[path] = v
        self.spans[path] = a.span
        return v

    def check_range(self, v, f: SC.F, key: str, span: Span):
        if isinstance(v, bool) or not isinstance(v, (int, float, Fraction)):
            return v
        if f.min is not None and v < f.min:
            if f.kind in ("int", "int_or_auto") and f.min == 1:
                raise ParcError(Diagnostic("P017", ERROR, f"`{key}` must be at least 1, got {_fmt(v)}", span,
                                           help="degrees and sizes are positive whole numbers"))
            raise ParcError(Diagnostic("P017", ERROR, f"`{key}` must be at least {_fmt(f.min)}, got {_fmt(v)}",
                                       span))
        if f.max is not None and v > f.max:
            rng = f"between {_fmt(f.min)} and {_fmt(f.max)}" if f.min is not None else f"at most {_fmt(f.max)}"
            hint = None
            if key == "gpu_memory_utilization":
                hint = "it is a fraction of the GPU's memory: 0.9 means 90%"
            elif key == "zero":
                hint = "0: no sharding, 1: optimizer state, 2: + gradients, 3: + parameters (FSDP)"
            raise ParcError(Diagnostic("P017", ERROR, f"`{key}` must be {rng}, got {_fmt(v)}", span,
                                       help=hint))
        return v

    def eval(self, node, f: SC.F, key: str, kind: str):
        k = f.kind
        if k in ("enum", "preset"):
            name = self.ident(node, key)
            if name is None:
                raise ParcError(Diagnostic("P016", ERROR,
                                           f"`{key}` expects {SC.KIND_WORDS[k]}, got {_describe(node)}",
                                           node.span, help=self.enum_help(f)))
            if k == "enum" and name not in f.choices:
                sug = did_you_mean(name, f.choices)
                raise ParcError(Diagnostic("P016", ERROR, f"`{name}` is not a valid `{key}`", node.span,
                                           help=(f"did you mean `{sug}`? " if sug else "") +
                                           "choose one of: " + ", ".join(f.choices)))
            return name
        if k == "bool":
            if isinstance(node, S.Bool):
                return node.value
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects `true` or `false`, got {_describe(node)}",
                                       node.span))
        if k == "str":
            if isinstance(node, S.String):
                return node.value
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects a string in double quotes, got {_describe(node)}",
                                       node.span, help=f'write `{key} = "..."`'))
        if k == "strlist":
            if isinstance(node, S.String):
                return [node.value]
            if isinstance(node, S.List) and all(isinstance(i, S.String) for i in node.items):
                return [i.value for i in node.items]
            if isinstance(node, S.List):
                bad = next(i for i in node.items if not isinstance(i, S.String))
                raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects a list of strings; this item is {_describe(bad)}",
                                           bad.span, help="quote every item: [\"--flag\", \"value\"]"))
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects a list of strings, got {_describe(node)}",
                                       node.span))
        if k == "any":
            return self.literal(node, key)
        if k == "int_or_auto" and isinstance(node, S.Auto):
            return "auto"
        if k == "split":
            if isinstance(node, S.Ref) and len(node.parts) == 1:
                if node.parts[0] in ("even", "balanced"):
                    return node.parts[0]
                sug = did_you_mean(node.parts[0], ("even", "balanced"))
                raise ParcError(Diagnostic("P016", ERROR, f"`{node.parts[0]}` is not a layer split", node.span,
                                           help=(f"did you mean `{sug}`? " if sug else "") +
                                           "write `even`, `balanced` or a list like [19, 20, 20, 21]"))
            if isinstance(node, S.List):
                if not node.items:
                    raise ParcError(Diagnostic("P016", ERROR, "the layer split is empty", node.span,
                                               help="give one layer count per (virtual) stage"))
                out = []
                for it in node.items:
                    v = self.number(it, SC.F("int"), key, kind)
                    v = self.whole(v, it, key)
                    if v < 0:
                        raise ParcError(Diagnostic("P017", ERROR, f"a stage cannot hold {count(v, 'layer')}", it.span))
                    out.append(v)
                return out
            raise ParcError(Diagnostic("P016", ERROR, f"`layers` expects {SC.KIND_WORDS['split']}, got {_describe(node)}",
                                       node.span))
        if k == "link":
            return self.link(node, key)
        # numeric kinds
        if isinstance(node, S.Auto):
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` cannot be `auto`", node.span,
                                       help="only the mesh axes pp, dp, cp and tp can be `auto`"))
        v = self.number(node, f, key, kind)
        if k in ("int", "int_or_auto"):
            return self.whole(v, node, key)
        if k == "frac":
            return float(v)
        # bytes / bandwidth / flops keep whole numbers exact where they are
        if isinstance(v, Fraction):
            return int(v) if v.denominator == 1 else float(v)
        return v

    def whole(self, v, node, key):
        if isinstance(v, Fraction):
            if v.denominator != 1:
                raise ParcError(Diagnostic("P016", ERROR, f"`{key}` must be a whole number, got {_fmt(v)}",
                                           node.span))
            return int(v)
        if isinstance(v, float):
            if not v.is_integer():
                raise ParcError(Diagnostic("P016", ERROR, f"`{key}` must be a whole number, got {v:g}",
                                           node.span))
            return int(v)
        return v

    def number(self, node, f: SC.F, key: str, kind: str):
        """The exact value of a numeric expression; every literal and every intermediate
        result is bounded by ``MAX_MAGNITUDE`` (a P017 diagnostic beyond it), so no value
        outgrows what ``int``, ``Fraction`` and ``float`` can print and convert."""
        if isinstance(node, S.BinOp):
            # walk a chain (a + b + c ...) along its left operands without recursion
            spine = []
            while isinstance(node, S.BinOp):
                spine.append(node)
                node = node.left
            acc = self._number(node, f, key, kind)
            for op in reversed(spine):
                acc = _bounded(self.binop(op, acc, f, key, kind), op, key)
            return acc
        return self._number(node, f, key, kind)

    def binop(self, node: S.BinOp, a, f: SC.F, key: str, kind: str):
        b = self.number(node.right, SC.F("int") if node.op in "*/%" and f.kind != "int" and
                        isinstance(node.right, S.Number) else f, key, kind)
        if node.op == "+":
            return a + b
        if node.op == "-":
            return a - b
        if node.op == "*":
            return a * b
        if b == 0:
            raise ParcError(Diagnostic("P003", ERROR, "division by zero", node.right.span))
        if node.op == "%":
            if isinstance(a, int) and isinstance(b, int):
                return a % b
            raise ParcError(Diagnostic("P016", ERROR, "`%` needs whole numbers", node.span))
        q = Fraction(a) / Fraction(b)
        if isinstance(a, int) and isinstance(b, int) and q.denominator != 1:
            lo, hi = a // b, a // b + 1
            raise ParcError(Diagnostic(
                "P003", ERROR, f"{a} / {b} is not a whole number ({float(q):.4g})", node.span,
                help=f"integer division is exact here; write {lo * b} / {b} = {lo} or {hi * b} / {b} = {hi}, "
                     f"or the value itself"))
        return q

    def _number(self, node, f: SC.F, key: str, kind: str):
        unit_kind = {"int": "count", "int_or_auto": "count", "frac": None, "bytes": "bytes",
                     "bandwidth": "bandwidth", "flops": "flops"}[f.kind]
        if isinstance(node, S.Number):
            _bounded(node.value, node, key)
            if unit_kind in ("bytes", "bandwidth", "flops") and node.value != 0:
                ex = {"bytes": "80GB", "bandwidth": "450GB/s", "flops": "989TFLOPS"}[unit_kind]
                raise ParcError(Diagnostic("P005", ERROR, f"`{key}` needs a unit: {node.text} of what?",
                                           node.span,
                                           help=f"expected {SC.KIND_WORDS[f.kind]}; for example `{key} = {ex}`"))
            return node.value
        if isinstance(node, S.Quantity):
            _bounded(node.number, node, key)
            table = SC.UNITS.get(unit_kind or "", {})
            if node.unit in table:
                fac = table[node.unit]
                if isinstance(fac, tuple):
                    return _bounded(node.number * Fraction(fac[0], fac[1]), node, key)
                return _bounded(node.number * fac, node, key)
            got = SC.unit_kind(node.unit)
            if got is None:
                raise ParcError(Diagnostic("P004", ERROR, f"unknown unit `{node.unit}` in `{node.text}`",
                                           node.span, help=self.unit_help(f, node)))
            if unit_kind is None:
                raise ParcError(Diagnostic("P004", ERROR, f"`{key}` takes a plain number, but `{node.text}` has a unit",
                                           node.span, help=f"write the number alone"))
            words = {"count": "a count", "bytes": "a size in bytes", "bandwidth": "a bandwidth",
                     "flops": "a compute rate"}
            raise ParcError(Diagnostic("P004", ERROR,
                                       f"`{node.text}` is {words[got]}, but `{key}` expects {SC.KIND_WORDS[f.kind]}",
                                       node.span, help=self.unit_help(f, node)))
        if isinstance(node, S.Ref):
            return self.reference(node, kind, key)
        if isinstance(node, S.Neg):
            return -self.number(node.operand, f, key, kind)
        if isinstance(node, S.BinOp):
            return self.number(node, f, key, kind)
        if isinstance(node, (S.String, S.Bool, S.List, S.Call, S.Auto)):
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects {SC.KIND_WORDS[f.kind]}, got {_describe(node)}",
                                       node.span))
        raise ParcError(Diagnostic("P016", ERROR, f"unexpected value for `{key}`", node.span))

    def unit_help(self, f: SC.F, node: S.Quantity) -> str:
        if f.kind == "bandwidth" and node.unit in SC.UNITS["bytes"]:
            return f"a bandwidth is per second: write `{node.text}/s`"
        units = SC.UNITS.get({"int": "count", "int_or_auto": "count"}.get(f.kind, f.kind), {})
        return f"expected {SC.KIND_WORDS[f.kind]}" + (
            "; units: " + ", ".join(list(units)[:8]) if units else "")

    def reference(self, node: S.Ref, kind: str, key: str):
        parts = node.parts
        if len(parts) == 1:
            blk, fld = kind, parts[0]
        elif len(parts) == 2:
            blk, fld = parts
        else:
            raise ParcError(Diagnostic("P011", ERROR, f"cannot resolve `{node.name}`", node.span,
                                       help="refer to a field as `block.field`, e.g. `cluster.gpus_per_node`"))
        if blk not in SC.BLOCKS or blk == "gpu":
            sug = did_you_mean(blk, [b for b in SC.BLOCKS if b != "gpu"])
            raise ParcError(Diagnostic("P011", ERROR, f"cannot resolve `{node.name}`: no block `{blk}`"
                                       if len(parts) == 2 else f"cannot resolve `{node.name}`", node.span,
                                       help=f"did you mean `{sug}.{fld}`?" if sug and len(parts) == 2 else
                                       "refer to a field as `block.field`, e.g. `cluster.gpus_per_node`"))
        if fld not in SC.BLOCKS[blk]:
            sug = did_you_mean(fld, SC.BLOCKS[blk])
            raise ParcError(Diagnostic("P011", ERROR, f"cannot resolve `{node.name}`: `{blk}` has no field `{fld}`",
                                       node.span, help=f"did you mean `{blk}.{sug}`?" if sug else None))
        # fields that presets fill are read from the resolved value
        got = self.derived(blk, fld)
        if got is None:
            raise ParcError(Diagnostic("P011", ERROR, f"`{blk}.{fld}` has no value to refer to", node.span,
                                       help=f"set `{fld}` in the `{blk}` block"))
        if got == "auto":
            raise ParcError(Diagnostic("P011", ERROR, f"`{blk}.{fld}` is `auto` and cannot be referred to",
                                       node.span))
        if isinstance(got, bool) or not isinstance(got, (int, float, Fraction)):
            raise ParcError(Diagnostic("P016", ERROR, f"`{blk}.{fld}` is not a number", node.span))
        return got

    def derived(self, blk, fld):
        """A field's value for references: explicit, else from the preset."""
        try:
            v = self.value(blk, fld)
        except _Poison:
            raise
        if v is not None:
            return v
        if blk == "model":
            pre = self.model_preset()
            if pre and fld in pre:
                return pre[fld]
        return None

    def ident(self, node, key):
        if isinstance(node, S.Ref) and len(node.parts) == 1:
            return node.parts[0]
        if isinstance(node, S.Quantity) and SC.unit_kind(node.unit) is None:
            return node.text  # 1f1b
        if isinstance(node, S.Number) and key in ("dtype", "precision"):
            return None
        return None

    def enum_help(self, f):
        if f.choices:
            return "choose one of: " + ", ".join(f.choices)
        return None

    def literal(self, node, key):
        if isinstance(node, (S.String, S.Bool)):
            return node.value
        if isinstance(node, S.Number):
            _bounded(node.value, node, key)
            return node.value if isinstance(node.value, int) else float(node.value)
        if isinstance(node, S.List):
            return [self.literal(i, key) for i in node.items]
        if isinstance(node, S.Ref) and len(node.parts) == 1:
            return node.parts[0]
        if isinstance(node, S.Quantity):
            return node.text
        raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects a plain value, got {_describe(node)}",
                                   node.span))

    def link(self, node, key):
        if isinstance(node, S.Ref) and len(node.parts) == 1 and node.parts[0] in SC.LINK_KINDS:
            return (node.parts[0], None, node.span)
        if not isinstance(node, S.Call):
            raise ParcError(Diagnostic("P016", ERROR, f"`{key}` expects a link like nvlink(450GB/s), got {_describe(node)}",
                                       node.span, help=f"links: " + ", ".join(f"{k}(...)" for k in SC.LINK_KINDS)))
        if node.name not in SC.LINK_KINDS:
            sug = did_you_mean(node.name, SC.LINK_KINDS)
            raise ParcError(Diagnostic("P016", ERROR, f"unknown link `{node.name}`", node.name_span,
                                       help=(f"did you mean `{sug}`? " if sug else "") +
                                       "links: " + ", ".join(SC.LINK_KINDS)))
        if len(node.args) != 1:
            raise ParcError(Diagnostic("P016", ERROR, f"`{node.name}(...)` takes one bandwidth, got {len(node.args)} arguments",
                                       node.span, help=f"write `{node.name}(450GB/s)`"))
        bw = self.number(node.args[0], SC.F("bandwidth"), key, "cluster")
        if isinstance(bw, Fraction):
            bw = int(bw) if bw.denominator == 1 else float(bw)
        if bw <= 0:
            raise ParcError(Diagnostic("P017", ERROR, "a link's bandwidth must be positive", node.args[0].span))
        return (node.name, bw, node.span)

    # -- presets
    def model_preset(self) -> dict | None:
        try:
            name = self.value("model", "from")
        except _Poison:
            return None
        if name is None:
            return None
        return presets("models").get(name)

    def check_preset(self, kind: str, block: str, key: str = "from") -> dict | None:
        try:
            name = self.value(block, key) if block in self.blocks else None
        except _Poison:
            raise
        if name is None:
            return None
        table = presets(kind)
        if name not in table:
            a = self.assign(block, key)
            sug = did_you_mean(name, table)
            self.err("P010", f"unknown {'model' if kind == 'models' else 'GPU'} preset `{name}`", a.value.span,
                     help=(f"did you mean `{sug}`? " if sug else "") + "`parc presets` lists them")
            self.values[f"{block}.{key}"] = _POISON
            raise _Poison(block)
        return table[name]


_POISON = object()


def _is_within(p: Path, root: Path) -> bool:
    return is_within(p, root)


MAX_MAGNITUDE = 10**60  # the largest number (and denominator) a spec computes with


def _too_large(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return abs(v) > MAX_MAGNITUDE
    if isinstance(v, Fraction):
        return abs(v.numerator) > MAX_MAGNITUDE or v.denominator > MAX_MAGNITUDE
    if isinstance(v, float):
        return not (abs(v) <= MAX_MAGNITUDE)  # also inf and nan
    return False


def _bounded(v, node, key: str):
    """``v``, or a P017 diagnostic at ``node`` when it is beyond ``MAX_MAGNITUDE``."""
    if not _too_large(v):
        return v
    if isinstance(v, Fraction) and abs(v.numerator) <= MAX_MAGNITUDE:
        what = "has too many decimal places"
    else:
        what = "is too large"
    size = max(abs(v.numerator), v.denominator) if isinstance(v, Fraction) else v
    digits = f" (about {int(abs(size).bit_length() * 0.30103) + 1:,} digits)" if not isinstance(v, float) else ""
    raise ParcError(Diagnostic(
        "P017", ERROR, f"`{key}`: this number {what}{digits}; parc computes with numbers up to 10^60",
        node.span, help="write the value in the units the field takes (80GB, 989TFLOPS, 450GB/s)"))


def _fmt(v) -> str:
    if isinstance(v, Fraction):
        return str(int(v)) if v.denominator == 1 else f"{float(v):g}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _describe(node) -> str:
    if isinstance(node, S.String):
        return f"the string {node.text}"
    if isinstance(node, S.Number):
        return f"the number {node.text}"
    if isinstance(node, S.Quantity):
        return f"`{node.text}`"
    if isinstance(node, S.Bool):
        return f"`{'true' if node.value else 'false'}`"
    if isinstance(node, S.Auto):
        return "`auto`"
    if isinstance(node, S.Ref):
        return f"the name `{node.name}`"
    if isinstance(node, S.Call):
        return f"`{node.name}(...)`"
    if isinstance(node, S.List):
        return "a list"
    return "an expression"


# ------------------------------------------------------------------------------ plan building

def _get(r: Resolver, kind: str, key: str, default=None):
    """A field's value, or ``default`` if unset; None if it failed (already reported)."""
    try:
        return r.value(kind, key, default)
    except _Poison:
        return _FAILED


_FAILED = object()


class _Incomplete(Exception):
    """Some value the plan needs failed; its error is already reported."""


def _need(v):
    if v is _FAILED:
        raise _Incomplete()
    return v


def _block_span(r: Resolver, kind: str, fallback: Span) -> Span:
    b = r.blocks.get(kind)
    return b.span if b else fallback


def _head(r: Resolver, kind: str, fallback: Span) -> Span:
    """A short span for a block: its header line."""
    b = r.blocks.get(kind)
    if not b:
        return fallback
    s = b.span
    return Span(s.file, s.line, s.column, s.line, s.column + len(kind), s.start, s.start + len(kind))


def build_model(r: Resolver, top: Span) -> Model:
    if "model" not in r.blocks:
        if not r.import_failed:
            r.err("P018", "the spec has no `model` block", top,
                  help="add `model \"name\" { from = llama3_8b }` (see `parc presets`)")
        raise _Incomplete()
    head = _head(r, "model", top)
    try:
        pre = r.check_preset("models", "model")
    except _Poison:
        raise _Incomplete()
    pre = dict(pre or {})
    from_span = r.spans.get("model.from", head)
    vals: dict[str, Any] = {}
    failed = False
    for key in SC.BLOCKS["model"]:
        if key == "from":
            continue
        v = _get(r, "model", key)
        if v is _FAILED:
            failed = True
            continue
        if v is None and key in pre:
            v = pre[key]
            r.spans[f"model.{key}"] = from_span
        vals[key] = v
    if failed:
        raise _Incomplete()
    missing = [k for k in ("layers", "hidden", "heads", "vocab") if vals.get(k) is None]
    if missing:
        r.err("P018", "model needs " + ", ".join(f"`{k}`" for k in missing) +
              (" (or a preset with `from = ...`)" if not pre else ""), head,
              help="set them, or start from a preset: `from = llama3_8b` (`parc presets` lists them)")
        raise _Incomplete()
    from parc.cost import estimate as costmodel

    h, a = vals["hidden"], vals["heads"]
    mlp = vals.get("mlp") or "swiglu"
    if vals.get("kv_heads") is None:
        vals["kv_heads"] = a
        r.spans["model.kv_heads"] = r.spans.get("model.heads", head)
    if vals.get("ffn_hidden") is None:
        vals["ffn_hidden"] = 4 * h if mlp == "gelu" else 256 * -(-(8 * h // 3) // 256)
        r.spans["model.ffn_hidden"] = r.spans.get("model.hidden", head)
    if vals.get("head_dim") is None and h % a == 0:
        vals["head_dim"] = h // a
        r.spans["model.head_dim"] = r.spans.get("model.hidden", head)
    experts = vals.get("experts") or 0
    if experts:
        if vals.get("top_k") is None:
            vals["top_k"] = min(2, experts)
        if vals.get("moe_ffn_hidden") is None:
            vals["moe_ffn_hidden"] = vals["ffn_hidden"]
    label = r.blocks["model"].label
    m = Model(
        name=label or pre.get("name") or (r.values.get("model.from") or "model"),
        layers=vals["layers"], hidden=h, ffn_hidden=vals["ffn_hidden"], heads=a,
        kv_heads=vals["kv_heads"], head_dim=vals.get("head_dim"), vocab=vals["vocab"], params=0,
        dtype=vals.get("dtype") or "bf16", seq_len=vals.get("seq_len") or 4096,
        tied_embeddings=bool(vals.get("tied_embeddings")) if vals.get("tied_embeddings") is not None else False,
        mlp=mlp, norm=vals.get("norm") or "rmsnorm", position=vals.get("position") or "rope",
        bias=bool(vals.get("bias")), experts=experts, top_k=vals.get("top_k") or 0,
        moe_ffn_hidden=vals.get("moe_ffn_hidden") or 0, shared_experts=vals.get("shared_experts") or 0,
        moe_every=vals.get("moe_every") or 1, rope_theta=vals.get("rope_theta") or 10000,
        max_positions=vals.get("max_positions"), preset=r.values.get("model.from"))
    if vals.get("seq_len") is None:
        r.spans["model.seq_len"] = head
    m.params = vals["params"] if vals.get("params") is not None else costmodel.param_count(m)
    if vals.get("params") is None:
        r.spans["model.params"] = from_span
    return m


def build_gpu(r: Resolver, top: Span) -> GPU:
    cl = r.blocks["cluster"]
    child = cl.children.get("gpu")
    if child is None:
        try:
            name = r.value("cluster", "gpu")
        except _Poison:
            raise _Incomplete()
        if name is None:
            r.err("P018", "the cluster needs a `gpu` (a preset like h100_sxm, or a `gpu { ... }` block)",
                  _head(r, "cluster", top), help="`parc presets` lists the GPU presets")
            raise _Incomplete()
        table = presets("gpus")
        if name not in table:
            a = r.assign("cluster", "gpu")
            sug = did_you_mean(name, table)
            r.err("P010", f"unknown GPU preset `{name}`", a.value.span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "`parc presets` lists them, or describe it "
                       "with `gpu { memory = 80GB  flops = 989TFLOPS }`")
            raise _Incomplete()
        g = table[name]
        sp = r.spans.get("cluster.gpu")
        for k in ("memory", "flops", "hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth"):
            r.spans[f"cluster.gpu.{k}"] = sp
        return GPU(name, int(g["memory"]), float(g["flops"]), float(g.get("hbm_bandwidth", 0)),
                   float(g.get("nvlink_bandwidth", 0)), float(g.get("pcie_bandwidth", 0)))
    # a gpu { ... } block, evaluated with the gpu field table
    r.blocks["gpu"] = child
    try:
        base = r.check_preset("gpus", "gpu")
    except _Poison:
        raise _Incomplete()
    base = dict(base or {})
    vals = {}
    failed = False
    for k in ("memory", "flops", "hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth"):
        v = _get(r, "gpu", k)
        if v is _FAILED:
            failed = True
            continue
        if v is None and k in base:
            v = base[k]
        if f"gpu.{k}" in r.spans:
            r.spans[f"cluster.gpu.{k}"] = r.spans[f"gpu.{k}"]
        else:
            r.spans[f"cluster.gpu.{k}"] = child.span
        vals[k] = v
    if failed:
        raise _Incomplete()
    missing = [k for k in ("memory", "flops") if vals.get(k) is None]
    if missing:
        r.err("P018", "the `gpu` block needs " + " and ".join(f"`{k}`" for k in missing), child.span,
              help="for example `memory = 80GB` and `flops = 989TFLOPS` (dense BF16)")
        raise _Incomplete()
    name = r.values.get("gpu.from") or "custom"
    return GPU(name, int(vals["memory"]), float(vals["flops"]), float(vals.get("hbm_bandwidth") or 0),
               float(vals.get("nvlink_bandwidth") or 0), float(vals.get("pcie_bandwidth") or 0))


def build_cluster(r: Resolver, top: Span) -> Cluster:
    if "cluster" not in r.blocks:
        if not r.import_failed:
            r.err("P018", "the spec has no `cluster` block", top,
                  help="add `cluster \"name\" { nodes = 1  gpus_per_node = 8  gpu = h100_sxm }`, "
                       "or `use` a shared cluster file")
        raise _Incomplete()
    head = _head(r, "cluster", top)
    nodes = _get(r, "cluster", "nodes", 1)
    gpn = _get(r, "cluster", "gpus_per_node")
    intra = _get(r, "cluster", "intra_node")
    inter = _get(r, "cluster", "inter_node")
    ifname = _get(r, "cluster", "socket_ifname")
    try:
        gpu = build_gpu(r, top)
    except _Incomplete:
        gpu = None
    if gpn is None:
        r.err("P018", "the cluster needs `gpus_per_node`", head, help="for example `gpus_per_node = 8`")
        raise _Incomplete()
    if _FAILED in (nodes, gpn, intra, inter, ifname) or gpu is None:
        raise _Incomplete()
    r.spans.setdefault("cluster.nodes", head)

    def mk(v, which):
        if v is None:
            return None
        kind, bw, _ = v
        if bw is None:
            bw = gpu.nvlink_bandwidth if kind in ("nvlink", "xgmi") else gpu.pcie_bandwidth
            if not bw:
                r.err("P018", f"`{kind}` needs a bandwidth here: {gpu.name} has no {kind} figure",
                      r.spans.get(f"cluster.{which}", head), help=f"write `{kind}(...GB/s)`")
                raise _Incomplete()
        return Link(kind, float(bw))

    intra_l = mk(intra, "intra_node")
    inter_l = mk(inter, "inter_node")
    if intra_l is None and gpn > 1:
        intra_l = Link("nvlink", gpu.nvlink_bandwidth) if gpu.nvlink_bandwidth else \
            Link("pcie", gpu.pcie_bandwidth or 32e9)
        r.spans["cluster.intra_node"] = r.spans.get("cluster.gpu", head)
    label = r.blocks["cluster"].label or "cluster"
    if nodes * gpn > MAX_WORLD:
        r.err("P017", f"a cluster of {nodes * gpn:,} GPUs is larger than parc plans for ({MAX_WORLD:,})",
              r.spans.get("cluster.nodes", head))
        raise _Incomplete()
    return Cluster(label, nodes, gpn, gpu, intra_l, inter_l, ifname)


def build_mesh(r: Resolver, cluster: Cluster | None, top: Span) -> Mesh:
    blk = r.blocks.get("mesh")
    vals = {}
    failed = False
    for ax in ("pp", "dp", "cp", "tp", "ep", "etp"):
        v = _get(r, "mesh", ax)
        if v is _FAILED:
            failed = True
        vals[ax] = v
    given = [k for k in (blk.order if blk else []) if k in SC.MESH_AXES]
    order = []
    for ax in SC.MESH_AXES:  # unlisted axes (size 1) take their usual place
        if ax not in given:
            order.append(ax)
    order = _merge_order(given)
    autos = [ax for ax in SC.MESH_AXES if vals[ax] == "auto"]
    if len(autos) > 1:
        for ax in autos[1:]:
            r.err("P023", f"only one mesh axis can be `auto`; `{autos[0]}` already is", r.spans[f"mesh.{ax}"],
                  help=f"give `{ax}` a number")
        raise _Incomplete()
    mesh_span = _head(r, "mesh", top)
    for ax in ("pp", "dp", "cp", "tp", "ep", "etp"):
        r.spans.setdefault(f"mesh.{ax}", mesh_span)
    if failed:
        raise _Incomplete()
    m = Mesh(order=order, **{ax: (1 if vals[ax] in (None, "auto") else vals[ax])
                             for ax in ("pp", "dp", "cp", "tp", "ep", "etp")})
    if autos:
        ax = autos[0]
        m.auto = ax
        if cluster is not None:
            others = 1
            for o in SC.MESH_AXES:
                if o != ax:
                    others *= m.size(o)
            world = cluster.world
            if world % others == 0:
                setattr(m, ax, world // others)
            else:
                setattr(m, ax, 0)  # the P101 rule reports the mismatch
    return m


def _merge_order(given: list[str]) -> list[str]:
    """The spec's axis order, with the axes it leaves out (size 1) in their usual places."""
    out = list(given)
    canon = list(SC.MESH_AXES)
    for i, ax in enumerate(canon):
        if ax in out:
            continue
        # insert before the first listed axis that canonically comes after it
        pos = len(out)
        for j, o in enumerate(out):
            if canon.index(o) > i:
                pos = j
                break
        out.insert(pos, ax)
    return out


def build_placement(r: Resolver, mesh: Mesh, top: Span) -> Placement:
    p = Placement()
    blk = r.blocks.get("placement")
    if blk is None:
        return p
    failed = False
    for rule in blk.rules:
        if rule.axis not in SC.MESH_AXES + SC.MOE_AXES:
            sug = did_you_mean(rule.axis, SC.MESH_AXES + SC.MOE_AXES)
            r.err("P011", f"unknown axis `{rule.axis}`", rule.axis_span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "axes: pp, dp, cp, tp, ep, etp")
            failed = True
            continue
        if rule.link not in ("intra_node", "inter_node"):
            sug = did_you_mean(rule.link, ("intra_node", "inter_node"))
            r.err("P011", f"unknown link `{rule.link}`", rule.link_span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "place an axis `on intra_node` or `on inter_node`")
            failed = True
            continue
        p.links[rule.axis] = rule.link
        r.spans[f"placement.{rule.axis}"] = rule.span
    split = _get(r, "placement", "layers")
    if split is _FAILED:
        failed = True
    elif isinstance(split, list):
        p.layers_mode, p.layers = "explicit", split
    elif split is not None:
        p.layers_mode = split
    for a in blk.modules:
        node = a.value
        if isinstance(node, S.Ref) and node.parts == ["replicate"]:
            p.modules.append(ModulePlacement(a.key, "replicate", None))
            continue
        if not isinstance(node, S.Call) or node.name not in SC.PLACEMENT_STYLES:
            name = node.name if isinstance(node, S.Call) else None
            sug = did_you_mean(name, SC.PLACEMENT_STYLES) if name else None
            r.err("P016", f"a module placement is one of colwise(tp), rowwise(tp), sequence(tp), experts(ep) or "
                          f"replicate; got {_describe(node)}", node.span,
                  help=f"did you mean `{sug}`?" if sug else None)
            failed = True
            continue
        if len(node.args) != 1 or not (isinstance(node.args[0], S.Ref) and len(node.args[0].parts) == 1):
            r.err("P016", f"`{node.name}(...)` takes the axis it splits over, e.g. `{node.name}"
                          f"({SC.PLACEMENT_STYLES[node.name] or 'tp'})`", node.span)
            failed = True
            continue
        axis = node.args[0].parts[0]
        if axis not in SC.MESH_AXES + SC.MOE_AXES:
            r.err("P011", f"unknown axis `{axis}`", node.args[0].span, help="axes: pp, dp, cp, tp, ep, etp")
            failed = True
            continue
        p.modules.append(ModulePlacement(a.key, node.name, axis))
        r.spans[f"placement.module.{a.key}"] = a.span
    if failed:
        raise _Incomplete()
    return p


# Blocks whose fields nothing else in the plan is computed from: a bad value there leaves the
# field's default in a partial plan, so the checks that do not read the block still run.
PARTIAL_BLOCKS = ("train", "serve")


def _section(r: Resolver, kind: str, cls, top: Span, partial: bool = False):
    if kind not in r.blocks:
        return None
    obj = cls()
    failed = False
    before = len(r.diags)
    for key in SC.BLOCKS[kind]:
        v = _get(r, kind, key)
        if v is _FAILED:
            failed = True
        elif v is not None:
            setattr(obj, key, v)
        r.spans.setdefault(f"{kind}.{key}", _head(r, kind, top))
    if failed:
        if not partial:
            raise _Incomplete()
        r.__dict__.setdefault("partial", {}).setdefault(kind, []).extend(r.diags[before:])
    return obj


def build_targets(r: Resolver) -> dict[str, Target]:
    out = {}
    failed = False
    for name, blk in r.targets.items():
        keys = target_spec(name)["keys"]
        settings = {}
        for key, a in blk.assigns.items():
            f = SC.F(keys[key].get("kind", "any"), keys[key].get("min"), keys[key].get("max"),
                     tuple(keys[key].get("choices", ())))
            try:
                v = r.eval(a.value, f, key, "target")
                v = r.check_range(v, f, key, a.value.span)
            except ParcError as e:
                r.diags.append(e.diagnostic)
                failed = True
                continue
            except _Poison:
                failed = True
                continue
            settings[key] = v
            r.spans[f"target.{name}.{key}"] = a.span
            r.spans[f"target.{name}.{key}.value"] = a.value.span
            for i, item in enumerate(getattr(a.value, "items", None) or ()):
                r.spans[f"target.{name}.{key}.value.{i}"] = item.span
        r.spans[f"target.{name}"] = Span(blk.span.file, blk.span.line, blk.span.column, blk.span.line,
                                         blk.span.column + 6, blk.span.start, blk.span.start + 6)
        out[name] = Target(name, settings)
    if failed:
        raise _Incomplete()
    return out


def resolve_document(r: Resolver, main_file: str, partial: bool = False) -> Plan | None:
    top = Span.point(main_file)
    parts: dict[str, Any] = {}
    ok = True
    for name, fn in (("model", lambda: build_model(r, top)), ("cluster", lambda: build_cluster(r, top))):
        try:
            parts[name] = fn()
        except _Incomplete:
            ok = False
    try:
        parts["mesh"] = build_mesh(r, parts.get("cluster"), top)
    except _Incomplete:
        ok = False
    try:
        parts["placement"] = build_placement(r, parts.get("mesh"), top)
    except _Incomplete:
        ok = False
    sections = {}
    for kind, cls in (("schedule", Schedule), ("train", Train), ("serve", Serve)):
        try:
            sections[kind] = _section(r, kind, cls, top, partial and kind in PARTIAL_BLOCKS)
        except _Incomplete:
            ok = False
            sections[kind] = _FAILED
    try:
        targets = build_targets(r)
    except _Incomplete:
        ok = False
        targets = {}
    if "train" in r.blocks and "serve" in r.blocks:
        r.err("P022", "a spec is either training (`train`) or serving (`serve`), not both",
              _head(r, "serve", top), related=[Related(_head(r, "train", top), "training declared here")],
              help="split it into two specs that `use` a shared cluster file")
        ok = False
    if not ok:
        return None
    sched = sections["schedule"] or Schedule()
    mode = "serve" if "serve" in r.blocks else "train"
    train = sections["train"] if mode == "train" else None
    if mode == "train" and train is None:
        train = Train()
    serve = sections["serve"]
    mesh = parts["mesh"]
    sb = r.blocks.get("schedule")
    if sb is None or "global_batch" not in sb.assigns:
        if sb is None or "microbatches" not in sb.assigns:
            sched.global_batch = sched.micro_batch * max(mesh.dp, 1) * (mesh.pp if mesh.pp > 1 else 1)
            r.spans["schedule.global_batch"] = _head(r, "schedule", _head(r, "mesh", top))
        else:
            sched.global_batch = sched.microbatches * sched.micro_batch * max(mesh.dp, 1)
            r.spans["schedule.global_batch"] = r.spans["schedule.microbatches"]
    if sb is None or "pipeline" not in sb.assigns:
        if sched.virtual_stages > 1:
            sched.pipeline = "interleaved_1f1b"
    per = sched.micro_batch * mesh.dp
    derived = sched.global_batch // per if per and sched.global_batch % per == 0 else None
    if sb is not None and "microbatches" in sb.assigns:
        pass  # the P2 rules compare the given count with the derived one
    else:
        sched.microbatches = derived
        r.spans["schedule.microbatches"] = r.spans.get("schedule.global_batch")
    plan = Plan(file=main_file, model=parts["model"], cluster=parts["cluster"], mesh=mesh,
                placement=parts["placement"], schedule=sched, mode=mode, train=train, serve=serve,
                targets=targets, spans=r.spans, files=r.files)
    for kind in ("model", "cluster", "mesh", "placement", "schedule", "train", "serve"):
        if kind in r.blocks:
            r.spans[kind] = _head(r, kind, top)
    _resolve_split(plan)
    return plan


def _resolve_split(plan: Plan) -> None:
    """Fill ``placement.layers`` for even and balanced splits (explicit lists stay as given)."""
    from parc.cost import estimate as costmodel

    p = plan.placement
    stages = plan.mesh.pp * plan.schedule.virtual_stages
    if p.layers_mode == "explicit" or stages <= 0:
        return
    L = plan.model.layers
    if p.layers_mode == "even":
        p.layers = [L // stages] * stages if L % stages == 0 else None
    else:
        p.layers = costmodel.balanced_split(plan.model, stages)


def load(path: str | os.PathLike, root: str | os.PathLike | None = None, text: str | None = None,
         shown: str | None = None, partial: bool = False) -> Resolution:
    """Read, parse and resolve one spec. A spec that cannot be read gives the P030 diagnostic.

    With ``partial``, a bad value or unknown key in `train` or `serve` leaves that block's
    defaults in the plan, and the Resolution names the block and its errors, so that the checks
    that do not read it can still report the spec's other mistakes in the same run."""
    p = Path(path)
    r = Resolver(find_root(p, root))
    if not shown:
        shown = str(path)
        if text is None and p.is_absolute():
            try:
                shown = r.display(p.resolve())
            except (OSError, RuntimeError, ValueError):
                pass
    r.load_file(p, shown, text=text)
    plan = None
    if not any(d.code in ("P001", "P002", "P030") and d.span.file == shown for d in r.diags):
        plan = resolve_document(r, shown, partial)
        if plan is not None:
            plan.source = shown if text is not None else root_relative(p, r.root)
    bad = r.__dict__.get("partial", {}) if partial else {}
    return Resolution(plan, r.diags, r.sources, frozenset(bad), tuple(d for ds in bad.values() for d in ds))


def root_relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, normalised and '/'-separated (its name alone when it lies
    outside the root): one spelling for every way of naming the file and every working folder."""
    full = path.resolve()
    try:
        return full.relative_to(root.resolve()).as_posix()
    except ValueError:
        return full.name


def resolve_text(text: str, file: str = "<input>", root: str | os.PathLike | None = None) -> Resolution:
    """Resolve spec text that is not on disk (imports are read relative to ``file``)."""
    return load(file, root=root if root is not None else Path(file).resolve().parent, text=text, shown=file)
