"""Context-parallel ring attention as each framework runs it: the bytes its ring carries (torchtitan
hands SDPA K and V repeated to the query heads, and torch's ring passes their gradients in
float32) and the HBM traffic of the eager ops torch's ring runs around the attention kernel, each
against a value worked by hand from parc/model/data/kernels.toml and frameworks.toml."""
from __future__ import annotations

import pytest

from parc.cost import estimate as cm
from parc.cost.comm import cp_bytes_per_layer
from parc.cost.kernels import ring_merge_bytes
from parc.model.frameworks import context_parallel
from parc.resolve import load


def plan_of(text: str):
    res = load("t.par", text=text, partial=True)
    assert res.plan is not None, [d.message for d in res.diagnostics]
    return res.plan


def llama8b_cp(framework: str, cp: int = 4, recompute: str = "full") -> str:
    """Llama 3 8B (32 layers, 32 query heads and 8 KV heads of 128) at sequence 131,072 over one
    8-GPU H100 node, dp 8/cp by cp."""
    return f'''
model "m" {{
 from = llama3_8b
 seq_len = 131072
}}
cluster "c" {{
 nodes = 1
 gpus_per_node = 8
 gpu = h100_sxm
}}
mesh {{
 dp = {8 // cp}
 cp = {cp}
}}
schedule {{
 micro_batch = 1
 global_batch = {8 // cp}
}}
train {{
 zero = 3
 recompute = {recompute}
 framework = {framework}
}}
'''


def test_the_frameworks_rings():
    torch_ring, te = context_parallel("torchtitan"), context_parallel("megatron")
    assert torch_ring["kv_heads"] == "query" and torch_ring["grad_bytes"] == 4
    assert te["kv_heads"] == "kv" and te["grad_bytes"] == 0
    assert set(te["merge"].values()) == {0.0}
    assert context_parallel("deepspeed") == te


def test_cp_bytes_with_float32_gradients():
    # 32,768 local tokens, K/V width 1024, cp 4, 16-bit activations: the forward's K and V and the
    # backward's K and V at 2 bytes, their gradients at 4: 3 · 2 · 32768 · 1024 · (2 + 2 + 4)
    assert cp_bytes_per_layer(32768, 1024, 4, 2, 4) == 3 * 2 * 32768 * 1024 * 8 == 1_610_612_736
    # without a wider gradient, three times the forward's volume, as before
    assert cp_bytes_per_layer(32768, 1024, 4, 2) == 3 * 3 * 2 * 32768 * 1024 * 2


def test_torch_ring_merge_bytes_by_hand():
    m = plan_of(llama8b_cp("torchtitan")).model
    ring = context_parallel("torchtitan")
    # cp 4: a forward pass 40.5 · 3 + 12 = 133.5 bytes an element, run twice (recomputed), the
    # backward 58.5 · 3 + 76 = 251.5: 518.5 an element of 32,768 tokens · 32 heads · 128, 32 layers
    per_element = 2 * (40.5 * 3 + 12) + 58.5 * 3 + 76
    assert per_element == 518.5
    want = 518.5 * 32768 * 32 * 128 * 32
    assert ring_merge_bytes(m, 32768, 1, 4, 32, ring, 2) == pytest.approx(want, rel=1e-12)
    # no ring without context parallelism, and none counted for Transformer Engine's
    assert ring_merge_bytes(m, 32768, 1, 1, 32, ring, 2) == 0.0
    assert ring_merge_bytes(m, 32768, 1, 4, 32, context_parallel("megatron"), 2) == 0.0


def test_torchtitan_ring_in_the_estimate():
    """The same cp 4 plan under torchtitan and under Megatron-LM: torchtitan's ring carries the 32
    query heads' K and V (4x the 8 KV heads) with float32 gradients (8/6 of the bytes), and its
    microbatch pays the merge's 518.5 bytes an element at hbm · hbm_efficiency on top of the
    kernels' traffic."""
    tt, mg = plan_of(llama8b_cp("torchtitan")), plan_of(llama8b_cp("megatron"))
    e_tt, e_mg = cm.estimate(tt, cache=False), cm.estimate(mg, cache=False)
    assert e_tt.comm_bytes["cp"] == pytest.approx(e_mg.comm_bytes["cp"] * 4 * 8 / 6, rel=1e-12)
    # Megatron-LM's ring at the KV heads: 3 · 3 · 2 · 32768 · 1024 · 2 a layer, 32 layers, x 1.5 recomputed
    assert e_mg.comm_bytes["cp"] == pytest.approx(3 * 3 * 2 * 32768 * 1024 * 2 * 32 * 1.5, rel=1e-12)
    gpu = tt.cluster.gpu
    merge = 518.5 * 32768 * 32 * 128 * 32 / (gpu.hbm_bandwidth * tt.profile.hbm_efficiency)
    # the stage's memory-bound seconds: its kernels' (the elementwise ones, the loss) plus the merge
    st_tt = e_tt.stages[0]
    rates = cm.stage_rates(tt.model, 32768, 1, 1, 1, gpu, tt.train, tt.profile, e_tt.efficiency)
    f = cm.recompute_factors("full")
    _, _, kernels = cm.stage_compute_time(tt.model, 32768, 1, rates, 32, 0, True, *f, 1.0, 0.0)
    assert st_tt.memory_time_per_microbatch == pytest.approx(kernels + merge, rel=1e-9)
