"""P6xx: what the chosen target can express."""
from __future__ import annotations

from . import rule


@rule("P601", "vllm-serves-only", targets=("vllm",))
def vllm_serving_only(plan, c):
    if plan.mode == "train":
        c.report(c.at("target.vllm"),
                 "vLLM serves models; this spec trains (it has a `train` block)",
                 help="use `target megatron` or `target torchrun` for training, or replace `train` with `serve`")
