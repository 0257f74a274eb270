"""The search space: every combination of parallel degrees and settings worth costing.

The space is built in three layers, each pruned before the next is multiplied out:

1. mesh shapes (pp, dp, cp, tp, ep, etp): divisors of the world size only, and only shapes whose
   degrees split the model's widths and keep their groups where the rules require;
2. per mesh shape, schedule options (pipeline, virtual stages, micro batch, microbatches, layer
   split) that the batch and schedule rules accept;
3. per schedule option, the training options (zero stage, recompute, sequence parallel).

Every filter here mirrors an error rule of :mod:`parc.rules` (named next to it), so a
row dropped here is a plan ``parc check`` would refuse; nothing is dropped for being slow. The
mesh invariants are :mod:`parc.model.dims`'s, the same predicates the rules word.
Definitional choices that shape the space (not pruning) are:

* ``sequence_parallel`` is only tried with tp > 1 (without TP it changes nothing);
* pp = 1 runs no pipeline: its schedule is ``1f1b`` with one virtual stage;
* gpipe and 1f1b hold one stage per rank; dualpipe_v two; interleaved_1f1b and zero_bubble
  2 to ``Problem.max_virtual`` (and at most layers / pp); dualpipe two copies of one stage
  (virtual_stages = 1, the model cut into pp stages);
* the layer split is ``even`` when pp · virtual_stages divides the layers, else ``balanced``;
* expert tensor parallelism splits experts within the TP group: etp divides tp (Megatron-LM's
  default is etp = tp, torchtitan's etp = 1 or tp);
* serving searches tp, pp, dp and ep with cp = 1.
"""
from __future__ import annotations

from dataclasses import replace

from parc.model.dims import (ParallelDims, auto_degree, divisors, grid_fits, seq_cp_ok, seq_sp_ok, splits,
                             tp_fits_model)
from parc.model.fields import PIPELINES
from parc.model.rankmap import RankMap
from parc.model.targets import runs_pipeline
from parc.planner.inputs import Problem

# the recompute options, by index; the search tries the first three, torchtitan's per-op selective
# checkpointing only where the spec fixes it
RECOMPUTE = ("none", "selective", "full", "selective_op")
SEARCHED_RECOMPUTE = RECOMPUTE[:3]
SPLITS = ("even", "balanced", "explicit")


def _fixed(pr: Problem, path: str, values):
    """``values`` restricted to the one a spec fixed (if any)."""
    if path in pr.fixed:
        want = pr.fixed[path]
        return [x for x in values if x == want]
    return list(values)


# --- mesh shapes ---------------------------------------------------------------------------------

def tp_splits_model(pr: Problem, t: int) -> bool:
    """P102 heads % tp, P103 kv_heads split or replicated, P106 ffn / shared-expert widths % tp;
    for the torch runtime also P108 vocab % tp and P110 kv_heads % tp (no replication)."""
    if t <= 1:
        return True
    torch = "torch" in pr.rule_targets
    return tp_fits_model(pr.model, t, replicate_kv=not torch) and (not torch or splits(pr.model.vocab, t))


def mesh_shapes(pr: Problem) -> list[tuple[int, int, int, int, int, int]]:
    """Every (pp, dp, cp, tp, ep, etp) whose product is the world and that the P1/P3 rules accept."""
    m, cl = pr.model, pr.cluster
    world = cl.world
    train = pr.mode == "train"
    if m.head_dim is None and m.hidden % m.heads:                       # P111: no shape works
        return []
    out = []
    for tp in _fixed(pr, "mesh.tp", divisors(world)):
        if not tp_splits_model(pr, tp):
            continue
        for cp in _fixed(pr, "mesh.cp", divisors(world // tp) if train else [1]):
            if train and not seq_cp_ok(m.seq_len, cp):               # P114
                continue
            if cp > 1 and "deepspeed" in pr.rule_targets:             # P686: DeepSpeed has no cp
                continue
            for pp in _fixed(pr, "mesh.pp", divisors(world // (tp * cp))):
                if pp > m.layers:                                    # P104/P105: a layer per stage
                    continue
                if pp > 1 and m.tied_embeddings and "torch" in pr.rule_targets:   # P610
                    continue
                dp = auto_degree(world, tp * cp * pp)
                if "mesh.dp" in pr.fixed and pr.fixed["mesh.dp"] != dp:
                    continue
                for ep, etp in _expert_grids(pr, pp, dp, cp, tp):
                    if _groups_ok(pr, pp, dp, cp, tp, ep, etp):
                        out.append((pp, dp, cp, tp, ep, etp))
    return out


def _expert_grids(pr: Problem, pp: int, dp: int, cp: int, tp: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs: P109 experts % ep, P112 ep·etp | dp·cp·tp, P113 moe_ffn_hidden % etp, and
    the targets' P606 (vLLM: ep spans the stage, etp = 1), P632 (torchtitan 0.3.0: etp = 1), P612
    (Megatron-LM: no etp with biases), P613 (Megatron-LM: expert dp = dp unless pp is outermost)."""
    m = pr.model
    dims = ParallelDims(pp=pp, dp=dp, cp=cp, tp=tp)
    region = dims.region
    if not m.is_moe:
        return [(e, t) for e in _fixed(pr, "mesh.ep", [1]) for t in _fixed(pr, "mesh.etp", [1])]
    tg = pr.rule_targets
    out = []
    # vLLM spreads experts unevenly (P109 is a warning there); Megatron-LM and torch refuse it
    uneven_ok = pr.mode == "serve" and "vllm" in tg and not tg & {"megatron", "torch"}
    for ep in _fixed(pr, "mesh.ep", divisors(region)):
        if not splits(m.experts, ep) and not uneven_ok:
            continue
        for etp in _fixed(pr, "mesh.etp", [t for t in divisors(tp) if grid_fits(region, ep, t)]):
            if not splits(m.moe_ffn_hidden, etp):
                continue
            if "vllm" in tg and pr.mode == "serve" and (etp > 1 or (ep > 1 and ep != region)):
                continue
            if "torchtitan" in tg and etp > 1:                  # P632 (0.3.0 has no etp)
                continue
            if "megatron" in tg and m.bias and etp > 1:
                continue
            if "megatron" in tg and pp > 1 and dp > 1 and (ep > 1 or etp > 1) and \
                    replace(dims, ep=ep, etp=etp).expert_dp != dp:
                order = [ax for ax in pr.order if {"pp": pp, "dp": dp, "cp": cp, "tp": tp}[ax] > 1]
                if order.index("dp") < order.index("pp"):
                    continue
            out.append((ep, etp))
    return out


def rank_map(pr: Problem, mesh: tuple) -> RankMap:
    """The rank map of a mesh shape (pp, dp, cp, tp, ep, etp) under the problem's axis order (vLLM's own,
    dp, pp, cp, tp, when it serves: the topology rules judge that one).

    Not kept: on the largest cluster a map's group arrays hold millions of ranks, and the
    search visits hundreds of shapes. What the search needs of it is kept by :func:`crosses`."""
    pp, dp, cp, tp, ep, etp = mesh
    from parc.model.targets import rank_order

    imposed = [o for o in (rank_order(t, pr.mode) for t in sorted(pr.rule_targets)) if o]
    order = imposed[0] if imposed else pr.order
    return RankMap.from_sizes(pr.cluster.gpus_per_node, order=order, ep=ep, etp=etp, domain=pr.cluster.domain,
                              pp=pp, dp=dp, cp=cp, tp=tp)


def crosses(pr: Problem, mesh: tuple, axis) -> bool:
    """Whether some group of ``axis`` leaves its NVLink domain (a node unless the cluster says
    ``nvlink_domain``) under mesh shape ``mesh`` (cached as one bool per shape and axis; the rank
    map that answers it is dropped)."""
    key = ("crosses", mesh, axis)
    got = pr.memo.get(key)
    if got is None and not isinstance(axis, str):
        # a group of several axes stays inside a domain iff the groups of each axis do (a rank of
        # the joint group is reached from its first rank one axis at a time, each step inside
        # one group of that axis), so no array of the world's ranks is needed
        got = pr.memo[key] = any(crosses(pr, mesh, ax) for ax in axis)
    if got is None:
        got = pr.memo[key] = ask_rank_map(pr, mesh, lambda rm: rm.crosses_domain(axis))
    return got


def ask_rank_map(pr: Problem, mesh: tuple, question):
    """``question(rank_map)`` for mesh shape ``mesh``: the last rank map built is kept for the next
    question about the same shape, its group arrays (up to world-size int64 each) dropped after."""
    last = pr.memo.get("rankmap")
    if last is None or last[0] != mesh:
        last = pr.memo["rankmap"] = (mesh, rank_map(pr, mesh))
    answer = question(last[1])
    last[1]._cache.clear()
    return answer


def _groups_ok(pr: Problem, pp: int, dp: int, cp: int, tp: int, ep: int, etp: int) -> bool:
    """P301: TP groups (and CP or EP groups pinned to intra_node) stay inside an NVLink domain;
    P304: every placement rule holds (intra_node: groups inside a domain; inter_node: across)."""
    links = pr.placement.links
    mesh = (pp, dp, cp, tp, ep, etp)
    if tp > 1 and links.get("tp") != "inter_node" and crosses(pr, mesh, "tp"):
        return False
    sizes = dict(zip(("pp", "dp", "cp", "tp", "ep", "etp"), mesh))
    for ax, where in links.items():
        if sizes.get(ax, 1) <= 1:
            continue
        across = crosses(pr, mesh, ax)
        if where == "intra_node" and across or where == "inter_node" and not across:
            return False
    return True


# --- schedule options ----------------------------------------------------------------------------

def _split_mode(pr: Problem, stages: int) -> int | None:
    """Index into SPLITS for ``stages`` (virtual) stages, or None when no split works."""
    L = pr.model.layers
    if stages > L:
        return None
    given = pr.fixed.get("placement.layers")
    if given == "explicit":
        lay = pr.placement.layers or []
        return 2 if len(lay) == stages else None
    if given == "even":
        return 0 if L % stages == 0 else None
    if given == "balanced":
        return 1
    return 0 if L % stages == 0 else 1


def layout_options(pr: Problem, pp: int) -> list[tuple[int, int, int]]:
    """(pipeline, virtual stages, split) for a pipeline of ``pp`` ranks (P104-P105, P204-P208)."""
    out = []
    L = pr.model.layers
    pipes = _fixed(pr, "schedule.pipeline", PIPELINES if pp > 1 else ("1f1b",))
    if pp == 1 and "schedule.pipeline" in pr.fixed and not pipes:
        pipes = [pr.fixed["schedule.pipeline"]]   # a schedule named for pp = 1 is kept as written
    for t in sorted(pr.rule_targets) if pp > 1 else ():    # P607, P616, P688: the runtimes' tables
        pipes = [x for x in pipes if runs_pipeline(t, x)]
    for name in pipes:
        if pp == 1:
            vs = [1]
        elif name == "dualpipe" and pp % 2:                          # P211
            continue
        elif name in ("gpipe", "1f1b", "dualpipe"):
            vs = [1]                                                  # P206, P211
        elif name == "dualpipe_v":
            vs = [2]                                                  # P207
        else:
            vs = list(range(2, pr.max_virtual + 1))                      # P206, P208
        for v in _fixed(pr, "schedule.virtual_stages", vs):
            if pp * v > L:
                continue
            split = _split_mode(pr, pp * v)
            if split is not None:
                out.append((PIPELINES.index(name), v, split))
    return out


def batch_options(pr: Problem, dp: int) -> list[tuple[int, int, int]]:
    """(micro_batch, microbatches, global_batch) for ``dp`` data-parallel replicas (P201)."""
    if pr.global_batch is not None:
        gb = pr.global_batch
        if gb % dp:                                                   # P201 for any micro_batch
            return []
        out = [(mb, ParallelDims(dp=dp, micro_batch=mb, global_batch=gb).microbatches, gb)
               for mb in divisors(gb // dp)]
    else:                                                             # microbatches fixed instead
        n = pr.microbatches
        out = [(mb, n, ParallelDims(dp=dp, micro_batch=mb).global_batch_for(n))
               for mb in range(1, pr.max_micro_batch + 1)]
    if "schedule.micro_batch" in pr.fixed:
        out = [x for x in out if x[0] == pr.fixed["schedule.micro_batch"]]
    return out


def few_microbatches_refused(pr: Problem) -> bool:
    """Whether P202 refuses 1F1B with fewer microbatches than stages: torch's Schedule1F1B does (the
    torch runtime, and a plan without a target, which runs on it); Megatron-LM and DeepSpeed run it."""
    from parc.model.targets import rule_targets

    named = pr.rule_targets & set(rule_targets())
    return "torch" in named or not named


def schedule_ok(pr: Problem, name: str, p: int, n: int, v: int) -> bool:
    """P202 (1f1b needs m ≥ pp where torch's Schedule1F1B runs it), P207 (dualpipe_v m ≥ 2pp), P211
    (dualpipe: even pp, even m ≥ 2pp), P208 (zero_bubble rounds), and for the targets P203
    (Megatron-LM: interleaved m a multiple of pp) and P205 (torch: rounds)."""
    if p <= 1:
        return True
    if name == "1f1b":
        return n >= p or not few_microbatches_refused(pr)
    if name == "gpipe":
        return True
    if name == "dualpipe_v":
        return n >= 2 * p
    if name == "dualpipe":
        return p % 2 == 0 and n % 2 == 0 and n >= 2 * p
    rounds_ok = n % max(1, n // p) == 0
    if name == "zero_bubble" and v > 2:
        return rounds_ok
    if name == "interleaved_1f1b" and v > 1:
        if "megatron" in pr.rule_targets and (n < p or n % p):
            return False
        if "torch" in pr.rule_targets and not rounds_ok:
            return False
    return True


def zero_options(pr: Problem, pp: int = 1) -> list[int]:
    """ZeRO stages to try (P615: DeepSpeed's pipeline engine takes ZeRO-0 and 1 only; P028: Megatron-FSDP's
    double buffer asks for ZeRO-3)."""
    zs = _fixed(pr, "train.zero", (0, 1, 2, 3))
    if pr.target_settings("megatron").get("fsdp_double_buffer"):   # P028: Megatron-FSDP's alone
        zs = [z for z in zs if z >= 3]
    if pp > 1 and "deepspeed" in pr.rule_targets:
        zs = [z for z in zs if z < 2]
    return zs


def train_options(pr: Problem, tp: int, cp: int) -> list[tuple[int, int]]:
    """(recompute, sequence_parallel) for one mesh shape (P115 for sequence parallel)."""
    sps = [0, 1] if tp > 1 else [0]
    if "train.sequence_parallel" in pr.fixed:
        sps = [int(bool(pr.fixed["train.sequence_parallel"]))]
    sps = [s for s in sps if seq_sp_ok(pr.model.seq_len, cp, tp, s)]
    options = RECOMPUTE if "train.recompute" in pr.fixed else SEARCHED_RECOMPUTE
    rcs = [RECOMPUTE.index(r) for r in _fixed(pr, "train.recompute", options)]
    return [(r, s) for r in rcs for s in sps]


