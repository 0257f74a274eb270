"""The numbers and settings of a diff in words: 60.1 GB, 2.27B, 1.5 ms, 12.50%, +4.0 GB (+7.1%)."""
from __future__ import annotations

from parc.printable import printable

from parc import units
from parc.report.diff.metrics import HEADLINE


def fmt_value(v, kind: str) -> str:
    """A metric's value in the comparison style of ``parc.units`` (fixed decimals, so the old
    and new columns line up)."""
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


def shown_rows(rows, show_all: bool):
    return [r for r in rows if (r["old"] or r["new"]) and (show_all or r["verdict"] != "same"
                                                            or r["key"] in HEADLINE)]


def setting_value(v) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list) and len(v) > 3 and len(set(map(repr, v))) == 1:
        return f"[{setting_value(v[0])} × {len(v)}]"
    if isinstance(v, list):
        return "[" + ", ".join(setting_value(x) for x in v) + "]"
    return printable(str(v))
