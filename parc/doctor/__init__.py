"""parc doctor: a node's pre-flight check against a plan, before the launch.

Each check reads the node through :class:`parc.doctor.probes.Probes` (fakes in tests) and returns
findings (codes D1xx of ``findings.toml``: the cause, the fix, the numbers) and what it passed.
:func:`diagnose` runs them all; ``Report.ready`` is what the exit status says.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from parc.doctor.context import Context
from parc.doctor.findings import ERROR, Finding, Passed, finding

SCHEMA_VERSION = 1


@dataclass
class Report:
    spec: str
    node_rank: int
    nodes: int
    findings: list[Finding] = field(default_factory=list)
    passed: list[Passed] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not any(f.severity == ERROR for f in self.findings)

    def to_json(self) -> dict:
        """The shape docs/doctor.md documents (``version`` 1)."""
        errors = sum(f.severity == ERROR for f in self.findings)
        return {"version": SCHEMA_VERSION, "spec": self.spec, "node_rank": self.node_rank, "nodes": self.nodes,
                "ready": self.ready, "errors": errors, "warnings": len(self.findings) - errors,
                "findings": [f.to_json() for f in self.findings], "passed": [p.to_json() for p in self.passed]}


def checks():
    """Every check, in the order the report reads: the GPUs, the software, the networks, the
    fabric the expert all-to-all needs (DeepEP, EFA), the rendezvous and its address, the KV
    transfer between pools, the host, the topology. Each runs only where the plan needs it."""
    from parc.doctor import fabric, gpus, host, kv, names, network, rendezvous, software, topology

    return (gpus.check, software.check, network.check_interfaces, network.check_rdma, fabric.check_deepep,
            fabric.check_efa, rendezvous.check, names.check, kv.check, host.check_shared, host.check_shm,
            topology.check)


def diagnose(ctx: Context, spec_errors: int = 0) -> Report:
    """Run every check on the node ``ctx`` describes."""
    rep = Report(ctx.spec or ctx.plan.source or ctx.plan.file, ctx.node_rank, ctx.plan.cluster.nodes)
    if spec_errors:
        rep.findings.append(finding("D190", "spec", f"parc check finds {spec_errors} error(s) in the spec",
                                    spec=rep.spec, errors=spec_errors))
    for run in checks():
        for item in run(ctx):
            (rep.findings if isinstance(item, Finding) else rep.passed).append(item)
    return rep
