"""The GPU of a cluster: a preset from parc/model/data/gpus.toml, or a `gpu { ... }` block that
starts from one (or from nothing) and overrides its figures, with a power limit applied."""
from __future__ import annotations

from parc.language.diagnostics import WARNING, Diagnostic, Span
from parc.model.plan import GPU
from parc.resolve.catalog import presets
from parc.resolve.evaluate import Evaluator, Poison, did_you_mean, rename
from parc.resolve.parts import _FAILED, _Incomplete, _get, _head


_GPU_EXTRA = ("arch", "matmul_efficiency", "fp8_matmul_efficiency", "tdp")


def preset_gpu(name: str) -> GPU:
    """The GPU of a preset in parc/model/data/gpus.toml."""
    g = presets("gpus")[name]
    return GPU(name, int(g["memory"]), float(g["flops"]), float(g.get("hbm_bandwidth", 0)),
               float(g.get("nvlink_bandwidth", 0)), float(g.get("pcie_bandwidth", 0)),
               float(g.get("fp8_flops", 0)), bool(g.get("nvls", False)), str(g.get("arch", "")),
               float(g.get("matmul_efficiency", 0)), float(g.get("fp8_matmul_efficiency", 0)),
               float(g.get("tdp", 0)))


def power_capped(base: dict, watts: float) -> float | None:
    """The share of its peaks a GPU keeps at a power limit of ``watts``: 1 at or above its TDP,
    else linear between the datasheet's low-power point (``low_power`` W, ``low_power_flops``: the
    same die as a lower-power part states it, the H100 NVL for the H100) and the TDP; None where the
    preset gives no low-power point. torchtitan's 500 W H100s: "between SXM and NVL"
    (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md), 835 + (500 - 400) / 300 ·
    (989 - 835) = 886 TFLOPS."""
    tdp = float(base.get("tdp", 0))
    if tdp and watts >= tdp:
        return 1.0
    low, low_flops, flops = base.get("low_power"), base.get("low_power_flops"), base.get("flops")
    if not (tdp and low and low_flops and flops):
        return None
    at = low_flops + (max(watts, low) - low) / (tdp - low) * (flops - low_flops)
    return at / flops


def _group_gpu(r: Evaluator, name: str, span: Span) -> GPU | None:
    """A node group's GPU preset, or None where the name is unknown (reported)."""
    if name in presets("gpus"):
        return preset_gpu(name)
    sug = did_you_mean(name, presets("gpus"))
    r.err("P010", f"unknown GPU preset `{name}`", span,
          help=(f"did you mean `{sug}`? " if sug else "") + "`parc presets` lists them", fixes=rename(span, sug, name))
    return None


def build_gpu(r: Evaluator, top: Span) -> GPU:
    cl = r.blocks["cluster"]
    child = cl.children.get("gpu")
    if child is None:
        try:
            name = r.value("cluster", "gpu")
        except Poison:
            raise _Incomplete()
        if name is None:
            r.err("P018", "the cluster needs a `gpu` (a preset like h100_sxm, or a `gpu { ... }` block)",
                  _head(r, "cluster", top), help="`parc presets` lists the GPU presets")
            raise _Incomplete()
        table = presets("gpus")
        if name not in table:
            a = r.assign("cluster", "gpu")
            sug = did_you_mean(name, table)
            r.err("P010", f"unknown GPU preset `{name}`", a.value.span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "`parc presets` lists them, or describe it "
                       "with `gpu { memory = 80GB; flops = 989TFLOPS }`", fixes=rename(a.value.span, sug, name))
            raise _Incomplete()
        sp = r.spans.get("cluster.gpu")
        for k in ("memory", "flops", "hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth"):
            r.spans[f"cluster.gpu.{k}"] = sp
        return preset_gpu(name)
    # a gpu { ... } block, evaluated with the gpu field table
    r.blocks["gpu"] = child
    try:
        base = r.check_preset("gpus", "gpu")
    except Poison:
        raise _Incomplete()
    base = dict(base or {})
    vals = {}
    failed = False
    for k in ("memory", "flops", "hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth", "fp8_flops", "nvls",
              *_GPU_EXTRA, "power_limit"):
        v = _get(r, "gpu", k)
        if v is _FAILED:
            failed = True
            continue
        if v is None and k in base:
            v = base[k]
        if f"gpu.{k}" in r.spans:
            r.spans[f"cluster.gpu.{k}"] = r.spans[f"gpu.{k}"]
        else:
            r.spans[f"cluster.gpu.{k}"] = child.span
        vals[k] = v
    if failed:
        raise _Incomplete()
    missing = [k for k in ("memory", "flops") if vals.get(k) is None]
    if missing:
        r.err("P018", "the `gpu` block needs " + " and ".join(f"`{k}`" for k in missing), child.span,
              help="for example `memory = 80GB` and `flops = 989TFLOPS` (dense BF16)")
        raise _Incomplete()
    if not vals.get("hbm_bandwidth"):   # every memory-bound kernel would take 0 s
        vals["hbm_bandwidth"] = _nearest_bandwidth(r, float(vals["flops"]), child.span)
    name = child.label or r.values.get("gpu.from") or "custom"
    gpu = GPU(name, int(vals["memory"]), float(vals["flops"]), float(vals.get("hbm_bandwidth") or 0),
              float(vals.get("nvlink_bandwidth") or 0), float(vals.get("pcie_bandwidth") or 0),
              float(vals.get("fp8_flops") or 0), bool(vals.get("nvls") or False), str(vals.get("arch") or ""),
              float(vals.get("matmul_efficiency") or 0), float(vals.get("fp8_matmul_efficiency") or 0),
              float(vals.get("tdp") or 0), float(vals.get("power_limit") or 0))
    if gpu.power_limit and "flops" not in child.assigns:
        _cap_power(r, gpu, base, child)
    return gpu


def _nearest_bandwidth(r: Evaluator, flops: float, span) -> float:
    """A block without `hbm_bandwidth` would time every memory-bound kernel at 0 s: it is timed at
    the memory bandwidth of the preset nearest in dense BF16 peak instead, and P033 says which."""
    import math

    table = {k: g for k, g in presets("gpus").items() if g.get("hbm_bandwidth") and g.get("flops")}
    name = min(sorted(table), key=lambda k: abs(math.log(float(table[k]["flops"]) / flops)))
    bw = float(table[name]["hbm_bandwidth"])
    r.diags.append(Diagnostic(
        "P033", WARNING, f"the `gpu` block gives no `hbm_bandwidth`: parc times what memory bandwidth bounds "
        f"(elementwise kernels, the loss, decoding) at {bw / 1e9:g} GB/s, the bandwidth of {name}, the preset "
        f"nearest in peak FLOPS ({float(table[name]['flops']) / 1e12:g} TFLOPS)", span,
        help=f"state the datasheet's memory bandwidth, `hbm_bandwidth = {bw / 1e9:g}GB/s` if it is {name}'s, or "
             "start from a preset: `from = h100_sxm`"))
    return bw


def _cap_power(r: Evaluator, gpu: GPU, base: dict, child) -> None:
    """A `power_limit` lowers the peaks the block took from its preset (:func:`power_capped`);
    P034 where the preset has no low-power point to scale by."""
    share = power_capped(base, gpu.power_limit)
    if share is None:
        r.err("P034", f"`power_limit = {gpu.power_limit:g}W`: parc has no datasheet point of this GPU at a lower "
              "power to scale its peaks by", r.spans.get("gpu.power_limit", child.span),
              help="give the peaks at that power yourself: `flops = ...` (and `fp8_flops = ...`)")
        raise _Incomplete()
    gpu.flops *= share
    gpu.fp8_flops *= share
