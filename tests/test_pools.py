"""Prefill/decode-disaggregated serving plans: the `prefill` and `decode` pools inside `serve`,
resolved into one plan per pool instance and judged pool by pool, then as a whole (P117–P120)."""
from __future__ import annotations

from support.specs import assert_fires, assert_quiet, line_of, only

CLUSTER = """cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}"""


def pd_spec(prefill="instances = 2", decode="dp = 2", nodes=4, mesh="tp = 8", serve="kv_transfer = nixl",
            model="from = llama3_70b") -> str:
    def lines(body):
        return "".join(f"    {s.strip()}\n" for s in body.split(";") if s.strip())

    return (f'model "m" {{\n  {model}\n}}\n' + CLUSTER.format(nodes=nodes) + "\n"
            f"mesh {{\n  {mesh}\n}}\n"
            "serve {\n  max_model_len = 8192\n" + "".join(f"  {s.strip()}\n" for s in serve.split(";") if s.strip())
            + "  prefill {\n" + lines(prefill) + "  }\n"
            + "  decode {\n" + lines(decode) + "  }\n}\n")


def test_pools_take_the_mesh_keys_they_leave_out(check_spec):
    r = check_spec(pd_spec())
    assert r.ok, [(d.code, d.message) for d in r.diagnostics]
    pre, dec = r.plan.pools
    assert (pre.name, pre.instances, pre.mesh.tp, pre.mesh.dp) == ("prefill", 2, 8, 1)
    assert (dec.name, dec.instances, dec.mesh.tp, dec.mesh.dp) == ("decode", 1, 8, 2)
    # 2 prefill instances of 8 GPUs and one decode instance of dp 2 · tp 8
    assert r.plan.world_size == 2 * 8 + 16
    assert r.plan.serve.kv_transfer == "nixl"


def test_a_pool_instance_is_a_serving_plan_on_its_own_hosts(check_spec):
    from parc.model.pools import pool_plans

    text = pd_spec(prefill="tp = 4; instances = 2", decode="dp = 2", nodes=3)
    r = check_spec(text)
    (pre, pre_plan), (dec, dec_plan) = pool_plans(r.plan)
    # a 4-GPU prefill instance sees one node of 4 GPUs; a 16-GPU decode instance two whole nodes
    assert (pre_plan.cluster.nodes, pre_plan.cluster.gpus_per_node, pre_plan.world_size) == (1, 4, 4)
    assert (dec_plan.cluster.nodes, dec_plan.cluster.gpus_per_node, dec_plan.world_size) == (2, 8, 16)
    assert pre_plan.pools == [] and dec_plan.mesh.dp == 2
    # its mesh keys point into the pool block: the prefill's tp at its own line, the decode's
    # inherited tp at the `mesh` block's line
    assert pre_plan.span("mesh.tp").line == line_of(text, "tp = 4")
    assert dec_plan.span("mesh.tp").line == line_of(text, "tp = 8")
    assert dec_plan.span("mesh.dp").line == line_of(text, "dp = 2")


def test_one_pool_alone_is_refused(check_spec):
    text = pd_spec().replace("  decode {\n    dp = 2\n  }\n", "")
    r = check_spec(text)
    d = only(r, "P024")
    assert "needs a `decode` pool" in d.message and d.span.line == line_of(text, "prefill {")


def test_a_pool_block_twice_is_refused(check_spec):
    text = pd_spec().replace("  decode {", "  prefill {\n    tp = 4\n  }\n  decode {")
    d = only(check_spec(text), "P009")
    assert "`prefill` is defined twice" in d.message


def test_a_rule_one_pool_breaks_names_the_pool(check_spec):
    # tp = 3 splits none of Llama 3 70B's 64 heads: only the prefill pool is wrong
    text = pd_spec(prefill="tp = 3; instances = 1", nodes=4)
    d = only(check_spec(text), "P102")
    assert d.message.startswith("prefill pool: ") and d.span.line == line_of(text, "tp = 3")


def test_a_finding_both_pools_share_is_reported_once(check_spec):
    # the mesh's tp = 3 is both pools' (neither overrides it): one P102, at the mesh block, unprefixed
    text = pd_spec(prefill="instances = 1", decode="instances = 1", mesh="tp = 3", nodes=2)
    d = only(check_spec(text), "P102")
    assert not d.message.startswith(("prefill pool", "decode pool"))
    assert d.span.line == line_of(text, "tp = 3")


def test_pools_larger_than_the_cluster(check_spec):
    # 2 × 8 prefill + 16 decode GPUs = 32 on a cluster of 3 nodes × 8 = 24
    d = assert_fires(check_spec, pd_spec(nodes=3), "P117", "instances = 2")
    assert "the pools need 32 GPUs" in d.message and "24 GPUs on 3 nodes" in d.message
    assert "`nodes = 4`" in d.help
    assert_quiet(check_spec, pd_spec(nodes=4), "P117")


def test_small_instances_of_both_pools_share_a_node(check_spec):
    from parc.model.pools import instances, nodes_needed

    # 2 prefill instances of tp 2 and a decode instance of tp 4: one 8-GPU node, as vLLM's
    # one-node disaggregation examples run it
    r = check_spec(pd_spec(prefill="tp = 2; instances = 2", decode="tp = 4", nodes=1))
    assert not [d for d in r.diagnostics if d.code in ("P117", "P118", "P119")], r.diagnostics
    got = [(i.pool, i.index, i.nodes, i.devices) for i in instances(r.plan)]
    assert got == [("prefill", 0, (0,), "0,1"), ("prefill", 1, (0,), "2,3"), ("decode", 0, (0,), "4,5,6,7")]
    assert nodes_needed(r.plan) == 1
    # an instance of a node or more takes whole nodes of its own, after the shared one
    r = check_spec(pd_spec(prefill="tp = 4; instances = 1", decode="dp = 2", nodes=3))
    got = [(i.pool, i.nodes, i.devices) for i in instances(r.plan)]
    assert got == [("prefill", (0,), "0,1,2,3"), ("decode", (1, 2), "0,1,2,3,4,5,6,7")]
    d = only(r, "P118")   # 4 GPUs of node 0 are left
    assert "use 20 GPUs" in d.message and "4 would sit idle" in d.message


def test_pools_that_leave_gpus_idle(check_spec):
    d = assert_fires(check_spec, pd_spec(nodes=5), "P118", "serve {", severity="warning")
    assert "use 32 GPUs" in d.message and "8 would sit idle" in d.message


def test_an_instance_must_take_whole_nodes(check_spec):
    # a decode instance of dp 3 · tp 4 = 12 GPUs on 8-GPU nodes
    text = pd_spec(prefill="tp = 8", decode="dp = 3; tp = 4", nodes=3)
    d = assert_fires(check_spec, text, "P119", "decode {")
    assert "12 GPUs" in d.message and "(8 or 16)" in d.help
    assert_quiet(check_spec, pd_spec(), "P119")


def test_kv_transfer_on_one_mesh_is_ignored(check_spec):
    from support.specs import spec

    text = spec(model="from = llama3_8b", mesh="tp = 8", serve="max_model_len = 4096\nkv_transfer = nixl")
    assert_fires(check_spec, text, "P120", "kv_transfer", severity="warning")


def test_dcp_adds_no_gpus(check_spec):
    from support.specs import spec

    r = check_spec(spec(model="from = llama3_8b", mesh="tp = 8\ndcp = 2", serve="max_model_len = 4096"))
    assert r.plan.mesh.dcp == 2 and r.plan.world_size == 8


def test_smallest_serving_mesh_of_an_expert_parallel_plan(check_spec):
    # Before: the search for a mesh that fits kept ep = 16 while it tried one replica of tp 8,
    # and the rank map raised (`ep·etp = 16 does not divide dp·cp·tp = 8`): an internal error.
    from support.specs import spec

    text = spec(model="from = deepseek_v3\ncheckpoint_format = bf16", nodes=2, mesh="dp = 2\ntp = 8\nep = 16",
                serve="max_model_len = 8192")
    d = only(check_spec(text), "P402")
    assert "smallest mesh" in d.help


def test_each_pool_is_split_as_its_engine_splits_it(check_spec):
    # DeepSeek-V3's 61 layers: the prefill pool's pp = 4 and the decode pool's pp = 3, each split as
    # vLLM's get_pp_indices splits it (the remainder before the last stage)
    from parc.model.pools import pool_plans

    r = check_spec(pd_spec(prefill="pp = 4; instances = 1", decode="pp = 3", mesh="tp = 8", nodes=7,
                           model="from = deepseek_v3") + 'target vllm { model = "deepseek-ai/DeepSeek-V3" }\n')
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    splits = {pool.name: pp.placement.layers for pool, pp in pool_plans(r.plan)}
    assert splits == {"prefill": [15, 15, 16, 15], "decode": [20, 21, 20]}
    assert r.plan.placement.layers == [61]     # the whole plan's own mesh is left as it was
