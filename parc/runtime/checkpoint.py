"""Checkpoints with torch.distributed.checkpoint: saved under one plan, loaded under another.

Parameter names are the same in every plan (layers keyed by global index), and every sharded
weight is a DTensor that knows its global shape, so DCP reshards on load: a checkpoint written
with tp = 2 loads with tp = 4, with dp·tp, with pipeline stages, or in one process. The step
count goes beside it in ``parc-run.json``. Optimizer state is not saved (SGD has none).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)

META = "parc-run.json"


def exists(path: str) -> bool:
    return (Path(path) / ".metadata").is_file()


def _state(rank) -> dict:
    out = {}
    for mod in rank.state_dict_modules():
        out.update(get_model_state_dict(mod, options=StateDictOptions(strict=False)))
    return out


def save(rank, path: str, step: int) -> dict:
    Path(path).mkdir(parents=True, exist_ok=True)
    state = _state(rank)
    dcp.save({"model": state}, checkpoint_id=path)
    info = {"path": str(path), "step": step, "tensors": _count(state)}
    if dist.get_rank() == 0:
        with open(os.path.join(path, META), "w") as f:
            json.dump({"step": step, "world_size": dist.get_world_size()}, f)
    dist.barrier()
    return info


def load(rank, path: str) -> dict:
    state = _state(rank)
    dcp.load({"model": state}, checkpoint_id=path)
    for mod in rank.state_dict_modules():
        names = {n for n, _ in mod.named_parameters()} | {n for n, _ in mod.named_buffers()}
        set_model_state_dict(mod, {k: v for k, v in state.items() if k in names},
                             options=StateDictOptions(strict=False))
    return {"path": str(path), "step": saved_step(path), "tensors": _count(state)}


def saved_step(path: str) -> int:
    """The step count saved beside a checkpoint (0 if unknown)."""
    meta = Path(path) / META
    if meta.is_file():
        return int(json.loads(meta.read_text()).get("step", 0))
    return 0


def _count(state: dict) -> int:
    return len(state)
