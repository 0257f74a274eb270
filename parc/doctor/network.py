"""The networks NCCL and Gloo will use: the socket interfaces (NCCL_SOCKET_IFNAME,
GLOO_SOCKET_IFNAME, the cluster's socket_ifname), the InfiniBand/RoCE devices and their ports,
whether NCCL_IB_DISABLE hides them, and the locked-memory limit RDMA needs.

Interfaces are read from /sys/class/net/<if>/operstate and flags, RDMA ports from
/sys/class/infiniband/<dev>/ports/<n>/state ("4: ACTIVE") and link_layer (InfiniBand or
Ethernet: RoCE)."""
from __future__ import annotations

from dataclasses import dataclass

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding
from parc.targets.base import nccl_env, plain_ifname
from parc.units import nbytes_binary as size
from parc.words import count

NET = "/sys/class/net"
IB = "/sys/class/infiniband"
RDMA_LINKS = ("infiniband", "roce")


def interfaces(probes) -> dict[str, bool]:
    """Every interface of the node and whether it is up: operstate ``up``, or ``unknown`` (lo,
    some virtual devices) with the IFF_UP flag set."""
    out = {}
    for name in probes.listdir(NET):
        state = (probes.read(f"{NET}/{name}/operstate") or "").strip()
        flags = (probes.read(f"{NET}/{name}/flags") or "0").strip()
        try:
            up_flag = bool(int(flags, 16) & 1)
        except ValueError:
            up_flag = False
        out[name] = state == "up" or (state == "unknown" and up_flag)
    return out


def _matches(spec: str, names) -> list[str]:
    """Interfaces one NCCL_SOCKET_IFNAME item selects: a prefix, or ``=name`` exactly."""
    if spec.startswith("="):
        return [n for n in names if n == spec[1:]]
    return [n for n in names if n.startswith(spec)]


def _others(ifs: dict[str, bool]) -> str:
    ups = [n for n, up in ifs.items() if up and n != "lo" and not n.startswith("docker")]
    return ", ".join(ups) or "none is up but lo"


def _wanted(ctx: Context) -> tuple[str | None, str]:
    """The NCCL_SOCKET_IFNAME the launch will run with, and where it comes from: the environment
    wins over the cluster's socket_ifname, which the launch exports only where it is unset."""
    env = ctx.env.get("NCCL_SOCKET_IFNAME")
    if env:
        return env, "NCCL_SOCKET_IFNAME"
    if ctx.plan.cluster.socket_ifname:
        return ctx.plan.cluster.socket_ifname, "the cluster's socket_ifname"
    return None, ""


def _items(ctx: Context, spec: str, source: str) -> list[tuple[str, str]]:
    """(NCCL_SOCKET_IFNAME item, where it comes from) for NCCL's prefixes (none for an ``^``
    exclusion) and Gloo's exact names (``=name``): GLOO_SOCKET_IFNAME from the environment, else
    the plain names of the cluster's socket_ifname, which the launch exports for Gloo."""
    out = [] if spec.startswith("^") else [(s, source) for s in spec.split(",") if s]
    env = ctx.env.get("GLOO_SOCKET_IFNAME")
    gloo, where = (env, "GLOO_SOCKET_IFNAME") if env else (plain_ifname(ctx.plan.cluster.socket_ifname),
                                                            "the cluster's socket_ifname")
    seen = {s.lstrip("=") for s, _ in out if s.startswith("=")}
    return out + [(f"={g}", where) for g in (gloo or "").split(",") if g and g not in seen]


def check_interfaces(ctx: Context) -> list[Finding | Passed]:
    ifs = interfaces(ctx.probes)
    spec, source = _wanted(ctx)
    out: list[Finding | Passed] = []
    own = ctx.plan.cluster.socket_ifname
    if ctx.env.get("NCCL_SOCKET_IFNAME") and own and ctx.env["NCCL_SOCKET_IFNAME"] != own:
        out.append(finding("D122", "network", f"NCCL_SOCKET_IFNAME={ctx.env['NCCL_SOCKET_IFNAME']} in the "
                           f"environment wins over the cluster's socket_ifname = \"{own}\"",
                           env_value=ctx.env["NCCL_SOCKET_IFNAME"], cluster_value=own))
    if spec is None:
        if ctx.multi_node and len([n for n, up in ifs.items() if up and n != "lo" and not n.startswith("docker")]) > 1:
            out.append(finding("D123", "network", f"this node has several networks up ({_others(ifs)}) and "
                               "neither socket_ifname nor NCCL_SOCKET_IFNAME names one", available=_others(ifs)))
        return out
    wanted = _items(ctx, spec, source)
    missing = [(w, src) for w, src in wanted if not _matches(w, ifs)]
    if missing:
        names = ", ".join(dict.fromkeys(w.lstrip("=") for w, _ in missing))
        out.append(finding("D120", "network", f"{missing[0][1]} names {names}, which this node does not have "
                           f"(it has {', '.join(ifs) or 'no interface'})", ifname=names, available=_others(ifs)))
        return out
    chosen = sorted({n for w, _ in wanted for n in _matches(w, ifs)})
    dead = [(w.lstrip("="), src) for w, src in wanted if not any(ifs[n] for n in _matches(w, ifs))]
    if dead:
        out.append(finding("D121", "network", f"{dead[0][0]}, the interface {dead[0][1]} names, is down",
                           ifname=dead[0][0], available=_others(ifs)))
        return out
    if chosen:
        out.append(Passed("network", f"NCCL and Gloo use {', '.join(chosen)} ({source}), up"))
    return out


@dataclass(frozen=True)
class Port:
    device: str
    port: str
    state: str        # ACTIVE, DOWN, INIT, ARMED, ...
    link: str         # InfiniBand | Ethernet (RoCE)

    def __str__(self):
        return f"{self.device} port {self.port} {self.state}"


def rdma_ports(probes) -> list[Port]:
    out = []
    for dev in probes.listdir(IB):
        for port in probes.listdir(f"{IB}/{dev}/ports"):
            state = (probes.read(f"{IB}/{dev}/ports/{port}/state") or "").strip()
            link = (probes.read(f"{IB}/{dev}/ports/{port}/link_layer") or "InfiniBand").strip()
            out.append(Port(dev, port, state.split(":", 1)[-1].strip() or "UNKNOWN", link))
    return out


def _ib_disabled(ctx: Context) -> tuple[bool, str]:
    """Whether NCCL will run with NCCL_IB_DISABLE=1, and who sets it."""
    if "NCCL_IB_DISABLE" in ctx.env:
        return ctx.env["NCCL_IB_DISABLE"].strip() == "1", "the environment"
    launch = {e.name: e.value for e in nccl_env(ctx.plan)}
    return launch.get("NCCL_IB_DISABLE") == "1", "the launch (the cluster's inter_node is ethernet)"


def check_rdma(ctx: Context) -> list[Finding | Passed]:
    inter = ctx.plan.cluster.inter_node
    kind = inter.kind if inter is not None else None
    if not ctx.multi_node:
        return []
    ports = rdma_ports(ctx.probes)
    active = [p for p in ports if p.state == "ACTIVE"]
    disabled, who = _ib_disabled(ctx)
    if kind not in RDMA_LINKS:
        if active and kind == "ethernet":
            return [finding("D133", "rdma", f"the cluster's inter_node link is ethernet, and this node has "
                            f"{count(len(active), 'active RDMA port')} ({', '.join(map(str, active))})",
                            active=[str(p) for p in active])]
        return []
    if not ports:
        return [finding("D130", "rdma", f"the cluster's inter_node link is {kind}, and {IB} lists no device")]
    if not active:
        down = ", ".join(map(str, ports))
        return [finding("D131", "rdma", f"no InfiniBand/RoCE port is active: {down}", down=down)]
    out: list[Finding | Passed] = []
    if disabled:
        out.append(finding("D132", "rdma", f"NCCL_IB_DISABLE=1 (set by {who}) hides "
                           f"{count(len(active), 'active RDMA port')} ({', '.join(map(str, active))}) from NCCL; the cluster's inter_node link is {kind}",
                           where=" in the job's environment" if who == "the environment" else ""))
    else:
        down = [p for p in ports if p.state != "ACTIVE"]
        out.append(Passed("rdma", f"{count(len(active), 'active RDMA port')}: {', '.join(p.device for p in active)}"
                          + (f" ({', '.join(map(str, down))})" if down else "")))
    return out + _memlock(ctx)


def _memlock(ctx: Context) -> list[Finding | Passed]:
    limit = ctx.probes.memlock()
    if limit is None:
        return [Passed("rdma", "locked memory unlimited")]
    return [finding("D152", "rdma", f"the locked-memory limit is {size(limit)} (ulimit -l: {limit // 1024}); "
                    "RDMA registers NCCL's buffers against it, and NCCL asks for unlimited", memlock=limit)]
