"""Findings: what parc doctor reports, each a code of ``findings.toml`` with its numbers.

A :class:`Finding` carries its code, name, severity, a message in the user's quantities, the
fix (the table's template filled with the finding's ``data``) and that data, which is also the
JSON form's ``data``. A :class:`Passed` is a check that found nothing wrong, with what it saw.
"""
from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ERROR, WARNING = "error", "warning"


@lru_cache(maxsize=1)
def table() -> dict[str, dict]:
    """findings.toml: code -> {name, severity, title, doc, fix}."""
    with open(HERE / "findings.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def node_facts() -> dict:
    """node.toml: engines, GPU names, shared filesystems, /dev/shm, rendezvous ports."""
    with open(HERE / "node.toml", "rb") as f:
        return tomllib.load(f)


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: str
    check: str          # the check that found it: gpus, software, network, rdma, fabric, rendezvous, kv, host, topology, spec
    message: str
    fix: str
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"code": self.code, "name": self.name, "severity": self.severity, "check": self.check,
                "title": table()[self.code]["title"], "message": self.message, "fix": self.fix,
                "data": self.data}


@dataclass(frozen=True)
class Passed:
    check: str
    detail: str

    def to_json(self) -> dict:
        return {"check": self.check, "detail": self.detail}


def fill(template: str, data: dict) -> str:
    """The table's fix with the finding's numbers (a key the data lacks stays as written)."""
    class _Keep(dict):
        def __missing__(self, key):
            return "{" + key + "}"

    return string.Formatter().vformat(template, (), _Keep(data))


def finding(code: str, check: str, message: str, **data) -> Finding:
    """Finding ``code`` of ``findings.toml`` with its message and the numbers its fix names."""
    row = table()[code]
    return Finding(code, row["name"], row["severity"], check, message, fill(row["fix"], data), data)
