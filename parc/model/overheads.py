"""The framework overheads every GPU pays (CUDA context, NCCL buffers, allocator fragmentation),
read from ``data/overheads.toml``, which gives each its source."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "overheads.toml"


@lru_cache(maxsize=1)
def table() -> dict:
    """``{"cuda_context": bytes, "nccl_buffers": bytes per communicator, "fragmentation": fraction}``."""
    import tomllib

    with open(DATA, "rb") as f:
        return dict(tomllib.load(f))
