"""torchrun's own rules."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.base import settings
from parc.targets.torchrun import TARGET
from parc.words import count


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")


@rule("P653", "torchrun-local-rendezvous", targets=(TARGET,))
def local_rendezvous(plan, c):
    ep = settings(plan, TARGET).get("rdzv_endpoint")
    if not ep or plan.cluster.nodes == 1:
        return
    host = ep.rsplit(":", 1)[0] if ep.count(":") == 1 or ep.startswith("[") else ep
    if host.lower() in LOCAL_HOSTS or host.startswith("127."):
        c.report(c.at("target.torchrun.rdzv_endpoint", "target.torchrun"),
                 f"rdzv_endpoint `{ep}` names this machine, so each of the {count(plan.cluster.nodes, 'node')} would host "
                 "its own rendezvous and start a separate world",
                 help="give the address of one node that every node can reach (host:port), or remove "
                      "`rdzv_endpoint` for a static rendezvous at $MASTER_ADDR")
