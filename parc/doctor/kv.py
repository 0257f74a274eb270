"""The KV transfer of a disaggregated plan over NIXL (only where the plan has prefill and decode
pools and its engine moves the KV cache with NIXL): the nixl package, the devices
UCX_NET_DEVICES names, and, across nodes, that this node reaches the other pool's nodes on the
ports the launch gives their KV transfer.

The nodes are the launch's: ``PARC_HOSTS`` lists every node's address in the order
:func:`parc.model.pools.instances` places the instances (node.sh reads the same list), and this
node is the one of ``--node-rank``. vLLM's NixlConnector opens its side channel on every
instance of both pools (``VLLM_NIXL_SIDE_CHANNEL_PORT``: the vllm target's NIXL_PORT, plus the
instance's slot on a shared node), where the other side's workers hand-shake before they read or
write the KV blocks, so every node checks every node of the other pool. SGLang's decode servers
register with each prefill server's bootstrap server (--disaggregation-bootstrap-port) and then
exchange ports of their own, so a decode node checks the prefill nodes' bootstrap port. As for
the rendezvous, a refused connection passes: the node answered and nothing listens yet."""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding, node_facts
from parc.doctor.network import IB, NET
from parc.words import count

CHECK = "kv"


def engine(ctx: Context) -> str | None:
    """The engine whose pools move their KV cache over NIXL (vllm or sglang), or None."""
    plan = ctx.plan
    if not plan.pools or plan.serve is None:
        return None
    from parc.targets.sglang import transfer_backend

    for e in ctx.engines():
        if (e == "vllm" and plan.serve.kv_transfer == "nixl") or (e == "sglang" and transfer_backend(plan) == "nixl"):
            return e
    return None


def check(ctx: Context) -> list[Finding | Passed]:
    e = engine(ctx)
    if e is None:
        return []
    return _package(ctx) + _ucx_devices(ctx) + _peers(ctx, e)


def _package(ctx: Context) -> list[Finding | Passed]:
    dists = node_facts()["nixl"]["dists"]
    for d in dists:
        v = ctx.probes.version(d)
        if v:
            return [Passed(CHECK, f"NIXL: {d} {v}")]
    return [finding("D178", CHECK, f"the plan moves its KV cache with NIXL, and neither {' nor '.join(dists)} is "
                    "installed in this Python environment")]


def _ucx_devices(ctx: Context) -> list[Finding | Passed]:
    """UCX_NET_DEVICES: ``mlx5_0:1,eth0`` (an RDMA device and port, or an interface); ``all``."""
    wanted = [w.strip() for w in ctx.env.get("UCX_NET_DEVICES", "").split(",") if w.strip()]
    if not wanted or "all" in wanted:
        return []
    p = ctx.probes
    have = set(p.listdir(IB)) | set(p.listdir(NET))
    missing = [w for w in wanted if w.split(":")[0] not in have]
    if missing:
        return [finding("D179", CHECK, f"UCX_NET_DEVICES={ctx.env['UCX_NET_DEVICES']} names {', '.join(missing)}, "
                        f"which this node does not have (it has {', '.join(sorted(have)) or 'none'})",
                        missing=", ".join(missing), available=", ".join(sorted(have)))]
    return [Passed(CHECK, f"UCX uses {', '.join(wanted)} (UCX_NET_DEVICES), present here")]


def endpoints(ctx: Context, e: str) -> list[tuple[int, int, str]]:
    """(node index, port, what) this node must reach: each instance of the other pool(s)."""
    from parc.model.pools import instances

    placed = instances(ctx.plan)
    here = {i.pool for i in placed if ctx.node_rank in i.nodes}
    out = []
    for inst in placed:
        node = inst.nodes[0]
        if node == ctx.node_rank:
            continue
        if e == "vllm" and here - {inst.pool}:
            from parc.targets.vllm import NIXL_PORT

            out.append((node, NIXL_PORT + inst.first // inst.gpus_per_node,
                        f"{inst.pool} instance {inst.index}'s NIXL side channel"))
        elif inst.pool == "prefill" and "decode" in here:
            from parc.targets.sglang import BOOTSTRAP_PORT

            out.append((node, BOOTSTRAP_PORT, f"prefill instance {inst.index}'s bootstrap server"))
    return out


def _peers(ctx: Context, e: str) -> list[Finding | Passed]:
    from parc.model.pools import nodes_needed

    n = nodes_needed(ctx.plan)
    if n <= 1:
        return []
    hosts = ctx.env.get("PARC_HOSTS", "").split()
    if len(hosts) < n:
        said = f"names {len(hosts)}" if hosts else "is not set"
        return [finding("D181", CHECK, f"the pools run on {n} nodes and PARC_HOSTS {said}: parc doctor cannot "
                        "tell the other pool's nodes to check them", nodes=n)]
    ends = endpoints(ctx, e)
    bad = []
    for node, port, what in ends:
        got = ctx.probes.connect(hosts[node], port)
        if got.outcome == "unreachable":
            bad.append(f"{hosts[node]}:{port} ({what}, node {node}): {got.why}")
    if bad:
        return [finding("D180", CHECK, f"this node cannot reach {len(bad)} of the other pool's KV-transfer ports: "
                        + "; ".join(bad), peers="; ".join(bad), ports=", ".join(sorted({b.split(' ')[0] for b in bad})))]
    if not ends:
        return []
    return [Passed(CHECK, f"the other pool answers on its {count(len(ends), 'KV-transfer port')}: "
                   + ", ".join(f"{hosts[n]}:{p}" for n, p, _ in ends))]
