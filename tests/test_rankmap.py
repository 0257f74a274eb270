"""The rank map against a per-rank reference, the peers' documented layouts, and a plan."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from parc.model.rankmap import RankMap


def reference_groups(order, sizes, axes):
    """Groups by brute force: ranks that agree on every axis outside ``axes``."""
    dims = [sizes[a] for a in order]
    by_key = {}
    for rank, coord in enumerate(itertools.product(*[range(d) for d in dims])):
        c = dict(zip(order, coord))
        key = tuple(c[a] for a in order if a not in axes)
        by_key.setdefault(key, []).append(rank)
    return sorted(sorted(v) for v in by_key.values())


def reference_expert_groups(order, sizes, ep, etp, axis):
    dims = [sizes[a] for a in order]
    stages = {}
    for rank, coord in enumerate(itertools.product(*[range(d) for d in dims])):
        stages.setdefault(dict(zip(order, coord))["pp"], []).append(rank)
    out = {}
    for pp_r, ranks in stages.items():  # a stage's ranks, already in flattened mesh order
        for j, rank in enumerate(ranks):
            e = {"etp": j % etp, "ep": (j // etp) % ep, "edp": j // (ep * etp)}
            key = (pp_r,) + tuple(e[a] for a in ("edp", "ep", "etp") if a != axis)
            out.setdefault(key, []).append(rank)
    return sorted(sorted(v) for v in out.values())


def max_nodes(groups, g):
    return max(len({r // g for r in grp}) for grp in groups)


def as_sorted_rows(arr):
    return sorted(sorted(int(x) for x in row) for row in arr)


LAYOUTS = [
    (("pp", "dp", "cp", "tp"), dict(pp=4, dp=2, cp=1, tp=2), 8, 1, 1),
    (("pp", "dp", "cp", "tp"), dict(pp=2, dp=4, cp=2, tp=2), 8, 4, 2),
    (("pp", "dp", "cp", "tp"), dict(pp=1, dp=6, cp=1, tp=3), 4, 3, 2),
    (("dp", "pp", "cp", "tp"), dict(pp=3, dp=2, cp=2, tp=2), 8, 2, 2),
    (("tp", "cp", "dp", "pp"), dict(pp=2, dp=3, cp=1, tp=4), 6, 2, 1),
    (("pp", "tp", "dp", "cp"), dict(pp=2, dp=2, cp=3, tp=2), 5, 6, 2),
    (("cp", "dp", "tp", "pp"), dict(pp=4, dp=2, cp=2, tp=1), 3, 4, 1),
]


@pytest.mark.parametrize("order,sizes,g,ep,etp", LAYOUTS)
def test_groups_and_nodes_match_reference(order, sizes, g, ep, etp):
    rm = RankMap.from_sizes(g, order=order, ep=ep, etp=etp, **sizes)
    assert rm.world == np.prod(list(sizes.values()))
    for axes in [("pp",), ("dp",), ("cp",), ("tp",), ("dp", "cp"), ("cp", "tp")]:
        key = axes[0] if len(axes) == 1 else axes
        ref = reference_groups(order, sizes, axes)
        got = rm.groups(key)
        assert as_sorted_rows(got) == ref
        assert rm.nodes_spanned(key) == max_nodes(ref, g)
        assert rm.crosses_node(key) == (max_nodes(ref, g) > 1)
    for axis in ("ep", "etp", "edp"):
        ref = reference_expert_groups(order, sizes, ep, etp, axis)
        assert as_sorted_rows(rm.groups(axis)) == ref, axis
        assert rm.nodes_spanned(axis) == max_nodes(ref, g), axis


@pytest.mark.parametrize("order,sizes,g,ep,etp", LAYOUTS)
def test_coords_roundtrip(order, sizes, g, ep, etp):
    rm = RankMap.from_sizes(g, order=order, ep=ep, etp=etp, **sizes)
    ranks = np.arange(rm.world)
    c = rm.coords(ranks)
    assert list(c) == list(order)
    assert (rm.rank_of(**c) == ranks).all()
    for ax in order:
        assert c[ax].min() == 0 and c[ax].max() == sizes[ax] - 1
    assert (rm.node_of(ranks) * g + rm.local_of(ranks) == ranks).all()
    e = rm.expert_coords(ranks)
    # each expert group holds ranks of one stage, differing only in its own coordinate
    for axis in ("ep", "etp"):
        for row in rm.groups(axis):
            assert len(set(c["pp"][row].tolist())) == 1
            assert sorted(e[axis][row].tolist()) == list(range(rm.size(axis)))


def test_megatron_docstring_example():
    # Megatron-LM initialize_model_parallel docstring: 16 GPUs, tp=2, pp=4 (so dp=2)
    rm = RankMap.from_sizes(8, pp=4, dp=2, tp=2)
    assert rm.groups("tp")[:3].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert rm.groups("dp")[:4].tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert rm.groups("pp")[:2].tolist() == [[0, 4, 8, 12], [1, 5, 9, 13]]


def test_megatron_expert_layout():
    # Megatron's expert generator: rank = etp_r + etp·(ep_r + ep·(edp_r + edp·pp_r))
    rm = RankMap.from_sizes(8, pp=2, dp=4, tp=2, ep=2, etp=2)
    assert rm.edp == 2
    assert rm.groups("etp")[:2].tolist() == [[0, 1], [2, 3]]
    assert rm.groups("ep")[:3].tolist() == [[0, 2], [1, 3], [4, 6]]
    assert rm.groups("edp")[:2].tolist() == [[0, 4], [1, 5]]
    assert rm.groups("ep")[-1].tolist() == [13, 15]


def test_node_placement_llama3_70b():
    # 8 nodes × 8 GPUs, pp=4 dp=2 tp=8: TP inside a node, DP and PP across nodes
    rm = RankMap.from_sizes(8, pp=4, dp=2, cp=1, tp=8)
    assert rm.nodes_spanned("tp") == 1 and not rm.crosses_node("tp")
    assert rm.nodes_spanned("dp") == 2 and rm.link("dp") == "inter_node"
    assert rm.nodes_spanned("pp") == 4
    assert rm.node_of(23) == 2 and rm.local_of(23) == 7
    assert rm.rank_of(pp=1, dp=1, tp=3) == 27
    assert rm.coords(27) == {"pp": 1, "dp": 1, "cp": 0, "tp": 3}


def test_tp_crossing_a_node_is_seen():
    # tp = 16 on 8-GPU nodes spans 2 nodes; tp = 3 on 4-GPU nodes straddles a boundary
    assert RankMap.from_sizes(8, dp=2, tp=16).nodes_spanned("tp") == 2
    rm = RankMap.from_sizes(4, dp=4, tp=3)
    assert rm.nodes_spanned("tp") == 2  # ranks 3,4,5 sit on nodes 0 and 1
    assert rm.groups("tp")[1].tolist() == [3, 4, 5]


def test_from_plan(check_spec):
    r = check_spec('''
        model "m" { from = llama3_70b }
        cluster "c" {
          nodes = 8
          gpus_per_node = 8
          gpu = h100_sxm
          intra_node = nvlink(450GB/s)
          inter_node = infiniband(400Gb/s)
        }
        mesh {
          pp = 4
          dp = auto
          tp = 8
        }
        schedule {
          micro_batch = 1
          global_batch = 64
        }
        train { zero = 1 }
    ''')
    rm = RankMap(r.plan)
    assert rm.world == 64 and rm.sizes["dp"] == 2
    s = rm.summary()
    assert s["order"] == ["pp", "dp", "cp", "tp"]
    assert s["axes"]["tp"] == {"size": 8, "stride": 1, "groups": 8, "nodes_spanned": 1, "domains_spanned": 1,
                               "link": "intra_node", "first_group": list(range(8))}
    assert s["axes"]["pp"]["first_group"] == [0, 16, 32, 48]
    assert s["axes"]["dp"]["link"] == "inter_node"


def test_bad_sizes():
    with pytest.raises(ValueError):
        RankMap.from_sizes(8, dp=0)
    with pytest.raises(ValueError):
        RankMap.from_sizes(8, dp=3, ep=2)


def test_large_cluster_shapes():
    rm = RankMap.from_sizes(8, pp=16, dp=128, cp=8, tp=8)
    assert rm.world == 131072
    assert rm.groups("dp").shape == (1024, 128)
    assert rm.nodes_spanned("cp") == 8 and rm.nodes_spanned("tp") == 1
    assert rm.nodes_spanned("dp") == 128
