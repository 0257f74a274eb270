"""A tiny torchrun entry point: checks what the launch gave this process against plan.json.

Run by tests/test_backends_torchrun.py through an emitted launch script. Every rank checks
RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE against the plan, rebuilds the plan from
$PARC_PLAN with plan_from_dict, builds the named DeviceMesh in the plan's axis order (gloo on
CPU) and compares its coordinates and groups with parc's rank map; rank 0 gathers every
rank's findings and writes them as JSON to the path given as the first argument.
"""
import json
import os
import sys
from datetime import timedelta


def main() -> None:
    out = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from parc.model.plan import plan_from_dict
    from parc.model.rankmap import RankMap

    with open(os.environ["PARC_PLAN"], encoding="utf-8") as f:
        plan = plan_from_dict(json.load(f))
    m = plan.mesh
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", tuple(m.size(ax) for ax in m.order), mesh_dim_names=tuple(m.order))
        rm = RankMap(plan)
        expected = {ax: int(v) for ax, v in rm.coords(rank).items() if ax in m.order}
        got = {ax: int(c) for ax, c in zip(m.order, mesh.get_coordinate())}
        groups = {ax: sorted(int(r) for r in mesh[ax].mesh.flatten().tolist()) for ax in m.order}
        want_groups = {ax: sorted(int(r) for r in rm.group_of(ax, rank)) for ax in m.order}
        mine = {"rank": rank, "world": world, "local_rank": local, "local_world": local_world,
                "plan_world": plan.world_size, "node": rank // plan.cluster.gpus_per_node,
                "coords": got, "expected_coords": expected, "groups": groups, "expected_groups": want_groups,
                "args": sys.argv[2:]}
        every = [None] * world
        dist.all_gather_object(every, mine)
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(every, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
