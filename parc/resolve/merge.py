"""Blocks of every loaded file merged into one document: an importing file overrides what it
imports key by key; a block or a key given twice in one file, an unknown block or key, and a
statement in the wrong place are reported here."""
from __future__ import annotations

from dataclasses import dataclass, field

from parc.language import syntax as S
from parc.language.diagnostics import ERROR, Diagnostic, Related, Span
from parc.model import fields as SC
from parc.resolve.catalog import known_targets, near_target, target_keys, target_spec
from parc.resolve.evaluate import did_you_mean, rename

# Blocks whose fields nothing else in the plan is computed from: a bad value there leaves the
# field's default in a partial plan, so the checks that do not read the block still run.
PARTIAL_BLOCKS = ("train", "serve")
NESTED = ("gpu", "topology", "group")   # the blocks a `cluster` block may hold


@dataclass
class Block:
    kind: str
    label: str | None
    span: Span
    label_span: Span | None
    assigns: dict[str, S.Assign] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    rules: list[S.OnRule] = field(default_factory=list)
    modules: list[S.Assign] = field(default_factory=list)
    children: dict[str, "Block"] = field(default_factory=dict)


@dataclass
class Document:
    """The merged blocks (``target`` blocks by name in ``targets``), the diagnostics found so
    far, and per partial block (``train``, ``serve``) the errors confined to it."""

    diags: list[Diagnostic] = field(default_factory=list)
    blocks: dict[str, Block] = field(default_factory=dict)
    targets: dict[str, Block] = field(default_factory=dict)
    partial: dict[str, list[Diagnostic]] = field(default_factory=dict)
    import_failed: bool = False  # a file could not be loaded: missing blocks are not reported
    broken: list = field(default_factory=list)   # (kind, label) of the spec's blocks that did not parse

    def err(self, code, msg, span, help=None, related=None, fixes=None):
        self.diags.append(Diagnostic(code, ERROR, msg, span, help=help, related=related or [], fixes=fixes or []))

    def add_block(self, b: S.Block, seen: dict) -> None:
        """Merge one top-level block of a file; ``seen`` holds the file's blocks so far."""
        kind = b.kind
        if kind not in SC.TOP_BLOCKS:
            sug = did_you_mean(kind, SC.TOP_BLOCKS)
            self.err("P006", f"unknown block `{kind}`", b.kind_span,
                     help=(f"did you mean `{sug}`?" if sug else
                           "blocks are: " + ", ".join(SC.TOP_BLOCKS)), fixes=rename(b.kind_span, sug, kind))
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
            self._add_target(b)
            return
        if b.label is not None and SC.LABELS[kind] == "none":
            self.err("P021", f"block `{kind}` takes no label", b.label_span,
                     help=f"write `{kind} {{ ... }}`")
        merged = self.blocks.get(kind)
        if merged is None:
            merged = self.blocks[kind] = Block(kind, b.label, b.span, b.label_span)
        else:  # an imported block, overridden key by key by this file
            merged.span = b.span
            if b.label is not None:
                merged.label, merged.label_span = b.label, b.label_span
        self.merge_items(merged, b, kind)

    def _add_target(self, b: S.Block) -> None:
        if b.label is None:
            self.err("P021", "a `target` block needs the target's name, e.g. `target vllm { ... }`",
                     b.kind_span, help="targets: " + ", ".join(known_targets()))
            return
        if target_spec(b.label) is None:
            sug = near_target(b.label)
            self.err("P020", f"unknown target `{b.label}`", b.label_span,
                     help=(f"did you mean `{sug}`?" if sug else
                           "targets: " + ", ".join(known_targets())), fixes=rename(b.label_span, sug, b.label))
            return
        merged = self.targets.get(b.label)
        if merged is None:
            merged = self.targets[b.label] = Block("target", b.label, b.span, b.label_span)
        self.merge_items(merged, b, "target")

    def merge_items(self, merged: Block, b: S.Block, kind: str) -> None:
        fields = SC.BLOCKS.get(kind)
        if kind == "target":
            fields = {k: SC.F(v.get("kind", "any")) for k, v in target_keys(b.label).items()}
        seen: dict[str, S.Assign] = {}
        seen_rules: dict[str, S.OnRule] = {}
        for st in b.items:
            if isinstance(st, S.Assign):
                self._assign(merged, b, kind, st, fields, seen)
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
                self._nested(merged, kind, st, seen)
            elif isinstance(st, S.Use):
                self.err("P019", "`use` is only allowed at the top of a file", st.span)

    def _assign(self, merged: Block, b: S.Block, kind: str, st: S.Assign, fields, seen: dict) -> None:
        if st.quoted and kind == "placement":
            merged.modules.append(st)
            return
        if st.key in seen:
            self.err("P008", f"`{st.key}` is set twice in `{kind}`", st.key_span,
                     help="keep one of them", related=[Related(seen[st.key].key_span, "first set here")])
            return
        seen[st.key] = st
        if st.key not in fields or st.quoted:
            self.unknown_key(f"target {b.label}" if kind == "target" else kind, st, fields)
            return
        merged.assigns[st.key] = st
        if st.key not in merged.order:
            merged.order.append(st.key)

    def _nested(self, merged: Block, kind: str, st: S.Block, seen: dict) -> None:
        """A block inside a block: `gpu { ... }`, `topology { ... }` and `group "name" { ... }`
        inside `cluster` (a group's key in ``children`` is ``group.<name>``), the pools
        `prefill { ... }` and `decode { ... }` inside `serve`. `topology`, groups and pools merge
        key by key over the block of the same name an imported file gives."""
        if kind == "serve" and st.kind in SC.POOLS:
            if st.kind in seen:
                self.err("P009", f"block `{st.kind}` is defined twice in `serve`", st.kind_span,
                         help="merge the two blocks into one",
                         related=[Related(seen[st.kind].key_span, "first defined here")])
                return
            seen[st.kind] = S.Assign(st.kind, st.kind_span, S.Auto(st.span), st.span)
            if st.label is not None:
                self.err("P021", f"block `{st.kind}` takes no label", st.label_span,
                         help=f"write `{st.kind} {{ ... }}`")
            child = merged.children.get(st.kind)
            if child is None:
                child = merged.children[st.kind] = Block(st.kind, None, st.span, None)
            child.span = st.span
            self.merge_items(child, st, st.kind)
            return
        if kind == "cluster" and st.kind in NESTED:
            name = st.kind if st.kind != "group" else f"group.{st.label}"
            if st.kind == "group" and st.label is None:
                self.err("P021", "a `group` block needs a name, e.g. `group \"l40s_nodes\" { ... }`", st.kind_span)
                return
            if name in seen:
                self.err("P008", f"`{name}` is set twice in `cluster`", st.kind_span,
                         related=[Related(seen[name].key_span, "first set here")])
                return
            seen[name] = S.Assign(name, st.kind_span, S.Auto(st.span), st.span)
            if st.label is not None and st.kind not in ("group", "gpu"):   # a gpu's label names a custom GPU
                self.err("P021", f"block `{st.kind}` takes no label", st.label_span)
            child = merged.children.get(name) if st.kind != "gpu" else None
            if child is None:
                child = merged.children[name] = Block(st.kind, st.label, st.span, st.label_span)
            child.span = st.span
            self.merge_items(child, st, st.kind)
            merged.assigns.pop(name, None)
            return
        sug = None
        if st.kind in SC.TOP_BLOCKS:
            msg = f"block `{st.kind}` cannot be nested inside `{kind}`"
            sug = f"close the `{kind}` block with `}}` before `{st.kind}`"
        else:
            msg = f"unknown block `{st.kind}` inside `{kind}`"
        self.err("P006", msg, st.kind_span, help=sug)

    def unknown_key(self, where: str, st: S.Assign, fields) -> None:
        sug = did_you_mean(st.key, fields)
        if sug:
            help = f"did you mean `{sug}`?"
        else:
            help = f"`{where}` takes: " + ", ".join(fields)
        self.err("P007", f"unknown key `{st.key}` in `{where}`", st.key_span, help=help,
                 fixes=rename(st.key_span, sug if sug and not st.quoted else None, st.key))
        if where in PARTIAL_BLOCKS:
            self.partial.setdefault(where, []).append(self.diags[-1])
