"""The generated parts of docs/import.md: the flag tables, made from each engine target's
``flags.toml`` (the table ``parc compile`` writes from and ``parc import`` reads through), and
the orchestrators' objects, made from ``objects.toml`` beside the readers; so the page cannot
drift from either (tests/test_import_docs.py compares them)."""
from __future__ import annotations

ENGINES = ("vllm", "sglang", "megatron", "megatron_deepspeed", "torchtitan", "deepspeed", "torchrun")
BEGIN = "<!-- flag-tables: generated from parc/targets/*/flags.toml; PARC_UPDATE_GOLDEN=1 rewrites it -->"
END = "<!-- end of flag-tables -->"
OBJECTS_BEGIN = "<!-- object-tables: generated from parc/importer/objects.toml; PARC_UPDATE_GOLDEN=1 rewrites it -->"
OBJECTS_END = "<!-- end of object-tables -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _spellings(entry: dict) -> str:
    out = []
    for n in entry.get("names", []):
        span = ", ".join(x for x in (f"since {n['since']}" if n.get("since") else "",
                                     f"until {n['until']}" if n.get("until") else "") if x)
        alias = "alias" if n.get("alias") else ""
        note = "; ".join(x for x in (span, alias) if x)
        out.append(f"`{n['name']}`" + (f" ({note})" if note else ""))
    return ", ".join(out)


def _key(entry: dict) -> str:
    key = entry.get("key")
    if key:
        keys = key if isinstance(key, list) else [key]
        return ", ".join(f"`{k}`" for k in keys)
    if entry.get("plumbing"):
        return "wiring: parc writes it from the cluster and node"
    if entry.get("read"):
        return "read by the importer's rule"
    return "`extra_args`"


def table(engine: str) -> str:
    from parc.model.targets import display, flag_table, holds, newest

    rows = [f"### {display(engine)} (`--target {engine}`)", "",
            "| option | `.par` key | import | notes |", "|---|---|---|---|"]
    for what, e in flag_table(engine).items():
        how = ("plumbing" if e.get("plumbing") else f"rule `{e['read']}`" if e.get("read") else
               "value" if e.get("key") else "carried")
        if not any(holds(engine, newest(engine), n.get("since"), n.get("until")) for n in e.get("names", [])):
            how = f"not carried: {display(engine)} {newest(engine)} has no such option"
        elif e.get("emitted") is False:
            how += "; never emitted"
        rows.append(f"| {_spellings(e) or '`' + what + '`'} | {_key(e)} | {how} | {_cell(e.get('doc', ''))} |")
    return "\n".join(rows) + "\n"


def section() -> str:
    return BEGIN + "\n\n" + "\n".join(table(e) for e in ENGINES) + "\n" + END


def objects() -> dict:
    """objects.toml: for each orchestrator, its object's title and rows (field, key, how)."""
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).parent / "objects.toml").read_text(encoding="utf-8"))


def objects_section() -> str:
    out = [OBJECTS_BEGIN, ""]
    for o in objects().values():
        out += [f"### {o['title']}", "", "| field | `.par` key | how |", "|---|---|---|"]
        out += [f"| {_cell(r['field'])} | {', '.join(f'`{k.strip()}`' for k in r['key'].split(',')) if r['key'] else '—'} "
                f"| {_cell(r['how'])} |" for r in o["rows"]]
        out.append("")
    return "\n".join(out) + OBJECTS_END


def _replace(page: str, begin: str, end: str, text: str) -> str:
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return head + text + tail


def replace_section(page: str) -> str:
    """``page`` with its generated sections replaced by today's flags.toml and objects.toml."""
    return _replace(_replace(page, BEGIN, END, section()), OBJECTS_BEGIN, OBJECTS_END, objects_section())
