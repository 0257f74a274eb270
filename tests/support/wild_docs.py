"""docs/targets.md's "Real configs" section, made from tests/wild/corpus.toml: one row per
corpus entry (its source, target, what parc says, how it compares) and one row per difference
with its reason or the missing work that causes it. ``tests/test_wild.py`` checks the page holds
exactly this text between the two markers; ``PARC_UPDATE_GOLDEN=1`` rewrites it."""
from __future__ import annotations

from support.wild import Entry

BEGIN = "<!-- real-configs: generated from tests/wild/corpus.toml; PARC_UPDATE_GOLDEN=1 rewrites it -->"
END = "<!-- end of real-configs -->"

INTRO = """\
`tests/wild/` holds launch configs published by others, each as it was published (its source,
commit and hash in a `#|` header), with the `.par` that states the same plan. `tests/test_wild.py`
checks each `.par` (accepted, or refused only where the engine itself refuses the plan, as `parc
rules CODE` cites), compiles it for the original's target, runs both launches with every engine
replaced by a recorder, reads each engine's settings the way that engine parses them, and fails on
any difference not listed below, or listed but gone; under `PARC_JUDGES` the engines' own parsers
(vLLM, SGLang, SkyPilot, DeepSpeed's launcher and config, torchtitan's config functions) read both
launches too and must agree. Paths, hosts, ports, images, credentials,
logging, the data pipeline and the optimizer's hyperparameters are set aside. A difference is
either parc's choice (**reason**) or a **gap**: work that is missing, named so it can be closed.
"""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _status(e: Entry) -> str:
    gaps = [d for d in e.differs if d.get("gap")]
    if e.errors and e.errors_gap:
        head = f"refused ({', '.join(e.errors)}): gap"
    elif e.errors:
        head = f"refused by the engine's rule ({', '.join(e.errors)})"
    elif gaps:
        head = "accepted; gaps"
    elif e.differs:
        head = "accepted; differences stated"
    else:
        head = "accepted; same launch"
    return head


def section(entries: list[Entry]) -> str:
    lines = [BEGIN, "", "## Real configs", "", INTRO, "| entry | original | target | status |", "| --- | --- | --- | --- |"]
    for e in entries:
        lines.append(f"| `{e.name}` | {_cell(e.title)} ({_cell(e.source)}) | {e.target} | {_status(e)} |")
    lines += ["", "Each difference, entry by entry (`-`: the side leaves it out and the engine has no default):", "",
              "| entry | setting | original | parc | why |", "| --- | --- | --- | --- | --- |"]
    for e in entries:
        if e.errors_gap:
            lines.append(f"| `{e.name}` | check | runs | {', '.join(e.errors)} | gap: {_cell(e.errors_gap)} |")
        for d in e.differs:
            why = f"gap: {d['gap']}" if d.get("gap") else d.get("reason", "")
            lines.append(f"| `{e.name}` | `{_cell(d['key'])}` | `{_cell(d['original'])}` | `{_cell(d['emitted'])}` "
                         f"| {_cell(why)} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def replace_section(page: str, text: str) -> str:
    if BEGIN in page:
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        return head + text + ("\n" + tail if tail else "")
    return page.rstrip("\n") + "\n\n" + text
