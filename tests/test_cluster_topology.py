"""The cluster's `topology` and `group` blocks: resolved into the typed plan, and refused with a
reason where they do not describe the node."""
from __future__ import annotations

from parc.model.topology import Topology, device_order, fitting_sets, link_class, near_sets

BASE = """model {{ from = llama3_8b }}
cluster "c" {{
{body}
}}
mesh {{ {mesh} }}
train {{ zero = 3; recompute = full }}
"""


def _check(check_spec, body, mesh="dp = 4"):
    return check_spec(BASE.format(body=body, mesh=mesh))


def test_short_form_gives_every_pair_a_class():
    t = Topology(islands=[[0, 2], [1, 3]], numa=[0, 0, 1, 1])
    # one island: NVLink; two NUMA nodes: SYS; otherwise PHB
    assert [link_class(t, 0, b) for b in range(4)] == ["X", "PHB", "NV", "SYS"]
    assert fitting_sets(t, 4, 2) == [[0, 2], [1, 3]] and fitting_sets(t, 4, 4) == []
    # groups of consecutive local ranks: ranks 0,1 go to GPUs 0,2 and ranks 2,3 to GPUs 1,3
    assert device_order(t, 4, [[0, 1], [2, 3]]) == [0, 2, 1, 3]
    # groups of alternate ranks (tp listed before dp) already sit on the islands
    assert device_order(t, 4, [[0, 2], [1, 3]]) is None
    assert device_order(Topology(islands=[[0, 1], [2, 3]]), 4, [[0, 1], [2, 3]]) is None
    m = Topology(links=["X PIX NODE SYS", "PIX X NODE SYS", "NODE NODE X SYS", "SYS SYS SYS X"])
    assert near_sets(m, 4, "NODE") == [[0, 1], [2], [3]] and near_sets(m, 4, "SYS") == [[0, 1, 2], [3]]


def test_topology_resolves(check_spec):
    r = _check(check_spec, "  gpus_per_node = 4\n  gpu = h100_sxm\n  topology {\n    islands = [0, 1, 2, 3]\n"
                           "    numa = [0, 0, 1, 1]\n    nics = [\"mlx5_0\", \"mlx5_0\", \"mlx5_1\", \"mlx5_1\"]\n  }")
    assert r.ok, [str(d) for d in r.diagnostics]
    t = r.plan.cluster.topology
    assert t.islands == [[0, 1, 2, 3]] and t.numa == [0, 0, 1, 1] and t.nics[2] == "mlx5_1"
    assert r.plan.to_dict()["cluster"]["topology"]["numa"] == [0, 0, 1, 1]


def test_topology_that_does_not_fit_the_node(check_spec):
    r = _check(check_spec, "  gpus_per_node = 4\n  gpu = h100_sxm\n  topology {\n    islands = [[0, 1], [1, 4]]\n"
                           "    numa = [0, 0]\n    links = [\"X NV4\", \"NV4 X\"]\n  }")
    msgs = [d.message for d in r.errors if d.code == "P016"]
    assert any("islands list GPUs by their index on the node, 0 to 3" in m for m in msgs)
    assert any("numa gives the NUMA node of each of the 4 GPUs" in m for m in msgs)
    assert any("links is 4 rows of 4 classes" in m for m in msgs)
    r = _check(check_spec, "  gpus_per_node = 2\n  gpu = h100_sxm\n  topology { links = [\"X QPI\", \"QPI X\"] }",
               mesh="dp = 2")
    assert any("`QPI` is not a link class" in d.message for d in r.errors)


def test_groups_plan_for_the_slowest(check_spec):
    r = _check(check_spec, '  group "hopper" { nodes = 2; gpus_per_node = 8; gpu = h100_sxm }\n'
                           '  group "ada" { nodes = 1; gpus_per_node = 8; gpu = l40s }', mesh="dp = 24")
    assert r.plan is not None, [str(d) for d in r.diagnostics]
    cl = r.plan.cluster
    # 2 + 1 nodes of 8; the L40S (362 TFLOPS dense BF16 against the H100's 989) and its PCIe link
    assert (cl.nodes, cl.gpus_per_node, cl.gpu.name) == (3, 8, "l40s")
    assert cl.intra_node.kind == "pcie" and [g.name for g in cl.groups] == ["hopper", "ada"]
    assert cl.gpu.memory == min(g.gpu.memory for g in cl.groups)


def test_groups_refused(check_spec):
    r = _check(check_spec, '  group "a" { nodes = 1; gpus_per_node = 8; gpu = h100_sxm }\n'
                           '  group "b" { nodes = 1; gpus_per_node = 4; gpu = l40s }')
    assert any("every group of a cluster needs the same number" in d.message for d in r.errors)
    r = _check(check_spec, '  nodes = 3\n  group "a" { nodes = 1; gpus_per_node = 8; gpu = h100_sxm }')
    assert any("the cluster says nodes = 3 but its groups hold 1" in d.message for d in r.errors)
    r = _check(check_spec, '  group "a" { nodes = 1; gpus_per_node = 8; gpu = h100_smx }')
    assert any(d.code == "P010" and "did you mean `h100_sxm`" in (d.help or "") for d in r.errors)
    r = _check(check_spec, '  group "a" { nodes = 1 }')
    assert any("group \"a\" needs `gpus_per_node`, `gpu`" in d.message for d in r.errors)
    r = _check(check_spec, '  gpus_per_node = 8\n  gpu = h100_sxm\n  group { nodes = 1 }')
    assert any(d.code == "P021" and "needs a name" in d.message for d in r.errors)


def test_group_link_needs_a_figure(check_spec):
    r = _check(check_spec, '  group "a" { nodes = 1; gpus_per_node = 8; gpu = l40s; intra_node = nvlink }')
    assert any("`nvlink` needs a bandwidth here: l40s has no nvlink figure" in d.message for d in r.errors)
    r = _check(check_spec, '  group "a" { nodes = 1; gpus_per_node = 8; gpu = l40s; intra_node = nvlink(100GB/s) }',
               mesh="dp = 8")
    assert r.plan is not None and r.plan.cluster.intra_node.bandwidth == 100e9
