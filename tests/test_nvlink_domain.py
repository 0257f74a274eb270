"""An NVLink domain that spans nodes (GB200 NVL72: 18 trays of 4 GPUs on one NVLink fabric): the
groups inside it stay on the fast link for the rank map, the placement rules, the cost model and
the planner, while a node stays a host for the launchers."""
from __future__ import annotations

from pathlib import Path

from parc.cost import estimate as cm
from parc.model.rankmap import RankMap

ROOT = Path(__file__).resolve().parent.parent

NVL72 = """
use "clusters/gb200-nvl72.par"
model "m" { from = llama3_70b }
mesh {
  dp = 9
  tp = 8
}
train { zero = 1 }
"""

DGX = """
model "m" { from = llama3_70b }
cluster "two-dgx" {
  nodes         = 2
  gpus_per_node = 4
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}
mesh { tp = 8 }
train { zero = 1 }
"""


def _check(check_spec, write_spec, text):
    write_spec((ROOT / "examples/clusters/gb200-nvl72.par").read_text(), "clusters/gb200-nvl72.par")
    return check_spec(text)


def test_rank_map_tells_nodes_from_domains():
    # 72 ranks, tp 8 innermost, 4 GPUs a node, 72 a domain: the TP group 0..7 spans nodes 0 and 1
    rm = RankMap.from_sizes(4, dp=9, tp=8, domain=72)
    assert rm.nodes_spanned("tp") == 2 and rm.crosses_node("tp")
    assert rm.domains_spanned("tp") == 1 and not rm.crosses_domain("tp")
    assert rm.link("tp") == "intra_node"
    # dp groups (stride 8) hold ranks 0, 8, ..., 64: nine nodes, one domain
    assert rm.nodes_spanned("dp") == 9 and rm.domains_spanned("dp") == 1
    # two racks: dp = 18 over 144 ranks reaches the second domain
    two = RankMap.from_sizes(4, dp=18, tp=8, domain=72)
    assert two.domains_spanned("dp") == 2 and two.link("dp") == "inter_node"
    assert two.domain_of(80) == 1 and two.node_of(80) == 20
    # without a domain the node is the domain, as before
    plain = RankMap.from_sizes(4, dp=9, tp=8)
    assert plain.domain == 4 and plain.link("tp") == "inter_node"


def test_tp8_over_two_trays_of_one_nvl72_passes_on_nvlink(check_spec, write_spec):
    r = _check(check_spec, write_spec, NVL72)
    assert r.plan is not None and r.plan.cluster.domain == 72
    assert not [d for d in r.diagnostics if d.code.startswith("P30")], r.diagnostics
    est = cm.estimate(r.plan, cache=False)
    # the TP all-reduces run on NVLink: 900 GB/s, all 8 members in one domain
    assert est.comm_link["tp"] == "intra_node" and est.comm_local["tp"] == 8
    assert est.link_kind["intra_node"] == "nvlink"
    # the hosts are still 18 nodes of 4: the launchers see them
    assert est.rank_map["nodes"] == 18 and est.rank_map["gpus_per_node"] == 4
    assert est.rank_map["axes"]["tp"]["nodes_spanned"] == 2
    assert est.rank_map["axes"]["tp"]["domains_spanned"] == 1


def test_tp8_over_two_dgx_nodes_is_p301(check_spec):
    r = check_spec(DGX)
    codes = [d.code for d in r.diagnostics]
    assert "P301" in codes
    msg = next(d for d in r.diagnostics if d.code == "P301").message
    assert "spans 2 nodes of 4 GPUs" in msg


def test_tp_larger_than_the_domain_is_p301_in_domain_words(check_spec, write_spec):
    r = _check(check_spec, write_spec, NVL72.replace("use \"clusters/gb200-nvl72.par\"", """cluster "two" {
  nodes         = 4
  gpus_per_node = 4
  nvlink_domain = 8
  gpu           = gb200
  inter_node    = infiniband(400Gb/s)
}""").replace("dp = 9", "dp = 1").replace("tp = 8", "tp = 16"))
    p301 = [d for d in r.diagnostics if d.code == "P301"]
    assert p301 and "spans 2 NVLink domains of 8 GPUs" in p301[0].message


def test_domain_must_hold_whole_nodes(check_spec):
    r = check_spec(DGX.replace("gpus_per_node = 4", "gpus_per_node = 4\n  nvlink_domain = 6"))
    assert [d.code for d in r.errors] == ["P017"]
    assert "not a multiple of gpus_per_node = 4" in r.errors[0].message


def test_planner_asks_the_domain():
    from parc.planner.inputs import problem
    from parc.planner.space import crosses
    from parc.planner.vector import spanned

    pr = problem("llama3_70b", ROOT / "examples/clusters/gb200-nvl72.par", root=ROOT)
    assert pr.cluster.domain == 72 and pr.cluster.gpus_per_node == 4
    # mesh shapes are (pp, dp, cp, tp, ep, etp): tp 8 on two trays stays inside the rack's domain
    assert not crosses(pr, (1, 9, 1, 8, 1, 1), "tp")
    assert spanned(pr, (1, 9, 1, 8, 1, 1), "tp") == 1
    # the search keeps plans with tp 8 (twice a tray) among the valid ones
    from parc.planner.search import search

    res = search(pr, top=3)
    assert res.best is not None and (res.columns["tp"] == 8).any()


def test_planner_writes_the_domain_and_a_named_gpu_back(tmp_path):
    from dataclasses import replace

    from parc.api import check_file
    from parc.planner.emit import plan_text
    from parc.planner.inputs import problem
    from parc.planner.search import search

    pr = problem("llama3_70b", ROOT / "examples/clusters/gb200-nvl72.par", root=ROOT)
    pr.cluster = replace(pr.cluster, gpu=replace(pr.cluster.gpu, name="gb200-lab", memory=96 * 2**30))
    res = search(pr, top=1)
    text = plan_text(res)
    assert "nvlink_domain = 72" in text and 'gpu "gb200-lab" {' in text
    spec = tmp_path / "best.par"
    spec.write_text(text)
    r = check_file(spec, root=tmp_path)
    assert r.plan is not None and r.plan.cluster.domain == 72 and r.plan.cluster.gpu.name == "gb200-lab"
