"""``parc diff --format markdown``: a pull-request comment."""
from __future__ import annotations

from parc.printable import printable
from parc.report.diff.values import fmt_change, fmt_value, headline, setting_value, shown_rows
from parc.words import count


def render_markdown(old_name: str, new_name: str, rows, changes, show_all=False, errors=()) -> str:
    old_name, new_name = printable(old_name), printable(new_name)
    out = [f"### parc diff: `{new_name}`", "", f"`{old_name}` → `{new_name}`", ""]
    if errors:
        out += ["> [!WARNING]", "> " + ("This plan has errors:" if len(errors) == 1 else "These plans have errors:")]
        out += [f"> - `{_md(printable(e))}`" for e in errors]
        out.append("")
    if not changes:
        out += ["No setting of the resolved plan changed.", ""]
    out += [f"**{headline(rows)}**", ""]
    shown = shown_rows(rows, show_all)
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
        out += [f"| `{c['path']}` | {_md(setting_value(c['old']))} | {_md(setting_value(c['new']))} |"
                for c in changes]
        out += ["", "</details>", ""]
    out.append("<sub>Estimates from `parc explain`'s cost model; memory is the most loaded GPU's.</sub>")
    return "\n".join(out) + "\n"


def _md(s: str) -> str:
    return s.replace("|", "\\|")
