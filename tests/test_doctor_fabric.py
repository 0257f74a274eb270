"""parc doctor's fabric probes on a fake node (tests/support/doctor_node.py): DeepEP's IBGDA,
GPUDirect RDMA, GDRCopy, NICs, NVSHMEM and NCCL; EFA; NIXL between the pools of a disaggregated
plan; and what node 0's address resolves to. Each finding comes from one fact taken away from a
healthy node, which passes; and each probe runs only for the plans that need it."""
from __future__ import annotations

import pytest

from parc.doctor.fabric import numbers
from parc.doctor.probes import Connect
from support.doctor_node import SERVE_2NODE, TRAIN_2NODE, Node, doctor, only

CLUSTER = """
cluster "two-dgx" {{
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = {inter}
  socket_ifname = "eth0"
}}
"""


def wide_ep(backend: str = "deepep_low_latency", engine: str = "vllm", inter: str = "infiniband(400Gb/s)") -> str:
    """DeepSeek-V3 over 16 GPUs of two nodes, experts spread by the engine's DeepEP all-to-all."""
    key = {"vllm": "all2all_backend", "sglang": "moe_a2a_backend"}[engine]
    return ('model "deepseek-v3" { from = deepseek_v3; dtype = fp8 }\n' + CLUSTER.format(inter=inter)
            + "mesh { dp = 16; ep = 16 }\nserve { max_model_len = 4096; gpu_memory_utilization = 0.9; dp_attention = true }\n"
            + f'target {engine} {{ model = "deepseek-ai/DeepSeek-V3"; {key} = {backend} }}\n')


def pd(engine: str = "vllm", kv: str = "nixl", decode: str = "tp = 8") -> str:
    """Llama 3 70B, a prefill instance on node 0 and a decode instance on node 1."""
    return ('model "llama3-70b" { from = llama3_70b }\n' + CLUSTER.format(inter="infiniband(400Gb/s)")
            + f"mesh {{ tp = 8 }}\nserve {{\n  max_model_len = 4096\n  kv_transfer = {kv}\n  prefill {{ tp = 8 }}\n"
            f"  decode {{ {decode} }}\n}}\n" + f'target {engine} {{ model = "meta-llama/Llama-3.1-70B-Instruct" }}\n')


def sglang_2node() -> str:
    return SERVE_2NODE.replace("target vllm", "target sglang").replace('; version = "0.33"', "")


def passed(rep, check: str) -> str:
    return " | ".join(p.detail for p in rep.passed if p.check == check)


def nvshmem(n: Node) -> Node:
    n.packages["nvidia-nvshmem-cu12"] = "3.4.5"
    return n


# ------------------------------------------------------------------------------------------ DeepEP

def test_deepep_on_a_healthy_node(tmp_path):
    rep = doctor(nvshmem(Node()), tmp_path, wide_ep())
    assert rep.findings == [], [(f.code, f.message) for f in rep.findings]
    said = passed(rep, "fabric")
    assert "NVSHMEM: nvidia-nvshmem-cu12 3.4.5" in said
    assert "IBGDA enabled in the NVIDIA driver (EnableStreamMemOPs=1, PeerMappingOverride=1)" in said
    assert "GPUDirect RDMA through nvidia_peermem" in said and "IBGDA-capable NICs: mlx5_0" in said


@pytest.mark.parametrize("params,missing", [
    ({"EnableStreamMemOPs": "0", "RegistryDwords": '""'}, "NVreg_EnableStreamMemOPs=1 and PeerMappingOverride=1"),
    ({"EnableStreamMemOPs": "1", "RegistryDwords": '""'}, "PeerMappingOverride=1"),
])
def test_ibgda_off_in_the_driver(tmp_path, params, missing):
    n = nvshmem(Node())
    n.params = params
    f = only(doctor(n, tmp_path, wide_ep()), "D170")
    assert f.check == "fabric" and f.data["missing"] == missing
    assert f"the NVIDIA driver lacks {missing} (/proc/driver/nvidia/params)" in f.message
    assert "NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"" in f.fix


def test_gdrcopy_instead_of_the_driver_options(tmp_path):
    n = nvshmem(Node())
    n.params = {"EnableStreamMemOPs": "0", "RegistryDwords": '""'}
    n.modules.add("gdrdrv")
    f = only(doctor(n, tmp_path, wide_ep()), "D172")               # loaded on the host, no device here
    assert "/dev/gdrdrv is missing here" in f.message and "--device /dev/gdrdrv" in f.fix
    n.dev.append("gdrdrv")
    rep = doctor(n, tmp_path, wide_ep())
    assert rep.findings == [] and "IBGDA CPU-assisted through GDRCopy" in passed(rep, "fabric")


def test_no_gpudirect_rdma(tmp_path):
    n = nvshmem(Node())
    n.modules.discard("nvidia_peermem")
    f = only(doctor(n, tmp_path, wide_ep()), "D171")
    assert "the proprietary kernel modules cannot share GPU memory by dma-buf" in f.message
    assert "modprobe nvidia_peermem" in f.fix
    n.nvidia_version = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15"
    n.kernel = "5.4.0-150-generic"
    f = only(doctor(n, tmp_path, wide_ep()), "D171")
    assert "dma-buf needs Linux 5.12 or later, this node runs 5.4.0-150-generic" in f.message
    n.kernel = "6.8.0-53-generic"                                   # open modules on a recent kernel: dma-buf
    rep = doctor(n, tmp_path, wide_ep())
    assert rep.findings == [] and "GPUDirect RDMA through dma-buf" in passed(rep, "fabric")


def test_nics_that_cannot_run_ibgda(tmp_path):
    n = nvshmem(Node())
    n.ib_drivers = {"mlx5_0": "erdma"}                               # DeepEP#202, DeepEP#759
    f = only(doctor(n, tmp_path, wide_ep()), "D175")
    assert f.data["devices"] == "mlx5_0 (erdma)" and "UCCL-EP" in f.fix


@pytest.mark.parametrize("version,found", [(None, "none"), ("3.2.5", "nvidia-nvshmem-cu12 3.2.5")])
def test_nvshmem_missing_or_old(tmp_path, version, found):
    n = Node()
    if version:
        n.packages["nvidia-nvshmem-cu12"] = version
    f = only(doctor(n, tmp_path, wide_ep()), "D173")
    assert f.data == {"need": "3.3.9", "found": found}


def test_nvshmem_from_its_folder_or_the_linker(tmp_path):
    n = Node()
    n.tools.add("ldconfig")
    n.ldconfig = "\tlibnvshmem_host.so.3 (libc6,x86-64) => /opt/nvshmem/lib/libnvshmem_host.so.3\n"
    rep = doctor(n, tmp_path, wide_ep())
    assert rep.findings == [] and "NVSHMEM in the linker's cache" in passed(rep, "fabric")


def test_deepep_v2_needs_nccl(tmp_path):
    n = Node()
    n.packages["nvidia-nccl-cu13"] = "2.28.9"
    f = only(doctor(n, tmp_path, wide_ep("deepep_v2")), "D174")
    assert f.data == {"need": "2.30.4", "found": "nvidia-nccl-cu13 2.28.9"}
    n.packages["nvidia-nccl-cu13"] = "2.30.7"
    rep = doctor(n, tmp_path, wide_ep("deepep_v2"))
    assert rep.findings == [] and "NCCL for DeepEP v2: nvidia-nccl-cu13 2.30.7" in passed(rep, "fabric")
    assert "IBGDA" not in passed(rep, "fabric")                     # v2 runs on NCCL's Gin, not NVSHMEM


def test_sglang_deepep_is_probed_too(tmp_path):
    n = Node()
    n.params = {"EnableStreamMemOPs": "0", "RegistryDwords": '""'}
    rep = doctor(nvshmem(n), tmp_path, wide_ep("deepep", engine="sglang"))
    assert [f.code for f in rep.findings] == ["D170"]


@pytest.mark.parametrize("text", [SERVE_2NODE, TRAIN_2NODE, wide_ep("allgather_reducescatter"), pd()])
def test_no_deepep_no_deepep_probe(tmp_path, text):
    """A plan without a DeepEP backend never reads the driver's options or asks for NVSHMEM."""
    n = Node()
    n.params = {"EnableStreamMemOPs": "0"}
    rep = doctor(n, tmp_path, text)
    assert "/proc/driver/nvidia/params" not in n.reads
    assert not [f for f in rep.findings if f.code in ("D170", "D171", "D172", "D173", "D174", "D175")]
    assert not passed(rep, "fabric")


def test_one_node_needs_no_ibgda(tmp_path):
    one = (wide_ep().replace("nodes         = 2", "nodes         = 1").replace("dp = 16; ep = 16", "dp = 8; ep = 8")
           .replace("from = deepseek_v3; dtype = fp8", "from = deepseek_v2_lite"))
    n = nvshmem(Node())
    n.params = {"EnableStreamMemOPs": "0"}
    rep = doctor(n, tmp_path, one)
    assert rep.findings == [] and "/proc/driver/nvidia/params" not in n.reads


# ------------------------------------------------------------------------------------------ EFA

def efa(n: Node) -> Node:
    """An AWS p5-like node: one EFA device (the efa driver) and libfabric's fi_info."""
    n.ib, n.ib_drivers = {"rdmap16s27": {"1": ("4: ACTIVE", "Unspecified")}}, {"rdmap16s27": "efa"}
    n.tools.add("fi_info")
    return n


def test_efa(tmp_path):
    text = SERVE_2NODE.replace("infiniband(400Gb/s)", "efa(3200Gb/s)")
    n = efa(Node())
    rep = doctor(n, tmp_path, text)
    assert rep.findings == [], [(f.code, f.message) for f in rep.findings]
    assert "1 EFA device: rdmap16s27" in passed(rep, "fabric") and "libfabric's efa provider" in passed(rep, "fabric")
    n.fi_info = 1
    assert "fi_info -p efa finds no provider" in only(doctor(n, tmp_path, text), "D177").message
    n.tools.discard("fi_info")
    assert "fi_info is not installed" in only(doctor(n, tmp_path, text), "D177").message
    n = Node()
    f = only(doctor(n, tmp_path, text), "D176")
    assert "no device of the efa driver" in f.message


def test_deepep_v1_on_efa_is_the_nic_finding(tmp_path):
    rep = doctor(efa(nvshmem(Node())), tmp_path, wide_ep(inter="efa(3200Gb/s)"))
    assert [f.code for f in rep.findings] == ["D175"]


# ------------------------------------------------------------------------------------------ NIXL

def _pd_node(**env) -> Node:
    n = Node()
    n.packages["nixl"] = "1.3.0"
    n.env.update({"PARC_HOSTS": "10.0.0.1 10.0.0.2", **env})
    return n


def test_nixl_between_the_pools(tmp_path):
    """Node 0 holds the prefill instance; it reaches the decode instance's side channel on node 1."""
    n = _pd_node()
    rep = doctor(n, tmp_path, pd())
    assert rep.findings == [], [(f.code, f.message) for f in rep.findings]
    assert ("10.0.0.2", 5600) in n.connected
    assert "the other pool answers on its 1 KV-transfer port: 10.0.0.2:5600" in passed(rep, "kv")


def test_kv_peer_unreachable(tmp_path):
    n = _pd_node()
    n.reached[("10.0.0.1", 5600)] = Connect("unreachable", "no answer in 3 s")
    f = only(doctor(n, tmp_path, pd(), node_rank=1), "D180")    # the decode node looks for the prefill's
    assert f.message == ("this node cannot reach 1 of the other pool's KV-transfer ports: 10.0.0.1:5600 "
                         "(prefill instance 0's NIXL side channel, node 0): no answer in 3 s")
    assert "10.0.0.1:5600" in f.fix


def test_sglang_decode_reaches_the_prefill_bootstrap(tmp_path):
    n = _pd_node()
    n.reached[("10.0.0.1", 8998)] = Connect("unreachable", "No route to host")
    f = only(doctor(n, tmp_path, pd("sglang"), node_rank=1), "D180")
    assert "10.0.0.1:8998 (prefill instance 0's bootstrap server, node 0)" in f.message
    rep = doctor(_pd_node(), tmp_path, pd("sglang"), node_rank=0)   # the prefill side has nothing to dial
    assert rep.findings == [] and not passed(rep, "kv").count("KV-transfer port")


def test_no_host_list(tmp_path):
    n = _pd_node()
    del n.env["PARC_HOSTS"]
    f = only(doctor(n, tmp_path, pd()), "D181")
    assert f.severity == "warning" and "PARC_HOSTS is not set" in f.message and "scontrol show hostnames" in f.fix


def test_nixl_missing(tmp_path):
    n = _pd_node()
    del n.packages["nixl"]
    f = only(doctor(n, tmp_path, pd()), "D178")
    assert "neither nixl nor nixl-cu13 nor nixl-cu12 is installed" in f.message


def test_ucx_devices(tmp_path):
    f = only(doctor(_pd_node(UCX_NET_DEVICES="mlx5_3:1"), tmp_path, pd()), "D179")
    assert f.data["missing"] == "mlx5_3:1" and "mlx5_0" in f.data["available"]
    rep = doctor(_pd_node(UCX_NET_DEVICES="mlx5_0:1,eth0"), tmp_path, pd())
    assert rep.findings == [] and "UCX uses mlx5_0:1, eth0 (UCX_NET_DEVICES), present here" in passed(rep, "kv")


@pytest.mark.parametrize("text", [pd(kv="mooncake"), SERVE_2NODE, TRAIN_2NODE])
def test_no_nixl_no_kv_probe(tmp_path, text):
    n = Node()
    n.env["UCX_NET_DEVICES"] = "mlx5_9:1"
    rep = doctor(n, tmp_path, text)
    assert not passed(rep, "kv") and not [f for f in rep.findings if f.check == "kv"] and not n.connected


# ------------------------------------------------------------------------------------------ the rendezvous's name

def test_a_name_with_one_address_passes(tmp_path):
    rep = doctor(Node(), tmp_path)
    assert "node0 resolves to one address, 10.0.0.1" in passed(rep, "rendezvous")


def test_loopback(tmp_path):
    n = Node()
    n.hosts["node0"] = ["127.0.1.1"]
    n.local.add("127.0.1.1")
    f = only(doctor(n, tmp_path), "D183")
    assert "resolves to 127.0.1.1 on this node, a loopback address" in f.message and "/etc/hosts" in f.fix


def test_ipv6_only_for_sglang(tmp_path):
    n = Node()
    n.hosts["node0"] = ["fd00::1"]
    n.local.add("fd00::1")
    f = only(doctor(n, tmp_path, sglang_2node()), "D182")
    assert f.data == {"master_addr": "node0", "addresses": "fd00::1"}
    rep = doctor(n, tmp_path)                                        # vLLM's rendezvous takes IPv6
    assert not rep.findings and "node0 resolves to one address, fd00::1" in passed(rep, "rendezvous")


def test_several_addresses(tmp_path):
    n = Node()
    n.hosts["node0"] = ["10.0.0.1", "fd00::1"]
    n.local.add("fd00::1")
    f = only(doctor(n, tmp_path), "D184")
    assert f.severity == "warning" and "resolves to 2 addresses here (10.0.0.1, fd00::1)" in f.message


def test_an_address_literal_is_one_address(tmp_path):
    n = Node()
    n.hosts["fd00::1"] = ["fd00::1"]
    n.local.add("fd00::1")
    rep = doctor(n, tmp_path, sglang_2node(), master_addr="fd00::1")
    assert not [f for f in rep.findings if f.code in ("D182", "D184")]


def test_library_versions_compare_as_numbers():
    assert numbers("2.30.4") > numbers("2.4.0") and numbers("3.3.9") > numbers("3.3")
    assert numbers("12.4.127+cu12") == (12, 4, 127) and numbers("6.8.0-53-generic") >= numbers("5.12")


def test_the_fabric_walk_in_the_docs_is_what_parc_doctor_prints(tmp_path):
    from pathlib import Path

    from parc.doctor.render import text

    doc = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text()
    n = nvshmem(Node())
    n.params = {"EnableStreamMemOPs": "0", "RegistryDwords": '""'}
    n.modules.discard("nvidia_peermem")
    for fix in (False, True):   # before the two fixes, and after
        if fix:
            n.params = {"EnableStreamMemOPs": "1", "RegistryDwords": '"PeerMappingOverride=1;"'}
            n.modules.add("nvidia_peermem")
        rep = doctor(n, tmp_path, wide_ep())
        rep.spec = "wide-ep.par"
        assert text(rep) in doc
