"""A fake node for parc doctor's tests: every probe of parc.doctor.probes.Probes answered from
plain facts a test changes one at a time (a healthy DGX H100 node by default), and the helpers
that run the doctor on it."""
from __future__ import annotations

import re
from pathlib import Path

from parc.api import check_file
from parc.doctor import diagnose
from parc.doctor.context import Context
from parc.doctor.probes import Connect, Probes, Ran

MIB = 2 ** 20
H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559          # parc/model/data/gpus.toml h100_sxm: 85520809984 B = 81559 MiB

SERVE_2NODE = """
model "llama3-405b" { from = llama3_405b }
cluster "two-dgx" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
  socket_ifname = "eth0"
}
mesh { pp = 2; tp = 8 }
placement { tp on intra_node; pp on inter_node }
serve { max_model_len = 4096; gpu_memory_utilization = 0.92; max_num_seqs = 32 }
target vllm { model = "meta-llama/Llama-3.1-405B-Instruct"; version = "0.33" }
"""

TRAIN_2NODE = """
model "llama3-8b" { from = llama3_8b }
cluster "two-dgx" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
  socket_ifname = "eth0"
}
mesh { dp = 16 }
schedule { micro_batch = 1; global_batch = 64 }
train { zero = 3 }
target torchrun {
  entrypoint = "train.py"
  rdzv_endpoint = "node0:29400"
}
"""


# ------------------------------------------------------------------------------------------ fakes

class Node:
    """A healthy DGX H100 node as its probes answer; a test changes one fact and sees one finding."""

    def __init__(self):
        self.gpus = [(i, H100, H100_MIB, H100_MIB - 500) for i in range(8)]
        self.cuda = "12.8"                      # what the driver supports (nvidia-smi's header)
        self.tools = {"nvidia-smi"}
        self.torch = {"version": "2.9.0+cu128", "cuda": "12.8", "hip": None}
        self.packages = {"torch": "2.9.0", "vllm": "0.33.1", "sglang": "0.5.23", "megatron-core": "0.20.0"}
        self.nets = {"lo": ("unknown", "0x9"), "eth0": ("up", "0x1003"), "ib0": ("up", "0x1003")}
        self.ib = {"mlx5_0": {"1": ("4: ACTIVE", "InfiniBand")}}
        self.mounts = "/dev/sda1 / ext4 rw 0 0\nfiler:/export /shared nfs4 rw 0 0\n"
        self.shm = 32 * 2 ** 30
        self.memlock_limit = None
        self.hosts = {"node0": ["10.0.0.1"], "10.0.0.1": ["10.0.0.1"]}
        self.taken: set[int] = set()
        self.local = {"10.0.0.1", "127.0.0.1"}     # this node's addresses
        self.answer = Connect("refused")
        self.env: dict[str, str] = {}
        self.topo = ""
        # the fabric (parc/doctor/fabric.py, kv.py): a node DeepEP v1 runs on, IBGDA in the driver
        self.modules = {"nvidia", "nvidia_uvm", "ib_core", "mlx5_ib", "nvidia_peermem"}
        self.params = {"EnableStreamMemOPs": "1", "RegistryDwords": '"PeerMappingOverride=1;"'}
        self.nvidia_version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Fri Jan 24 2025"
        self.kernel = "6.8.0-53-generic"
        self.dev = ["null", "nvidia0", "nvidiactl", "shm"]
        self.ib_drivers = {"mlx5_0": "mlx5_core"}
        self.fi_info = 0                           # fi_info -p efa's exit status (tools must name it)
        self.ldconfig = ""
        self.reached: dict[tuple[str, int], Connect] = {}   # connect() answers by (host, port); else answer
        self.connected: list[tuple[str, int]] = []
        self.reads: list[str] = []

    def _run(self, argv):
        if argv[0] not in self.tools:
            return None
        if argv[0] == "fi_info":
            return Ran(self.fi_info, "provider: efa\n" if self.fi_info == 0 else "", "")
        if argv[0] == "ldconfig":
            return Ran(0, self.ldconfig)
        if argv[0] == "rocm-smi":
            return Ran(0, self.rocm_json)
        if argv[1:] == ["topo", "-m"]:
            return Ran(0, self.topo)
        if len(argv) == 1:
            return Ran(0, f"| NVIDIA-SMI 570.86.15  Driver Version: 570.86.15  CUDA Version: {self.cuda} |\n")
        rows = "\n".join(f"{i}, {n}, {t}, {f}, 570.86.15" for i, n, t, f in self.gpus)
        return Ran(0 if self.gpus else 6, rows, "" if self.gpus else "No devices were found")

    def _read(self, path):
        self.reads.append(path)
        if path == "/proc/mounts":
            return self.mounts
        if path == "/proc/modules":
            return "".join(f"{m} 16384 0 - Live 0x0000000000000000\n" for m in sorted(self.modules))
        if path == "/proc/driver/nvidia/params":
            return None if self.params is None else "".join(f"{k}: {v}\n" for k, v in self.params.items())
        if path == "/proc/driver/nvidia/version":
            return self.nvidia_version
        if path == "/proc/sys/kernel/osrelease":
            return self.kernel + "\n"
        m = re.fullmatch(r"/sys/class/net/([^/]+)/(operstate|flags)", path)
        if m and m.group(1) in self.nets:
            return self.nets[m.group(1)][0 if m.group(2) == "operstate" else 1] + "\n"
        m = re.fullmatch(r"/sys/class/infiniband/([^/]+)/ports/([^/]+)/(state|link_layer)", path)
        if m and m.group(1) in self.ib:
            return self.ib[m.group(1)][m.group(2)][0 if m.group(3) == "state" else 1] + "\n"
        return None

    def _listdir(self, path):
        if path == "/dev":
            return sorted(self.dev)
        if path == "/sys/class/net":
            return sorted(self.nets)
        if path == "/sys/class/infiniband":
            return sorted(self.ib)
        m = re.fullmatch(r"/sys/class/infiniband/([^/]+)/ports", path)
        return sorted(self.ib[m.group(1)]) if m and m.group(1) in self.ib else []

    def _bind(self, port, host=""):
        if host and host not in self.local:
            return "Cannot assign requested address"
        return "Address already in use" if port in self.taken else None

    def _realpath(self, path):
        if path == ".":
            return "/shared/jobs/405b"
        m = re.fullmatch(r"/sys/class/infiniband/([^/]+)/device/driver", path)
        if m and m.group(1) in self.ib_drivers:
            return f"/sys/bus/pci/drivers/{self.ib_drivers[m.group(1)]}"
        return path

    def _connect(self, host, port):
        self.connected.append((host, port))
        return self.reached.get((host, port), self.answer)

    def probes(self) -> Probes:
        return Probes(run=self._run, read=self._read, listdir=self._listdir,
                      fs_size=lambda p: self.shm if p == "/dev/shm" else None,
                      resolve=lambda h: self.hosts.get(h, []),
                      bind=self._bind,
                      connect=self._connect, version=self.packages.get,
                      torch_build=lambda: self.torch, memlock=lambda: self.memlock_limit,
                      realpath=self._realpath, env=self.env)


def plan_of(text: str, tmp_path: Path):
    spec = tmp_path / "spec.par"
    spec.write_text(text)
    r = check_file(spec)
    assert r.plan is not None and r.ok, r.diagnostics
    return r.plan


def doctor(node: Node, tmp_path: Path, text: str = SERVE_2NODE, **kw):
    kw.setdefault("master_addr", "node0")
    return diagnose(Context(plan_of(text, tmp_path), node.probes(), spec="spec.par", **kw))


def only(rep, code: str):
    """The one finding of ``code`` in a report (and no other error)."""
    hits = [f for f in rep.findings if f.code == code]
    assert len(hits) == 1, [(f.code, f.message) for f in rep.findings]
    others = [f.code for f in rep.findings if f.code != code and f.severity == "error"]
    assert not others, others
    return hits[0]
