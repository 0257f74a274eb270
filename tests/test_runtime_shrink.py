"""The rehearsal shrink keeps every divisibility the plan relies on (pure Python, no torch)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from parc.api import check_file
from parc.model import schedules
from parc.rules import run_rules
from parc.targets import load_rules

load_rules()   # the targets' own rules run too, as `parc check` runs them
from parc.runtime import shrink

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.par"))


def _plan(path):
    r = check_file(path)
    if not r.ok:
        pytest.skip(f"{path.name} has errors")
    m = r.plan.model
    if m.first_k_dense or m.is_mla or m.mtp_layers:   # what engine.unbuilt_features names
        pytest.skip(f"the runtime does not build {path.name}'s model (dense first layers, MLA or MTP)")
    return r.plan


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_rehearsal_keeps_every_divisibility(path):
    plan = _plan(path)
    before = copy.deepcopy(plan)
    p = shrink.rehearse(plan)
    m, mesh, s = p.model, p.mesh, p.schedule
    assert (mesh.pp, mesh.dp, mesh.cp, mesh.tp, mesh.ep, mesh.etp, mesh.order) == (
        plan.mesh.pp, plan.mesh.dp, plan.mesh.cp, plan.mesh.tp, plan.mesh.ep, plan.mesh.etp, plan.mesh.order)
    t = mesh.tp
    if plan.model.kv_heads % t == 0:
        assert m.kv_heads % t == 0 and m.heads % t == 0
    assert m.heads % m.kv_heads == 0
    assert (m.heads > m.kv_heads) == (plan.model.heads > plan.model.kv_heads)     # GQA stays GQA
    assert m.hidden == m.heads * 8 and m.ffn_hidden % t == 0
    assert (m.vocab % t == 0) == (plan.model.vocab % t == 0)
    assert m.seq_len % (2 * mesh.cp) == 0 and m.seq_len % t == 0
    assert (m.tied_embeddings, m.mlp, m.norm, m.position, m.bias) == (
        plan.model.tied_embeddings, plan.model.mlp, plan.model.norm, plan.model.position, plan.model.bias)
    if plan.model.is_moe:
        assert m.experts % mesh.ep == 0 and m.moe_ffn_hidden % mesh.etp == 0 and m.moe_layers >= 1
        assert 1 <= m.top_k <= m.experts
    if mesh.pp > 1:
        per = schedules.stages_per_rank(s.pipeline, s.virtual_stages)
        split = p.placement.layers
        assert len(split) == mesh.pp * per and min(split) >= 1 and sum(split) == m.layers
        if plan.mode == "train":
            assert schedules.check(s.pipeline, mesh.pp, s.microbatches, s.virtual_stages) is None
    assert s.global_batch == s.micro_batch * mesh.dp * s.microbatches
    assert m.params < 2_000_000 and m.dtype == "fp32"
    assert (plan.model, plan.schedule, plan.placement) == (before.model, before.schedule, before.placement)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_rehearsed_plan_passes_the_rules(path):
    p = shrink.rehearse(_plan(path))
    errors = [d for d in run_rules(p) if d.severity == "error"]
    assert not errors, [f"{d.code} {d.message}" for d in errors]


def test_uneven_split_stays_uneven():
    assert shrink.shrink_split([19, 20, 20, 21]) == [1, 2, 2, 2]
    assert shrink.shrink_split([8, 8]) == [1, 1]


def test_microbatches_satisfy_each_schedule():
    assert shrink.rehearsal_microbatches("1f1b", 4, 256) == 4
    assert shrink.rehearsal_microbatches("1f1b", 4, 6) == 6            # small counts are kept
    assert shrink.rehearsal_microbatches("dualpipe_v", 4, 256, 2) == 8
    assert shrink.rehearsal_microbatches("interleaved_1f1b", 4, 256, 2) == 4
    assert shrink.rehearsal_microbatches("gpipe", 1, 64) == 2


def test_degrees_of_tp_rehearse_the_same_shapes(write_spec):
    shapes = set()
    for tp in (1, 2, 4, 8):
        path = write_spec(f"""
            model "m" {{ from = llama3_8b }}
            cluster "c" {{
              nodes = 1
              gpus_per_node = {tp}
              gpu = h100_sxm
              intra_node = nvlink(450GB/s)
            }}
            mesh {{ tp = {tp} }}
            train {{ zero = 1 }}
            """, name=f"tp{tp}.par")
        m = shrink.rehearse(check_file(path, root=path.parent).plan).model
        shapes.add((m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab, m.seq_len, m.layers))
    assert len(shapes) == 1
