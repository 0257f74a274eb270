"""Gradient accumulation's HBM traffic per microbatch, by framework, against values worked by hand.

torchtitan under a pipeline runs FSDP2 with gradient sync off until a stage's last microbatch
(torch.distributed.pipelining's backward_maybe_with_nosync), so FSDP2 keeps each microbatch's
16-bit gradient of the gathered parameters in a float32 one (FSDPParam.to_accumulated_grad_if_needed
casts the first: reads 2, writes 4; accumulate_unsharded_grad_if_needed adds each later one:
reads 4 + 2, writes 4)."""
from __future__ import annotations

import pytest

from parc.cost.estimate import estimate
from parc.cost.kernels import grad_accumulation_bytes
from parc.model.frameworks import framework
from parc.resolve import load

# 4 layers of h = 1024, SwiGLU f = 4096, 8 heads of 128 (no GQA), vocabulary 32,000, untied
MODEL = """model "m" {
 layers = 4
 hidden = 1024
 ffn_hidden = 4096
 heads = 8
 kv_heads = 8
 vocab = 32000
 seq_len = 2048
 tied_embeddings = false
}"""


def tiny(pp: int, framework_name: str, microbatches: int):
    text = f"""{MODEL}
cluster "c" {{
 nodes = 1
 gpus_per_node = 8
 gpu {{
  from = h100_sxm
  hbm_bandwidth = 2TB/s
 }}
}}
mesh {{
 pp = {pp}
 dp = {8 // pp}
}}
schedule {{
 micro_batch = 1
 global_batch = {microbatches * 8 // pp}
}}
train {{
 zero = 3
 framework = {framework_name}
}}
"""
    res = load("t.par", text=text, partial=True)
    assert res.plan is not None, [d.message for d in res.diagnostics]
    return res.plan


def test_bytes_per_parameter_by_hand():
    tt = framework("torchtitan")
    # under a pipeline, 4 microbatches: (6 + 3 · 10) / 4 = 9 bytes a parameter each
    assert grad_accumulation_bytes(tt, 2, 4) == pytest.approx(9.0)
    assert grad_accumulation_bytes(tt, 2, 1) == pytest.approx(6.0)
    # without one FSDP2 reduce-scatters every microbatch's gradient: nothing is accumulated
    assert grad_accumulation_bytes(tt, 1, 4) == 0.0
    # DeepSpeed's BF16 optimizer adds the 16-bit gradients into FP32 ones either way: 2 + 4 + 4
    assert grad_accumulation_bytes(framework("deepspeed"), 1, 4) == 10.0
    assert grad_accumulation_bytes(framework("megatron"), 4, 8) == 0.0


def test_arrays_price_what_scalars_price():
    import numpy as np

    got = grad_accumulation_bytes(framework("torchtitan"), np.array([1, 2, 8]), np.array([4, 4, 8]))
    assert got.tolist() == pytest.approx([0.0, 9.0, (6 + 7 * 10) / 8])


def test_torchtitan_pipeline_stage_pays_the_accumulation(monkeypatch):
    plan = tiny(2, "torchtitan", 4)
    with_it = estimate(plan, cache=False).stages[0].memory_time_per_microbatch
    monkeypatch.setitem(framework("torchtitan"), "pipeline_grad_accumulation_bytes", [0, 0])
    without = estimate(plan, cache=False).stages[0].memory_time_per_microbatch
    # stage 0 gathers the embedding and 2 layers: 32,000 · 1024 + 2 · (4 · 1024² + 3 · 1024 · 4096
    # + 2 · 1024) = 32,768,000 + 33,558,528 = 66,326,528 parameters; 9 bytes each a microbatch at
    # 0.6 of 2 TB/s
    assert with_it - without == pytest.approx(9 * 66_326_528 / (0.6 * 2e12), rel=1e-9)
