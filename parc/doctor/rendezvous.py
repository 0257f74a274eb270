"""Where the nodes meet: node 0's address resolves, its rendezvous port is free on node 0 and
reachable from the others (a plan of several nodes only)."""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding

CHECK = "rendezvous"


def check(ctx: Context) -> list[Finding | Passed]:
    if not ctx.multi_node:
        return []
    addr, source = ctx.master()
    port, port_source = ctx.rendezvous_port()
    if addr is None:
        return [finding("D143", CHECK, f"the plan spans {ctx.plan.cluster.nodes} nodes and no address of node 0 "
                        "is given (--master-addr, MASTER_ADDR)", node_rank=ctx.node_rank)]
    resolved = ctx.probes.resolve(addr)
    if not resolved:
        return [finding("D140", CHECK, f"{addr} (from {source}) does not resolve on this node", master_addr=addr)]
    at = f"{addr} ({', '.join(resolved)})" if resolved != [addr] else addr
    if ctx.node_rank == 0:
        why = ctx.probes.bind(port)
        if why is not None:
            return [finding("D141", CHECK, f"port {port} ({port_source}) cannot be bound on node 0: {why}",
                            port=port, suggest=_free_port(ctx, port),
                            port_hint="" if port_source in ("--port", "MASTER_PORT") else
                            f" (the launch's default is {port}; pass --port to parc doctor to check another)")]
        if not any(ctx.probes.bind(0, a) is None for a in resolved):
            return [finding("D144", CHECK, f"this is node 0, and {at} (from {source}) is not an address of this "
                            "node: the other nodes will look for the rendezvous there", master_addr=addr)]
        return [Passed(CHECK, f"node 0 is {at}; port {port} ({port_source}) is free here")]
    got = ctx.probes.connect(addr, port)
    if got.outcome == "unreachable":
        return [finding("D142", CHECK, f"node 0 at {at} does not answer on port {port} ({port_source}): {got.why}",
                        port=port, master_addr=addr)]
    said = "something listens there already" if got.outcome == "ok" else "nothing listens yet"
    return [Passed(CHECK, f"node 0 at {at} answers on port {port} ({said})")]


def _free_port(ctx: Context, port: int) -> int:
    """The next port above ``port`` that binds here (``port + 1`` when none of the next 20 does)."""
    for p in range(port + 1, min(port + 21, 65536)):
        if ctx.probes.bind(p) is None:
            return p
    return port + 1
