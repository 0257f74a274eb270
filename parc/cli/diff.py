"""parc diff: what a change to a spec does to the plan, old → new, for a terminal or a PR comment."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from parc.words import count

DESCRIPTION = """Compare two versions of a spec: the settings that changed and what they do to the plan —
degrees, world size, per-GPU memory, communication, bubble and step time — old → new with
the difference. `--git REV` reads the old version from git (and the files it imports, from
the same revision)."""
EPILOG = """exit status: 0 compared, 1 a version has errors (printed; a plan with memory, topology or
target errors is still compared), 2 usage, I/O or git failure

with --exit-code, as `git diff --exit-code` and diff(1), for CI gates: 0 the plan did not change,
1 it changed (a setting or a metric), 2 trouble (usage, I/O, git, or a version with errors)

examples:
  parc diff old.par new.par
  parc diff --git origin/main specs/llama3-70b-train.par --format markdown >> comment.md"""


def add_arguments(p):
    p.add_argument("specs", nargs="+", metavar="SPEC", help="OLD.par NEW.par (`-` for one of them: read it from stdin), or one SPEC with --git")
    p.add_argument("--git", metavar="REV", help="compare SPEC at git revision REV (the old side) "
                   "with SPEC in the working tree")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="output format (default: text; markdown for a pull-request comment)")
    p.add_argument("--all", action="store_true", help="show unchanged rows too")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the metrics that changed, no header")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when the plan changed and 0 when it did not (2 on trouble), for CI gates")


# ----------------------------------------------------------------------------- metrics

@dataclass(frozen=True, slots=True)
class Metric:
    key: str          # dotted path into estimate(plan).to_json()
    label: str
    kind: str         # count | params | bytes | seconds | fraction | rate
    better: int = 0   # -1 lower is better, +1 higher is better, 0 neutral
    group: str = ""


METRICS: tuple[Metric, ...] = (
    Metric("world_size", "world size (GPUs)", "count", 0, "mesh"),
    Metric("mesh.pp", "pp", "count", 0, "mesh"),
    Metric("mesh.dp", "dp", "count", 0, "mesh"),
    Metric("mesh.cp", "cp", "count", 0, "mesh"),
    Metric("mesh.tp", "tp", "count", 0, "mesh"),
    Metric("mesh.ep", "ep", "count", 0, "mesh"),
    Metric("microbatches", "microbatches per step", "count", 0, "mesh"),
    Metric("params.most_loaded_gpu", "parameters on the busiest GPU", "params", -1, "mesh"),
    Metric("memory_per_gpu.weights", "weights", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.grads", "gradients", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.optimizer", "optimizer state", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.activations", "activations", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.kv_cache", "KV cache", "bytes", 0, "memory per GPU"),
    Metric("memory_per_gpu.total", "total", "bytes", -1, "memory per GPU"),
    Metric("memory_per_gpu.capacity", "capacity", "bytes", 0, "memory per GPU"),
    Metric("kv_cache.capacity_tokens", "KV cache capacity (tokens)", "count", +1, "memory per GPU"),
    Metric("comm_per_step.tp", "tp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.cp", "cp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.dp", "dp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.pp", "pp", "bytes", -1, "communication per step"),
    Metric("comm_per_step.ep", "ep", "bytes", -1, "communication per step"),
    Metric("bubble_fraction", "pipeline bubble", "fraction", -1, "time"),
    Metric("tokens_per_step", "tokens per step", "count", 0, "time"),
    Metric("step_time", "step time", "seconds", -1, "time"),
    Metric("tokens_per_second", "throughput (tokens/s)", "rate", +1, "time"),
    Metric("mfu", "MFU", "fraction", +1, "time"),
)

HEADLINE = {"step_time": "step time", "memory_per_gpu.total": "memory per GPU", "world_size": "GPUs"}


def _get(d: dict, key: str):
    cur = d
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _with_derived(est: dict) -> dict:
    est = dict(est)
    if "tokens_per_second" not in est and est.get("step_time"):
        est["tokens_per_second"] = est.get("tokens_per_step", 0) / est["step_time"]
    return est


def compare(old: dict, new: dict) -> list[dict]:
    """One row per metric: key, label, group, kind, old, new, delta, relative (None if old is 0),
    and verdict (better | worse | changed | same)."""
    old, new = _with_derived(old), _with_derived(new)
    rows = []
    for m in METRICS:
        a, b = _get(old, m.key), _get(new, m.key)
        if a is None and b is None:
            continue
        a = a or 0
        b = b or 0
        delta = b - a
        same = abs(delta) <= 1e-12 * max(abs(a), abs(b), 1)
        rel = None if a == 0 else delta / a
        if same:
            verdict = "same"
        elif m.better == 0:
            verdict = "changed"
        else:
            verdict = "better" if (delta > 0) == (m.better > 0) else "worse"
        rows.append({"key": m.key, "label": m.label, "group": m.group, "kind": m.kind, "old": a, "new": b,
                     "delta": 0 if same else delta, "relative": None if same else rel, "verdict": verdict})
    return rows


def setting_changes(old_plan: dict, new_plan: dict) -> list[dict]:
    """The resolved settings that differ, as dotted paths (``mesh.tp``: 8 → 4)."""
    a, b = _flatten(old_plan), _flatten(new_plan)
    out = []
    for k in sorted(set(a) | set(b), key=_setting_order):
        if k in ("file",) or k.startswith("targets.") and k.endswith(".name"):
            continue
        if a.get(k) != b.get(k):
            out.append({"path": k, "old": a.get(k), "new": b.get(k)})
    return out


_BLOCK_ORDER = ("model", "cluster", "mesh", "placement", "schedule", "train", "serve", "mode", "targets")


def _setting_order(k: str):
    head = k.split(".", 1)[0]
    return (_BLOCK_ORDER.index(head) if head in _BLOCK_ORDER else len(_BLOCK_ORDER), k)


def _flatten(d, prefix="") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out


# ----------------------------------------------------------------------------- formatting

def fmt_value(v, kind: str) -> str:
    from parc import units

    if v is None:
        return "—"
    style = {"bytes": lambda x: units.si(x, "B"), "params": units.si_count, "rate": units.si_count,
             "seconds": units.seconds_fixed, "fraction": units.percent_fixed}.get(kind)
    if style is not None:
        return style(v)
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{int(v):,}"


def fmt_change(row: dict) -> str:
    if row["verdict"] == "same":
        return ""
    d, kind = row["delta"], row["kind"]
    sign = "+" if d > 0 else "−"
    if kind == "fraction":
        body = f"{sign}{abs(d) * 100:.2f} pt"
    else:
        body = sign + fmt_value(abs(d), kind)
    if row["relative"] is not None and kind != "fraction":
        r = row["relative"]
        body += f" ({'+' if r > 0 else '−'}{abs(r) * 100:.1f}%)" if abs(r) < 100 else f" (×{1 + r:.0f})"
    return body


def headline(rows: list[dict]) -> str:
    by = {r["key"]: r for r in rows}
    parts = []
    for k, label in HEADLINE.items():
        r = by.get(k)
        if r is None or (r["old"] == 0 and r["new"] == 0):
            continue
        s = f"{label} {fmt_value(r['old'], r['kind'])} → {fmt_value(r['new'], r['kind'])}"
        if r["verdict"] != "same":
            s += f" ({fmt_change(r).split(' (')[-1].rstrip(')')})" if r["relative"] is not None else ""
        else:
            s += " (unchanged)"
        parts.append(s)
    return "; ".join(parts)


def _shown(rows, show_all: bool):
    return [r for r in rows if (r["old"] or r["new"]) and (show_all or r["verdict"] != "same"
                                                            or r["key"] in HEADLINE)]


def _setting_value(v) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list) and len(v) > 3 and len(set(map(repr, v))) == 1:
        return f"[{_setting_value(v[0])} × {len(v)}]"
    if isinstance(v, list):
        return "[" + ", ".join(_setting_value(x) for x in v) + "]"
    return str(v)


def render_markdown(old_name: str, new_name: str, rows, changes, show_all=False, errors=()) -> str:
    out = [f"### parc diff: `{new_name}`", "", f"`{old_name}` → `{new_name}`", ""]
    if errors:
        out += ["> [!WARNING]", "> " + ("This plan has errors:" if len(errors) == 1 else "These plans have errors:")]
        out += [f"> - `{_md(e)}`" for e in errors]
        out.append("")
    if not changes:
        out += ["No setting of the resolved plan changed.", ""]
    out += [f"**{headline(rows)}**", ""]
    shown = _shown(rows, show_all)
    if shown:
        out += ["| | old | new | change |", "|---|---:|---:|---:|"]
        group = None
        for r in shown:
            if r["group"] != group:
                group = r["group"]
                out.append(f"| **{group}** | | | |")
            mark = {"better": " ✅", "worse": " ⚠️"}.get(r["verdict"], "")
            out.append(f"| {r['label']} | {fmt_value(r['old'], r['kind'])} | {fmt_value(r['new'], r['kind'])} "
                       f"| {fmt_change(r)}{mark} |")
        out.append("")
    if changes:
        out += [f"<details><summary>{count(len(changes), 'setting')} changed</summary>",
                "", "| setting | old | new |", "|---|---|---|"]
        out += [f"| `{c['path']}` | {_md(_setting_value(c['old']))} | {_md(_setting_value(c['new']))} |"
                for c in changes]
        out += ["", "</details>", ""]
    out.append("<sub>Estimates from `parc explain`'s cost model; memory is the most loaded GPU's.</sub>")
    return "\n".join(out) + "\n"


def _md(s: str) -> str:
    return s.replace("|", "\\|")


def render_text(old_name: str, new_name: str, rows, changes, color=False, show_all=False,
                quiet=False) -> str:
    from parc.report.term import paint as term_paint

    def paint(s, code):
        return term_paint(s, code, color)

    out = []
    if not quiet:
        out += [paint(f"{old_name} → {new_name}", "1"), headline(rows), ""]
        if changes:
            out.append(paint("settings", "1"))
            w = max(len(c["path"]) for c in changes)
            for c in changes:
                out.append(f"  {c['path'].ljust(w)}  {_setting_value(c['old'])} → {_setting_value(c['new'])}")
            out.append("")
        else:
            out += ["no setting of the resolved plan changed", ""]
    shown = _shown(rows, show_all)
    if quiet:
        shown = [r for r in shown if r["verdict"] != "same"]
    if not shown:
        return "\n".join(out).rstrip("\n") + "\n"
    table = [["", "old", "new", "change"]]
    kinds = []
    group = None
    for r in shown:
        if r["group"] != group:
            group = r["group"]
            table.append([group, "", "", ""])
            kinds.append(None)
        table.append(["  " + r["label"], fmt_value(r["old"], r["kind"]), fmt_value(r["new"], r["kind"]),
                      fmt_change(r)])
        kinds.append(r["verdict"])
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    head = table[0]
    out.append(paint(f"{head[0].ljust(widths[0])}  {head[1].rjust(widths[1])}  {head[2].rjust(widths[2])}  "
                     f"{head[3].rjust(widths[3])}".rstrip(), "1"))
    for row, verdict in zip(table[1:], kinds):
        if verdict is None:
            out.append(paint(row[0], "1"))
            continue
        ch = row[3].rjust(widths[3])
        ch = paint(ch, {"better": "32", "worse": "31"}.get(verdict, "")) if verdict in ("better", "worse") else ch
        out.append(f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2].rjust(widths[2])}  {ch}".rstrip())
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- loading

class DiffError(Exception):
    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def _git(args: list[str], cwd: str) -> str:
    import subprocess

    try:
        p = subprocess.run(["git", *args], cwd=cwd or ".", capture_output=True, text=True)
    except OSError as e:
        raise DiffError(f"parc diff: cannot run git: {e.strerror or e}") from None
    if p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["git failed"])[-1]
        raise DiffError(f"parc diff: git {' '.join(args[:2])}: {msg}")
    return p.stdout


def checkout_old(rev: str, spec: str, into: str) -> str:
    """Write SPEC as of REV, and every file it imports at that revision, under ``into``; return
    the path of the old spec there."""
    from parc.resolve.reader import ReadFailure

    import re

    spec_dir = os.path.dirname(os.path.abspath(spec))
    top = _git(["rev-parse", "--show-toplevel"], spec_dir).strip()
    rel = os.path.relpath(os.path.realpath(spec), os.path.realpath(top)).replace(os.sep, "/")
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top)
    except DiffError:
        raise DiffError(f"parc diff: `{rev}` is not a revision of the repository at {top}") from None
    use = re.compile(r'^[ \t]*use[ \t]+"([^"\n]+)"', re.M)
    todo, done = [rel], set()
    while todo:
        r = todo.pop()
        if r in done or r.startswith("../"):
            continue
        done.add(r)
        try:
            text = _git_spec(rev, r, top)
        except DiffError:
            if r == rel:
                raise DiffError(f"parc diff: {spec} does not exist at {rev}")
            continue  # a missing import is reported by the checks
        except ReadFailure as e:
            if r == rel:
                raise DiffError(f"parc diff: cannot read {spec} at {rev}: {e.reason}") from None
            continue  # not written: the checks report the import as missing
        dest = os.path.join(into, *r.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text)
        base = os.path.dirname(r)
        for m in use.finditer(text):
            todo.append(os.path.normpath(os.path.join(base, m.group(1))).replace(os.sep, "/"))
    return os.path.join(into, *rel.split("/"))


def _git_spec(rev: str, rel: str, top: str) -> str:
    """The text of ``rel`` at ``rev``, read under the rules of the spec reader: a regular file
    (a link's target is never followed) of at most 1 MiB. DiffError if it is not there."""
    from parc.resolve.reader import MAX_SPEC_BYTES, ReadFailure, decode, size_words

    entry = _git(["ls-tree", "-l", "--full-tree", rev, "--", rel], top).strip()
    if not entry:
        raise DiffError(f"parc diff: {rel} does not exist at {rev}")
    meta, _, _ = entry.partition("\t")
    mode, kind, sha, size = (meta.split() + ["", "", "", ""])[:4]
    if kind != "blob" or mode not in ("100644", "100755"):
        raise ReadFailure(rel, "it is a link" if mode == "120000" else "it is not a regular file",
                          help="parc reads only regular files")
    if not size.isdigit() or int(size) > MAX_SPEC_BYTES:
        raise ReadFailure(rel, f"is {size_words(int(size)) if size.isdigit() else 'of unknown size'}; "
                          "a spec or an imported file may be at most 1 MiB")
    return decode(_git_bytes(["cat-file", "blob", sha], top))


def _git_bytes(args: list[str], cwd: str) -> bytes:
    import subprocess

    try:
        p = subprocess.run(["git", *args], cwd=cwd or ".", capture_output=True)
    except OSError as e:
        raise DiffError(f"parc diff: cannot run git: {e.strerror or e}") from None
    if p.returncode != 0:
        raise DiffError(f"parc diff: git {' '.join(args[:2])} failed")
    return p.stdout


@dataclass
class Side:
    name: str
    plan: dict
    estimate: dict
    errors: list  # findings that leave an estimate (P3 topology, P4 memory, P6 target)


def load(path: str, root=None, shown: str | None = None) -> Side:
    """The plan and estimate of a spec. A spec whose shapes do not resolve or divide (P0-P2
    errors) has no plan to compare: DiffError with its diagnostics."""
    from parc.api import check_file
    from parc.report.diagnostics.text import render_text as render_diags

    from parc.resolve.reader import READ_CODE, STDIN, STDIN_NAME, ReadFailure, read_stdin

    try:
        if path == STDIN:
            shown = shown or STDIN_NAME
            r = check_file(STDIN_NAME, root=root, text=read_stdin())
        else:
            shown = shown or path
            r = check_file(path, root=root)
    except OSError as e:
        raise DiffError(f"parc: cannot read {path}: {getattr(e, 'reason', None) or e.strerror or e}") from None
    unread = [d for d in r.diagnostics if d.code == READ_CODE]
    if unread:
        raise DiffError(render_diags(unread, r.sources).rstrip("\n"))
    blocking = [d for d in r.errors if d.code[:2] in ("P0", "P1", "P2")]
    est = None
    if r.plan is not None and not blocking:
        from parc.cost.estimate import estimate

        try:
            est = estimate(r.plan).to_json()
        except (ArithmeticError, ValueError):
            est = None
    if est is None:
        text = render_diags(blocking or r.errors, r.sources)
        text = text.replace(r.file, shown)
        raise DiffError(f"parc diff: {shown} has errors, so there is no plan to compare:\n{text}", 1)
    for d in r.errors:
        if d.span.file == r.file:
            d.span = type(d.span)(shown, *(getattr(d.span, f) for f in ("line", "column", "end_line",
                                                                           "end_column", "start", "end")))
    return Side(shown, r.plan.to_dict(), est, r.errors)


def _error_lines(sides) -> list[str]:
    out = []
    for s in sides:
        for d in s.errors:
            out.append(f"{d.span.file}:{d.span.line}:{d.span.column}: {d.code} {d.message}")
    return out


def run(args) -> int:
    import json
    import tempfile

    try:
        if args.git:
            if len(args.specs) != 1:
                raise DiffError("parc diff: with --git give one SPEC (its old version comes from git)")
            new_path = args.specs[0]
            if not os.path.isfile(new_path):
                raise DiffError(f"parc: cannot read {new_path}: No such file or directory")
            with tempfile.TemporaryDirectory(prefix="parc-diff-") as tmp:
                old_path = checkout_old(args.git, new_path, tmp)
                old = load(old_path, root=tmp, shown=f"{args.git}:{new_path}")
        else:
            if len(args.specs) != 2:
                raise DiffError("parc diff: give OLD.par NEW.par, or --git REV SPEC")
            old = load(args.specs[0], root=args.root)
            new_path = args.specs[1]
        new = load(new_path, root=args.root)
    except DiffError as e:
        print(str(e).rstrip("\n"), file=sys.stderr)
        return 2 if args.exit_code else e.code
    rows = compare(old.estimate, new.estimate)
    changes = setting_changes(old.plan, new.plan)
    errors = _error_lines((old, new))
    if args.format == "json":
        print(json.dumps({"old": {"file": old.name, "estimate": old.estimate,
                                  "errors": [d.to_json() for d in old.errors]},
                          "new": {"file": new.name, "estimate": new.estimate,
                                  "errors": [d.to_json() for d in new.errors]},
                          "changes": changes, "metrics": rows}, indent=2))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(old.name, new.name, rows, changes, show_all=args.all, errors=errors))
    else:
        from parc.report.term import use_color

        sys.stdout.write(render_text(old.name, new.name, rows, changes, color=use_color(sys.stdout),
                                     show_all=args.all, quiet=args.quiet))
        for line in errors:
            print(line, file=sys.stderr)
    if args.exit_code:
        if errors:
            return 2
        return 1 if changes or any(r["verdict"] != "same" for r in rows) else 0
    return 1 if errors else 0
