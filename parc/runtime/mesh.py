"""Process groups and device meshes for a plan.

``Meshes`` holds the named ``DeviceMesh`` in the spec's axis order (sizes of 1 kept), the 1-D
meshes of each axis, the flattened ``dp_cp`` mesh that data parallelism (FSDP, ZeRO, gradient
averaging) uses, and for MoE models the expert grid ``(pp, edp, ep, etp)`` that Megatron-LM
carves out of each stage's dp·cp·tp ranks (``etp`` innermost), as a second mesh over the same
ranks so that expert weights are DTensors on ``ep`` and FSDP can shard them over ``edp``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from parc.model.plan import Plan
from parc.model.rankmap import RankMap


def init_process_group(backend: str, rank: int, world: int, timeout_s: float,
                       store_path: Optional[str] = None) -> None:
    """Start torch.distributed: a FileStore when one is given (forked ranks), else env://
    (torchrun); a single process gets an in-memory store. The timeout is finite so that a
    desynchronised collective fails instead of hanging."""
    timeout = timedelta(seconds=timeout_s)
    bound_groups(timeout)
    if store_path is not None:
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    elif world == 1 and "MASTER_ADDR" not in os.environ:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    else:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)


def bound_groups(timeout: timedelta) -> None:
    """Every process group this process creates later (the device meshes' axes, their flattened
    dp·cp, the expert grid, tied-weight pairs) gets ``timeout`` too: torch gives a group created
    without one its 30-minute default, whatever the world group's timeout is, and device meshes
    create theirs without one. A stopped rank would then hang its peers for half an hour."""
    import torch.distributed.distributed_c10d as c10d

    c10d.default_pg_timeout = timeout
    if hasattr(c10d, "default_pg_nccl_timeout"):
        c10d.default_pg_nccl_timeout = timeout


def shutdown() -> None:
    """Barrier, then destroy: destroying without the barrier can abort a rank (SIGABRT)."""
    if dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def _flatten(mesh: DeviceMesh, name: str) -> DeviceMesh:
    """The one place that flattens a mesh: torch 2.13 only has the private ``_flatten``."""
    return mesh._flatten(name)


@dataclass
class Meshes:
    plan: Plan
    device_type: str
    root: DeviceMesh
    order: tuple
    rank: int
    coords: dict
    dp_cp: Optional[DeviceMesh] = None
    expert: Optional[DeviceMesh] = None
    expert_coords: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    def size(self, axis: str) -> int:
        return self.plan.mesh.size(axis)

    def __getitem__(self, axis: str) -> DeviceMesh:
        return self.root[axis]

    def group(self, axis: str):
        if axis == "dp_cp":
            return self.dp_cp.get_group() if self.dp_cp is not None else None
        if axis in ("ep", "edp", "etp"):
            return self.expert[axis].get_group()
        return self.root[axis].get_group()

    @property
    def dp_cp_size(self) -> int:
        return self.size("dp") * self.size("cp")


def build_meshes(plan: Plan, device_type: str) -> Meshes:
    """Every rank calls this with the same plan, in the same order."""
    m = plan.mesh
    order = tuple(a for a in m.order if a in ("pp", "dp", "cp", "tp"))
    for a in ("pp", "dp", "cp", "tp"):
        if a not in order:
            order = (a,) + order
    shape = tuple(m.size(a) for a in order)
    root = init_device_mesh(device_type, shape, mesh_dim_names=order)
    rank = dist.get_rank()
    coords = {a: root.get_local_rank(a) for a in order}
    dims = tuple(a for a in order if a in ("dp", "cp"))
    dp_cp = _flatten(root[dims], "dp_cp") if m.dp * m.cp > 1 else None
    meshes = Meshes(plan, device_type, root, order, rank, coords, dp_cp=dp_cp)
    if plan.model.is_moe:
        rm = RankMap(plan)
        edp = rm.edp
        layout = torch.as_tensor(
            _expert_layout(rm), dtype=torch.int64).reshape(m.pp, edp, m.ep, m.etp)
        meshes.expert = DeviceMesh(device_type, layout, mesh_dim_names=("pp_e", "edp", "ep", "etp"))
        ec = rm.expert_coords(rank)
        meshes.expert_coords = {k: int(v) for k, v in ec.items()}
    return meshes


def _expert_layout(rm: RankMap) -> list[int]:
    """Global ranks ordered as (pp, edp, ep, etp), etp fastest."""
    import numpy as np

    ranks = np.arange(rm.world)
    ec = rm.expert_coords(ranks)
    key = ((ec["pp"] * rm.edp + ec["edp"]) * rm.ep + ec["ep"]) * rm.etp + ec["etp"]
    out = np.empty(rm.world, dtype=np.int64)
    out[key] = ranks
    return out.tolist()
