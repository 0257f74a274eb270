"""Placements, applied in the order that composes (as torchtitan does):

1. pipeline stages are built directly (see :mod:`.pipeline`), each a ``Transformer`` holding
   its layers;
2. tensor and sequence parallelism through DTensor ``parallelize_module`` on ``mesh["tp"]``
   (the Megatron plan below for the reference model, or the spec's ``placement`` patterns);
3. expert parallelism: routed-expert weights become DTensors sharded on dim 0 over the ep
   mesh; tokens travel by all-to-all (:func:`.collectives.expert_all_to_all`);
4. data parallelism over the flattened dp·cp mesh: FSDP2 ``fully_shard`` for ZeRO-3 (experts
   over the expert-data-parallel mesh), and for ZeRO 0-2 :class:`GradSync`, which averages
   gradients (ZeRO-1: all-reduce, each rank steps and owns the optimizer state of a share of
   the parameters, owners broadcast the new values; ZeRO-2: gradients are reduced only to
   their owner, so each rank keeps the gradients it steps).
"""
from __future__ import annotations

import fnmatch
from typing import Iterable, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

from parc.runtime.mesh import Meshes
from parc.runtime.model import MoE, Parallel, Transformer


class PlacementError(ValueError):
    """A placement the runtime cannot apply (named in the user's terms)."""


def parallel_context(meshes: Meshes, sequence_parallel: bool) -> Parallel:
    tp, cp = meshes.size("tp"), meshes.size("cp")
    par = Parallel(tp=tp, tp_rank=meshes.coords["tp"], sequence_parallel=sequence_parallel and tp > 1,
                   cp=cp, cp_rank=meshes.coords["cp"])
    if tp > 1:
        par.tp_group = meshes.group("tp")
    if cp > 1:
        par.cp_group = meshes.group("cp")
    if meshes.expert is not None and meshes.size("ep") > 1:
        par.ep = meshes.size("ep")
        par.ep_rank = meshes.expert_coords["ep"]
        par.ep_group = meshes.group("ep")
    if meshes.expert is not None and meshes.size("etp") > 1:
        par.etp = meshes.size("etp")
        par.etp_group = meshes.group("etp")
    return par


# -- tensor / sequence parallel ------------------------------------------------------------

def megatron_plan(stage: Transformer, sp: bool) -> dict:
    """The default TP(+SP) plan for the reference model: column-parallel Q/K/V and MLP input
    projections, row-parallel output projections, a vocab-parallel embedding and output head
    (V/tp rows each), norms sequence-parallel when SP is on."""
    seq = Shard(1) if sp else Replicate()
    learned = stage.cfg.position == "learned"
    plan: dict = {}
    if stage.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Replicate() if (learned or not sp) else Shard(1))
    if stage.norm is not None:
        if sp:
            plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate(), use_local_output=True)
    for key, layer in stage.layers.items():
        pre = f"layers.{key}"
        if sp:
            plan[f"{pre}.attention_norm"] = SequenceParallel()
            plan[f"{pre}.ffn_norm"] = SequenceParallel()
            plan[f"{pre}.attention"] = PrepareModuleInput(input_layouts=(Shard(1),),
                                                          desired_input_layouts=(Replicate(),))
        for w in ("wq", "wk", "wv"):
            plan[f"{pre}.attention.{w}"] = ColwiseParallel()
        plan[f"{pre}.attention.wo"] = RowwiseParallel(output_layouts=seq)
        ff = layer.feed_forward
        mlps = []
        if isinstance(ff, MoE):
            if sp:
                plan[f"{pre}.feed_forward"] = PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_output=True)
            if ff.shared is not None:
                mlps.append((f"{pre}.feed_forward.shared", ff.shared))
        else:
            mlps.append((f"{pre}.feed_forward", ff))
        for name, mlp in mlps:
            if sp:
                plan[name] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan[f"{name}.w1"] = ColwiseParallel()
            if mlp.swiglu:
                plan[f"{name}.w3"] = ColwiseParallel()
            plan[f"{name}.w2"] = RowwiseParallel(output_layouts=seq)
    return plan


STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel, "sequence": SequenceParallel}


def pattern_plan(module: nn.Module, placements: Iterable, axis: str = "tp") -> dict:
    """The spec's ``placement`` patterns (``"layers.*.attention.wq" = colwise(tp)``) for ``axis``,
    matched against the module's own names (``*`` matches one name component or more)."""
    names = [n for n, _ in module.named_modules() if n]
    plan: dict = {}
    for pl in placements:
        if pl.style not in STYLES or (pl.axis or "tp") != axis:
            continue
        hits = [n for n in names if fnmatch.fnmatchcase(n, pl.pattern)]
        for n in hits:
            plan[n] = STYLES[pl.style]()
    return plan


def apply_tp(stage: nn.Module, meshes: Meshes, sp: bool, patterns: Optional[list] = None) -> None:
    if meshes.size("tp") == 1:
        return
    tp_mesh = meshes["tp"]
    if patterns:
        plan = pattern_plan(stage, patterns)
    elif isinstance(stage, Transformer):
        plan = megatron_plan(stage, sp)
    else:
        raise PlacementError("tp > 1 on a custom module needs `placement` patterns such as "
                             "\"layers.*.attention.wq\" = colwise(tp)")
    parallelize_module(stage, tp_mesh, plan)
    if isinstance(stage, Transformer) and stage.tok_embeddings is not None and stage.output is not None \
            and stage.cfg.tied_embeddings:
        stage.output.weight = stage.tok_embeddings.weight    # both are V/tp rows: keep them tied


# -- expert parallel -----------------------------------------------------------------------

# the dimension of each grouped expert weight that expert tensor parallelism splits (the
# expert's hidden width); None: replicated over etp (the output bias, added once)
ETP_DIM = {"w1": 1, "w3": 1, "w2": 2, "b1": 1, "b3": 1, "b2": None}


def apply_ep(stage: nn.Module, meshes: Meshes) -> None:
    """Shard routed-expert weights on dim 0 over the ep mesh (each rank keeps E/ep experts) and,
    with etp > 1, each expert's hidden width over the etp mesh."""
    if meshes.expert is None:
        return
    grid = meshes.expert["ep", "etp"]
    for mod in stage.modules():
        if isinstance(mod, MoE):
            ex = mod.experts
            for name, p in list(ex.named_parameters(recurse=False)):
                dim = ETP_DIM[name]
                place = [Shard(0), Shard(dim) if dim is not None else Replicate()]
                d = distribute_tensor(p.detach(), grid, place, src_data_rank=None)
                setattr(ex, name, nn.Parameter(d, requires_grad=p.requires_grad))


def expert_params(stage: nn.Module) -> list[nn.Parameter]:
    return [p for m in stage.modules() if isinstance(m, MoE) for p in m.experts.parameters()]


# -- data parallel ------------------------------------------------------------------------

def apply_fsdp(stages: list[nn.Module], meshes: Meshes, pipelined: bool,
               param_dtype: Optional[torch.dtype] = None) -> tuple[bool, bool]:
    """ZeRO-3: FSDP2 over the flattened dp·cp mesh for dense weights (the cp ranks of a model
    copy hold the same weights, so they shard them too, as torchtitan's ``fsdp = dp_shard * cp``
    and :func:`parc.cost.params.shard_groups` do), over the expert-data-parallel mesh for experts; blocks
    first, then each stage root. Under pipelining parameters stay unsharded between a
    microbatch's forward and backward (``reshard_after_forward=False``).
    Returns whether dense and expert weights are sharded."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # a bf16/fp16 plan on GPUs gathers weights in that precision and reduces gradients in fp32
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else None
    kw = {"mp_policy": mp} if mp is not None else {}
    dense = meshes.dp_cp_size > 1
    experts = meshes.expert is not None
    reshard = not pipelined
    for stage in stages:
        if experts:
            for mod in stage.modules():
                if isinstance(mod, MoE):
                    # dim 1 (an expert's own rows) as the cost model counts: each expert
                    # split over edp, rather than whole experts over edp (dim 0)
                    # (FSDP averages their gradients over edp; GradSync rescales to dp·cp)
                    fully_shard(mod.experts, mesh=meshes.expert["edp"], reshard_after_forward=reshard,
                                shard_placement_fn=lambda p: Shard(1), **kw)
        if not dense:
            continue
        layers = getattr(stage, "layers", None)
        if layers is not None:
            for layer in layers.values():
                fully_shard(layer, mesh=meshes.dp_cp, reshard_after_forward=reshard, **kw)
        fully_shard(stage, mesh=meshes.dp_cp, reshard_after_forward=reshard, **kw)
    return dense, experts


def _local(t: torch.Tensor) -> torch.Tensor:
    return t._local_tensor if isinstance(t, DTensor) else t


class GradSync:
    """Gradient averaging and ZeRO-1/2 for plans without FSDP (zero 0, 1, 2).

    Dense parameters average over dp·cp; experts sum over the expert-data-parallel group and
    divide by dp·cp (each expert saw its ep group's share of the tokens). ZeRO-1/2 assign every
    parameter an owner among its group's ranks (greedy by size): only the owner keeps optimizer
    state and steps it, then broadcasts the result.
    """

    def __init__(self, stages: list[nn.Module], meshes: Meshes, zero: int,
                 fsdp_dense: bool = False, fsdp_experts: bool = False):
        self.zero = 0 if (fsdp_dense or fsdp_experts) else zero
        self.scale = 1.0 / meshes.dp_cp_size
        experts = {id(p) for s in stages for p in expert_params(s)}
        seen: set[int] = set()
        dense, exp = [], []
        for s in stages:
            for p in s.parameters():
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                (exp if id(p) in experts else dense).append(p)
        self.params = dense + exp
        self.buckets = []
        if fsdp_dense:
            pass                 # FSDP averages them over dp·cp
        elif meshes.dp_cp_size > 1:
            self.buckets.append((dense, meshes.group("dp_cp"), meshes.dp_cp_size, "avg"))
        elif self.zero in (1, 2):
            self.buckets.append((dense, None, 1, "avg"))
        self.rescale: tuple[list, float] = ([], 1.0)
        if exp:
            edp = meshes.expert["edp"].size()
            if fsdp_experts:
                # each expert saw one ep group's tokens, and FSDP averaged over edp: the mean is
                # over all dp·cp shards of the batch
                self.rescale = (exp, edp / meshes.dp_cp_size)
            else:
                self.buckets.append((exp, meshes.group("edp") if edp > 1 else None, edp, "sum"))
        self.owner: dict[int, int] = {}       # id(param) -> owner's index in its group
        self.group_of: dict[int, tuple] = {}
        if self.zero in (1, 2):
            for params, group, n, _ in self.buckets:
                load = [0] * n
                for p in sorted(params, key=lambda q: -_local(q).numel()):
                    i = min(range(n), key=lambda j: (load[j], j))
                    load[i] += _local(p).numel()
                    self.owner[id(p)] = i
                    self.group_of[id(p)] = (group, n)

    def owned(self, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """The parameters this rank steps (all of them without ZeRO-1/2)."""
        if self.zero not in (1, 2):
            return list(params)
        out = []
        for p in params:
            group, n = self.group_of.get(id(p), (None, 1))
            me = dist.get_rank(group) if group is not None else 0
            if self.owner.get(id(p), 0) == me:
                out.append(p)
        return out

    def keeps_grad(self, p) -> bool:
        """Whether this rank holds ``p``'s gradient after :meth:`reduce` (under ZeRO-1/2 only the
        parameter's owner keeps it)."""
        if self.zero not in (1, 2) or id(p) not in self.group_of:
            return True
        group, _ = self.group_of[id(p)]
        return group is None or dist.get_rank(group) == self.owner[id(p)]

    def reduce(self) -> None:
        for p in self.params:
            if p.grad is not None:
                _replicate_partial(p)
        params, factor = self.rescale
        if factor != 1.0:
            for p in params:
                if p.grad is not None:
                    _local(p.grad).mul_(factor)
        for params, group, n, how in self.buckets:
            scale = self.scale if how == "sum" else 1.0 / n
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                g = _local(p.grad)
                if group is not None:
                    if self.zero == 2:
                        dst = dist.get_global_rank(group, self.owner[id(p)])
                        dist.reduce(g, dst, group=group)
                    else:
                        dist.all_reduce(g, group=group)
                if scale != 1.0:
                    g.mul_(scale)
                if self.zero in (1, 2) and group is not None and dist.get_rank(group) != self.owner[id(p)]:
                    p.grad = None        # only the owner steps it (and an optimizer's zero_grad
                    #                      never sees the parameters it does not own)

    def broadcast(self) -> None:
        if self.zero not in (1, 2):
            return
        for params, group, n, _ in self.buckets:
            if group is None:
                continue
            for p in params:
                src = dist.get_global_rank(group, self.owner[id(p)])
                dist.broadcast(_local(p.data), src, group=group)


def _replicate_partial(p) -> None:
    """A replicated DTensor parameter can come back with a Partial gradient: reduce it first."""
    g = p.grad
    if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
        p.grad = g.redistribute(g.device_mesh, p.placements)


def tie_groups(meshes: Meshes, pipeline_ranks_of_stage: dict, first_stage: int, last_stage: int):
    """Process groups pairing each rank holding the first stage's embedding with the rank of the
    same dp/cp/tp coordinates holding the last stage's head (tied embeddings under pp > 1).
    Every rank creates every group, in the same order."""
    pp_first, pp_last = pipeline_ranks_of_stage[first_stage], pipeline_ranks_of_stage[last_stage]
    if pp_first == pp_last:
        return None
    root = meshes.root
    mesh = root.mesh
    order = list(meshes.order)
    ppd = order.index("pp")
    grid = mesh.movedim(ppd, 0)                   # (pp, rest...)
    firsts = grid[pp_first].reshape(-1).tolist()
    lasts = grid[pp_last].reshape(-1).tolist()
    mine = None
    for a, b in zip(firsts, lasts):
        g = dist.new_group([a, b])
        if meshes.rank in (a, b):
            mine = g
    return mine
