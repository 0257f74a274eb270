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


def plan_of(cluster: str, mesh: str, global_batch: int, framework_name: str, model: str = MODEL):
    """The plan of ``model`` on a cluster and mesh given as their blocks' bodies, one microbatch of
    one sequence per data-parallel rank and step unless ``global_batch`` makes more, ZeRO-3."""
    text = (f"{model}\ncluster \"c\" {{\n{cluster}\n}}\nmesh {{\n{mesh}\n}}\n"
            f"schedule {{\n micro_batch = 1\n global_batch = {global_batch}\n}}\n"
            f"train {{\n zero = 3\n framework = {framework_name}\n}}\n")
    res = load("t.par", text=text, partial=True)
    assert res.plan is not None, [d.message for d in res.diagnostics]
    return res.plan


def tiny(pp: int, framework_name: str, microbatches: int, gpus: int = 8):
    """The model over pp stages of one node of ``gpus`` H100s at 2 TB/s, ``microbatches`` a step."""
    cluster = f" nodes = 1\n gpus_per_node = {gpus}\n gpu {{\n  from = h100_sxm\n  hbm_bandwidth = 2TB/s\n }}"
    return plan_of(cluster, f" pp = {pp}\n dp = {gpus // pp}", microbatches * gpus // pp, framework_name)


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


# --- torch's ring under torchtitan's default rotation --------------------------------------------
# torchtitan's context_parallel_rotate_method defaults to "allgather" (torchtitan/config_manager.py
# at 9dec370; torchtitan/config/job_config.py in its later releases): torch's _AllGatherRotater
# all-gathers every rank's K and V once, right after a pass's first sub-SDPA, and every later ring
# step waits for it; the K and V gradients travel by all-to-all, one step at a time
# (_templated_ring_attention_backward's dkv_rotater).


def test_gathered_share_of_the_ring_by_hand():
    from parc.cost.comm import cp_gathered_share
    from parc.model.frameworks import context_parallel

    # bf16 K and V (2 + 2 bytes) against float32 gradients (4): half the bytes are gathered
    assert cp_gathered_share(context_parallel("torchtitan"), "bf16") == pytest.approx(0.5)
    # Transformer Engine's p2p ring passes every chunk step by step
    assert cp_gathered_share(context_parallel("megatron"), "bf16") == 0.0


def test_gathered_kv_hides_under_the_first_ring_step_only():
    from types import SimpleNamespace

    from parc.cost.timing import exposed_comm

    ctime = {"tp": 0.0, "cp": 10.0, "ep": 0.0, "pp": 0.0}
    off = SimpleNamespace(tp_comm_overlap=False, ep_comm_overlap=False, overlap_grad_reduce=False,
                          overlap_param_gather=False)
    # 40 s of attention over a ring of 8: the gathered 5 s hide under the first step's 5 s, the
    # gradients' 5 s under the other 35 s, each at overlap 0.5: 10 - 2.5 - 2.5 = 5
    got = exposed_comm(ctime, 0.0, 40.0, 0.0, 0.0, 1, off, 0.5, cp=8, cp_gathered=0.5)
    assert got["cp"] == pytest.approx(5.0)
    # 16 s of attention: the first step's 2 s hide 2 of the gathered 5 (at 0.5: 1), the rest 14 s
    # all 5 of the gradients' (2.5): 10 - 1 - 2.5
    got = exposed_comm(ctime, 0.0, 16.0, 0.0, 0.0, 1, off, 0.5, cp=8, cp_gathered=0.5)
    assert got["cp"] == pytest.approx(6.5)
    # a ring that passes every chunk step by step hides under all of it: 10 - 0.5 · 10
    got = exposed_comm(ctime, 0.0, 16.0, 0.0, 0.0, 1, off, 0.5, cp=8, cp_gathered=0.0)
    assert got["cp"] == pytest.approx(5.0)


def test_torchtitan_cp_plan_exposes_its_gathered_ring():
    # cp 8 over two nodes of 4 GPUs: the ring crosses InfiniBand
    plan = plan_of(" nodes = 4\n gpus_per_node = 4\n gpu = h100_sxm\n intra_node = nvlink(450GB/s)\n"
                   " inter_node = infiniband(400Gb/s)", " dp = 2\n cp = 8", 2, "torchtitan",
                   MODEL.replace("seq_len = 2048", "seq_len = 131072"))
    e = estimate(plan, cache=False)
    c, attn, ov = e.comm_time["cp"], e.compute_split()["attention"], plan.profile.overlap
    # K and V in bf16, their gradients in float32: half of the ring's bytes gathered, hidden under
    # the first of 8 steps; the other half under the rest
    want = c - ov * min(c / 2, attn / 8) - ov * min(c / 2, attn * 7 / 8)
    assert e.comm_exposed["cp"] == pytest.approx(want, rel=1e-12)
    assert e.comm_exposed["cp"] > c - ov * min(c, attn)   # more than a step-by-step ring exposes


# --- what FSDP2 keeps gathered under a pipeline ---------------------------------------------------


def test_torchtitan_pipeline_stage_holds_its_gathered_parameters_and_float32_gradients(monkeypatch):
    """torchtitan's apply_fsdp keeps a pipeline stage's parameters gathered after forward
    (reshard_after_forward = not pp_enabled, torchtitan/parallelisms/parallelize_llama.py at 9dec370)
    and torch.distributed.pipelining keeps them so after backward until the last microbatch
    (set_reshard_after_backward(False)); their gradients stay unsharded in float32 until then."""
    plan = tiny(2, "torchtitan", 4)              # pp 2 × dp 4
    on = estimate(plan, cache=False).stages[0].memory
    monkeypatch.setitem(framework("torchtitan"), "pipeline_gathered_state", False)
    off = estimate(plan, cache=False).stages[0].memory
    # stage 0: 66,326,528 parameters (above), gathered in bf16 (2 bytes) with float32 gradients (4)
    assert on.weights - off.weights == 2 * 66_326_528
    assert on.grads - off.grads == 4 * 66_326_528
    assert on.optimizer == off.optimizer


def test_nothing_is_gathered_without_a_pipeline_or_without_fsdp():
    base = estimate(tiny(1, "torchtitan", 4), cache=False).stages[0].memory
    mega = estimate(tiny(1, "megatron", 4), cache=False).stages[0].memory
    assert base.weights == mega.weights and base.grads == mega.grads
    # pp 2 on 2 GPUs leaves dp 1: torchtitan applies no FSDP, nothing is gathered twice
    one = estimate(tiny(2, "torchtitan", 4, gpus=2), cache=False).stages[0].memory
    ref = estimate(tiny(2, "megatron", 4, gpus=2), cache=False).stages[0].memory
    assert one.weights == ref.weights and one.grads == ref.grads
