"""A serving deployment as a spec: what ``parc plan --serve --objective ... -o`` writes, and the
``parc check`` verdict on it that the search ranks by.

One mesh of ``n`` replicas writes ``mesh { ... dp = n }`` (with data-parallel attention the
engine's own dp and ``serve { dp_attention = true }``); two pools write ``serve { prefill { ... }
decode { ... } }`` with each pool's degrees and ``instances``. The cluster block keeps the
cluster's GPUs and links and asks for the nodes the deployment takes (a deployment smaller than
a node takes part of one), so the plan's world is the GPUs it uses.
"""
from __future__ import annotations

import dataclasses
import math

from parc.planner.emit import _label, _val, cluster_block, model_block
from parc.planner.inputs import Problem

_KEPT = ("eplb", "redundant_experts", "eplb_window", "eplb_interval", "two_batch_overlap", "speculative",
         "speculative_tokens", "acceptance_rate", "draft_model")
KV_TRANSFER = "nixl"      # a connector both vLLM (NixlConnector) and SGLang (--disaggregation-transfer-backend nixl) take


def used_cluster(pr: Problem, d):
    """The problem's cluster cut to the nodes ``d`` takes."""
    cl, per = pr.cluster, pr.cluster.gpus_per_node
    if d.disaggregated:
        nodes = sum(math.ceil(n * ic.shape.gpus / per) for ic, n in
                    ((d.prefill, d.prefill_instances), (d.decode, d.instances)))
        return dataclasses.replace(cl, nodes=nodes)
    gpus = d.instances * d.decode.shape.gpus
    if gpus < per:
        return dataclasses.replace(cl, nodes=1, gpus_per_node=gpus)
    return dataclasses.replace(cl, nodes=gpus // per)


def _mesh_keys(pr: Problem, shape, dp: int) -> list[str]:
    sizes = {"pp": shape.pp, "dp": dp, "cp": 1, "tp": shape.tp}
    keys = [f"{ax} = {sizes[ax]}" for ax in pr.order]
    keys += [f"{k} = {getattr(shape, k)}" for k in ("ep", "dcp") if getattr(shape, k) > 1]
    return keys


def deployment_text(pr: Problem, goal, d, formatted: bool = True) -> str:
    """``d`` as a complete spec that ``parc check`` accepts (laid out as ``parc fmt`` would,
    unless ``formatted`` is false: the same plan, its keys unaligned)."""
    from parc.language.fmt import format_text

    srv = pr.serve
    dec = d.decode.shape
    head = (f"# parc plan --serve --objective {goal.objective}: {d.label()}, {d.gpus} GPUs\n"
            f"# {goal.prompt_tokens} prompt + {goal.output_tokens} output tokens, "
            f"{d.batch:.4g} requests per decode step; {goal.targets_text()}\n\n")
    out = model_block(pr.model) + [""] + cluster_block(dataclasses.replace(pr, cluster=used_cluster(pr, d))) + [""]
    if not d.disaggregated:
        out += ["mesh {"] + ["  " + k for k in _mesh_keys(pr, dec, dec.dp if dec.dp_attention else d.instances)]
        out += ["}", ""]
    if pr.placement.links:
        out += ["placement {"] + [f"  {ax} on {where}" for ax, where in pr.placement.links.items()] + ["}", ""]
    out.append("serve {")
    if srv.max_model_len is not None:
        out.append(f"  max_model_len = {srv.max_model_len}")
    if srv.gpu_memory_utilization is not None:   # else the engine's own (not written)
        out.append(f"  gpu_memory_utilization = {_val(srv.gpu_memory_utilization)}")
    for k in ("max_num_seqs", "max_num_batched_tokens"):    # the spec's; else the engine's own (not written)
        if getattr(srv, k) is not None:
            out.append(f"  {k} = {getattr(srv, k)}")
    if srv.kv_cache_dtype != "auto":
        out.append(f"  kv_cache_dtype = {srv.kv_cache_dtype}")
    if dec.dp_attention:
        out.append("  dp_attention = true")
    for k in _KEPT:                          # the spec's own serving settings the search does not choose
        v = getattr(srv, k)
        if v not in (None, False, 0):
            out.append(f"  {k} = {_label(v) if k == 'draft_model' else _val(v)}")
    out += [f"  prompt_tokens = {goal.prompt_tokens}", f"  output_tokens = {goal.output_tokens}",
            f"  concurrency = {goal.concurrency or d.users}"]
    if d.disaggregated:
        out.append(f"  kv_transfer = {srv.kv_transfer or KV_TRANSFER}")
        for name, ic, n in (("prefill", d.prefill, d.prefill_instances), ("decode", d.decode, d.instances)):
            s = ic.shape
            out += [f"  {name} {{"] + ["    " + k for k in _mesh_keys(pr, s, s.dp)] + [f"    instances = {n}", "  }"]
    out += ["}", ""]
    for name in pr.targets:
        text = pr.block_text.get(f"target.{name}")
        out += [text, ""] if text else [f"target {name} {{"] + [
            f"  {k} = {_label(v) if isinstance(v, str) else _val(v)}" for k, v in pr.targets[name].settings.items()
        ] + ["}", ""]
    text = head + "\n".join(out).rstrip() + "\n"
    return format_text(text, "best.par") if formatted else text


def check_text(text: str, targets=()) -> tuple[list[str], list[str], object]:
    """(error codes, warning codes, the plan) ``parc check`` gives a written spec."""
    from parc.api import check_file
    from parc.language.diagnostics import ERROR

    from parc.planner.search import NOT_A_SHAPE

    r = check_file("best.par", targets, text=text)
    errs = sorted({x.code for x in r.diagnostics if x.severity == ERROR and x.code not in NOT_A_SHAPE})
    warns = sorted({x.code for x in r.diagnostics if x.severity != ERROR})
    return errs, warns, r.plan
