"""The rule registry: each rule is one small function over the resolved plan.

A rule is registered with :func:`rule` and returns (or yields) diagnostics built through its
:class:`Check`; its documentation lives in ``data/rules.toml`` under its code. Families run in
order (P1 mesh, P2 batch and schedule, P3 topology, P4 memory, P5 advice, P6 target) and a
family whose inputs failed is not run, so one mistake gives one error, not a cascade:

* a mesh that does not match the cluster (P101, or P302 when it leaves GPUs idle) stops
  everything but P1 and P6;
* a shape that the mesh does not divide (any P1 error) stops P2, P3 and the P5 advice, whose
  numbers (dp, microbatches, groups) would change with the fix;
* the memory estimate (P4) runs only on a plan whose shapes divide (no P1 or P2 error).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from ..diagnostics import ERROR, NOTE, WARNING, Diagnostic, Related, Span
from ..plan import Plan

GENERIC = "generic"
# Targets whose rules exist; "torch" is parc's own runtime (torchtitan-style), "deepspeed" the
# ZeRO conventions. A spec opts into a target's rules by naming it (`target vllm`) or --target.
TARGET_FAMILIES = ("megatron", "vllm", "torchrun", "torch", "deepspeed", "slurm", "kubernetes")

_MODULES = ("mesh", "batch", "topology", "memory", "advice", "style", "targets")


@dataclass(slots=True)
class Rule:
    code: str
    name: str
    severity: str
    targets: tuple[str, ...]          # ("generic",) or the targets it applies to
    fn: Callable
    family: str = ""

    def doc(self) -> dict:
        return rule_docs().get(self.code, {})


_REGISTRY: dict[str, Rule] = {}


def rule(code: str, name: str, severity: str = ERROR, targets: tuple[str, ...] = (GENERIC,)):
    """Register a rule function ``fn(plan, check) -> iterable of Diagnostic | None``."""

    def deco(fn):
        if code in _REGISTRY:
            raise RuntimeError(f"rule {code} registered twice")
        _REGISTRY[code] = Rule(code, name, severity, tuple(targets), fn, code[:2])
        return fn

    return deco


@dataclass(slots=True)
class Check:
    """What a rule uses to report: the plan's spans and its own code and severity."""

    rule: Rule
    plan: Plan
    target: str | None = None
    out: list[Diagnostic] = field(default_factory=list)

    def report(self, span: Span, message: str, help: str | None = None, *, severity: str | None = None,
               related: list[tuple[Span, str]] | None = None) -> Diagnostic:
        d = Diagnostic(self.rule.code, severity or self.rule.severity, message, span, help=help,
                       related=[Related(s, m) for s, m in (related or [])], target=self.target)
        self.out.append(d)
        return d

    def at(self, *paths: str) -> Span:
        return self.plan.span(*paths)


@lru_cache(maxsize=1)
def rule_docs() -> dict[str, dict]:
    import tomllib

    path = Path(__file__).resolve().parent.parent / "data" / "rules.toml"
    with open(path, "rb") as f:
        return tomllib.load(f)


def registry() -> dict[str, Rule]:
    for m in _MODULES:
        importlib.import_module(f"{__name__}.{m}")
    importlib.import_module("parc.backends").load_checks()  # the backends' own P65x-P69x checks
    return _REGISTRY


def active_targets(plan: Plan, extra: Iterable[str] = ()) -> list[str]:
    names = list(plan.targets)
    for t in extra:
        if t not in names:
            names.append(t)
    return names


def run_rules(plan: Plan, targets: Iterable[str] = (), select: Callable[[str], bool] | None = None
              ) -> list[Diagnostic]:
    """Every applicable rule over ``plan``; ``targets`` adds targets beyond those the spec names."""
    reg = registry()
    tnames = active_targets(plan, targets)
    # runtime-style targets bring the torch rules along
    implied = set(tnames)
    # Slurm and Kubernetes launch torchrun for training and the vllm target's commands for serving
    by_scheduler = bool(implied & {"slurm", "kubernetes"})
    if "torchrun" in implied or (by_scheduler and plan.mode != "serve"):
        implied.add("torch")
    if by_scheduler and plan.mode == "serve":
        implied.add("vllm")
    out: list[Diagnostic] = []
    # a mesh smaller than the cluster (P302, idle GPUs) is a mesh mistake like P101
    idle = 0 < plan.mesh.product < plan.cluster.world
    failed_codes: set[str] = set()
    failed_families: set[str] = set()
    for code in sorted(reg):
        r = reg[code]
        if select is not None and not select(code):
            continue
        fam = r.family
        if "P101" in failed_codes and fam not in ("P1", "P6"):
            continue
        if idle and fam in ("P2", "P3", "P4", "P5") and code != "P302" and not code.startswith("P55"):
            continue
        if "P1" in failed_families and (fam in ("P2", "P3") or (fam == "P5" and not code.startswith("P55"))):
            continue  # P55x are lint's style checks on the text, valid or not
        if fam == "P4" and (failed_families & {"P1", "P2"}):
            continue
        runs = [None] if GENERIC in r.targets else [t for t in r.targets if t in implied]
        for t in runs:
            chk = Check(r, plan, t)
            res = r.fn(plan, chk)
            if res is not None:
                for d in res:
                    if d not in chk.out:
                        chk.out.append(d)
            for d in chk.out:
                if d.severity == ERROR:
                    failed_codes.add(code)
                    failed_families.add(fam)
            out.extend(chk.out)
    return out


__all__ = ["rule", "Rule", "Check", "run_rules", "registry", "rule_docs", "ERROR", "WARNING", "NOTE",
           "GENERIC"]
