"""Diagnostics as SARIF 2.1.0, as GitHub code scanning accepts it.

A pure function of the diagnostics. The log lists every rule parc knows, in code order,
whether it fired or not, so ``ruleIndex`` and the rule pages stay stable between runs; file
URIs are relative to the folder the run started in (the repository root in CI), with ``/``.
A diagnostic's fixes become the result's ``fixes``: each a replacement of an exact region (an
empty one inserts), with ``properties.safe`` telling the one change ``parc lint --fix`` applies
from alternatives a user chooses between.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

from parc.language.diagnostics import ERROR, NOTE, WARNING, Diagnostic, family

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/parc-dev/parc"
_LEVEL = {ERROR: "error", WARNING: "warning", NOTE: "note"}
_FAMILY = {"P0": "syntax-and-names", "P1": "mesh", "P2": "batch-and-schedule", "P3": "topology",
           "P4": "memory", "P5": "advice", "P6": "target", "P7": "known-defect",
           "P72": "orchestrator-target",   # P720-P729: the orchestrators' own target rules (P6 is full)
           "P73": "trtllm-target"}         # P730-P739: TensorRT-LLM's own target rules


def _uri(file: str) -> str:
    """A repository-relative URI with ``/`` separators (a file URI for paths outside the cwd)."""
    p = file
    if os.path.isabs(p):
        try:
            rel = os.path.relpath(p)
        except ValueError:
            rel = None
        if rel is None or rel.startswith(".."):
            from pathlib import Path

            return Path(p).as_uri()
        p = rel
    p = p.replace(os.sep, "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def _region(span) -> dict:
    end_line = max(span.end_line, span.line)
    end_col = span.end_column
    if end_line == span.line and end_col <= span.column:
        end_col = span.column + 1
    return {"startLine": max(1, span.line), "startColumn": max(1, span.column),
            "endLine": max(1, end_line), "endColumn": max(1, end_col)}


def _fix(fix) -> dict:
    """A SARIF ``fix``: the edits grouped by file, each region exact (an empty region inserts)."""
    by_file: dict[str, list] = {}
    for e in fix.edits:
        s = e.span
        by_file.setdefault(s.file, []).append({
            "deletedRegion": {"startLine": s.line, "startColumn": s.column, "endLine": s.end_line,
                              "endColumn": s.end_column, "charOffset": s.start, "charLength": s.end - s.start},
            "insertedContent": {"text": e.text}})
    return {"description": {"text": fix.message},
            "artifactChanges": [{"artifactLocation": {"uri": _uri(f)}, "replacements": r} for f, r in by_file.items()],
            "properties": {"safe": fix.safe}}


def sarif_rules(severities: dict[str, str] | None = None) -> list[dict]:
    """A reportingDescriptor for every documented code (rules.toml), in code order."""
    from parc.rules import rule_docs
    from parc.targets import load_rules as registry   # every rule, the targets' own included

    docs = rule_docs()
    reg = registry()
    out = []
    for code in sorted(c for c in docs if isinstance(docs[c], dict)):
        d = docs[code]
        r = reg.get(code)
        sev = (severities or {}).get(code) or (r.severity if r else None) or d.get("severity") or ERROR
        title = d.get("title") or d.get("name") or code
        full = d.get("doc") or title
        help_text = full + (f"\n\nThe same rule in other tools: {d['source']}." if d.get("source") else "")
        help_md = f"**{code} {d.get('name', '')}**: {full}" + (
            f"\n\n*Enforced by:* {d['source']}" if d.get("source") else "")
        tags = [_FAMILY.get(family(code), "parc")]
        if r and r.targets and r.targets != ("generic",):
            tags.extend(r.targets)
        entry = {
            "id": code,
            "name": d.get("name", code),
            "shortDescription": {"text": title},
            "fullDescription": {"text": full},
            "help": {"text": help_text, "markdown": help_md},
            "defaultConfiguration": {"level": _LEVEL.get(sev, "warning")},
            "properties": {"tags": tags, "precision": "very-high",
                           "problem.severity": "recommendation" if sev == NOTE else _LEVEL.get(sev, "warning")},
        }
        if d.get("issues"):   # a known defect (P7xx): the public report of the bug
            entry["helpUri"] = d["issues"][0]
        out.append(entry)
    return out


def render_sarif(diags: Sequence[Diagnostic], *, version: str | None = None, ok: bool = True) -> str:
    """One SARIF 2.1.0 log with one run, as GitHub code scanning accepts it."""
    if version is None:
        from parc import __version__ as version
    rules = sarif_rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for d in diags:
        text = d.message + (f"\nhelp: {d.help}" if d.help else "")
        res = {
            "ruleId": d.code,
            "level": _LEVEL.get(d.severity, "warning"),
            "message": {"text": text},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(d.span.file)},
                "region": _region(d.span),
            }}],
        }
        if d.code in index:
            res["ruleIndex"] = index[d.code]
        if d.related:
            res["relatedLocations"] = [
                {"id": i, "message": {"text": r.message}, "physicalLocation": {
                    "artifactLocation": {"uri": _uri(r.span.file)}, "region": _region(r.span)}}
                for i, r in enumerate(d.related)]
        if d.target:
            res["properties"] = {"target": d.target}
        if d.fixes:
            res["fixes"] = [_fix(f) for f in d.fixes]
        results.append(res)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "parc", "version": version, "semanticVersion": version,
                                "informationUri": INFORMATION_URI, "rules": rules}},
            "invocations": [{"executionSuccessful": bool(ok)}],
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(log, indent=2)
