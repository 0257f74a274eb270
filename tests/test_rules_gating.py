"""Every independent mistake is reported in one run; an error that follows from another is not.

Gating is by dependency (``parc.rules.DEPENDS``): a rule is skipped only when a quantity
it reads was judged wrong by an earlier error.
"""
from __future__ import annotations

from support.specs import spec


def codes(result) -> list[str]:
    return sorted(d.code for d in result.errors)


def test_head_size_tp_across_nodes_and_batch_are_all_reported(check_spec):
    # three unrelated mistakes: a head size that is not whole (P111), a TP group of 16 on nodes of 8
    # (P301) and a global batch that micro_batch · dp does not divide (P201)
    text = spec("from = llama3_8b; hidden = 4100", nodes=2, mesh="dp = auto; tp = 16",
                schedule="micro_batch = 2; global_batch = 3")
    assert codes(check_spec(text)) == ["P111", "P201", "P301"]


def test_four_independent_mistakes(check_spec):
    # layers that pp does not split (P104), a sequence that 2·cp does not split (P114), a batch that
    # does not divide (P201) and a torchrun block without its script (P602)
    text = spec("from = llama3_8b; layers = 31; seq_len = 4098", nodes=2, mesh="pp = 2; cp = 2; tp = 4",
                schedule="micro_batch = 2; global_batch = 3", target={"torchrun": "max_restarts = 1"})
    r = check_spec(text)
    assert codes(r) == ["P104", "P114", "P201", "P602"], [(d.code, d.message) for d in r.diagnostics]
    # the schedule rules read the microbatch count, which P201 already reports as not whole
    assert not [d for d in r.diagnostics if d.code in ("P202", "P209")]
    # the memory estimate reads every quantity: it waits for the fixes
    assert not [d for d in r.diagnostics if d.code.startswith("P4")]


def test_mesh_beyond_the_cluster_keeps_the_model_checks(check_spec):
    # a mesh of 32 GPUs on 16 (P101) does not hide a tp that splits no head evenly... of its own
    text = spec("from = llama3_8b; hidden = 4100", nodes=2, mesh="pp = 4; tp = 8",
                schedule="micro_batch = 1; global_batch = 8")
    r = check_spec(text)
    assert codes(r) == ["P101", "P111"]
    # the batch and topology checks read the mesh that does not fit: no P201/P3xx cascade
    assert not [d for d in r.diagnostics if d.code[:2] in ("P2", "P3", "P4")]


def test_a_wrong_tp_is_one_error(check_spec):
    # tp = 6 splits neither the 32 heads (P102) nor the 8 KV heads (P103) nor ffn_hidden (P106), and the
    # torch runtime would also refuse the KV split (P110): one error, naming every width
    text = spec("from = llama3_8b", gpn=12, mesh="dp = auto; tp = 6", schedule="micro_batch = 1; global_batch = 3",
                target={"torchrun": 'entrypoint = "train.py"'})
    r = check_spec(text)
    assert codes(r) == ["P102"], [(d.code, d.message) for d in r.diagnostics]
    d = r.errors[0]
    assert "kv_heads" in d.message and "ffn_hidden" in d.message
    # dp = auto comes from tp, so the batch (3 over dp = 2) follows from the same mistake; with dp
    # written out it does not, and both are reported
    fixed_dp = text.replace("dp = auto", "dp = 2")
    assert codes(check_spec(fixed_dp)) == ["P102", "P201"]


def test_a_typo_in_recompute_does_not_hide_the_other_mistakes(check_spec):
    # a value that is not a `recompute` (P016) stops only what reads the train block (the memory
    # estimate): the head size, the TP group across nodes and the batch are reported with it
    text = spec("from = llama3_8b; hidden = 4100", nodes=2, mesh="dp = auto; tp = 16",
                schedule="micro_batch = 2; global_batch = 3", train="zero = 1; recompute = fulll")
    r = check_spec(text)
    assert codes(r) == ["P016", "P111", "P201", "P301"], [(d.code, d.message) for d in r.diagnostics]
    assert r.plan is None   # a plan with a field left at its default is never handed on
    # an unknown key in train is the same
    typo = text.replace("recompute = fulll", "recomput = full")
    assert codes(check_spec(typo)) == ["P007", "P111", "P201", "P301"]
    # the memory estimate reads the train block: it waits for the fix
    ok = spec("from = llama3_70b", mesh="tp = 8", schedule="micro_batch = 1; global_batch = 8",
              train="zero = 0; recompute = fulll")
    r = check_spec(ok)
    assert codes(r) == ["P016"] and not [d for d in r.diagnostics if d.code.startswith("P4")]
    # a bad value in the mesh still stops the rules: everything reads the mesh
    bad_mesh = text.replace("tp = 16", 'tp = "16"')
    assert {d.code[:2] for d in check_spec(bad_mesh).errors} == {"P0"}


def test_an_expert_grid_that_does_not_fit_its_stage_is_reported_beside_idle_gpus(check_spec):
    # 8 of 16 GPUs used (P302), and an expert grid of 16 carved from a stage of dp · tp = 8 ranks
    # (P112): the grid is judged against the stage's own ranks, which the idle GPUs do not change
    text = spec("from = mixtral_8x7b", nodes=2, mesh="dp = 4; tp = 2; ep = 8; etp = 2",
                schedule="micro_batch = 1; global_batch = 8")
    r = check_spec(text)
    assert codes(r) == ["P112", "P302"], [(d.code, d.message) for d in r.diagnostics]


def test_an_expert_grid_vllm_spreads_unevenly_is_still_judged_against_its_stage(check_spec):
    # vLLM spreads 256 experts over ep = 7 unevenly (P109, a warning), but a grid of 7 cannot be
    # carved from dp · tp = 8 ranks: P112 reports it, and the memory rules, which build the rank
    # map from the grid, wait for the fix instead of failing inside
    text = spec("from = deepseek_v3; dtype = fp8", mesh="dp = 8; ep = 7",
                serve="max_model_len = 4096; dp_attention = true",
                target={"vllm": 'model = "deepseek-ai/DeepSeek-V3"'})
    r = check_spec(text)
    assert codes(r) == ["P112"], [(d.code, d.message) for d in r.diagnostics]
    assert [d.severity for d in r.diagnostics if d.code == "P109"] == ["warning"]
    assert not [d for d in r.diagnostics if d.code.startswith("P4")]
    # the same with ep = 6, and with no target at all (P109 is then the error: no warning path)
    assert "P112" in codes(check_spec(text.replace("ep = 7", "ep = 6")))


def test_an_expert_degree_on_a_dense_serving_model_is_judged_not_a_crash(check_spec):
    # P109 is a warning where no target refuses ep on a dense model (torchtitan leaves it unused):
    # the memory rules then lay out the plan without an expert grid, which the model has none of
    text = spec("from = llama3_70b", gpn=4, mesh="tp = 4; ep = 3", serve="max_model_len = 4096")
    r = check_spec(text)
    assert [d.code for d in r.diagnostics if d.code == "P109"] == ["P109"], [(d.code, d.message) for d in r.diagnostics]
