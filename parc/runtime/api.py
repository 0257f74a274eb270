"""The Python API: run your own ``nn.Module`` under a plan.

::

    from parc.api import session

    with session("plan.par") as s:              # under torchrun, or a world of one
        model = s.parallelize(MyModel())         # the spec's `placement` patterns, then ZeRO
        opt = torch.optim.AdamW(s.owned(model.parameters()))
        for x, y in data:
            loss = loss_fn(model(x), y)
            loss.backward()
            s.sync_gradients()                   # dp·cp averaging (ZeRO 0-2; FSDP does its own)
            opt.step(); s.after_step(); opt.zero_grad()

Placement patterns name modules of *your* model (``"blocks.*.up" = colwise(tp)``;
``rowwise(tp)``, ``sequence(tp)``, ``experts(ep)`` shards the matched modules' weights on dim 0
over the expert-parallel mesh (route tokens with
:func:`parc.runtime.collectives.expert_all_to_all`), ``replicate`` leaves them alone). Without
patterns, parc's own reference model gets the Megatron plan. For pipelines,
:meth:`Session.stages` says which layers this rank holds and :meth:`Session.schedule` wraps
your stage modules in the plan's ``torch.distributed.pipelining`` schedule.
"""
from __future__ import annotations

import fnmatch
import os
from typing import Callable, Optional, Union

import torch
import torch.distributed as dist
from torch import nn

from parc.model.plan import Plan
from parc.runtime import mesh as M
from parc.runtime import parallel as P
from parc.runtime.pipeline import Layout, build_schedule, layout


def _load(spec) -> Plan:
    """The plan itself, or one read back from the ``plan.json`` a compiled launch carries.

    A ``.par`` spec is resolved above the runtime: :func:`parc.api.session` does it and
    hands the plan here, so the runtime depends on the plan model only."""
    if isinstance(spec, Plan):
        return spec
    path = os.fspath(spec)
    if not path.endswith(".json"):
        raise TypeError(f"Session takes a resolved Plan or a plan.json; for the spec {path!r} "
                        "use parc.api.session(path), which resolves and checks it first")
    import json

    from parc.model.plan import plan_from_dict

    with open(path, encoding="utf-8") as f:
        return plan_from_dict(json.load(f))


class Session:
    """A plan's process group and meshes for this process (one rank)."""

    def __init__(self, spec: Union[str, os.PathLike, Plan], *, device: str = "auto", timeout: float = 120.0):
        self.plan = _load(spec)
        cuda = torch.cuda.is_available() and device != "cpu"
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
        self._owns_group = False
        world = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", 1))
        if world != self.plan.world_size:
            raise RuntimeError(f"the plan needs {self.plan.world_size} processes but this world has {world}; "
                               "launch the program with the torchrun script `parc compile --target torchrun` emits")
        if not dist.is_initialized():
            if cuda:
                torch.cuda.set_device(self.device)
            M.init_process_group("nccl" if cuda else "gloo", int(os.environ.get("RANK", 0)), world, timeout)
            self._owns_group = True
        self.meshes = M.build_meshes(self.plan, self.device.type)
        self.mesh = self.meshes.root
        self.coords = dict(self.meshes.coords)
        self._sync: Optional[P.GradSync] = None

    # -- placement -------------------------------------------------------------------------
    def parallelize(self, module: nn.Module, *, zero: Optional[int] = None) -> nn.Module:
        """Tensor/sequence parallel (patterns or the Megatron plan), expert sharding, then ZeRO:
        FSDP2 for zero 3 (per child of ``layers``/``blocks`` if the module has one, then the
        root), gradient averaging and owners for 0-2 (:meth:`sync_gradients`)."""
        plan = self.plan
        module = module.to(self.device)
        pats = plan.placement.modules
        sp = bool(plan.train and plan.train.sequence_parallel)
        P.apply_tp(module, self.meshes, sp, [p for p in pats if p.style in P.STYLES] or None)
        self._shard_experts(module, [p for p in pats if p.style == "experts"])
        z = zero if zero is not None else (plan.train.zero if plan.train else 0)
        dense, experts = False, False
        if z == 3 and self.meshes.size("dp") > 1:
            from torch.distributed.fsdp import fully_shard

            for name in ("layers", "blocks"):
                kids = getattr(module, name, None)
                if isinstance(kids, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
                    for child in (kids.values() if isinstance(kids, nn.ModuleDict) else kids):
                        fully_shard(child, mesh=self.meshes["dp"], reshard_after_forward=plan.mesh.pp == 1)
            fully_shard(module, mesh=self.meshes["dp"], reshard_after_forward=plan.mesh.pp == 1)
            dense = True
        self._sync = P.GradSync([module], self.meshes, z, dense, experts)
        return module

    def _shard_experts(self, module: nn.Module, pats) -> None:
        if not pats:
            return
        if self.meshes.expert is None:
            raise P.PlacementError("experts(ep) placements need a model with experts and an ep axis")
        from torch.distributed.tensor import Shard, distribute_tensor

        ep_mesh = self.meshes.expert["ep"]
        for name, mod in module.named_modules():
            if any(fnmatch.fnmatchcase(name, p.pattern) for p in pats):
                for pname, p in list(mod.named_parameters(recurse=False)):
                    d = distribute_tensor(p.detach(), ep_mesh, [Shard(0)], src_data_rank=None)
                    setattr(mod, pname, nn.Parameter(d, requires_grad=p.requires_grad))

    def owned(self, params):
        """The parameters this rank's optimizer should step (a share of them under ZeRO-1/2)."""
        params = list(params)
        return self._sync.owned(params) if self._sync else params

    def sync_gradients(self) -> None:
        """Average gradients over dp·cp (ZeRO 0-2; FSDP reduces its own)."""
        if self._sync:
            self._sync.reduce()

    def after_step(self) -> None:
        """ZeRO-1/2: owners broadcast the parameters they stepped."""
        if self._sync:
            self._sync.broadcast()

    # -- pipeline ----------------------------------------------------------------------------
    def stages(self) -> Layout:
        """This rank's virtual stages and their layers (``.stage_ids``, ``.layers[stage]``)."""
        return layout(self.plan, self.coords["pp"])

    def schedule(self, modules: dict[int, nn.Module], loss_fn: Callable, log: Optional[list] = None):
        """The plan's pipeline schedule over this rank's stage modules (``{stage: module}``);
        ``loss_fn`` returns the per-microbatch mean. ``log`` collects the executed actions."""
        return build_schedule(self.plan, modules, self.stages(), self.meshes.group("pp"), self.device,
                              loss_fn, log if log is not None else [])

    # -- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        if self._owns_group:
            M.shutdown()
            self._owns_group = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
