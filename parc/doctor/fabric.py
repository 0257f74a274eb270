"""The fabric the plan's expert all-to-all needs: DeepEP (only where the spec's engine block names
a DeepEP backend for a mixture-of-experts model) and AWS EFA (only where the cluster's inter_node
link is efa). node.toml [deepep] and [efa] say what each needs, with the sources.

DeepEP v1 runs on NVSHMEM: across nodes it needs IBGDA, enabled in the NVIDIA driver
(/proc/driver/nvidia/params: ``EnableStreamMemOPs: 1``, ``PeerMappingOverride=1`` among the
``RegistryDwords``) or CPU-assisted through GDRCopy (the gdrdrv module and /dev/gdrdrv);
GPUDirect RDMA (nvidia_peermem in /proc/modules, or dma-buf: the open kernel modules, as
/proc/driver/nvidia/version says, on Linux 5.12 or later); NICs whose driver is mlx5_core; and
NVSHMEM itself. DeepEP v2 runs on NCCL's Gin backend: NCCL recent enough, and GPUDirect RDMA
across nodes."""
from __future__ import annotations

import os

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding, node_facts
from parc.doctor.network import IB
from parc.words import count

CHECK = "fabric"
PARAMS = "/proc/driver/nvidia/params"


def numbers(version: str) -> tuple[int, ...]:
    """``2.30.4`` -> (2, 30, 4), the leading numeric components of a library's version."""
    out = []
    for part in version.replace("-", ".").replace("+", ".").split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def deepep(ctx: Context) -> set[str]:
    """The DeepEP generations the launch runs (``v1``, ``v2``): the engine blocks' all-to-all
    backend (node.toml [deepep.backends]), for a model with experts."""
    if not ctx.plan.model.is_moe:
        return set()
    out = set()
    for engine, b in node_facts()["deepep"]["backends"].items():
        if engine not in ctx.engines():
            continue
        name = ctx.plan.target_settings(engine).get(b["key"])
        out |= {gen for gen in ("v1", "v2") if name in b[gen]}
    return out


def modules(probes) -> set[str]:
    """The loaded kernel modules (/proc/modules' first column)."""
    return {line.split()[0] for line in (probes.read("/proc/modules") or "").splitlines() if line.split()}


def driver_params(probes) -> dict[str, str] | None:
    """/proc/driver/nvidia/params as ``{name: value}`` (values unquoted), None without the driver."""
    text = probes.read(PARAMS)
    if text is None:
        return None
    return {k.strip(): v.strip().strip('"') for k, _, v in (ln.partition(":") for ln in text.splitlines()) if k.strip()}


def rdma_drivers(probes) -> dict[str, str]:
    """Each RDMA device of /sys/class/infiniband and the kernel driver behind it."""
    return {dev: os.path.basename(probes.realpath(f"{IB}/{dev}/device/driver")) for dev in probes.listdir(IB)}


def check_deepep(ctx: Context) -> list[Finding | Passed]:
    gens = deepep(ctx)
    out: list[Finding | Passed] = []
    if "v1" in gens:
        out += _nvshmem(ctx)
        if ctx.multi_node:
            out += _ibgda(ctx) + _gpudirect(ctx) + _ibgda_nics(ctx)
    if "v2" in gens:
        out += _nccl(ctx)
        if ctx.multi_node and "v1" not in gens:
            out += _gpudirect(ctx)
    return out


def _installed(probes, dists: list[str]) -> tuple[str, str] | None:
    """The first of ``dists`` installed, with its version."""
    for d in dists:
        v = probes.version(d)
        if v:
            return d, v
    return None


def _nvshmem(ctx: Context) -> list[Finding | Passed]:
    facts, p = node_facts()["deepep"], ctx.probes
    found = _installed(p, facts["nvshmem_dists"])
    need = facts["nvshmem_min"]
    if found and numbers(found[1]) < numbers(need):
        return [finding("D173", CHECK, f"DeepEP v1 needs NVSHMEM {need} or later; {found[0]} {found[1]} is installed",
                        need=need, found=f"{found[0]} {found[1]}")]
    if found:
        return [Passed(CHECK, f"NVSHMEM: {found[0]} {found[1]}")]
    home = ctx.env.get("NVSHMEM_DIR")
    if home and any(n.startswith("libnvshmem_host") for n in p.listdir(f"{home}/lib")):
        return [Passed(CHECK, f"NVSHMEM in {home} (NVSHMEM_DIR)")]
    ran = p.run(["ldconfig", "-p"])
    if ran is not None and "libnvshmem_host" in ran.out:
        return [Passed(CHECK, "NVSHMEM in the linker's cache (ldconfig -p)")]
    return [finding("D173", CHECK, f"DeepEP v1 needs NVSHMEM {need} or later, and this node has none (no "
                    f"{' or '.join(facts['nvshmem_dists'])}, no NVSHMEM_DIR, no libnvshmem_host in ldconfig -p)",
                    need=need, found="none")]


def _ibgda(ctx: Context) -> list[Finding | Passed]:
    p = ctx.probes
    params = driver_params(p)
    if params is None:
        return []   # no NVIDIA driver here: the gpus check says so (D100)
    stream = params.get("EnableStreamMemOPs") == "1"
    peer = "PeerMappingOverride=1" in params.get("RegistryDwords", "")
    if stream and peer:
        return [Passed(CHECK, "IBGDA enabled in the NVIDIA driver (EnableStreamMemOPs=1, PeerMappingOverride=1)")]
    loaded, device = "gdrdrv" in modules(p), "gdrdrv" in p.listdir("/dev")
    if loaded and device:
        return [Passed(CHECK, "IBGDA CPU-assisted through GDRCopy (gdrdrv loaded, /dev/gdrdrv): it works, "
                       "slower than IBGDA enabled in the driver")]
    if loaded:
        return [finding("D172", CHECK, "the gdrdrv module is loaded on the host but /dev/gdrdrv is missing here, "
                        "and the NVIDIA driver does not enable IBGDA: DeepEP's NVSHMEM has no IBGDA path")]
    missing = [k for k, ok in (("NVreg_EnableStreamMemOPs=1", stream), ("PeerMappingOverride=1", peer)) if not ok]
    return [finding("D170", CHECK, f"IBGDA is off: the NVIDIA driver lacks {' and '.join(missing)} ({PARAMS}), "
                    "and GDRCopy's gdrdrv is not loaded; DeepEP v1 hangs or fails at its first dispatch across "
                    "nodes", missing=" and ".join(missing))]


def _gpudirect(ctx: Context) -> list[Finding | Passed]:
    p = ctx.probes
    if "nvidia_peermem" in modules(p):
        return [Passed(CHECK, "GPUDirect RDMA through nvidia_peermem")]
    version = p.read("/proc/driver/nvidia/version")
    if version is None:
        return []
    kernel = (p.read("/proc/sys/kernel/osrelease") or "").strip()
    need = node_facts()["deepep"]["dmabuf_kernel"]
    open_modules = "Open Kernel Module" in version
    if open_modules and numbers(kernel) >= numbers(need):
        return [Passed(CHECK, f"GPUDirect RDMA through dma-buf (open kernel modules, Linux {kernel})")]
    why = ("the proprietary kernel modules cannot share GPU memory by dma-buf" if not open_modules
           else f"dma-buf needs Linux {need} or later, this node runs {kernel or 'an unknown kernel'}")
    return [finding("D171", CHECK, f"no GPUDirect RDMA: nvidia_peermem is not loaded, and {why}; the NICs cannot "
                    "read GPU memory, so DeepEP's transfers between nodes fail", kernel=kernel)]


def _ibgda_nics(ctx: Context) -> list[Finding | Passed]:
    drivers = rdma_drivers(ctx.probes)
    if not drivers:
        return []   # no RDMA device at all: the rdma check says so where the cluster wants one (D130)
    ok = node_facts()["deepep"]["ibgda_nic_drivers"]
    good = sorted(d for d, drv in drivers.items() if drv in ok)
    if good:
        return [Passed(CHECK, f"IBGDA-capable NICs: {', '.join(good)}")]
    seen = ", ".join(f"{d} ({drv})" for d, drv in sorted(drivers.items()))
    return [finding("D175", CHECK, f"DeepEP v1 drives the NICs with IBGDA, which NVSHMEM opens only on "
                    f"{', '.join(ok)} devices; this node has {seen}", devices=seen)]


def _nccl(ctx: Context) -> list[Finding | Passed]:
    facts = node_facts()["deepep"]
    found = _installed(ctx.probes, facts["nccl_dists"])
    need = facts["nccl_min"]
    if found and numbers(found[1]) >= numbers(need):
        return [Passed(CHECK, f"NCCL for DeepEP v2: {found[0]} {found[1]}")]
    have = f"{found[0]} {found[1]} is installed" if found else f"neither {' nor '.join(facts['nccl_dists'])} is installed"
    return [finding("D174", CHECK, f"DeepEP v2 runs on NCCL's Gin backend, NCCL {need} or later; {have}",
                    need=need, found=f"{found[0]} {found[1]}" if found else "none")]


def check_efa(ctx: Context) -> list[Finding | Passed]:
    inter = ctx.plan.cluster.inter_node
    if not ctx.multi_node or inter is None or inter.kind != "efa":
        return []
    facts, p = node_facts()["efa"], ctx.probes
    devices = sorted(d for d, drv in rdma_drivers(p).items() if drv == facts["driver"])
    if not devices:
        return [finding("D176", CHECK, "the cluster's inter_node link is efa, and /sys/class/infiniband lists no "
                        f"device of the {facts['driver']} driver")]
    out: list[Finding | Passed] = [Passed(CHECK, f"{count(len(devices), 'EFA device')}: {', '.join(devices)}")]
    ran = p.run(["fi_info", "-p", facts["provider"]])
    if ran is None or ran.code != 0:
        why = "fi_info is not installed" if ran is None else f"fi_info -p {facts['provider']} finds no provider"
        out.append(finding("D177", CHECK, f"libfabric's {facts['provider']} provider is missing ({why}): NCCL's "
                           "aws-ofi-nccl plugin and UCCL-EP cannot open the EFA devices"))
    else:
        out.append(Passed(CHECK, f"libfabric's {facts['provider']} provider"))
    return out
