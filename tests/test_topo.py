"""`parc topo` on recorded outputs (tests/data/topo): the cluster block it writes, then `check`
on TP over the right and the wrong GPUs of that node, and the GPU order the launch files set."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from parc.api import check_file
from parc.cli.main import main as topo_main
from parc.topo import TopoError, cluster_block, read_nics, read_nvidia, read_rocm
from support.snapshot import assert_snapshot

DATA = Path(__file__).parent / "data" / "topo"
# recorded output -> (reader, GPU preset written)
NODES = {"dgx_h100": (read_nvidia, "h100_sxm"), "l40s_pcie": (read_nvidia, "l40s"),
         "workstation": (read_nvidia, None), "vm_two_numa": (read_nvidia, "a100_sxm_40gb"),
         "mi300x": (read_rocm, "mi300x")}
# the workstation's GPUs have no preset: the spec describes them (RTX A6000 datasheet: 48 GB,
# NVLink bridge 112.5 GB/s both directions = 56.25 GB/s each way, PCIe Gen4 x16 32 GB/s)
WS_GPU = "gpu {\n    memory = 48GB\n    flops = 154.8TFLOPS\n    nvlink_bandwidth = 56.25GB/s\n" \
         "    pcie_bandwidth = 32GB/s\n  }"


def block(name: str) -> str:
    reader, gpu = NODES[name]
    return cluster_block(reader((DATA / f"{name}.txt").read_text()), name, gpu)


@pytest.mark.parametrize("name", sorted(NODES))
def test_the_cluster_block_of_each_recorded_node(name):
    assert_snapshot(f"topo/{name}.par", block(name))


def _spec(tmp_path, name: str, mesh: str, extra: str = "") -> str:
    (tmp_path / "node.par").write_text(block(name))
    gpu = f"cluster {{\n  {WS_GPU}\n}}\n" if NODES[name][1] is None else ""
    text = (f'use "node.par"\nmodel {{ from = llama3_8b }}\n{gpu}mesh {{\n  {mesh}\n}}\n'
            f"serve {{ max_model_len = 4096 }}\n{extra}")
    p = tmp_path / "spec.par"
    p.write_text(text)
    return str(p)


def codes(result) -> set[str]:
    return {d.code for d in result.diagnostics}


def verdict(tmp_path, name, mesh):
    r = check_file(_spec(tmp_path, name, mesh), root=str(tmp_path))
    assert r.plan is not None, [str(d) for d in r.diagnostics]
    return r


# node, right mesh, wrong mesh, the code the wrong one gets
CASES = [
    ("dgx_h100", "tp = 8", None, None),                     # NV18 everywhere: any tp is on NVLink
    ("mi300x", "tp = 8", None, None),                       # XGMI everywhere
    ("vm_two_numa", "dp = 2\n  tp = 4", "tp = 8", "P306"),  # tp = 8 crosses the two sockets (SYS)
    ("workstation", "dp = 2\n  tp = 2", "tp = 4", "P305"),  # tp = 4 meets PHB between the NVLink pairs
    ("l40s_pcie", "dp = 4\n  tp = 2", "dp = 2\n  tp = 4", "P306"),  # PIX pairs; tp = 4 meets NODE
]


@pytest.mark.parametrize("name,right,wrong,code", CASES, ids=[c[0] for c in CASES])
def test_check_tp_over_the_right_and_the_wrong_gpus(tmp_path, name, right, wrong, code):
    r = verdict(tmp_path, name, right)
    assert not codes(r) & {"P305", "P306"}, [str(d) for d in r.diagnostics]
    if wrong:
        d = next(d for d in verdict(tmp_path, name, wrong).diagnostics if d.code == code)
        assert d.severity == ("warning" if code == "P305" else "error")


def test_vm_across_numa_names_the_islands(tmp_path):
    d = next(d for d in verdict(tmp_path, "vm_two_numa", "tp = 8").diagnostics if d.code == "P306")
    assert "GPU 0 reaches GPU 4 over the link between NUMA nodes (SYS)" in d.message
    assert "no 8 GPUs of this node share NVLink (islands: {0,1,2,3}, {4,5,6,7}): use tp = 4" in d.help


def test_workstation_tp4_warns_with_the_cost_and_the_fix(tmp_path):
    d = next(d for d in verdict(tmp_path, "workstation", "tp = 4").diagnostics if d.code == "P305")
    # under the launch's order 0,2,1,3 the group is GPUs 0..3; GPU 0 and GPU 1 meet over PHB
    assert "GPU 0 reaches GPU 1 over PCIe through the host bridge (PHB)" in d.message
    # the cost model's TP time per decoded token over PCIe (32 GB/s) against the NVLink pair (56 GB/s)
    assert "per decoded token over PCIe (32 GB/s) where NVLink (56 GB/s) would take" in d.message
    assert "islands: {0,2}, {1,3}" in d.help and "use tp = 2" in d.help


def test_l40s_box(tmp_path):
    # tp = 2 keeps each pair behind one switch (PIX): P303 says PCIe, nothing worse
    r = verdict(tmp_path, "l40s_pcie", "dp = 4\n  tp = 2")
    assert "P303" in codes(r) and not codes(r) & {"P305", "P306"}
    # tp = 4 spans two switches of a socket (NODE): an error naming the PIX pairs
    d = next(d for d in verdict(tmp_path, "l40s_pcie", "dp = 2\n  tp = 4").diagnostics if d.code == "P306")
    assert "over PCIe across host bridges of one NUMA node (NODE)" in d.message
    assert "the GPUs joined by better than NODE come 2 at a time ({0,1}, {2,3}, {4,5}, {6,7}): use tp = 2" in d.help
    # tp = 8 crosses the sockets (SYS): the help names the same PIX pairs, not the NUMA halves
    # (a group of 4 there would still meet NODE)
    d = next(d for d in verdict(tmp_path, "l40s_pcie", "tp = 8").diagnostics if d.code == "P306")
    assert "GPU 0 reaches GPU 4 over the link between NUMA nodes (SYS)" in d.message
    assert "come 2 at a time ({0,1}, {2,3}, {4,5}, {6,7}): use tp = 2" in d.help


def _compiled(tmp_path, name, mesh, target, block_text):
    from parc.api import load_plan
    from parc.targets import get

    plan = load_plan(_spec(tmp_path, name, mesh, block_text), [target], root=str(tmp_path))
    return get(target).build(plan)


def _visible(files) -> list[str]:
    return [ln for f in files for ln in f.text.splitlines() if "VISIBLE_DEVICES" in ln]


@pytest.mark.parametrize("target,body", [("vllm", 'model = "meta-llama/Meta-Llama-3-8B"'),
                                         ("sglang", 'model = "meta-llama/Meta-Llama-3-8B"')])
def test_the_launch_sets_the_gpu_order_that_keeps_tp_on_nvlink(tmp_path, target, body):
    # workstation: NVLink joins 0-2 and 1-3, so tp = 2 on consecutive ranks needs the order 0,2,1,3
    files = _compiled(tmp_path, "workstation", "dp = 2\n  tp = 2", target, f"target {target} {{ {body} }}\n")
    assert _visible(files) == ["export CUDA_VISIBLE_DEVICES=0,2,1,3"]


@pytest.mark.parametrize("name", ["dgx_h100", "vm_two_numa", "mi300x"])
def test_no_gpu_order_where_the_natural_one_serves(tmp_path, name):
    files = _compiled(tmp_path, name, "dp = 2\n  tp = 4", "vllm",
                      'target vllm { model = "meta-llama/Meta-Llama-3-8B" }\n')
    assert _visible(files) == []


def test_amd_gpus_are_ordered_with_hip_visible_devices():
    from parc.model.plan import GPU, Cluster, Link
    from parc.model.topology import Topology, visible_devices_var

    cl = Cluster("c", 1, 4, GPU("mi300x", 1, 1.0), Link("xgmi", 1.0), topology=Topology(islands=[[0, 2], [1, 3]]))
    assert visible_devices_var(cl) == "HIP_VISIBLE_DEVICES"


def test_readers_refuse_other_text():
    with pytest.raises(TopoError, match="nvidia-smi topo -m"):
        read_nvidia("hello\n")
    with pytest.raises(TopoError, match="rocm-smi --showtopo"):
        read_rocm((DATA / "dgx_h100.txt").read_text())
    with pytest.raises(TopoError, match="not a class"):
        read_nvidia((DATA / "workstation.txt").read_text().replace("NV4", "NVX?", 1))


def test_nic_list_for_rocm():
    # two NICs per socket, dealt out to the socket's GPUs in turn
    r = read_nics("mlx5_0 0\nmlx5_1 0\nmlx5_2 1\n", read_rocm((DATA / "mi300x.txt").read_text()))
    assert r.nics == ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_2", "mlx5_2", "mlx5_2"]


def test_older_drivers_name_nic_columns_by_device():
    text = "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\nGPU0\t X \tNV4\tPIX\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\n" \
           "mlx5_0\tPIX\tSYS\t X \n"
    r = read_nvidia(text)
    assert r.matrix == [["X", "NV4"], ["NV4", "X"]] and r.nics == ["mlx5_0", "mlx5_0"] and r.numa == []


def test_cli_writes_atomically_and_reads_stdin(tmp_path, monkeypatch, capsys):
    import io

    from parc.cli.main import main

    out = tmp_path / "cluster.par"
    assert main(["topo", str(DATA / "dgx_h100.txt"), "--gpu", "h100_sxm", "--name", "dgx_h100", "-o", str(out)]) == 0
    assert out.read_text() == block("dgx_h100")
    monkeypatch.setattr("sys.stdin", io.StringIO((DATA / "dgx_h100.txt").read_text()))
    assert main(["topo", "-", "--gpu", "h100_sxm", "--name", "dgx_h100"]) == 0
    assert capsys.readouterr().out == block("dgx_h100")


def test_cli_without_the_tool_says_so(monkeypatch, capsys, tmp_path):
    from parc.cli.main import main

    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["topo"]) == 2
    err = capsys.readouterr().err
    assert "`nvidia-smi` is not on this machine's PATH" in err and "nvidia-smi topo -m > topo.txt" in err
    assert main(["topo", "--rocm"]) == 2
    assert "`rocm-smi` is not on this machine's PATH" in capsys.readouterr().err


def test_cli_runs_the_tool_when_present(monkeypatch, capsys, tmp_path):
    from parc.cli.main import main

    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nif [ \"$1\" = topo ]; then /bin/cat {DATA / 'dgx_h100.txt'}; "
                    "else echo 'NVIDIA H100 80GB HBM3'; fi\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["topo", "--name", "dgx_h100"]) == 0
    assert capsys.readouterr().out == block("dgx_h100")   # the GPU preset named from --query-gpu=name


def test_cli_bad_input_and_preset(capsys, tmp_path):
    from parc.cli.main import main

    bad = tmp_path / "x.txt"
    bad.write_text("not a topology\n")
    assert main(["topo", str(bad)]) == 1
    assert "no `GPU0 GPU1 ...` header line" in capsys.readouterr().err
    assert main(["topo", str(DATA / "dgx_h100.txt"), "--gpu", "h100_smx"]) == 2
    assert "did you mean `h100_sxm`?" in capsys.readouterr().err


def test_explain_and_draw_show_each_ranks_physical_gpu(tmp_path):
    from parc.api import load_plan
    from parc.cost.estimate import estimate
    from parc.report.explain import render_text
    from parc.report.svg import mesh

    plan = load_plan(_spec(tmp_path, "workstation", "dp = 2\n  tp = 2"), root=str(tmp_path))
    est = estimate(plan)
    # local ranks 0,1 (one TP group) on the NVLink pair 0-2, ranks 2,3 on the pair 1-3
    assert est.to_json()["rank_map"]["physical_gpu"] == [0, 2, 1, 3]
    assert ("Physical GPU of each local rank (the launch sets this order on every node): "
            "0→GPU0, 1→GPU2, 2→GPU1, 3→GPU3.") in render_text(plan, est, "spec.par")
    svg = mesh(plan)
    assert 'data-rank="1" data-node="0" data-local="1"' in svg and "r1 · gpu2" in svg
    # on the DGX the natural order serves: local rank i is GPU i, and explain does not say it is set
    dgx = load_plan(_spec(tmp_path, "dgx_h100", "tp = 8"), root=str(tmp_path))
    assert estimate(dgx).to_json()["rank_map"]["physical_gpu"] == list(range(8))
    assert "0→GPU0, 1→GPU1" in render_text(dgx, estimate(dgx), "spec.par")
    assert "the launch sets this order" not in render_text(dgx, estimate(dgx), "spec.par")


def test_a_gpu_preset_without_nvlink_figure_keeps_pcie(capsys):
    from parc.cli.main import main

    # A100 PCIe's preset has nvlink_bandwidth = 0: the block plans for PCIe and says how to add the bridge
    assert main(["topo", str(DATA / "workstation.txt"), "--gpu", "a100_pcie_80gb"]) == 0
    out = capsys.readouterr().out
    assert "intra_node    = pcie" in out and "# write `intra_node = nvlink(BW)`" in out
    assert "islands = [[0, 2], [1, 3]]" in out


def test_the_order_follows_the_groups_the_rank_map_makes(tmp_path):
    from parc.model.topology import visible_devices

    # tp listed before dp is outermost: TP groups are local ranks {0,2} and {1,3}, already the
    # NVLink pairs, so the natural order serves and check is quiet; vLLM lays tp innermost
    # whatever the mesh says, so under vLLM the order 0,2,1,3 is set
    text = "tp = 2\n  dp = 2"
    r = verdict(tmp_path, "workstation", text)
    assert visible_devices(r.plan) is None and not codes(r) & {"P305", "P306"}
    files = _compiled(tmp_path, "workstation", text, "vllm", 'target vllm { model = "meta-llama/Meta-Llama-3-8B" }\n')
    assert _visible(files) == ["export CUDA_VISIBLE_DEVICES=0,2,1,3"]
    r = check_file(_spec(tmp_path, "workstation", text, 'target vllm { model = "m" }\n'), root=str(tmp_path))
    assert not codes(r) & {"P305", "P306"}


@pytest.mark.parametrize("text, words", [
    # a GPU column that is not GPU<n> after the GPUs, read before as a NIC
    ("\tGPU0\tGPU1\tGPU-7\tCPU Affinity\nGPU0\t X \tNV4\tPIX\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\n"
     "GPU-7\tPIX\tSYS\t X \n", "`GPU-7`"),
    # a row named like a GPU that no column names
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\nGPU-7\tNV4\tNV4\t0-7\n", "`GPU-7`"),
    # NIC columns in the header that the rows do not fill: the CPU affinity lands under NIC0
    ("\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\tNV4\t X \t0-7\t0\n",
     "NIC0"),
])
def test_misread_tables_are_refused(text, words, tmp_path, capsys):
    with pytest.raises(TopoError, match=re.escape(words)):
        read_nvidia(text)
    f = tmp_path / "topo.txt"
    f.write_text(text)
    assert topo_main(["topo", str(f)]) == 1
    assert words in capsys.readouterr().err
