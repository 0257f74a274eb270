"""``parc diff`` for a terminal: the settings that changed, then the metrics as a table."""
from __future__ import annotations

from parc.printable import printable
from parc.report import term
from parc.report.diff.values import fmt_change, fmt_value, headline, setting_value, shown_rows


def render_text(old_name: str, new_name: str, rows, changes, color=False, show_all=False,
                quiet=False) -> str:
    def paint(s, code):
        return term.paint(s, code, color)

    out = []
    if not quiet:
        out += [paint(printable(f"{old_name} → {new_name}"), "1"), headline(rows), ""]
        if changes:
            out.append(paint("settings", "1"))
            w = max(len(c["path"]) for c in changes)
            for c in changes:
                out.append(f"  {c['path'].ljust(w)}  {setting_value(c['old'])} → {setting_value(c['new'])}")
            out.append("")
        else:
            out += ["no setting of the resolved plan changed", ""]
    shown = shown_rows(rows, show_all)
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
