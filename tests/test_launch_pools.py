"""The launchers of a prefill/decode-disaggregated plan: slurm and skypilot run node.sh on every
node (parc/targets/pooled.py), lws writes a LeaderWorkerSet per pool and the proxy Deployment,
kubernetes refuses the plan (P600) and names lws."""
from __future__ import annotations

import os
import subprocess
import time

import pytest
import yaml

from support.specs import assert_fires, assert_quiet

# llama3-8b on two 8-GPU nodes: two prefill instances of tp 4 share node 0 (GPUs 0-3 and 4-7),
# one decode instance of tp 8 takes node 1
SPEC = """model "llama" { from = llama3_8b }
cluster "c" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}
mesh { tp = 4 }
serve {
  max_model_len = 8192
  kv_transfer   = nixl
  prefill {
    instances = 2
  }
  decode {
    tp = 8
  }
}
target vllm { model = "meta-llama/Llama-3.1-8B" }
"""
KUBERNETES = 'target kubernetes { image = "vllm/vllm-openai:v0.33.0" }\n'


def files(r, target: str) -> dict[str, str]:
    from parc.targets import get

    return {f.path: f.text for f in get(target).build(r.plan)}


def test_node_sh_starts_each_nodes_instances_and_the_proxy(check_spec, tmp_path):
    r = check_spec(SPEC, ("slurm",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    out = files(r, "slurm")
    assert "#SBATCH --nodes=2" in out["job.sbatch"] and 'bash "$here/"node.sh' in out["job.sbatch"]
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("vllm", "python3"):   # record each call: its argv, the GPUs it sees, MASTER_ADDR
        (bindir / tool).write_text('#!/bin/sh\necho "$(basename "$0") CVD=${CUDA_VISIBLE_DEVICES:-} $*" '
                                   '>> "$REC"\n')
        (bindir / tool).chmod(0o755)
    rec = tmp_path / "rec"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", REC=str(rec), PARC_HOSTS="10.0.0.1\n10.0.0.2",
               VLLM_PROXY="toy_proxy_server.py")
    for node in (0, 1):
        p = subprocess.run(["bash", str(tmp_path / "node.sh"), str(node)], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
    calls = sorted(rec.read_text().splitlines())
    serves = [c for c in calls if c.startswith("vllm")]
    # node 0: the two prefill instances in slots 0 and 1: GPUs 0-3 on port 8100, GPUs 4-7 on 8101;
    # node 1: the decode instance on all 8 GPUs (no CUDA_VISIBLE_DEVICES of its own) on port 8200
    assert [(c.split()[1], c.split()[c.split().index("--port") + 1]) for c in serves] == [
        ("CVD=", "8200"), ("CVD=0,1,2,3", "8100"), ("CVD=4,5,6,7", "8101")]
    [proxy] = [c for c in calls if c.startswith("python3")]
    # the proxy on node 0: both prefill instances on node 0's address (ports 8100, 8101), decode on node 1's
    assert ("--prefiller-hosts 10.0.0.1 10.0.0.1 --prefiller-ports 8100 8101 "
            "--decoder-hosts 10.0.0.2 --decoder-ports 8200") in proxy


# a prefill and a decode instance of one GPU each on one 2-GPU node, as SGLang's and vLLM's one-node
# disaggregation examples run them (SGLang's docs: the decode server with --base-gpu-id 1 and
# another port)
ONE_NODE = SPEC.replace("nodes         = 2", "nodes         = 1").replace("gpus_per_node = 8", "gpus_per_node = 2") \
    .replace("mesh { tp = 4 }", "mesh { tp = 1 }").replace("    instances = 2\n", "").replace("    tp = 8\n", "")


def _record(tmp_path) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("vllm", "python3"):   # record each call: its argv and the GPUs it sees
        (bindir / tool).write_text('#!/bin/sh\necho "$(basename "$0") CVD=${CUDA_VISIBLE_DEVICES:-} '
                                   'NIXL=${VLLM_NIXL_SIDE_CHANNEL_PORT:-} $*" >> "$REC"\n')
        (bindir / tool).chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", REC=str(tmp_path / "rec"))


def test_pools_sharing_a_node_get_their_own_gpus_and_ports(check_spec, tmp_path):
    r = check_spec(ONE_NODE, ("vllm",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    out = files(r, "vllm")
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    env = _record(tmp_path)
    for script in ("prefill-serve.sh", "decode-serve.sh"):
        p = subprocess.run(["bash", str(tmp_path / script)], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
    calls = [c.split() for c in (tmp_path / "rec").read_text().splitlines()]
    got = [(c[1], c[2], c[c.index("--port") + 1]) for c in calls]
    # the prefill instance on GPU 0, the decode instance on GPU 1: their own ports and NIXL side channels
    assert got == [("CVD=0", "NIXL=5600", "8100"), ("CVD=1", "NIXL=5601", "8200")], got
    assert "--prefiller-ports 8100" in out["proxy.sh"] and "--decoder-ports 8200" in out["proxy.sh"]


def test_node_sh_stops_the_node_when_a_process_fails(check_spec, tmp_path):
    r = check_spec(SPEC, ("slurm",))
    for name, text in files(r, "slurm").items():
        (tmp_path / name).write_text(text)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text("#!/bin/sh\nexec sleep 60\n")   # a server that keeps running
    (bindir / "vllm").chmod(0o755)
    # without VLLM_PROXY the proxy fails at once: node.sh ends with its status, stopping the servers
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PARC_HOSTS="a b")
    env.pop("VLLM_PROXY", None)
    start = time.monotonic()
    p = subprocess.run(["bash", str(tmp_path / "node.sh"), "0"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "VLLM_PROXY" in p.stderr
    assert time.monotonic() - start < 15


def test_skypilot_asks_for_the_pools_nodes_and_runs_node_sh(check_spec):
    r = check_spec(SPEC, ("skypilot",))
    task = yaml.safe_load(files(r, "skypilot")["task.yaml"])
    assert task["num_nodes"] == 2 and task["resources"]["ports"] == 8000   # vllm PROXY_PORT
    assert '/node.sh "$SKYPILOT_NODE_RANK"' in task["run"] and 'PARC_HOSTS="$SKYPILOT_NODE_IPS"' in task["run"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lws_writes_a_set_per_pool_and_the_proxy(check_spec, engine):
    text = SPEC + f"target lws {{ engine = {engine} }}\n"
    pre_gpus = 4
    if engine == "sglang":   # prefill of tp 8 on nodes 0 and 1 (each pod its own GPUs)
        pre_gpus = 8
        text = (text.replace("kv_transfer   = nixl", "kv_transfer   = mooncake").replace("tp = 4", "tp = 8")
                .replace("nodes         = 2", "nodes         = 3") + 'target sglang { model = "meta-llama/Llama-3.1-8B" }\n')
    r = check_spec(text, ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    docs = list(yaml.safe_load_all(files(r, "lws")["lws.yaml"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "LeaderWorkerSet", "Service", "LeaderWorkerSet", "Service",
                                         "Deployment", "Service"]
    pre, dec = docs[1], docs[3]
    # prefill: 2 groups (instances) of one pod with 4 GPUs (SGLang's 8); decode: 1 group of one pod with 8
    for d, name, replicas, gpus in ((pre, "llama-prefill", 2, pre_gpus), (dec, "llama-decode", 1, 8)):
        lwt = d["spec"]["leaderWorkerTemplate"]
        c = lwt["workerTemplate"]["spec"]["containers"][0]
        assert (d["metadata"]["name"], d["spec"]["replicas"], lwt["size"]) == (name, replicas, 1)
        assert c["resources"]["limits"]["nvidia.com/gpu"] == gpus
    dep = docs[5]["spec"]["template"]["spec"]["containers"][0]
    leaders = ["llama-prefill-0.llama-prefill", "llama-prefill-1.llama-prefill", "llama-decode-0.llama-decode"]
    if engine == "vllm":
        assert dep["command"] == ["bash", "/etc/parc/proxy.sh"]
        assert {e["name"]: e["value"] for e in dep["env"]} == {"PREFILL_HOSTS": " ".join(leaders[:2]),
                                                               "DECODE_HOSTS": leaders[2]}
        assert "proxy.sh" in docs[0]["data"]
        pre_cmd = pre["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
        assert pre_cmd[pre_cmd.index("--port") + 1] == "$(PARC_PORT)"
    else:
        assert dep["command"] == ["bash", "/etc/parc/router.sh", *leaders] and "router.sh" in docs[0]["data"]


def test_p600_kubernetes_refuses_pools_and_names_lws(check_spec):
    # at the prefill block, target kubernetes's own error
    d = assert_fires(check_spec, SPEC + KUBERNETES, "P600", "prefill {", target="kubernetes", targets=("kubernetes",))
    assert "lws" in d.help
    one = SPEC[:SPEC.index("  prefill {")] + "}\n" + SPEC[SPEC.index('target vllm'):] + KUBERNETES
    assert_quiet(check_spec, one, "P600", ("kubernetes",))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lws_proxy_reaches_each_pod_on_its_own_port(check_spec, engine):
    """Instances sharing a node take a port each in the node scripts (8100, 8101); in a
    LeaderWorkerSet every instance is a pod of its own, on its pool's port: the proxy (router) in
    front must ask each pod on the port the pod listens on."""
    import re

    text = SPEC + f"target lws {{ engine = {engine} }}\n"
    if engine == "sglang":
        text = text.replace("kv_transfer   = nixl", "kv_transfer   = mooncake") + \
            'target sglang { model = "meta-llama/Llama-3.1-8B" }\n'
    r = check_spec(text, ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    docs = list(yaml.safe_load_all(files(r, "lws")["lws.yaml"]))
    listen = {}
    for d in docs:
        if d["kind"] == "LeaderWorkerSet":
            c = d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in c["env"]}
            port = c["command"][c["command"].index("--port") + 1].replace("$(PARC_PORT)", env.get("PARC_PORT", ""))
            listen[d["metadata"]["name"].rsplit("-", 1)[1]] = [port] * d["spec"]["replicas"]
    if engine == "vllm":
        proxy = docs[0]["data"]["proxy.sh"]
        asked = {p: re.search(rf"{flag} ([0-9 ]+)", proxy).group(1).split()
                 for p, flag in (("prefill", "--prefiller-ports"), ("decode", "--decoder-ports"))}
    else:
        ports = re.search(r"^ports=\(([0-9 ]+)\)", docs[0]["data"]["router.sh"], re.M).group(1).split()
        asked = {"prefill": ports[:len(listen["prefill"])], "decode": ports[len(listen["prefill"]):]}
    assert asked == listen


def test_node_sh_starts_sglang_instances_that_share_a_node_in_their_slots(check_spec, tmp_path):
    """Under slurm, SGLang's two prefill instances on node 0 start as the sglang target's slots
    (their own GPUs, API and bootstrap ports), the decode server on node 1, and the router on node
    0 pairs each prefill server's port and bootstrap port with the decode server."""
    from parc.targets import get
    from support.launched import launched

    text = (SPEC.replace("kv_transfer   = nixl", "kv_transfer   = mooncake")
            + 'target sglang { model = "meta-llama/Llama-3.1-8B" }\ntarget slurm { engine = sglang }\n')
    r = check_spec(text, ("slurm",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    servers, routers = [], []
    for c in launched("slurm", get("slurm").build(r.plan), tmp_path):
        o = dict(zip(c["argv"], c["argv"][1:]))
        if c["argv"][:2] == ["-m", "sglang.launch_server"]:
            servers.append((c["node"], o["--disaggregation-mode"], o["--port"], o.get("--base-gpu-id"),
                            o.get("--disaggregation-bootstrap-port")))
        elif c["argv"][:2] == ["-m", "sglang_router.launch_router"]:
            routers.append((c["node"], c["argv"][c["argv"].index("--pd-disaggregation") + 1:]))
    assert sorted(servers) == [(0, "prefill", "30000", "0", "8998"), (0, "prefill", "30004", "4", "9002"),
                               (1, "decode", "30000", None, None)]
    assert routers == [(0, ["--prefill", "http://gpu000:30000", "8998", "--prefill", "http://gpu000:30004", "9002",
                            "--decode", "http://gpu001:30000"])]


def test_node_sh_gives_each_nixl_instance_its_nodes_address(check_spec, tmp_path):
    """vLLM's NixlConnector listens for the decode instances' handshake on
    VLLM_NIXL_SIDE_CHANNEL_HOST and hands that address to them (vllm/envs.py: default localhost;
    nixl/base_scheduler.py: remote_host=side_channel_host): with the instances on two nodes, each
    must say its own node's address, which the script finds as it finds Ray's (hostname -I here)."""
    r = check_spec(SPEC, ("slurm",))
    for name, text in files(r, "slurm").items():
        (tmp_path / name).write_text(text)
    env = _record(tmp_path)
    (tmp_path / "bin" / "vllm").write_text('#!/bin/sh\necho "vllm HOST=${VLLM_NIXL_SIDE_CHANNEL_HOST:-} $*" >> "$REC"\n')
    for node, address in ((0, "192.0.2.10"), (1, "192.0.2.11")):
        (tmp_path / "bin" / "hostname").write_text(f'#!/bin/sh\necho "{address} fd00::1"\n')
        (tmp_path / "bin" / "hostname").chmod(0o755)
        p = subprocess.run(["bash", str(tmp_path / "node.sh"), str(node)], capture_output=True, text=True, timeout=60,
                           env=dict(env, PARC_HOSTS="gpu000 gpu001", VLLM_PROXY="toy_proxy_server.py"))
        assert p.returncode == 0, p.stderr
    hosts = sorted(c.split()[1] for c in (tmp_path / "rec").read_text().splitlines() if c.startswith("vllm"))
    assert hosts == ["HOST=192.0.2.10", "HOST=192.0.2.10", "HOST=192.0.2.11"]
    # a user's own address wins
    p = subprocess.run(["bash", str(tmp_path / "decode-serve.sh")], capture_output=True, text=True, timeout=60,
                       env=dict(env, VLLM_NIXL_SIDE_CHANNEL_HOST="10.1.2.3"))
    assert p.returncode == 0 and "HOST=10.1.2.3 " in (tmp_path / "rec").read_text().splitlines()[-1]


def test_instances_on_one_node_keep_vllms_own_side_channel_host(check_spec):
    """On one node vLLM's default (localhost) reaches every instance: the script leaves it."""
    r = check_spec(ONE_NODE, ("vllm",))
    assert all("VLLM_NIXL_SIDE_CHANNEL_HOST" not in t for t in files(r, "vllm").values())


def _pod_envs(docs) -> list[list[dict]]:
    """The env of every engine container in ``docs`` (LeaderWorkerSets, a DisaggregatedSet's roles,
    a DynamoGraphDeployment's workers, an LLMInferenceService's workloads)."""
    out = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("containers",):
                for c in node.get(key) or []:
                    if any(e.get("name") == "PARC_PLAN" for e in c.get("env", [])):
                        out.append(c["env"])
            if "envs" in node and "componentType" in node and node["componentType"] == "worker":
                out.append(node["envs"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for d in docs:
        walk(d)
    return out


@pytest.mark.parametrize("target, block, path, pods", [
    ("lws", "target lws { engine = vllm }\n", "lws.yaml", 2),
    ("lws", "target lws {\n  engine = vllm\n  disaggregated_set = true\n}\n", "lws.yaml", 2),
    ("dynamo", "target dynamo { }\n", "dgd.yaml", 2),
    ("dynamo", "target dynamo { api_version = v1alpha1 }\n", "dgd.yaml", 2),
    ("kserve", "target kserve { }\n", "llmisvc.yaml", 2),
])
def test_every_nixl_pod_advertises_its_own_ip(check_spec, target, block, path, pods):
    """Each pod has an address of its own: its side channel is the pod IP, from the downward API."""
    r = check_spec(SPEC + block, (target,))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    envs = _pod_envs(yaml.safe_load_all(files(r, target)[path]))
    assert len(envs) == pods
    for env in envs:
        [e] = [e for e in env if e["name"] == "VLLM_NIXL_SIDE_CHANNEL_HOST"]
        assert e == {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    mooncake = check_spec(SPEC.replace("kv_transfer   = nixl", "kv_transfer   = mooncake") + block, (target,))
    if not mooncake.errors:
        text = files(mooncake, target)[path]
        assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in text
