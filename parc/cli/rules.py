"""parc rules: list the diagnostic codes, or print one code's page."""
from __future__ import annotations

import sys

DESCRIPTION = "List every diagnostic code with its name, family, severity and targets, or explain one."
EPILOG = """examples:
  parc rules                    every code
  parc rules P1                 the mesh-divisibility family
  parc rules --target megatron  the codes that apply when compiling for Megatron-LM
  parc rules --target vllm --version 0.29
                                the codes in force for vLLM 0.29 (default: the newest)
  parc rules P102               one code's page
  parc rules --format json"""

FAMILIES = {
    "P0": "syntax and names",
    "P1": "mesh divisibility",
    "P2": "batch and schedule",
    "P3": "topology",
    "P4": "memory",
    "P5": "advice",
    "P6": "target",
    "P7": "known defects",
    "P72": "orchestrator targets",   # the P6 codes ran out: P720-P729 are the orchestrators' own target rules
    "P73": "TensorRT-LLM target",    # P730-P739: TensorRT-LLM's own target rules
}

def add_arguments(p):
    p.add_argument("codes", nargs="*", metavar="CODE",
                   help="codes (P102) or families (P1) to show; a single code prints its page")
    from parc.cli.targets import add_target

    add_target(p, repeatable=False, help="only codes that apply for this target (generic ones included)")
    p.add_argument("--version", metavar="V", help="with --target: the codes in force for this release of the "
                                                    "target (default: the newest parc knows)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")


def catalog() -> list[dict]:
    """Every code: registered rules and the documented codes reported elsewhere (P0 front end, lint)."""
    from parc.language.diagnostics import family
    from parc.rules import GENERIC, rule_docs
    from parc.targets import load_rules

    docs = rule_docs()
    reg = load_rules()
    out = []
    for code in sorted(set(docs) | set(reg)):
        d = docs.get(code, {})
        r = reg.get(code)
        out.append({
            "code": code,
            "name": r.name if r else d.get("name", ""),
            "title": d.get("title", ""),
            "family": family(code),
            "family_name": FAMILIES.get(family(code), ""),
            "severity": r.severity if r else d.get("severity", "error"),
            "targets": list(r.targets) if r else [GENERIC],
            "doc": d.get("doc", ""),
            "source": d.get("source"),
            "targets_audit": d.get("targets", {}),
            "since": d.get("since"),
            "until": d.get("until"),
            "issues": list(d.get("issues", [])),
            "defined_in": _where(r.fn) if r else None,
        })
    return out


def _where(fn) -> str:
    """``parc/rules/mesh.py:85``: where a rule's check is written."""
    from pathlib import Path

    code = fn.__code__
    root = Path(__file__).resolve().parent.parent.parent
    try:
        path = Path(code.co_filename).resolve().relative_to(root)
    except ValueError:
        path = Path(code.co_filename)
    return f"{path.as_posix()}:{code.co_firstlineno}"


def _wrap(text: str, width: int = 88, indent: str = "") -> str:
    import textwrap

    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent)


def _page(e: dict) -> str:
    lines = [f"{e['code']} {e['name']}: {e['title']}",
             f"family {e['family']} ({e['family_name']}) · severity {e['severity']} · "
             f"targets {', '.join(e['targets'])}", "", _wrap(e["doc"] or "(no documentation)")]
    if e.get("source"):
        lines += ["", _wrap(f"source: {e['source']}")]
    if e.get("targets_audit"):
        lines += ["", "where each target refuses it:"]
        for t, a in e["targets_audit"].items():
            if a.get("same_as") == "engine":
                from parc.model.targets import default_engine, engine_key, engines

                defaults = sorted({default_engine(t, m) for m in ("train", "serve")} & set(engines(t)))
                lines.append(_wrap(f"{t}: as engine, the target its `{engine_key(t)['key']}` key names (it launches "
                                   f"{', '.join(engines(t))}; default {' or '.join(defaults)})", indent="  "))
                continue
            if "same_as" in a:
                lines.append(_wrap(f"{t}: as {a['same_as']} (it launches {a['same_as']})", indent="  "))
                continue
            text = f"{t}: {a.get('fails', '')} ({a.get('source', '')}): {a.get('check', '')}"
            if a.get("since") or a.get("until"):
                text += f" [{_releases({**a, 'targets': [t]})}]"
            if a.get("note"):
                text += f"; {a['note']}"
            lines.append(_item(text))
    if e.get("since") or e.get("until"):
        lines.append(f"releases: {_releases(e)}")
    if e.get("until") and e["family"] == "P7":
        lines.append(f"fixed in: {_releases({**e, 'since': e['until'], 'until': None})}")
    for url in e.get("issues") or []:
        lines.append(f"public report: {url}")
    if e.get("defined_in"):
        lines.append(f"check: {e['defined_in']}")
    return "\n".join(lines)


def _item(text: str) -> str:
    import textwrap

    return textwrap.fill(text, width=88, initial_indent="  ", subsequent_indent="    ")


def _releases(e: dict) -> str:
    """``vLLM before 0.30``: the releases of its target a version-bound rule holds for."""
    from parc.model.targets import span_text, versions

    target = next((t for t in e["targets"] if versions(t)), e["targets"][0])
    return span_text(target, e.get("since"), e.get("until"))


def _table(entries: list[dict]) -> str:
    if not entries:
        return "no codes match"
    w = max(len(e["name"]) for e in entries)
    rows = [f"{'CODE':<5} {'NAME':<{w}}  {'FAMILY':<21} {'SEVERITY':<8} TARGETS"]
    for e in entries:
        fam = f"{e['family']} {e['family_name']}"
        bound = f" ({_releases(e)})" if e.get("since") or e.get("until") else ""
        rows.append(f"{e['code']:<5} {e['name']:<{w}}  {fam:<21} {e['severity']:<8} {', '.join(e['targets'])}{bound}")
    return "\n".join(rows)


def _for_release(entries: list[dict], target: str, version: str | None) -> tuple[list[dict], str | None]:
    """The entries in force for ``version`` of ``target`` (default: the newest), and the line that
    says which release the list is for (None for a target without releases)."""
    from parc.model.targets import display, holds, newest, versions

    known = versions(target)
    version = version or newest(target)

    def in_force(e: dict) -> bool:   # a family's rules (vLLM's under slurm) follow its newest release
        bound = [t for t in e["targets"] if versions(t)]
        return not bound or any(holds(t, version if t == target else newest(t), e.get("since"), e.get("until"))
                                for t in bound)

    kept = [e for e in entries if in_force(e)]
    if not known:
        return kept, None
    which = "the newest parc knows" if version == known[-1] else f"the newest parc knows is {known[-1]}"
    return kept, f"in force for {display(target)} {version} ({which}; --version picks one of {', '.join(known)})"


def _version_error(args) -> str | None:
    """Why ``--version`` cannot be honoured (no --target, a target without releases, an unknown
    release), or None."""
    from parc.model.targets import display, versions
    from parc.resolve.evaluate import did_you_mean

    if args.version is None:
        return None
    if not args.target:
        return "--version needs --target (the release of which target?)"
    known = versions(args.target)
    if not known:
        return f"parc knows no releases of {display(args.target)}: leave --version out"
    if args.version not in known:
        near = did_you_mean(args.version, known)
        return (f"{display(args.target)} {args.version} is not a release parc knows"
                + (f"; did you mean {near}?" if near else "") + f" (it knows {', '.join(known)})")
    return None


def run(args) -> int:
    import json

    problem = _version_error(args)
    if problem:
        print(f"parc: {problem}", file=sys.stderr)
        return 2
    entries = catalog()
    by_code = {e["code"]: e for e in entries}
    wanted = [c.upper() for c in args.codes]
    unknown = [c for c in wanted if c not in by_code and c not in FAMILIES]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], list(by_code), n=1)
        print(f"parc: unknown code `{args.codes[[c.upper() for c in args.codes].index(unknown[0])]}`"
              + (f"; did you mean {near[0]}?" if near else "") + " (`parc rules` lists them)", file=sys.stderr)
        return 2
    if wanted:
        entries = [e for e in entries if e["code"] in wanted or e["family"] in wanted]
    if args.target:
        t = args.target
        from parc.model.targets import implied as with_families

        implied = with_families([t])   # the rule families it brings in any mode
        entries = [e for e in entries if "generic" in e["targets"] or implied & set(e["targets"])]
        entries, release = _for_release(entries, t, args.version)
    else:
        release = None
    single = len(wanted) == 1 and wanted[0] in by_code
    if args.format == "json":
        print(json.dumps(entries[0] if single else entries, indent=2, ensure_ascii=False))
        return 0
    if single:
        print(_page(entries[0]))
    else:
        print(_table(entries))
        if release and entries:
            print(release)
    return 0
