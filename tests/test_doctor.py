"""parc doctor: each finding produced by fakes of the node's probes (parc.doctor.probes.Probes),
with its code, the numbers of its message and its fix; the JSON form; and one real run on this
CPU machine, which has no GPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parc.cli.main import main
from parc.doctor import diagnose
from parc.doctor.context import Context
from parc.doctor.findings import node_facts, table
from parc.doctor.gpus import parse_query, parse_rocm
from parc.doctor.host import filesystem_of, mounts
from parc.doctor.probes import Connect, parse_torch_version
from support.doctor_node import (H100, H100_MIB, MIB, SERVE_2NODE, TRAIN_2NODE, Node, doctor,  # noqa: F401
                                 only, plan_of)

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ a healthy node

def test_a_healthy_node_is_ready(tmp_path):
    rep = doctor(Node(), tmp_path)
    assert rep.findings == [] and rep.ready
    said = " | ".join(p.detail for p in rep.passed)
    assert f"8 × {H100} (79.6 GiB), as the cluster block says" in said   # 81559 MiB / 1024 = 79.6 GiB
    assert "vLLM 0.33.1, the release the spec pins (0.33)" in said
    assert "NCCL and Gloo use eth0 (the cluster's socket_ifname), up" in said
    assert "port 29501" in said                                           # vLLM's --master-port
    assert "/shared/jobs/405b is on nfs4 (/shared)" in said


# ------------------------------------------------------------------------------------------ GPUs

def test_no_gpu_says_so(tmp_path):
    n = Node()
    n.tools = set()
    f = only(doctor(n, tmp_path), "D100")
    assert f.message == ("no GPU is present on this node: nvidia-smi is not installed, nor rocm-smi; "
                         "the cluster block says 8 × h100_sxm per node")
    assert "nvidia.com/gpu: 8" in f.fix


def test_fewer_gpus_than_the_cluster_says(tmp_path):
    n = Node()
    n.gpus = n.gpus[:4]
    f = only(doctor(n, tmp_path), "D101")
    assert f.message == ("this node has 4 GPUs for the plan (nvidia-smi lists 4); the cluster block says "
                         "gpus_per_node = 8")
    assert "give the job 8 GPUs on every node" in f.fix and "set gpus_per_node = 4" in f.fix


def test_cuda_visible_devices_hides_gpus(tmp_path):
    n = Node()
    n.env["CUDA_VISIBLE_DEVICES"] = "0,1"
    f = only(doctor(n, tmp_path), "D101")
    assert "CUDA_VISIBLE_DEVICES=0,1 shows 2 of the 8" in f.message
    assert "unset CUDA_VISIBLE_DEVICES or list 8 devices" in f.fix


def test_wrong_gpu_model(tmp_path):
    n = Node()
    n.gpus = [(i, "NVIDIA L40S", 46068, 46000) for i in range(8)]
    f = only(doctor(n, tmp_path), "D102")
    # 46068 MiB / 1024 = 44.99 GiB -> "45 GiB"; h100_sxm 81559 MiB -> 79.6 GiB
    assert f.message == "the GPUs are 8 × NVIDIA L40S (45 GiB each); the cluster block says h100_sxm (79.6 GiB)"
    assert "write `gpu = l40s` in the cluster block" in f.fix


def test_a_mig_slice_is_another_gpu(tmp_path):
    n = Node()
    n.gpus[3] = (3, H100, 40000, 40000)        # same name, half the memory
    f = only(doctor(n, tmp_path), "D102")
    assert f.message.startswith(f"GPU 3 is an {H100} (39.1 GiB)")     # 40000 / 1024 = 39.06
    assert "write `gpu { memory = 40000MiB  flops = ... }` in the cluster block" in f.fix


def test_busy_gpu_memory_for_vllm(tmp_path):
    n = Node()
    n.gpus[3] = (3, H100, H100_MIB, 20000)
    f = only(doctor(n, tmp_path), "D103")
    # vLLM wants 0.92 x 79.6 GiB = 73.3 GiB free; 20000 MiB = 19.5 GiB; 20000 / 81559 = 0.245 -> 0.24
    assert f.message == ("GPU 3 has 19.5 GiB free of 79.6 GiB; the engine takes gpu_memory_utilization = 0.92 "
                         "of 79.6 GiB = 73.3 GiB")
    assert f.fix.endswith("or lower serve.gpu_memory_utilization to 0.24 or less")


def test_driver_too_old_for_torch(tmp_path):
    n = Node()
    n.cuda = "11.8"
    f = only(doctor(n, tmp_path), "D110")
    assert f.message == ("torch 2.9.0+cu128 was built for CUDA 12.8; the driver 570.86.15 supports CUDA up to "
                         "11.8: torch will not see the GPUs")
    assert "whl/cu118" in f.fix


def test_driver_a_minor_version_behind_is_a_warning(tmp_path):
    n = Node()
    n.cuda = "12.4"
    rep = doctor(n, tmp_path)
    f = only(rep, "D115")
    assert f.severity == "warning" and rep.ready and "whl/cu124" in f.fix


# ------------------------------------------------------------------------------------------ software

def test_engine_version_mismatch(tmp_path):
    n = Node()
    n.packages["vllm"] = "0.31.0"
    f = only(doctor(n, tmp_path), "D113")
    assert f.message == "vLLM 0.31.0 is installed; the spec pins vLLM 0.33"
    assert f.fix == ('pip install "vllm==0.33.*", or pin the installed release in the spec '
                     '(target vllm { version = "0.31" }) and check it again')


def test_a_cpu_only_torch_cannot_run_a_gpu_job(tmp_path):
    n = Node()
    n.torch = {"version": "2.13.0+cpu", "cuda": None, "hip": None}
    f = only(doctor(n, tmp_path), "D111")
    assert f.severity == "error"
    assert f.message == ("torch 2.13.0+cpu is a CPU-only build (built for neither CUDA nor ROCm): it sees no GPU, "
                         "and the plan runs on 8 GPUs per node")
    assert "GPU build of torch" in f.fix


def test_engine_missing_and_torch_missing(tmp_path):
    n = Node()
    del n.packages["vllm"], n.packages["torch"]
    rep = doctor(n, tmp_path)
    assert {f.code for f in rep.findings} == {"D111", "D112"}
    d112 = next(f for f in rep.findings if f.code == "D112")
    assert d112.fix == 'pip install "vllm==0.33.*" in the environment the job runs in'


def test_a_release_parc_does_not_know(tmp_path):
    n = Node()
    n.packages["vllm"] = "0.40.2"
    rep = doctor(n, tmp_path)
    f = only(rep, "D114")
    assert f.severity == "warning" and rep.ready and "0.26, 0.27" in f.message


def test_slurm_serving_checks_the_vllm_it_runs(tmp_path):
    n = Node()
    n.packages["vllm"] = "0.32.0"
    f = only(doctor(n, tmp_path, SERVE_2NODE + "target slurm { }\n"), "D113")
    assert f.message == "vLLM 0.32.0 is installed; the spec pins vLLM 0.33"


# ------------------------------------------------------------------------------------------ sockets

def test_wrong_interface(tmp_path):
    n = Node()
    f = only(doctor(n, tmp_path, SERVE_2NODE.replace('"eth0"', '"ens5"')), "D120")
    assert f.message == "the cluster's socket_ifname names ens5, which this node does not have (it has eth0, ib0, lo)"
    assert f.fix.startswith("name an interface this node has: eth0, ib0;")


def test_a_prefix_serves_nccl_but_not_gloo(tmp_path):
    # NCCL reads "eth" as a prefix (eth0 matches); the launch exports GLOO_SOCKET_IFNAME=eth, an exact name
    f = only(doctor(Node(), tmp_path, SERVE_2NODE.replace('"eth0"', '"eth"')), "D120")
    assert f.message == "the cluster's socket_ifname names eth, which this node does not have (it has eth0, ib0, lo)"


def test_gloo_from_the_environment(tmp_path):
    n = Node()
    n.env["GLOO_SOCKET_IFNAME"] = "bond0"
    f = only(doctor(n, tmp_path), "D120")
    assert f.message.startswith("GLOO_SOCKET_IFNAME names bond0, which this node does not have")


def test_interface_down(tmp_path):
    n = Node()
    n.nets["eth0"] = ("down", "0x1002")
    f = only(doctor(n, tmp_path), "D121")
    assert f.message == "eth0, the interface the cluster's socket_ifname names, is down"
    assert f.fix.startswith("bring eth0 up (ip link set eth0 up;") and f.fix.endswith("that is up: ib0")


def test_the_environment_wins_over_the_cluster(tmp_path):
    n = Node()
    n.env["NCCL_SOCKET_IFNAME"] = "ib0"
    rep = doctor(n, tmp_path)
    f = only(rep, "D122")
    assert f.message == 'NCCL_SOCKET_IFNAME=ib0 in the environment wins over the cluster\'s socket_ifname = "eth0"'
    assert rep.ready


def test_several_networks_none_named(tmp_path):
    n = Node()
    f = only(doctor(n, tmp_path, SERVE_2NODE.replace('socket_ifname = "eth0"', "")), "D123")
    assert "several networks up (eth0, ib0)" in f.message and "(one of eth0, ib0)" in f.fix


# ------------------------------------------------------------------------------------------ InfiniBand

def test_ib_port_down(tmp_path):
    n = Node()
    n.ib["mlx5_0"]["1"] = ("1: DOWN", "InfiniBand")
    f = only(doctor(n, tmp_path), "D131")
    assert f.message == "no InfiniBand/RoCE port is active: mlx5_0 port 1 DOWN"
    assert f.fix.startswith("bring the ports up (mlx5_0 port 1 DOWN)")


def test_no_rdma_device(tmp_path):
    n = Node()
    n.ib = {}
    f = only(doctor(n, tmp_path), "D130")
    assert f.message == "the cluster's inter_node link is infiniband, and /sys/class/infiniband lists no device"


def test_nccl_ib_disable_hides_ib(tmp_path):
    n = Node()
    n.env["NCCL_IB_DISABLE"] = "1"
    f = only(doctor(n, tmp_path), "D132")
    assert f.message == ("NCCL_IB_DISABLE=1 (set by the environment) hides 1 active RDMA port "
                         "(mlx5_0 port 1 ACTIVE) from NCCL; the cluster's inter_node link is infiniband")
    assert f.fix == "unset NCCL_IB_DISABLE in the job's environment"


def test_ethernet_cluster_with_active_ib(tmp_path):
    n = Node()
    rep = doctor(n, tmp_path, SERVE_2NODE.replace("infiniband(400Gb/s)", "ethernet(100Gb/s)"))
    f = only(rep, "D133")
    assert f.severity == "warning" and "1 active RDMA port (mlx5_0 port 1 ACTIVE)" in f.message


def test_memlock_too_low(tmp_path):
    n = Node()
    n.memlock_limit = 8 * MIB
    f = only(doctor(n, tmp_path), "D152")
    # 8 MiB = 8388608 B; ulimit -l counts KiB: 8192
    assert f.message.startswith("the locked-memory limit is 8 MiB (ulimit -l: 8192);")
    assert "ulimit -l unlimited" in f.fix and f.data["memlock"] == 8388608


# ------------------------------------------------------------------------------------------ rendezvous

def test_port_taken_on_node_0(tmp_path):
    n = Node()
    n.taken = {29501, 29502}
    f = only(doctor(n, tmp_path), "D141")
    assert f.message == ("port 29501 (the vllm launch's default) cannot be bound on node 0: "
                         "Address already in use")
    assert "ss -ltnp 'sport = :29501'" in f.fix and "MASTER_PORT=29503" in f.fix   # 29502 taken too


def test_master_port_from_the_environment(tmp_path):
    n = Node()
    n.env["MASTER_PORT"] = "40000"
    n.taken = {40000}
    assert "port 40000 (MASTER_PORT)" in only(doctor(n, tmp_path), "D141").message


def test_node_0_is_another_machine(tmp_path):
    n = Node()
    n.local = {"10.0.0.2", "127.0.0.1"}
    f = only(doctor(n, tmp_path), "D144")
    assert f.message == ("this is node 0, and node0 (10.0.0.1) (from --master-addr) is not an address of this node: "
                         "the other nodes will look for the rendezvous there")
    assert f.fix.startswith("run node rank 0 on the machine node0 names")


def test_master_address_unresolvable(tmp_path):
    n = Node()
    f = only(doctor(n, tmp_path, node_rank=1, master_addr="node0.invalid"), "D140")
    assert f.message == "node0.invalid (from --master-addr) does not resolve on this node"


def test_master_unreachable_from_node_1(tmp_path):
    n = Node()
    n.answer = Connect("unreachable", "no answer in 3 s")
    f = only(doctor(n, tmp_path, node_rank=1), "D142")
    assert f.message == "node 0 at node0 (10.0.0.1) does not answer on port 29501 (the vllm launch's default): no answer in 3 s"
    assert f.fix.startswith("open TCP port 29501 on node 0")


def test_a_refused_connection_before_the_launch_is_fine(tmp_path):
    rep = doctor(Node(), tmp_path, node_rank=1)
    assert rep.ready and any("nothing listens yet" in p.detail for p in rep.passed)


def test_no_master_address(tmp_path):
    rep = doctor(Node(), tmp_path, node_rank=1, master_addr=None)
    f = only(rep, "D143")
    assert f.severity == "warning" and "--node-rank 1 --master-addr ADDR" in f.fix


def test_master_address_from_rdzv_endpoint_and_torchrun_port(tmp_path):
    n = Node()
    n.taken = {29400}
    f = only(doctor(n, tmp_path, text=TRAIN_2NODE, master_addr=None), "D141")
    assert f.message.startswith("port 29400 (rdzv_endpoint) cannot be bound on node 0")


def test_training_checks_the_port_torchrun_uses_and_the_dataloaders_shm(tmp_path):
    n = Node()
    n.shm = 64 * MIB
    rep = doctor(n, tmp_path, text=TRAIN_2NODE.replace('  rdzv_endpoint = "node0:29400"', ""))
    f = only(rep, "D151")
    assert f.message == ("/dev/shm is 64 MiB; NCCL between the 8 GPUs of a node and torch's DataLoader workers "
                         "need at least 1 GiB")
    assert any("port 29500 (the torchrun launch's default)" in p.detail for p in rep.passed)


# ------------------------------------------------------------------------------------------ host

def test_folder_not_shared(tmp_path):
    n = Node()
    f = only(doctor(n, tmp_path, launch_dir="/home/me/job"), "D150")
    assert f.message == ("the launch folder /home/me/job is on ext4 (/), a filesystem of this node only; "
                         "the plan runs on 2 nodes")


def test_shm_too_small(tmp_path):
    n = Node()
    n.shm = 64 * MIB
    f = only(doctor(n, tmp_path), "D151")
    assert f.message == ("/dev/shm is 64 MiB; NCCL between the 8 GPUs of a node and vLLM's worker processes "
                         "need at least 1 GiB")
    assert "docker run --shm-size=1g" in f.fix


def test_spec_errors_are_a_finding(tmp_path):
    plan = plan_of(SERVE_2NODE, tmp_path)
    rep = diagnose(Context(plan, Node().probes(), master_addr="node0", spec="spec.par"), spec_errors=2)
    assert only(rep, "D190").fix == "run parc check spec.par and fix what it lists"


# ------------------------------------------------------------------------------------------ topology

WORKSTATION = """
cluster "ws" {
  nodes         = 1
  gpus_per_node = 4
  gpu           = h100_pcie
  intra_node    = nvlink(450GB/s)
  topology {
    islands = [[0, 1], [2, 3]]
    numa    = [0, 0, 0, 0]
  }
}
model "llama3-8b" { from = llama3_8b }
mesh { dp = 2; tp = 2 }
schedule { micro_batch = 1; global_batch = 8 }
train { zero = 1 }
"""
# nvidia-smi topo -m of a workstation whose NVLink bridges join GPU 0 with 2 and 1 with 3
TOPO_0_2 = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tPHB\tNV4\tPHB\t0-31\t0\tN/A
GPU1\tPHB\t X \tPHB\tNV4\t0-31\t0\tN/A
GPU2\tNV4\tPHB\t X \tPHB\t0-31\t0\tN/A
GPU3\tPHB\tNV4\tPHB\t X \t0-31\t0\tN/A
"""


def test_gpus_wired_slower_than_the_cluster_block_says(tmp_path):
    pytest.importorskip("parc.topo")
    n = Node()
    n.gpus = [(i, "NVIDIA H100 PCIe", H100_MIB, H100_MIB - 500) for i in range(4)]
    n.topo = TOPO_0_2
    f = only(doctor(n, tmp_path, WORKSTATION), "D160")
    # the block pairs 0-1 and 2-3 on NVLink; this node joins 0-2 and 1-3: pairs 0-1 and 2-3 are PHB here
    assert f.message == ("GPU 0 and GPU 1: the cluster block says NVLink, this node has PCIe through the host "
                         "bridge (PHB) (1 other pair likewise)")
    assert f.data["pairs"] == [[0, 1, "NV", "PHB"], [2, 3, "NV", "PHB"]]
    agrees = doctor(n, tmp_path, WORKSTATION.replace("[[0, 1], [2, 3]]", "[[0, 2], [1, 3]]"))
    assert agrees.ready and any(p.check == "topology" for p in agrees.passed)


def test_a_cluster_without_topology_checks_count_and_model_only(tmp_path):
    n = Node()
    n.topo = "not a topology"
    rep = doctor(n, tmp_path)
    assert rep.ready and not [p for p in rep.passed if p.check == "topology"]


# ------------------------------------------------------------------------------------------ readers

def test_parse_nvidia_smi_query():
    devs = parse_query(f"0, {H100}, 81559, 81000, 570.86.15\n1, {H100}, [N/A], [N/A], 570.86.15\n")
    assert devs[0].total == 81559 * MIB and devs[0].free == 81000 * MIB and devs[0].driver == "570.86.15"
    assert devs[1].total == 0 and len(devs) == 2


def test_parse_rocm_smi_json(tmp_path):
    text = json.dumps({"card0": {"Card Series": "AMD Instinct MI300X OAM", "VRAM Total Memory (B)": "206141652992",
                                 "VRAM Total Used Memory (B)": "1073741824"}, "system": {"Driver version": "6.8"}})
    (d,) = parse_rocm(text)
    assert d.index == 0 and d.total == 206141652992 and d.free == 206141652992 - 2 ** 30
    n = Node()
    n.tools = {"rocm-smi"}
    n.rocm_json = json.dumps({f"card{i}": json.loads(text)["card0"] for i in range(8)})
    spec = SERVE_2NODE.replace("h100_sxm", "mi300x").replace("nvlink(450GB/s)", "xgmi(448GB/s)")
    rep = doctor(n, tmp_path, spec)
    assert rep.ready, [(f.code, f.message) for f in rep.findings]
    assert any("8 × AMD Instinct MI300X OAM (192 GiB)" in p.detail for p in rep.passed)


def test_torch_version_read_without_importing_torch():
    text = "__version__ = '2.9.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n"
    assert parse_torch_version(text) == {"version": "2.9.0+cu128", "cuda": "12.8", "hip": None}


def test_mount_table():
    table_ = mounts("a / ext4 rw 0 0\nb /mnt/my\\040data nfs rw 0 0\nc /mnt tmpfs rw 0 0\n")
    assert filesystem_of("/mnt/my data/x", table_) == ("/mnt/my data", "nfs")
    assert filesystem_of("/mnt/other", table_) == ("/mnt", "tmpfs")
    assert filesystem_of("/home", table_) == ("/", "ext4")


# ------------------------------------------------------------------------------------------ data

def test_the_findings_table_is_complete():
    rows = table()
    assert len({r["name"] for r in rows.values()}) == len(rows)
    for code, row in rows.items():
        assert re.fullmatch(r"D1\d\d", code)
        assert row["severity"] in ("error", "warning") and row["title"] and row["doc"] and row["fix"]
    used = set(re.findall(r'"(D1\d\d)"', "".join(p.read_text() for p in (ROOT / "parc" / "doctor").glob("*.py"))))
    assert used == set(rows)
    doc = (ROOT / "docs" / "doctor.md").read_text()
    for code, row in rows.items():   # each finding's section says what the table says
        assert f"#### `{code}` {row['name']} ({row['severity']}): {row['title']}" in doc, code
        assert row["doc"] in doc and row["fix"].replace("{{", "{").replace("}}", "}") in doc, code


def test_the_walk_in_the_docs_is_what_parc_doctor_prints(tmp_path):
    from parc.doctor.render import text

    doc = (ROOT / "docs" / "doctor.md").read_text()
    n = Node()
    n.packages["vllm"], n.shm, n.nets["eth0"] = "0.31.0", 64 * MIB, ("down", "0x1002")
    n.env["NCCL_IB_DISABLE"] = "1"
    for node in (n, Node()):   # before the fixes, and after
        rep = doctor(node, tmp_path)
        rep.spec = "serve-405b.par"
        assert text(rep) in doc


def test_the_ports_are_the_launches_own():
    from parc.targets import deepspeed, sglang, vllm

    ports = node_facts()["ports"]
    assert (ports["vllm"], ports["vllm_ray"]) == (vllm.MASTER_PORT, vllm.RAY_PORT)
    assert ports["sglang"] == sglang.DIST_PORT and ports["deepspeed"] == deepspeed.MASTER_PORT
    launch = (ROOT / "parc" / "targets" / "torchrun" / "launch.sh.j2").read_text()
    assert f'${{MASTER_PORT:-{ports["torchrun"]}}}' in launch


def test_every_engine_is_a_target_with_releases():
    from parc.model.targets import versions

    assert all(versions(name) for name in node_facts()["engines"])


# ------------------------------------------------------------------------------------------ the command

def test_json_shape(tmp_path, monkeypatch, capsys):
    import parc.doctor.probes as probes

    n = Node()
    n.shm = 64 * MIB
    monkeypatch.setattr(probes, "real", n.probes)
    (tmp_path / "spec.par").write_text(SERVE_2NODE)
    assert main(["doctor", str(tmp_path / "spec.par"), "--json", "--master-addr", "node0"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"version", "spec", "node_rank", "nodes", "ready", "errors", "warnings", "findings", "passed"}
    assert (out["version"], out["node_rank"], out["nodes"], out["ready"], out["errors"]) == (1, 0, 2, False, 1)
    (f,) = out["findings"]
    assert set(f) == {"code", "name", "severity", "check", "title", "message", "fix", "data"}
    assert (f["code"], f["name"], f["check"], f["data"]["shm"]) == ("D151", "shm-small", "host", 64 * MIB)
    assert all(set(p) == {"check", "detail"} for p in out["passed"])


def test_a_healthy_node_exits_0(tmp_path, monkeypatch, capsys):
    import parc.doctor.probes as probes

    monkeypatch.setattr(probes, "real", Node().probes)
    (tmp_path / "spec.par").write_text(SERVE_2NODE)
    assert main(["doctor", str(tmp_path / "spec.par"), "--master-addr", "node0"]) == 0
    assert "ready: this node can launch the plan" in capsys.readouterr().out


def test_a_compiled_plan_json_is_checked_like_its_spec(tmp_path, monkeypatch, capsys):
    import parc.doctor.probes as probes
    from parc.targets.base import plan_json

    n = Node()
    n.packages["vllm"] = "0.31.0"
    monkeypatch.setattr(probes, "real", n.probes)
    (tmp_path / "plan.json").write_text(plan_json(plan_of(SERVE_2NODE, tmp_path)))
    assert main(["doctor", str(tmp_path / "plan.json"), "--json", "--master-addr", "node0"]) == 1
    (f,) = json.loads(capsys.readouterr().out)["findings"]
    assert f["code"] == "D113" and f["message"] == "vLLM 0.31.0 is installed; the spec pins vLLM 0.33"
    (tmp_path / "bad.json").write_text("{}")
    assert main(["doctor", str(tmp_path / "bad.json")]) == 2
    assert "is not a compiled plan.json" in capsys.readouterr().err


def test_node_rank_outside_the_cluster_is_a_usage_error(capsys):
    assert main(["doctor", str(ROOT / "examples" / "llama3-405b-serve-2node.par"), "--node-rank", "2"]) == 2
    assert "node rank 2 is outside the cluster's 2 node(s) (0 to 1)" in capsys.readouterr().err


@pytest.mark.skipif(Path("/usr/bin/nvidia-smi").exists(), reason="this machine has an NVIDIA driver")
def test_for_real_on_this_cpu_machine(capsys):
    code = main(["doctor", str(ROOT / "examples" / "llama3-70b-serve.par")])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err and "internal error" not in err
    assert "error D100 no-gpu: no GPU is present on this node" in out
    assert "not ready:" in out
    assert main(["doctor", str(ROOT / "examples" / "llama3-70b-serve.par"), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["code"] == "D100"


def test_the_real_probes_answer_on_this_machine():
    import socket

    from parc.doctor.network import interfaces
    from parc.doctor.probes import real

    p = real()
    assert interfaces(p).get("lo") is True                         # lo: operstate unknown, IFF_UP set
    assert p.run(["parc-no-such-tool"]) is None
    assert "127.0.0.1" in p.resolve("localhost") and p.resolve("no-such-host.invalid") == []
    with socket.socket() as s:                                     # a port something listens on
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert p.bind(port) is not None
        assert p.connect("127.0.0.1", port).outcome == "ok"
    assert p.connect("127.0.0.1", port).outcome == "refused"      # closed now: the host answers
    assert p.bind(0, "127.0.0.1") is None and p.bind(0, "192.0.2.1") is not None   # TEST-NET-1: not ours
    assert p.fs_size("/") > 0 and p.version("no-such-distribution") is None
    limit = p.memlock()
    assert limit is None or limit >= 0


def test_a_spec_on_standard_input(monkeypatch, capsys):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO((ROOT / "examples" / "llama3-70b-serve.par").read_text()))
    assert main(["doctor", "-", "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["spec"] == "<stdin>"
