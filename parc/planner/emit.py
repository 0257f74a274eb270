"""The best plan as a spec: what ``parc plan -o`` writes (the ranked table and why the runner-up
lost are printed by ``parc.report.plan``)."""
from __future__ import annotations

import dataclasses

from decimal import Decimal

from parc.model.plan import GPU, Model
from parc.model.fields import BLOCKS
from parc.planner.inputs import Problem
from parc.planner.plans import placement_links, stage_split, written
from parc.planner.search import SearchResult
from parc.report.plan import summary_line

# --- numbers as spec text ------------------------------------------------------------------------

_BYTES = (("TB", 10**12), ("TiB", 2**40), ("GB", 10**9), ("GiB", 2**30), ("MB", 10**6), ("MiB", 2**20),
          ("KB", 10**3))
_BW = (("TB/s", 10**12), ("GB/s", 10**9), ("Gb/s", 125 * 10**6), ("MB/s", 10**6), ("Mb/s", 125 * 10**3),
       ("KB/s", 10**3))
_FLOPS = (("PFLOPS", 10**15), ("TFLOPS", 10**12), ("GFLOPS", 10**9))


def _exact(x) -> Decimal:
    return Decimal(int(x)) if float(x).is_integer() else Decimal(repr(float(x)))


def quantity(x, units, base: str) -> str:
    """``x`` base units in spec syntax, exactly: a whole number below 10,000 of some unit
    (``450GB/s``, ``100Gb/s``), else at most three decimals (``362.5TFLOPS``), else whole base
    units (``85520809984B``)."""
    d = _exact(x)
    for unit, f in units:
        q = d / f
        if q == q.to_integral_value() and 1 <= q < 10000:
            return f"{int(q)}{unit}"
    for unit, f in units:
        q = d / f
        if 1 <= q < 10000 and q == q.quantize(Decimal("0.001")):
            return f"{format(q.normalize(), 'f')}{unit}"
    if d == d.to_integral_value():
        return f"{int(d)}{base}"
    return f"{format(d.normalize(), 'f')}{base}"


def _label(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _val(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


# --- blocks --------------------------------------------------------------------------------------

def model_block(m: Model) -> list[str]:
    """A ``model`` block that resolves to ``m``: ``from = preset`` plus what differs from it."""
    from parc.cost import estimate as costmodel
    from parc.planner.inputs import load_model

    lines = [f"model {_label(m.name)} {{"]
    base = None
    if m.preset:
        try:
            base = load_model(m.preset)
        except Exception:   # a preset that no longer loads: write every field
            base = None
    if base is not None:
        lines.append(f"  from = {m.preset}")
    keys = [k for k in BLOCKS["model"] if k != "from"]
    for k in keys:
        v = getattr(m, k)
        if base is not None:
            if k == "params":
                if v == costmodel.param_count(m):
                    continue
            elif getattr(base, k) == v:
                continue
        else:
            if k == "params" and v == costmodel.param_count(m):
                continue
            if k == "head_dim" and (v is None or v == m.hidden // m.heads):
                continue
            if v is None or (k in _MODEL_DEFAULTS and _MODEL_DEFAULTS[k] == v):
                continue
        if k in ("moe_ffn_hidden", "top_k", "shared_experts", "moe_every") and not m.experts:
            continue
        lines.append(f"  {k} = {_val(v)}")
    lines.append("}")
    return lines


# what a model block may leave out: each field's default, read from the Model it resolves to (one
# place, so a field added there is not restated as a value the language refuses, e.g. router_groups = 0);
# not checkpoint_format, which the resolver derives from dtype when a block leaves it out
_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Model)
                   if f.default is not dataclasses.MISSING and f.name != "checkpoint_format"}


def _gpu_preset(g: GPU) -> bool:
    from parc.resolve.resolver import presets

    p = presets("gpus").get(g.name)
    if not p:
        return False
    return (int(p["memory"]) == g.memory and float(p["flops"]) == g.flops
            and float(p.get("hbm_bandwidth", 0)) == g.hbm_bandwidth
            and float(p.get("nvlink_bandwidth", 0)) == g.nvlink_bandwidth
            and float(p.get("pcie_bandwidth", 0)) == g.pcie_bandwidth
            and float(p.get("fp8_flops", 0)) == g.fp8_flops and bool(p.get("nvls", False)) == g.nvls)


def cluster_block(pr: Problem) -> list[str]:
    cl = pr.cluster
    lines = [f"cluster {_label(cl.name)} {{", f"  nodes = {cl.nodes}", f"  gpus_per_node = {cl.gpus_per_node}"]
    if cl.nvlink_domain is not None:
        lines.append(f"  nvlink_domain = {cl.nvlink_domain}")
    g = cl.gpu
    if _gpu_preset(g):
        lines.append(f"  gpu = {g.name}")
    else:
        head = "  gpu {" if g.name == "custom" else f"  gpu {_label(g.name)} {{"
        lines += [head, f"    memory = {quantity(g.memory, _BYTES, 'B')}",
                  f"    flops = {quantity(g.flops, _FLOPS, 'FLOPS')}"]
        for k in ("hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth"):
            if getattr(g, k):
                lines.append(f"    {k} = {quantity(getattr(g, k), _BW, 'B/s')}")
        if g.fp8_flops:
            lines.append(f"    fp8_flops = {quantity(g.fp8_flops, _FLOPS, 'FLOPS')}")
        if g.nvls:
            lines.append("    nvls = true")
        lines.append("  }")
    for k in ("intra_node", "inter_node"):
        ln = getattr(cl, k)
        if ln is not None:
            lines.append(f"  {k} = {ln.kind}({quantity(ln.bandwidth, _BW, 'B/s')})")
    for k in ("cuda_context", "nccl_buffers"):     # the framework overheads the cluster overrides
        if getattr(cl, k, None) is not None:
            lines.append(f"  {k} = {quantity(getattr(cl, k), _BYTES, 'B')}")
    if getattr(cl, "fragmentation", None) is not None:
        lines.append(f"  fragmentation = {cl.fragmentation:g}")
    lines.append("}")
    return lines


def plan_text(res: SearchResult, i: int = 0) -> str:
    """Reported plan ``i`` as a complete, formatted spec that ``parc check`` accepts."""
    from parc.language.fmt import format_text

    pr, c = res.problem, res.plans[i]
    out = [f"# parc plan: rank {c.rank} of {res.valid:,} plans that fit ({res.candidates_evaluated:,} evaluated)",
           "# " + summary_line(pr, c), ""]
    out += model_block(pr.model) + [""] + cluster_block(pr) + [""]
    w = written(pr, c)
    out.append("mesh {")
    out += [f"  {ax} = {getattr(c, ax)}" for ax in w["mesh"]]
    out += ["}", ""]
    if "placement" in w:
        out.append("placement {")
        for ax, where in placement_links(pr, c).items():
            out.append(f"  {ax} on {where}")
        if c.layers == "balanced":
            out.append("  layers = balanced")
        elif c.layers == "explicit":
            lay = stage_split(pr, "explicit", c.pp * c.virtual_stages) or []
            out.append(f"  layers = [{', '.join(str(x) for x in lay)}]")
        for mp in pr.placement.modules:
            out.append(f"  {_label(mp.pattern)} = " +
                       ("replicate" if mp.style == "replicate" else f"{mp.style}({mp.axis})"))
        out += ["}", ""]
    values = {"schedule": {"pipeline": c.pipeline, "virtual_stages": c.virtual_stages, "micro_batch": c.micro_batch,
                           "global_batch": c.global_batch},
              "train": {"zero": c.zero, "sequence_parallel": c.sequence_parallel, "recompute": c.recompute},
              "serve": {"max_num_seqs": c.max_num_seqs}}
    for blk in ("schedule", "train", "serve"):
        if blk not in w:
            continue
        src = pr.train if blk == "train" else pr.serve
        out.append(blk + " {")
        for k in w[blk]:
            v = values[blk][k] if k in values[blk] else getattr(src, k)
            out.append(f"  {k} = {_val(v)}")
        out += ["}", ""]
    for name in pr.targets:
        text = pr.block_text.get(f"target.{name}")
        if text:
            out += [text, ""]
        else:
            out += [f"target {name} {{"] + [f"  {k} = {_setting(v)}" for k, v in pr.targets[name].settings.items()] \
                + ["}", ""]
    return format_text("\n".join(out).rstrip() + "\n", "best.par")


def launch_targets(pr: Problem, names) -> tuple[Problem, list[str]]:
    """``pr`` with a ``target`` block for each of ``names`` the spec lacks, holding the keys the
    target cannot do without that the planner knows (vLLM's and SGLang's `model`: the Hugging
    Face id of the model's preset), so that the written spec compiles for it; and a note for
    each key only the user knows (the script torchrun starts), which is asked for, never made up."""
    from dataclasses import replace

    from parc.model.plan import Target
    from parc.model.targets import example, required
    from parc.resolve.catalog import hub_id

    from parc.model.targets import names as folders

    targets, notes, text = dict(pr.targets), [], dict(pr.block_text)
    for name in [n for n in names if n in folders()]:   # a rule family (torch) has no block
        settings = dict(targets[name].settings) if name in targets else {}
        for key, what in required(name, pr.mode):
            if key in settings:
                continue
            hub = hub_id(pr.model) if example(name, key) == "hub_id" else None
            if hub:
                settings[key] = hub
                text.pop(f"target.{name}", None)   # the spec's block, written again with the key
            else:
                notes.append(f"give `target {name}` its `{key}` ({what}) before `parc compile --target {name}`")
        targets[name] = Target(name, settings)
    return replace(pr, targets=targets, block_text=text), notes


def default_targets(pr: Problem, named) -> list[str]:
    """The targets a written plan is for: those named (``--target``), else the spec's own, else
    for a serving search the engine it models (vLLM: its rank order, expert layout and
    benchmark workload, docs/planner.md); a training search models no one launcher."""
    if named:
        return list(named)
    if pr.targets:
        return list(pr.targets)
    return ["vllm"] if pr.mode == "serve" else []


def _setting(v) -> str:
    if isinstance(v, str):
        return _label(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_setting(x) for x in v) + "]"
    return _val(v)
