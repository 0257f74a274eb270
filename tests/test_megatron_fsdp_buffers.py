"""Megatron-FSDP's communication buffers and the benchmarks' forced expert balancing as
`target megatron` keys (Megatron-LM 0.19.2): `fsdp_double_buffer` (--fsdp-double-buffer), `nccl_ub`
(--use-nccl-ub) and `force_load_balancing` (--moe-router-force-load-balancing). The double buffer's
memory in closed form (parc.cost.memory.fsdp_double_buffer_bytes over parc.cost.params.fsdp_unit_params),
the flags in the launch and back through `parc import`, and the rules for what Megatron-LM refuses
or overrides (P028, P029, P659). tests/test_megatron_judge.py runs the same launches through
Megatron-LM's own parser."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.specs import assert_fires, assert_quiet, spec

LLAMA = dict(model="from = llama3_8b", mesh="dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 64")
MIXTRAL = dict(model="from = mixtral_8x7b; seq_len = 4096", nodes=16, mesh="dp = 128; ep = 8",
               schedule="micro_batch = 1; global_batch = 256")
SCRIPT = Path(__file__).parent / "wild" / "slurm-megatron-deepseek-v3-fsdp" / "sbatch_mfsdp_deepseek_v3.sh"
PLAN = SCRIPT.parent / "plan.par"


def _mem(check_spec, text):
    from parc.cost.estimate import estimate

    r = check_spec(text, ("megatron",))
    assert r.plan is not None, [d.message for d in r.errors]
    return r, estimate(r.plan).stages[0].memory


def _argv(plan) -> list[str]:
    from parc.targets.megatron import arg_lines

    return [str(w) for line in arg_lines(plan) for w in line]


# --- the memory, in closed form -----------------------------------------------------------------
def test_double_buffer_bytes_are_two_units_of_weights_and_grads():
    from parc.cost.memory import StateBytes, fsdp_double_buffer_bytes

    # bf16 weights (2 B) with fp32 main grads (4 B): 2 buffers × 1e9 × 6 B
    assert fsdp_double_buffer_bytes(1e9, StateBytes(2, 4, 12)) == 12e9
    assert fsdp_double_buffer_bytes(1e9, StateBytes(2, 2, 12)) == 8e9


def test_a_dense_layer_on_a_tp_rank(check_spec):
    """llama3_8b at tp = 2: one layer on a TP rank is q 16·128 × 4096, k and v 4·128 × 4096 each,
    o 4096 × 16·128, SwiGLU's three 7168 × 4096 and two norms of 4096: 109,060,096 parameters;
    bf16 weights and fp32 main grads, two buffers each."""
    layer = 2048 * 4096 + 2 * 512 * 4096 + 4096 * 2048 + 3 * 7168 * 4096 + 2 * 4096
    assert layer == 109_060_096
    text = spec(**LLAMA, train="zero = 3; recompute = full", target={"megatron": "fsdp_double_buffer = true"})
    _, mem = _mem(check_spec, text)
    assert mem.fsdp_buffers == 2 * layer * (2 + 4) == 1_308_721_152
    # counted in the total the memory rules judge
    _, without = _mem(check_spec, spec(**LLAMA, train="zero = 3; recompute = full", target={"megatron": ""}))
    assert without.fsdp_buffers == 0
    assert mem.total - without.total == pytest.approx(mem.fsdp_buffers)


def test_the_corpus_deepseek_v3_moe_layer(check_spec):
    """DeepSeek-V3 at tp = 1, ep = 8 (the Megatron-LM script in tests/wild): the 58 MoE layers are
    the most numerous unit, each on a GPU holding MLA (q_a 1536 × 7168 and its norm, q_b 128·192 ×
    1536, kv_a 576 × 7168 and its norm, kv_b 128·256 × 512, o 7168 × 128·128), two norms, the
    router 256 × 7168, 32 routed experts and the shared one (3 × 2048 × 7168 each); bf16 weights
    and bf16 main grads: 2 × 1,642,283,008 × 4 B."""
    mla = 1536 * 7168 + 1536 + 128 * 192 * 1536 + 576 * 7168 + 512 + 128 * 256 * 512 + 7168 * 128 * 128
    layer = mla + 2 * 7168 + 256 * 7168 + 33 * 3 * 2048 * 7168
    assert layer == 1_642_283_008
    from parc.api import check_file

    r = check_file(PLAN, ["slurm"])
    from parc.cost.estimate import estimate

    assert estimate(r.plan).stages[0].memory.fsdp_buffers == 2 * layer * (2 + 2)


def test_a_tie_buffers_the_first_layers_kind(check_spec):
    """Llama 4 Maverick alternates dense and MoE layers (the first dense): FixedPoolAllocator keeps
    the first unit's group on a tie, so the buffers hold a dense layer."""
    from parc.cost.params import StageLayout, fsdp_unit_params, is_moe_layer, stage_layouts, stage_parts

    text = spec(model="from = llama4_maverick; seq_len = 4096", nodes=16, mesh="dp = 32; tp = 4; ep = 8",
                schedule="micro_batch = 1; global_batch = 256", train="zero = 3",
                target={"megatron": "fsdp_double_buffer = true"})
    r, mem = _mem(check_spec, text)
    p, me = r.plan, r.plan.mesh
    assert p.model.moe_every == 2 and not is_moe_layer(p.model, 0) and is_moe_layer(p.model, 1)

    def one(moe):
        return sum(stage_parts(p.model, StageLayout(0, [], 1, moe, False, False), me.dp, me.cp, me.tp, me.ep,
                               me.etp).values())

    dense, moe = one(0), one(1)
    assert dense != moe
    assert fsdp_unit_params(p, stage_layouts(p)[0]) == dense


@pytest.mark.parametrize("train, target, counted", [
    ("zero = 3", "nccl_ub = true", True),                    # Megatron-LM turns the double buffer on
    ("zero = 3", "nccl_ub = true; fsdp_double_buffer = true", True),
    ("zero = 1", "nccl_ub = true", False),                   # DDP: the same buffers, from NCCL's pool
    ("zero = 3", "", False),                                 # allocated on use, not counted
])
def test_which_plans_hold_the_buffers(check_spec, train, target, counted):
    _, mem = _mem(check_spec, spec(**LLAMA, train=train + "; recompute = full", target={"megatron": target}))
    assert (mem.fsdp_buffers > 0) == counted


def test_explain_names_the_term(check_spec):
    from parc.cost.estimate import estimate
    from parc.report.explain import render_text

    r = check_spec(spec(**LLAMA, train="zero = 3; recompute = full", target={"megatron": "nccl_ub = true"}),
                   ("megatron",))
    est = estimate(r.plan)
    text = render_text(r.plan, est, "spec.par")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("fsdp buffers"))
    assert "1.31 GB" in line and "109M parameters" in line and "double buffer" in line
    assert est.to_json()["memory_per_gpu"]["fsdp_buffers"] == 1_308_721_152


# --- the launch and parc import ------------------------------------------------------------------
def test_each_key_is_its_flag(check_spec):
    r = check_spec(spec(**LLAMA, train="zero = 3; recompute = full",
                        target={"megatron": "fsdp_double_buffer = true; nccl_ub = true"}), ("megatron",))
    argv = _argv(r.plan)
    assert argv.count("--fsdp-double-buffer") == 1 and argv.count("--use-nccl-ub") == 1
    r = check_spec(spec(**LLAMA, train="zero = 3; recompute = full", target={"megatron": ""}), ("megatron",))
    assert not {"--fsdp-double-buffer", "--use-nccl-ub", "--moe-router-force-load-balancing"} & set(_argv(r.plan))
    r = check_spec(spec(**MIXTRAL, train="zero = 1", target={"megatron": "force_load_balancing = true"}),
                   ("megatron",))
    assert _argv(r.plan).count("--moe-router-force-load-balancing") == 1


def test_import_reads_the_scripts_switches_as_keys():
    """`parc import` of Megatron-LM's DeepSeek-V3 script: the three switches are target megatron's
    keys, not extra_args."""
    out = subprocess.run([sys.executable, "-m", "parc", "import", str(SCRIPT)], capture_output=True, text=True).stdout
    for key in ("force_load_balancing", "fsdp_double_buffer", "nccl_ub"):
        assert re.search(rf"^  {key} += true ", out, re.M), (key, out)
    for flag in ("--fsdp-double-buffer", "--use-nccl-ub", "--moe-router-force-load-balancing"):
        assert f'"{flag}"' not in out, flag      # not in extra_args (the comments cite the script)


SCRIPT_DDP = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 32 --hidden-size 4096 \\
    --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \\
    --seq-length 8192 --max-position-embeddings 8192 --swiglu --normalization RMSNorm --vocab-size 128256 \\
    --position-embedding-type rope --rotary-base 500000 --disable-bias-linear --untie-embeddings-and-output-weights \\
    --tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64 --bf16 \\
    --use-distributed-optimizer {switches}
"""


@pytest.mark.parametrize("switches, kept, dropped", [
    ("--fsdp-double-buffer --use-nccl-ub", ["nccl_ub"], ["--fsdp-double-buffer"]),
    ("--use-megatron-fsdp --fsdp-double-buffer --use-nccl-ub", ["fsdp_double_buffer", "nccl_ub"], []),
])
def test_import_keeps_the_double_buffer_only_with_megatron_fsdp(tmp_path, switches, kept, dropped):
    """Without Megatron-FSDP Megatron-LM never reads --fsdp-double-buffer (a spec saying it is P028):
    `parc import` leaves it out and says so; NCCL user buffers register the DDP buffers and stay."""
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT_DDP.format(switches=switches), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "parc", "import", str(p)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for key in kept:
        assert re.search(rf"^  {key} += true ", r.stdout, re.M), (key, r.stdout)
    for flag in dropped:
        assert flag in r.stderr and "Megatron-FSDP" in r.stderr and "fsdp_double_buffer" not in r.stdout
        assert f'"{flag}"' not in r.stdout


# --- the rules -----------------------------------------------------------------------------------
def test_p028_double_buffer_without_megatron_fsdp(check_spec):
    bad = spec(**LLAMA, train="zero = 1; recompute = full", target={"megatron": "fsdp_double_buffer = true"})
    d = assert_fires(check_spec, bad, "P028", "fsdp_double_buffer = true")
    assert "zero = 1" in d.message and "stricter" in d.message
    assert_quiet(check_spec, spec(**LLAMA, train="zero = 3; recompute = full",
                                  target={"megatron": "fsdp_double_buffer = true"}), "P028")
    # NCCL user buffers alone are the DDP buffers' registration: nothing to refuse
    assert_quiet(check_spec, spec(**LLAMA, train="zero = 1; recompute = full", target={"megatron": "nccl_ub = true"}),
                 "P028")


def test_p028_double_buffer_off_beside_nccl_ub(check_spec):
    bad = spec(**LLAMA, train="zero = 3; recompute = full",
               target={"megatron": "nccl_ub = true; fsdp_double_buffer = false"})
    d = assert_fires(check_spec, bad, "P028", "fsdp_double_buffer = false")
    assert "turns the double buffer on" in d.message
    assert_quiet(check_spec, spec(**LLAMA, train="zero = 3; recompute = full",
                                  target={"megatron": "nccl_ub = true; fsdp_double_buffer = true"}), "P028")
    # without Megatron-FSDP there is no double buffer for the key to deny
    assert_quiet(check_spec, spec(**LLAMA, train="zero = 1; recompute = full",
                                  target={"megatron": "nccl_ub = true; fsdp_double_buffer = false"}), "P028")


def test_p029_forced_balance_needs_experts(check_spec):
    bad = spec(**LLAMA, train="zero = 1; recompute = full", target={"megatron": "force_load_balancing = true"})
    d = assert_fires(check_spec, bad, "P029", "force_load_balancing = true")
    assert "no experts" in d.message
    assert_quiet(check_spec, spec(**MIXTRAL, train="zero = 1", target={"megatron": "force_load_balancing = true"}),
                 "P029")


@pytest.mark.parametrize("key", ["fsdp_double_buffer", "nccl_ub"])
def test_p659_ep_overlap_refuses_the_double_buffer(check_spec, key):
    """mcore_fsdp_adapter.py: "1F1B overlap with FSDP does not support double buffer"."""
    bad = spec(**MIXTRAL, train="zero = 3; ep_comm_overlap = true", target={"megatron": f"{key} = true"})
    d = assert_fires(check_spec, bad, "P659", f"{key} = true", target="megatron", targets=("megatron",))
    assert "does not support double buffer" in d.message and f"remove `{key}`" in d.help
    assert_quiet(check_spec, spec(**MIXTRAL, train="zero = 3; ep_comm_overlap = true", target={"megatron": ""}),
                 "P659", ("megatron",))
    # the distributed optimizer has no double buffer: nccl_ub alone is fine there
    assert_quiet(check_spec, spec(**MIXTRAL, train="zero = 1; ep_comm_overlap = true",
                                  target={"megatron": "nccl_ub = true"}), "P659", ("megatron",))


# --- the planner ---------------------------------------------------------------------------------
def test_the_planner_counts_the_double_buffer_as_explain_does():
    """`parc plan` for a spec whose target megatron asks for the double buffer: the bulk search's
    memory of every candidate is the estimate's, the double buffers included on its ZeRO-3 rows
    (pipelines, interleaved chunks and DeepSeekMoE's dense first layer among them), and with
    `fsdp_double_buffer` only Megatron-FSDP (zero = 3) is tried (P028 refuses the rest)."""
    from dataclasses import replace

    import numpy as np

    from parc.cost.estimate import estimate
    from parc.model.plan import GPU, Cluster, Link, Target
    from parc.planner import build_plan
    from parc.planner.inputs import problem
    from parc.planner.plans import Candidate
    from parc.planner.space import PIPELINES, RECOMPUTE, SPLITS
    from parc.planner.vector import train_costs

    h100 = Cluster("h100", 2, 8, GPU("h100_sxm", 85520809984, 989e12, 3350e9, 450e9, 64e9), Link("nvlink", 450e9),
                   Link("infiniband", 50e9))
    base = problem("deepseek_moe_16b", h100, "train", seq_len=4096, global_batch=64)
    for settings in ({"nccl_ub": True}, {"fsdp_double_buffer": True}):
        pr = replace(base, targets={"megatron": Target("megatron", settings)}, memo={})
        cols = train_costs(pr).cols
        zeros = set(np.unique(cols["zero"]).tolist())
        assert zeros == ({3} if "fsdp_double_buffer" in settings else {0, 1, 2, 3}), zeros
        rng = np.random.default_rng(3)
        three = np.nonzero(cols["zero"] == 3)[0]
        idx = np.concatenate([rng.choice(three, 25, replace=False), rng.choice(len(cols["pp"]), 10, replace=False)])
        buffered = 0
        for i in idx:
            c = Candidate(rank=0, pp=int(cols["pp"][i]), dp=int(cols["dp"][i]), cp=int(cols["cp"][i]),
                          tp=int(cols["tp"][i]), ep=int(cols["ep"][i]), etp=int(cols["etp"][i]),
                          pipeline=PIPELINES[cols["pipeline"][i]], virtual_stages=int(cols["v"][i]),
                          micro_batch=int(cols["mb"][i]), microbatches=int(cols["m"][i]),
                          global_batch=int(cols["gb"][i]), layers=SPLITS[cols["split"][i]],
                          zero=int(cols["zero"][i]), recompute=RECOMPUTE[cols["recompute"][i]],
                          sequence_parallel=bool(cols["sp"][i]))
            e = estimate(build_plan(pr, c), cache=False)
            assert (e.memory.fsdp_buffers > 0) == (c.zero >= 3)
            buffered += c.zero >= 3
            assert cols["memory"][i] == pytest.approx(e.memory.total, rel=1e-9), (settings, c)
        assert buffered >= 25
