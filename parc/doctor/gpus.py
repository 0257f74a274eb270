"""The node's GPUs against the cluster block: how many, which model, how much memory is free,
and whether the driver runs the CUDA torch was built for.

The devices come from ``nvidia-smi --query-gpu`` (NVIDIA) or ``rocm-smi --json`` (AMD); the
CUDA version the driver supports from ``nvidia-smi``'s header; torch's build from
torch/version.py (:func:`parc.doctor.probes.Probes.torch_build`)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding, node_facts
from parc.units import nbytes_binary as size
from parc.words import count

CHECK = "gpus"
MIB = 2 ** 20
QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.free,driver_version",
         "--format=csv,noheader,nounits"]
ROCM = ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"]


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    total: int        # bytes
    free: int         # bytes
    driver: str = ""


@dataclass(frozen=True)
class Inventory:
    """The GPUs the node shows, by which tool, and why there are none."""
    vendor: str                 # nvidia | amd | "" (none found)
    devices: list[Device]
    driver: str = ""
    cuda: str | None = None     # the CUDA version the driver supports (nvidia-smi's header)
    why_none: str = ""


def parse_query(text: str) -> list[Device]:
    """Rows of ``nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version
    --format=csv,noheader,nounits`` (memory in MiB)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 4 and cells[0].isdigit():
            total = int(float(cells[2])) * MIB if _num(cells[2]) else 0
            free = int(float(cells[3])) * MIB if _num(cells[3]) else total
            out.append(Device(int(cells[0]), cells[1], total, free, cells[4] if len(cells) > 4 else ""))
    return out


def _num(s: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)?", s))


def parse_rocm(text: str) -> list[Device]:
    """``rocm-smi --showproductname --showmeminfo vram --json``: one object per ``cardN``."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    out = []
    for card, info in sorted(data.items()):
        m = re.fullmatch(r"card(\d+)", card)
        if not m or not isinstance(info, dict):
            continue
        low = {k.lower(): str(v) for k, v in info.items()}
        name = low.get("card series") or low.get("card sku") or low.get("card model") or "AMD GPU"
        total = int(low.get("vram total memory (b)", "0") or 0)
        used = int(low.get("vram total used memory (b)", "0") or 0)
        out.append(Device(int(m.group(1)), name, total, total - used))
    return out


def inventory(probes) -> Inventory:
    """The node's GPUs, from nvidia-smi, else rocm-smi."""
    ran = probes.run(QUERY)
    if ran is not None:
        devs = parse_query(ran.out) if ran.code == 0 else []
        if devs:
            head = probes.run(["nvidia-smi"])
            m = re.search(r"CUDA Version:\s*([\d.]+)", head.out if head else "")
            return Inventory("nvidia", devs, devs[0].driver, m.group(1) if m else None)
        why = (ran.err or ran.out).strip().splitlines()
        return Inventory("", [], why_none="nvidia-smi lists no GPU" + (f": {why[0]}" if why else ""))
    rocm = probes.run(ROCM)
    if rocm is not None:
        devs = parse_rocm(rocm.out) if rocm.code == 0 else []
        if devs:
            return Inventory("amd", devs)
        return Inventory("", [], why_none="rocm-smi lists no GPU")
    return Inventory("", [], why_none="nvidia-smi is not installed, nor rocm-smi")


def visible(inv: Inventory, env) -> tuple[list[Device], str]:
    """The devices a process started here sees (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or
    ROCR_VISIBLE_DEVICES hide the others), and the variable that hid some."""
    names = ("CUDA_VISIBLE_DEVICES",) if inv.vendor == "nvidia" else ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                                                     "CUDA_VISIBLE_DEVICES")
    for var in names:
        if var in env:
            items = [x.strip() for x in env[var].split(",") if x.strip()]
            by_index = {d.index: d for d in inv.devices}
            keep = [by_index[int(x)] for x in items if x.isdigit() and int(x) in by_index]
            if any(not x.isdigit() for x in items):   # UUIDs or MIG names: keep the count
                keep = inv.devices[:len(items)]
            return keep, var
    return list(inv.devices), ""


def check(ctx: Context) -> list[Finding | Passed]:
    cl = ctx.plan.cluster
    inv = inventory(ctx.probes)
    if not inv.devices:
        return [finding("D100", CHECK, f"no GPU is present on this node: {inv.why_none}; the cluster block says "
                        f"{cl.gpus_per_node} × {cl.gpu.name} per node", gpus_per_node=cl.gpus_per_node,
                        found=0)]
    devs, var = visible(inv, ctx.env)
    out: list[Finding | Passed] = []
    if len(devs) < cl.gpus_per_node:
        why = (f"{var}={ctx.env[var]} shows {len(devs)} of the {len(inv.devices)}" if var
               else f"{'nvidia-smi' if inv.vendor == 'nvidia' else 'rocm-smi'} lists {len(inv.devices)}")
        out.append(finding("D101", CHECK, f"this node has {count(len(devs), 'GPU')} for the plan ({why}); the "
                           f"cluster block says gpus_per_node = {cl.gpus_per_node}", found=len(devs),
                           gpus_per_node=cl.gpus_per_node, why=f"unset {var} or list {cl.gpus_per_node} devices"
                           if var else "a node with more GPUs, or the job's GPU request"))
    used = devs[:cl.gpus_per_node]
    out += _model(ctx, used)
    out += _free(ctx, used)
    if not any(isinstance(f, Finding) for f in out):
        d = used[0]
        out.insert(0, Passed(CHECK, f"{len(used)} × {d.name} ({size(d.total)}), as the cluster block says"))
    return out + _driver(ctx, inv)


def preset_named(name: str) -> str | None:
    """The GPU preset of a name the driver reports (parc/topo/gpu_names.toml, first match: the
    table `parc topo` names a node's GPU by)."""
    from parc.topo.probe import preset_for

    return preset_for(name)


def matches(preset: str, memory: int, dev: Device) -> bool:
    """Whether device ``dev`` is the cluster's GPU: its name maps to ``preset`` (any name for a
    preset no name maps to) and its total memory is within node.toml's tolerance."""
    facts = node_facts()["gpus"]
    from parc.topo.probe import gpu_names

    named = preset not in gpu_names().values() or preset_named(dev.name) == preset
    return named and abs(dev.total - memory) <= facts["memory_tolerance"] * memory


def _model(ctx: Context, devs: list[Device]) -> list[Finding]:
    gpu = ctx.plan.cluster.gpu
    wrong = [d for d in devs if not matches(gpu.name, gpu.memory, d)]
    if not wrong:
        return []
    d = wrong[0]
    which = (f"the GPUs are {len(wrong)} × {d.name} ({size(d.total)} each)" if len(wrong) == len(devs) else
             f"GPU {d.index} is an {d.name} ({size(d.total)})" + (f", and {count(len(wrong) - 1, 'other')} differ"
                                                                  if len(wrong) > 1 else ""))
    preset = preset_for(d)
    suggest = f"`gpu = {preset}`" if preset else f"`gpu {{ memory = {d.total // MIB}MiB  flops = ...  hbm_bandwidth = ... }}`"
    return [finding("D102", CHECK, f"{which}; the cluster block says {gpu.name} ({size(gpu.memory)})",
                    expected=gpu.name, found=d.name, found_memory=d.total, suggest=suggest)]


def preset_for(dev: Device) -> str | None:
    """The GPU preset a device is: the one its name maps to, when the memory agrees."""
    from parc.resolve.catalog import presets

    name = preset_named(dev.name)
    row = presets("gpus").get(name or "")
    return name if row and matches(name, int(row["memory"]), dev) else None


def need(ctx: Context, dev: Device) -> tuple[float, str, str]:
    """The memory a GPU must have free at start, how the need reads, and what to lower.

    Serving: vLLM stops when the free memory is below gpu_memory_utilization of the total
    (vllm/worker: `Free memory on device ... is less than desired GPU memory utilization`);
    SGLang's mem_fraction_static, which the sglang launch sets from the same field, likewise.
    Training: the peak of the most loaded GPU (:func:`parc.cost.estimate.estimate`)."""
    plan = ctx.plan
    if plan.mode == "serve" and plan.serve is not None:
        from parc.cost.engine import memory_fraction

        u = memory_fraction(plan)
        fits = math.floor(dev.free / dev.total * 100) / 100 if dev.total else 0.0
        return (u * dev.total, f"the engine takes gpu_memory_utilization = {u:g} of {size(dev.total)} = "
                f"{size(u * dev.total)}", f"serve.gpu_memory_utilization to {fits:.2f} or less")
    from parc.cost.estimate import estimate

    try:
        peak = estimate(plan).memory.total
    except Exception:   # a plan whose numbers cannot be computed: parc check says why (D190)
        return 0.0, "", ""
    return peak, f"the plan's peak is {size(peak)} per GPU (parc explain)", "the plan's memory per GPU (parc explain)"


def _free(ctx: Context, devs: list[Device]) -> list[Finding]:
    short = []
    for d in devs:
        want, how, lower = need(ctx, d)
        if d.free < want:
            short.append((d, want, how, lower))
    if not short:
        return []
    d, want, how, lower = short[0]
    more = f" ({count(len(short) - 1, 'other GPU')} likewise)" if len(short) > 1 else ""
    return [finding("D103", CHECK, f"GPU {d.index} has {size(d.free)} free of {size(d.total)}{more}; {how}",
                    gpu=d.index, free=d.free, total=d.total, need=int(want), lower=lower)]


def _major_minor(v: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _driver(ctx: Context, inv: Inventory) -> list[Finding | Passed]:
    """torch's CUDA against what the driver supports (NVIDIA's CUDA Compatibility guide: a
    newer major version fails, a newer minor version runs with minor version compatibility)."""
    build = ctx.probes.torch_build() or {}
    tc, dc = _major_minor(build.get("cuda")), _major_minor(inv.cuda)
    if inv.vendor != "nvidia" or tc is None or dc is None:
        return []
    data = dict(torch_cuda=build["cuda"], driver_cuda=inv.cuda, driver=inv.driver, torch=build.get("version"),
                driver_tag=f"{dc[0]}{dc[1]}")
    said = (f"torch {build.get('version')} was built for CUDA {build['cuda']}; the driver {inv.driver} supports "
            f"CUDA up to {inv.cuda}")
    if tc[0] > dc[0]:
        return [finding("D110", "software", said + ": torch will not see the GPUs", **data)]
    if tc > dc:
        return [finding("D115", "software", said + " (a newer minor version: it runs with minor version "
                        "compatibility, features that need the newer driver may fail)", **data)]
    return [Passed("software", f"driver {inv.driver} (CUDA {inv.cuda}) runs torch {build.get('version')} "
                   f"built for CUDA {build['cuda']}")]
