"""Slurm and Kubernetes: they serve with the vllm target's commands, the Slurm job runs to the end
on 2 and 1,024 hosts under stub `scontrol`/`srun`/`hostname`, Kubernetes names are DNS-1035
labels, and values a script or manifest cannot carry are refused or encoded."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from backends_support import ROOT, compile_rel, run_emitted, write_out
from support import launched

yaml = pytest.importorskip("yaml", reason="PyYAML reads the manifests back")

SERVE_SPEC = "tests/data/specs/serve-scheduled.par"
TRAIN_SPEC = "tests/data/specs/slurm-kubernetes.par"
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _files(spec: str, target: str):
    r, _, files = compile_rel(spec, target)
    assert files is not None, [f"{d.code} {d.message}" for d in r.errors]
    return files


def _compile(write_spec, tmp_path, text, target):
    from parc.cli.compile import compile_spec

    r, _, files = compile_spec(write_spec(text), target, root=tmp_path)
    return r, files


# --- serving under Slurm and Kubernetes ----------------------------------------------------------
@pytest.mark.parametrize("spec", [SERVE_SPEC, "examples/llama3-70b-serve.par", "tests/data/specs/vllm-dp-nodes.par"])
def test_slurm_serves_with_the_vllm_targets_commands(spec, tmp_path):
    """Every node's task runs `vllm serve` exactly as the vllm target's node script does (never
    `torchrun serve.py`)."""
    slurm = write_out(_files(spec, "slurm"), tmp_path / "slurm")
    vllm = write_out(_files(spec, "vllm"), tmp_path / "vllm")
    nodes = json.loads((slurm / "plan.json").read_text())["cluster"]["nodes"]
    got = run_sbatch(slurm, tmp_path / "run", [f"gpu{i:03d}" for i in range(nodes)], run_nodes=range(nodes))
    assert got["rc"] == 0, got["stderr"]
    for k in range(nodes):
        task = got["tasks"][k]
        assert "torchrun" not in task and task["vllm"][0] == "serve"
        # the same argv as the vllm target's own script, with node 0's address from Slurm
        want = run_emitted(vllm / ("serve.sh" if nodes == 1 else "launch.sh"), tmp_path / f"v{k}",
                           *([] if nodes == 1 else [str(k)]), env={"MASTER_ADDR": "gpu000"})["vllm"]
        assert task["vllm"] == want


@pytest.mark.parametrize("spec", [SERVE_SPEC, "examples/llama3-70b-serve.par"])
def test_kubernetes_serves_with_the_vllm_targets_commands(spec, tmp_path, write_spec):
    files = _files(spec, "vllm")
    vllm = write_out(files, tmp_path / "vllm")
    text = (ROOT / spec).read_text()
    if "target kubernetes" not in text:
        text += '\ntarget kubernetes { image = "vllm/vllm-openai:v0.11.0" }\n'
    r, kfiles = _compile(write_spec, tmp_path, text, "kubernetes")
    assert kfiles is not None, [f"{d.code} {d.message}" for d in r.errors]
    docs = list(yaml.safe_load_all(next(f.text for f in kfiles if f.path == "job.yaml")))
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    mounted = tmp_path / "etc-parc"
    mounted.mkdir()
    for key, body in cm["data"].items():
        (mounted / key).write_text(body)
    roles = job["spec"]["pytorchReplicaSpecs"]
    nodes = sum(r["replicas"] for r in roles.values())
    for k in range(nodes):
        role = roles["Master" if k == 0 else "Worker"]
        cmd = role["template"]["spec"]["containers"][0]["command"]
        assert "torchrun" not in cmd
        # Kubernetes substitutes $(RANK), which the training operator sets: 0 master, index + 1 worker
        argv = [w.replace("$(RANK)", str(k)).replace("/etc/parc", str(mounted)) for w in cmd]
        assert argv[0] == "bash"
        got = run_emitted(Path(argv[1]), tmp_path / f"k{k}", *argv[2:], env={"MASTER_ADDR": "job-master-0"})
        want = run_emitted(vllm / ("serve.sh" if nodes == 1 else "launch.sh"), tmp_path / f"w{k}",
                           *([] if nodes == 1 else [str(k)]), env={"MASTER_ADDR": "job-master-0"})
        assert got["vllm"] == want["vllm"] and got["vllm"][0] == "serve"


def test_kubernetes_serving_without_an_image_suggests_a_vllm_image(check_spec):
    r = check_spec((ROOT / "examples/llama3-70b-serve.par").read_text(), ["kubernetes"])
    d = next(d for d in r.errors if d.code == "P650")
    assert "vllm/vllm-openai" in d.help and "P602" not in {e.code for e in r.errors}


def test_serving_under_a_scheduler_keeps_vllms_checks(check_spec):
    """A serving spec compiled for Slurm is judged by vLLM's rules (here P604: no virtual stages)."""
    text = (ROOT / SERVE_SPEC).read_text().replace("serve {", "schedule { virtual_stages = 2 }\nserve {")
    r = check_spec(text, ["slurm"])
    assert "P604" in {d.code for d in r.errors}
    assert "P602" not in {d.code for d in r.errors}  # no torchrun entry point is needed to serve


# --- Slurm under stub scontrol / srun / hostname (tests/support/launched.py) --------------------
def run_sbatch(folder: Path, tmp: Path, hosts: list[str], *, run_nodes=(), env: dict | None = None) -> dict:
    """job.sbatch run under the stubs; each node's task as {launcher: its argv}."""
    got = launched.run_sbatch(folder, tmp, hosts, run_nodes=run_nodes, env=env)
    got["tasks"] = {k: {c["launcher"]: c["argv"] for c in calls} for k, calls in got["tasks"].items()}
    return got


@pytest.mark.parametrize("n", [2, 1024])
def test_sbatch_runs_to_the_end_and_hands_node_0_to_every_task(n, tmp_path, write_spec):
    """`scontrol show hostnames | head -n 1` under pipefail died with SIGPIPE (141) on long host
    lists; the job must start srun with the first host as MASTER_ADDR on 2 and 1,024 nodes."""
    text = (ROOT / TRAIN_SPEC).read_text().replace("nodes         = 2", f"nodes         = {n}") \
        .replace("dp = 8", f"dp = {8 * n // 2}").replace("global_batch = 64", f"global_batch = {32 * n}")
    r, files = _compile(write_spec, tmp_path, text, "slurm")
    assert files is not None, [f"{d.code} {d.message}" for d in r.errors]
    out = write_out(files, tmp_path / "out")
    hosts = [f"gpu-node-{i:04d}.rack{i // 32:02d}.cluster.example" for i in range(n)]
    got = run_sbatch(out, tmp_path / "run", hosts, run_nodes=[0, n - 1])
    assert got["rc"] == 0, got["stderr"]
    assert got["srun"][:4] == [f"--nodes={n}", "--ntasks-per-node=1", "--cpus-per-task=128", "--kill-on-bad-exit=1"]
    assert got["srun"][-2:] == ["bash", f"{out}/launch.sh"]
    assert got["srun.env"]["MASTER_ADDR"] == hosts[0]
    for k in (0, n - 1):
        tr = got["tasks"][k]["torchrun"]
        assert tr[tr.index("--nnodes") + 1] == str(n)
        if "--rdzv-backend" in tr:  # restarts asked for: c10d, node ranks assigned as nodes join
            assert tr[tr.index("--rdzv-backend") + 1] == "c10d"
            assert tr[tr.index("--rdzv-endpoint") + 1].rsplit(":", 1)[0] == hosts[0]
        else:
            assert tr[tr.index("--node-rank") + 1] == str(k)
            assert tr[tr.index("--master-addr") + 1] == hosts[0]


def test_sbatch_asks_for_cpus_and_memory_and_passes_cpus_to_srun(tmp_path):
    files = {f.path: f.text for f in _files(SERVE_SPEC, "slurm")}
    sb = files["job.sbatch"]
    assert "#SBATCH --mem=0\n" in sb and "#SBATCH --cpus-per-task=96\n" in sb
    assert "filesystem every node mounts" in sb
    out = write_out(_files(SERVE_SPEC, "slurm"), tmp_path / "out")
    got = run_sbatch(out, tmp_path / "run", ["gpu000", "gpu001"], env={"SLURM_CPUS_PER_TASK": "96"})
    assert got["rc"] == 0, got["stderr"]
    assert "--cpus-per-task=96" in got["srun"]
    # without cpus_per_task: no directive, and srun gets the whole node's CPUs
    sb = {f.path: f.text for f in _files(TRAIN_SPEC, "slurm")}["job.sbatch"]
    assert "--cpus-per-task=" not in sb.split("set -euo")[0] and "#SBATCH --mem=0\n" in sb


# --- names -----------------------------------------------------------------------------------------
def _names(docs) -> list[str]:
    out = []
    for d in docs:
        out.append(d["metadata"]["name"])
        if d["kind"] == "PyTorchJob":
            for role, spec in d["spec"]["pytorchReplicaSpecs"].items():
                # the pods and services the operator makes: <name>-<role>-<index>
                out.append(f"{d['metadata']['name']}-{role.lower()}-{spec['replicas'] - 1}")
    return out


def test_kubernetes_name_from_a_model_label_is_a_dns_1035_label(tmp_path):
    files = _files(SERVE_SPEC, "kubernetes")            # model "70b-custom", no `name`
    docs = list(yaml.safe_load_all(files[0].text))
    for name in _names(docs):
        assert DNS_1035.fullmatch(name) and len(name) <= 63, name
    assert docs[-1]["metadata"]["name"] == "parc-70b-custom"


@pytest.mark.parametrize("target,key,value,code", [
    ("slurm", "partition", "gpu\\n", "P660"), ("slurm", "job_name", "train\\n", "P660"),
    ("kubernetes", "namespace", "training\\n", "P661"), ("kubernetes", "name", "job\\n", "P661"),
    ("kubernetes", "name", "7b", "P661")])
def test_names_with_a_trailing_newline_are_refused(target, key, value, code, tmp_path, write_spec):
    """A check by `re.match` with a pattern ending in `$` let "gpu\\n" through (`$` matches
    before a final newline): job.sbatch then failed `bash -n`, the manifest held a newline."""
    text = re.sub(rf"(?m)^  {key} *=.*\n", "", (ROOT / TRAIN_SPEC).read_text())
    text = text.replace(f"target {target} {{", f'target {target} {{\n  {key} = "{value}"', 1)
    r, files = _compile(write_spec, tmp_path, text, target)
    assert files is None, "compiled"
    d = next(d for d in r.errors if d.code == code)
    line = text.splitlines()[d.span.line - 1]
    assert line.strip().startswith(key) and d.span.column == line.index(key) + 1


def test_a_namespace_may_start_with_a_digit(tmp_path, write_spec):
    """Namespaces are DNS-1123 labels (unlike the job's name, which names Services)."""
    text = (ROOT / TRAIN_SPEC).read_text().replace('namespace  = "training"', 'namespace  = "1team"')
    r, files = _compile(write_spec, tmp_path, text, "kubernetes")
    assert files is not None, [f"{d.code} {d.message}" for d in r.errors]


# --- values a script or manifest cannot carry -------------------------------------------------
NUL_SPEC = """
model "m" { from = llama3_8b }
cluster "c" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = ethernet(200Gb/s)
}
mesh { dp = 2; tp = 8 }
schedule { global_batch = 16 }
target torchrun { entrypoint = "train.py"; args = ["--tag", "a\0b"] }
target kubernetes { image = "img:1" }
"""


@pytest.mark.parametrize("target", ["torchrun", "slurm", "kubernetes"])
def test_nul_in_a_value_is_refused_at_its_span(target, tmp_path, write_spec):
    r, files = _compile(write_spec, tmp_path, NUL_SPEC, target)
    assert files is None
    d = next(d for d in r.errors if d.code == "P662")
    line = NUL_SPEC.lstrip("\n").splitlines()[d.span.line - 1]
    assert line.startswith("target torchrun") and line[d.span.column - 1:].startswith("args")


def test_characters_beyond_the_bmp_read_back_from_yaml(tmp_path, write_spec):
    """json.dumps escapes U+1F600 as a surrogate pair, which YAML reads as two lone surrogates."""
    text = NUL_SPEC.replace('"a\0b"', '"caf\u00e9 \U0001F600"').replace('"m"', '"m \U0001F680"')
    r, files = _compile(write_spec, tmp_path, text, "kubernetes")
    assert files is not None, [f"{d.code} {d.message}" for d in r.errors]
    docs = list(yaml.safe_load_all(files[0].text))
    # the pods run the torchrun target's launch.sh, which the ConfigMap carries
    assert "  'caf\u00e9 \U0001F600'\n" in docs[0]["data"]["launch.sh"]
    assert json.loads(docs[0]["data"]["plan.json"])["model"]["name"] == "m \U0001F680"
    files[0].text.encode("utf-8")  # no lone surrogate anywhere


# --- Kubernetes resources, InfiniBand and gang scheduling ----------------------------------------
def test_kubernetes_pods_request_cpu_memory_shm_rdma_and_gang_scheduling():
    docs = list(yaml.safe_load_all(_files(SERVE_SPEC, "kubernetes")[0].text))
    job = docs[-1]
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2, "queue": "inference"}
    for role in ("Master", "Worker"):
        pod = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        c = pod["containers"][0]
        assert c["resources"]["requests"] == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8,
                                              "rdma/rdma_shared_device_a": 1}
        assert c["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert pod["schedulerName"] == "volcano"
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    # defaults: 4 CPUs and 32 GiB per GPU, /dev/shm 16 GiB, every pod in the gang
    job = list(yaml.safe_load_all(_files(TRAIN_SPEC, "kubernetes")[0].text))[-1]
    c = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert c["resources"]["requests"] == {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 8}
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2


def test_kubernetes_on_infiniband_without_rdma_warns(check_spec):
    text = (ROOT / SERVE_SPEC).read_text()
    text = re.sub(r"  rdma_resource .*\n  rdma_devices .*\n", "", text)
    r = check_spec(text)
    d = next(d for d in r.diagnostics if d.code == "P663")
    assert d.severity == "warning" and "InfiniBand" in d.message and "rdma_resource" in d.help


@pytest.mark.parametrize("value", ["rdma/" + "\u00e9" * 300, "rdma/has space", "rdma/x\n", "-rdma/x", "rdma/" + "a" * 64,
                                   "Upper.Case/x"])
def test_rdma_resource_must_be_a_resource_name(check_spec, value):
    """rdma_resource is a key of the resource requests: an overlong one was written as a YAML key
    over 1,024 characters, which no YAML reader accepts, and the API server refuses any name that
    is not a qualified name."""
    text = (ROOT / SERVE_SPEC).read_text()
    text = re.sub(r"  rdma_resource .*\n", lambda m: f"  rdma_resource = {json.dumps(value, ensure_ascii=False)}\n",
                  text)
    r = check_spec(text)
    assert any(d.code == "P661" and "rdma_resource" in d.message for d in r.errors), \
        [f"{d.code} {d.message}" for d in r.diagnostics]


def test_a_plugin_resource_name_is_accepted(check_spec):
    text = (ROOT / SERVE_SPEC).read_text()
    for value in ("rdma/rdma_shared_device_a", "nvidia.com/hostdev", "rdma/hca_shared_devices_a"):
        r = check_spec(re.sub(r"  rdma_resource .*\n", lambda m: f"  rdma_resource = {json.dumps(value)}\n", text))
        assert not [d for d in r.errors if d.code == "P661"], value
