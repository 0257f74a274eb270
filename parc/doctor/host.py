"""The host around the launch: the launch folder on a filesystem every node mounts (a plan of
several nodes), and /dev/shm large enough for NCCL and the engines' worker processes."""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding, node_facts
from parc.model.targets import display
from parc.units import nbytes_binary as size
from parc.words import count

SHM = "/dev/shm"


def mounts(text: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of /proc/mounts (``\\040`` is a space)."""
    out = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 3:
            out.append((cells[1].replace("\\040", " ").replace("\\011", "\t"), cells[2]))
    return out


def filesystem_of(path: str, table: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The mount holding ``path``: the longest mount point it lies under (the last mounted wins)."""
    best = None
    for point, kind in table:
        under = path == point or path.startswith(point.rstrip("/") + "/")
        if under and (best is None or len(point) >= len(best[0])):
            best = (point, kind)
    return best


def check_shared(ctx: Context) -> list[Finding | Passed]:
    if not ctx.multi_node:
        return []
    path = ctx.probes.realpath(ctx.launch_dir)
    mount = filesystem_of(path, mounts(ctx.probes.read("/proc/mounts") or ""))
    if mount is None:
        return []
    point, kind = mount
    shared = node_facts()["filesystems"]["shared"]
    if kind in shared:
        return [Passed("host", f"the launch folder {path} is on {kind} ({point}), which every node can mount")]
    return [finding("D150", "host", f"the launch folder {path} is on {kind} ({point}), a filesystem of this node "
                    f"only; the plan runs on {ctx.plan.cluster.nodes} nodes", path=path, fstype=kind,
                    shared="NFS, Lustre, GPFS, BeeGFS, CephFS, ...")]


def _users(ctx: Context) -> str:
    """Who needs /dev/shm on this node, in words."""
    who = []
    if ctx.plan.cluster.gpus_per_node > 1:
        who.append(f"NCCL between the {count(ctx.plan.cluster.gpus_per_node, 'GPU')} of a node")
    serving = [display(e) for e in ctx.engines() if e in ("vllm", "sglang")]
    if serving:
        who.append(f"{' and '.join(serving)}'s worker processes")
    if ctx.plan.mode == "train":
        who.append("torch's DataLoader workers")
    return " and ".join(who) or "torch's worker processes"


def check_shm(ctx: Context) -> list[Finding | Passed]:
    have = ctx.probes.fs_size(SHM)
    want = node_facts()["shm"]["need"]
    if have is None:
        have = 0
    if have >= want:
        return [Passed("host", f"{SHM} is {size(have)}")]
    return [finding("D151", "host", f"{SHM} is {size(have)}; {_users(ctx)} need at least {size(want)}",
                    shm=have, need=size(want), need_flag=f"{want // 2 ** 30}g" if want % 2 ** 30 == 0 else str(want))]
