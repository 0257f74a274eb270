"""What node 0's address resolves to here (a plan of several nodes): a name every node must
resolve to the same reachable address. A loopback answer (Debian's ``127.0.1.1 <hostname>`` in
/etc/hosts) sends every node to itself; a name with only IPv6 addresses hangs SGLang, whose
rendezvous and bootstrap resolve IPv4 (sglang#7478, sglang#2892; ai-dynamo/dynamo#3019 for the
AAAA-only case); a name with several addresses lets the processes of different nodes pick
different ones (meta-pytorch/monarch#4619: a node whose /etc/hosts gives its own name an IPv6
address its peers' DNS does not have). :mod:`parc.doctor.rendezvous` checks first that the
address resolves at all and answers."""
from __future__ import annotations

import ipaddress

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding

CHECK = "rendezvous"


def _ip(text: str):
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def check(ctx: Context) -> list[Finding | Passed]:
    if not ctx.multi_node:
        return []
    addr, source = ctx.master()
    if addr is None:
        return []
    resolved = sorted(set(ctx.probes.resolve(addr)))
    ips = [ip for ip in map(_ip, resolved) if ip is not None]
    if not ips:
        return []   # does not resolve: D140
    literal = _ip(addr) is not None
    data = dict(master_addr=addr, addresses=", ".join(resolved))
    loop = [str(ip) for ip in ips if ip.is_loopback]
    if loop:
        return [finding("D183", CHECK, f"{addr} (from {source}) resolves to {', '.join(loop)} on this node, a "
                        "loopback address: every node would look for node 0 on itself", **data)]
    if not literal and all(ip.version == 6 for ip in ips) and "sglang" in ctx.engines():
        return [finding("D182", CHECK, f"{addr} (from {source}) resolves only to IPv6 ({', '.join(resolved)}): "
                        "SGLang's rendezvous and bootstrap look up IPv4 addresses and hang", **data)]
    if not literal and len(ips) > 1:
        return [finding("D184", CHECK, f"{addr} (from {source}) resolves to {len(ips)} addresses here "
                        f"({', '.join(resolved)}): the nodes' processes may bind and connect to different ones", **data)]
    return [Passed(CHECK, f"{addr} resolves to one address, {resolved[0]}")]
