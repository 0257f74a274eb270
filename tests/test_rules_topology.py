"""P3xx topology rules, read from the rank map: a spec that triggers each, and the same made valid."""
from __future__ import annotations

from support.specs import assert_fires, assert_quiet, line_of, spec

L70 = "from = llama3_70b"
SERVE = "max_model_len = 4096"


def test_p301_tp_wider_than_a_node(check_spec):
    bad = spec(L70, nodes=2, gpn=4, mesh="tp = 8", placement="tp on intra_node", serve=SERVE)
    d = assert_fires(check_spec, bad, "P301", "tp on intra_node")
    assert "spans 2 nodes of 4 GPUs" in d.message and "infiniband" in d.message
    assert "tp = 4 inside each node with pp = 2" in d.help
    assert_quiet(check_spec, bad.replace("tp = 8", "pp = 2\n  tp = 4"), "P301")


def test_p301_serving_engines_run_tp_across_nodes(check_spec):
    # SGLang's DeepSeek-V3 launch (docs/basic_usage/deepseek_v3.md, "--tp 16 --nnodes 2" on two
    # 8×H200 nodes): SGLang runs it, so a warning that prices the all-reduces, not an error
    text = spec("from = deepseek_v3", nodes=2, gpn=8, mesh="tp = 16", serve="max_model_len = 8192",
                target={"sglang": 'model = "deepseek-ai/DeepSeek-V3"'}).replace("h100_sxm", "h200")
    d = assert_fires(check_spec, text, "P301", "tp = 16", severity="warning")
    assert "SGLang runs it" in d.message and "per step of one sequence" in d.message and "× as long" in d.message
    assert not check_spec(text).errors
    # vLLM likewise; without a serving engine the rule keeps its error, and training keeps it too
    d = assert_fires(check_spec, text.replace("target sglang", "target vllm"), "P301", "tp = 16", severity="warning")
    assert "vLLM runs it" in d.message
    assert_fires(check_spec, text.split("target sglang")[0], "P301", "tp = 16")
    train = spec(L70, nodes=2, gpn=8, mesh="tp = 16", schedule="micro_batch = 1; global_batch = 8",
                 target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    assert_fires(check_spec, train, "P301", "tp = 16")
    assert_quiet(check_spec, text.replace("tp = 16", "dp = 2\n  tp = 8"), "P301")


def test_p301_tp_not_innermost(check_spec):
    # tp listed first is outermost: its groups stride over dp and cross the node
    bad = spec(L70, nodes=2, mesh="tp = 4; pp = 2; dp = 2", serve=SERVE)
    d = assert_fires(check_spec, bad, "P301", "tp = 4")
    assert "ranks 0, 4, 8, 12" in d.message
    assert "order pp, dp, tp" in d.help
    assert_quiet(check_spec, spec(L70, nodes=2, mesh="pp = 2; dp = 2; tp = 4", serve=SERVE), "P301")


def test_p301_tp_placed_across_nodes_on_purpose(check_spec):
    text = spec(L70, nodes=2, gpn=4, mesh="tp = 8", placement="tp on inter_node", serve=SERVE)
    assert_quiet(check_spec, text, "P301")


def test_p301_cp_pinned_to_a_node(check_spec):
    text = spec("from = llama3_8b; seq_len = 131072", nodes=8, mesh="dp = auto; cp = 8; tp = 2",
                placement="cp on intra_node", schedule="micro_batch = 1; global_batch = 32",
                train="zero = 3; sequence_parallel = true; recompute = full")
    d = assert_fires(check_spec, text, "P301", "cp on intra_node")
    assert "CP groups" in d.message
    assert_quiet(check_spec, text.replace("cp on intra_node", "cp on inter_node"), "P301")
    # unpinned, a CP ring across nodes is a normal long-context layout
    assert_quiet(check_spec, text.replace("placement {\n  cp on intra_node\n}\n", ""), "P301")


def test_p302_idle_gpus(check_spec):
    bad = spec(nodes=2, mesh="dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 64")
    d = assert_fires(check_spec, bad, "P302", "dp = 4")
    assert "8 would sit idle" in d.message and "dp = 8" in d.help
    r = check_spec(bad)
    assert {x.code[:2] for x in r.errors} == {"P3"}
    assert_quiet(check_spec, bad.replace("dp = 4", "dp = 8"), "P302")


def test_p303_tp_over_pcie(check_spec):
    bad = spec(nodes=1, gpn=4, mesh="dp = 2; tp = 2", intra="pcie(32GB/s)",
               schedule="micro_batch = 1; global_batch = 64", train="zero = 3")
    d = assert_fires(check_spec, bad, "P303", "tp = 2", severity="warning")
    assert "PCIe (32 GB/s" in d.message
    assert_quiet(check_spec, bad.replace("pcie(32GB/s)", "nvlink(450GB/s)"), "P303")
    served = spec(nodes=1, gpn=4, mesh="dp = 2; tp = 2", intra="pcie(32GB/s)", serve=SERVE)
    assert_fires(check_spec, served, "P303", "tp = 2", severity="note")


def test_p304_pp_pinned_inside_a_node_that_cannot_hold_it(check_spec):
    bad = spec(L70, nodes=2, mesh="pp = 2; tp = 8", placement="tp on intra_node; pp on intra_node", serve=SERVE)
    d = assert_fires(check_spec, bad, "P304", "pp on intra_node")
    assert "span 2 nodes" in d.message
    assert_quiet(check_spec, bad.replace("pp on intra_node", "pp on inter_node"), "P304")


def test_p304_inter_node_that_stays_inside(check_spec):
    bad = spec(L70, nodes=2, mesh="pp = 2; dp = 2; tp = 4", placement="dp on inter_node", serve=SERVE)
    d = assert_fires(check_spec, bad, "P304", "dp on inter_node")
    assert "stays inside one node" in d.message
    assert "order dp, pp, tp" in d.help
    assert_quiet(check_spec, bad.replace("pp = 2; dp = 2; tp = 4".replace("; ", "\n  "),
                                         "dp = 2\n  pp = 2\n  tp = 4"), "P304")


def test_p304_single_node(check_spec):
    bad = spec(mesh="pp = 2; tp = 4", placement="pp on inter_node", serve=SERVE)
    d = assert_fires(check_spec, bad, "P304", "pp on inter_node")
    assert "single node" in d.message


def test_p301_and_p304_one_error_for_one_order_mistake(check_spec):
    text = spec(L70, nodes=2, mesh="tp = 4; pp = 2; dp = 2", placement="pp on inter_node", serve=SERVE)
    r = check_spec(text)
    assert [d.code for d in r.errors] == ["P301"]


# ------------------------------------------------------------------------------ vLLM's fixed rank order

VLLM_SERVE = {"vllm": 'model = "meta-llama/Meta-Llama-3-8B-Instruct"'}


def test_vllm_mesh_order_is_judged_under_vllms_order(check_spec):
    # the mesh lists tp outside dp, which would put each TP group across both nodes; vLLM lays ranks
    # out as (dp, pp, cp, tp) whatever the mesh says, and under that order each TP group is one node
    text = spec("from = llama3_8b", nodes=2, mesh="tp = 8; dp = 2", serve="max_model_len = 4096",
                target=VLLM_SERVE)
    r = check_spec(text)
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    d = [x for x in r.diagnostics if x.code == "P652"]
    assert len(d) == 1 and d[0].severity == "note" and "dp, pp, cp, tp" in d[0].message
    # the same spec for torchrun runs in the mesh's order: the TP group crosses the nodes
    torch = text.replace('target vllm {\n  model = "meta-llama/Meta-Llama-3-8B-Instruct"\n}',
                         'target torchrun {\n  entrypoint = "serve.py"\n}')
    assert "P301" in {x.code for x in check_spec(torch).errors}


def test_vllm_placement_that_breaks_under_vllms_order(check_spec):
    # `dp on intra_node` holds in the mesh's order (pp, dp, tp: dp groups of ranks 4 apart) but not in
    # vLLM's, where dp is outermost (ranks 8 apart, on two nodes): an error that says so, with no
    # advice to reorder the mesh (vLLM would not follow it)
    text = spec("from = llama3_8b", nodes=2, mesh="pp = 2; dp = 2; tp = 4", placement="dp on intra_node",
                serve="max_model_len = 4096", target=VLLM_SERVE)
    r = check_spec(text)
    errs = [d for d in r.errors]
    assert [d.code for d in errs] == ["P304"], [(d.code, d.message) for d in r.diagnostics]
    assert "vLLM's rank order (dp, pp, cp, tp" in errs[0].message and "dp on intra_node" in errs[0].message
    assert "mesh axes in the order" not in (errs[0].help or "")
    assert errs[0].span.line == line_of(text, "dp on intra_node")
    # without vLLM the mesh's own order holds the placement
    assert not check_spec(text.replace('target vllm {\n  model = "meta-llama/Meta-Llama-3-8B-Instruct"\n}\n', "")).errors


def test_rule_messages_count_one_in_the_singular(check_spec):
    """Counts in rule messages go through one plural helper: a one-GPU mesh read "uses 1 GPUs",
    a one-GPU node "a node of 1 GPUs"."""
    text = spec("""  layers = 4
  hidden = 256
  ffn_hidden = 512
  heads = 4
  vocab = 1024
  seq_len = 128""", nodes=1, gpn=2, mesh="dp = 1")
    r = check_spec(text)
    d = next(d for d in r.diagnostics if d.code == "P302")
    assert "uses 1 GPU (" in d.message
    words = " ".join(f"{x.message} {x.help or ''}" for x in r.diagnostics)
    for noun in ("GPU", "node", "rank", "layer", "stage", "microbatch", "expert"):
        assert f" 1 {noun}s" not in words, words
