"""vLLM: every emitted option is one `vllm serve` defines and each launch mode says what it
should; vLLM itself judges the commands in tests/test_vllm_judge.py."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from backends_support import ROOT, accepted_cases, run_emitted, write_out

FLAGS = {ln.strip() for ln in (ROOT / "tests/data/flags/vllm-0.32.0.txt").read_text().splitlines()
         if ln.strip() and not ln.startswith("#")}
CASES = [(s, f) for s, t, f in accepted_cases() if t == "vllm"]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """spec -> (plan, [per node: {launcher: argv, launcher.env: env}]); a disaggregated spec gives
    one entry per pool, "spec:pool", whose plan is that pool's instance (its mesh, GPUs, nodes)."""
    out = {}
    for spec, files in CASES:
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        d = write_out(files, tmp / "out")
        plan = json.loads((d / "plan.json").read_text())
        views = [(spec, "", plan)]
        for p in plan["pools"]:
            g, per = math.prod(p["mesh"][a] for a in ("pp", "dp", "cp", "tp")), plan["cluster"]["gpus_per_node"]
            views.append((f"{spec}:{p['name']}", p["name"] + "-", {**plan, "mesh": p["mesh"], "world_size": g,
                          "cluster": {**plan["cluster"], "nodes": max(1, g // per)}}))
        for key, prefix, view in views[1:] if plan["pools"] else views:
            if (d / f"{prefix}serve.sh").exists():   # with pools: the instance in the node's first slot
                out[key] = (view, [run_emitted(d / f"{prefix}serve.sh", tmp, *(["0"] if prefix else []))])
            else:   # one launch.sh, run on every node with its rank
                out[key] = (view, [run_emitted(d / f"{prefix}launch.sh", tmp, str(k))
                                   for k in range(view["cluster"]["nodes"])])
    return out


def _opt(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_every_option_is_vllms(launched):
    assert len(launched) >= 7
    for spec, (plan, nodes) in launched.items():
        for got in nodes:
            if "vllm" in got:
                argv = got["vllm"]
                assert argv[0] == "serve" and argv[1] == plan["targets"]["vllm"]["settings"]["model"]
                unknown = [a for a in argv[2:] if a.startswith("-") and a not in FLAGS]
                assert not unknown, f"{spec}: {unknown}"


def test_sizes_multiply_to_the_world(launched):
    for spec, (plan, nodes) in launched.items():
        argv = next(g["vllm"] for g in nodes if "vllm" in g)
        tp, pp = int(_opt(argv, "--tensor-parallel-size")), int(_opt(argv, "--pipeline-parallel-size"))
        dp = int(_opt(argv, "--data-parallel-size") or 1)
        pcp = int(_opt(argv, "--prefill-context-parallel-size") or 1)
        assert (tp, pp, dp, pcp) == tuple(plan["mesh"][a] for a in ("tp", "pp", "dp", "cp"))
        assert tp * pp * dp * pcp == plan["world_size"]
        # a limit the spec gives is written; one it leaves out is vLLM's own (not written)
        for flag, key in (("--max-model-len", "max_model_len"), ("--max-num-seqs", "max_num_seqs")):
            given = plan["serve"][key]
            assert _opt(argv, flag) == (None if given is None else str(given)), (spec, flag)
        given = plan["serve"]["gpu_memory_utilization"]
        assert _opt(argv, "--gpu-memory-utilization") == (None if given is None else repr(float(given))), spec
        assert ("--enable-expert-parallel" in argv) == (plan["mesh"]["ep"] > 1)


def test_ray_head_and_workers(launched):
    plan, nodes = launched["examples/llama3-405b-serve-2node.par"]
    head, worker = nodes
    assert head["ray"][:2] == ["start", "--head"]
    assert _opt(head["vllm"], "--distributed-executor-backend") == "ray"
    assert "vllm" not in worker and worker["ray"][:3] == ["start", "--address", "10.0.0.1:6379"]
    assert worker["ray"][-1] == "--block" and "--node-ip-address" in worker["ray"]


def test_multiprocessing_nodes(launched):
    plan, nodes = launched["tests/data/specs/vllm-nnodes.par"]
    for k, got in enumerate(nodes):
        argv = got["vllm"]
        assert (_opt(argv, "--nnodes"), _opt(argv, "--node-rank"), _opt(argv, "--master-addr")) == ("2", str(k),
                                                                                                    "10.0.0.1")
        assert ("--headless" in argv) == (k > 0)
        assert got["vllm.env"]["VLLM_PP_LAYER_PARTITION"] == "38,42"
        assert _opt(argv, "--kv-cache-dtype") == "fp8"


def test_data_parallel_nodes(launched):
    plan, nodes = launched["tests/data/specs/vllm-dp-nodes.par"]
    for k, got in enumerate(nodes):
        argv = got["vllm"]
        assert _opt(argv, "--data-parallel-size-local") == "2"
        assert _opt(argv, "--data-parallel-start-rank") == (None if k == 0 else str(2 * k))
        assert _opt(argv, "--data-parallel-address") == "10.0.0.1"
        assert ("--headless" in argv) == (k > 0) and ("--port" in argv) == (k == 0)


def test_context_parallel_is_prefill_cp(launched):
    plan, (got,) = launched["tests/data/specs/vllm-pcp.par"]
    assert _opt(got["vllm"], "--prefill-context-parallel-size") == "2"


SERVE = """
model "m" {{ from = llama3_8b }}
cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
mesh {{
{mesh}
}}
serve {{ max_model_len = 4096 }}
target vllm {{ model = "x/y" }}
"""


@pytest.mark.parametrize("nodes,mesh,code", [
    (2, "  pp = 3\n  tp = 4", None),                # 12 of 16 GPUs: P101 says it, not P651
    (3, "  dp = 2\n  tp = 12", "P651"),             # a 12-GPU replica on 8-GPU nodes
    (1, "  tp = 2\n  dp = 4", None),                # tp outside dp: judged under vLLM's order (P652 is a note)
    (2, "  pp = 2\n  dp = 4\n  tp = 2", None),       # pp outside dp: vLLM keeps dp outermost, and that holds
    (2, "  dp = 4\n  pp = 2\n  tp = 2", None),
    (1, "  dp = 4\n  tp = 2", None),
])
def test_vllm_layout_rules(nodes, mesh, code, check_spec):
    from parc import targets as backends

    backends.load_rules()
    r = check_spec(SERVE.format(nodes=nodes, mesh=mesh), targets=("vllm",))
    codes = {d.code for d in r.errors}
    if code is None:
        assert not codes & {"P651", "P652"}
    else:
        assert code in codes, [f"{d.code} {d.message}" for d in r.diagnostics]


@pytest.mark.parametrize("model,max_len,code", [
    ("from = llama3_8b", 8192, None),
    ("from = llama3_8b", 16384, "P658"),                 # Meta-Llama-3-8B: max_position_embeddings 8192
    ("from = llama3_8b\n  max_positions = 131072", 16384, None),   # Llama 3.1's 131072
    ("from = qwen2_5_7b", 131072, None),
    # Llama 3.1's own llama3 scaling is already counted in its 131072 positions; a linear scaling
    # of factor 2 over 8192 positions reaches 16384 in vLLM (_get_and_verify_max_len)
    ("from = llama3_1_8b", 262144, "P658"),
    ("from = llama3_8b\n  rope_scaling = linear\n  rope_factor = 2", 16384, None),
    ("from = llama3_8b\n  rope_scaling = yarn\n  rope_factor = 2", 16384, "P658"),
])
def test_max_model_len_within_the_models_positions(model, max_len, code, check_spec):
    """vLLM refuses --max-model-len above the config's max_position_embeddings."""
    text = SERVE.format(nodes=1, mesh="  dp = 1\n  tp = 8").replace('model "m" { from = llama3_8b }',
                                                                      'model "m" {\n  ' + model + "\n}")
    text = text.replace("max_model_len = 4096", f"max_model_len = {max_len}")
    r = check_spec(text, targets=("vllm",))
    errs = [d for d in r.errors if d.code == "P658"]
    if code is None:
        assert not errs
        return
    assert len(errs) == 1, [f"{d.code} {d.message}" for d in r.diagnostics]
    e = errs[0]
    if "llama3_1" in model:
        assert "262,144" in e.message and "131,072 positions, its llama3 RoPE scaling already counted" in e.message
        return
    assert "16,384" in e.message and "8,192" in e.message and "max_model_len = 8192" in e.help
    assert text.lstrip("\n").splitlines()[e.span.line - 1].strip().startswith("serve")


RAY_DP = """
model "m" { from = llama3_8b }
cluster "c" {
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
  socket_ifname = "IFNAME"
}
mesh {
  dp = 8
  tp = 2
}
serve { max_model_len = 4096 }
target vllm {
  model    = "x/y"
  executor = ray
}
"""


def _ray_log_bin(tmp_path):
    """A `ray` that appends every call (one line of argv and its VLLM_HOST_IP) to $ARGV_DIR/ray.log."""
    b = tmp_path / "raybin"
    b.mkdir()
    (b / "ray").write_text('#!/usr/bin/env bash\necho "$* | ${VLLM_HOST_IP:-}" >> "$ARGV_DIR/ray.log"\n')
    (b / "ray").chmod(0o755)
    return b / "ray"


@pytest.mark.parametrize("ifname", ["eth7", "^lo,docker"])
def test_ray_data_parallel_across_nodes(ifname, write_spec, tmp_path):
    """With Ray and dp across nodes, vLLM needs --data-parallel-size-local (else it places every DP
    engine on the head node); each node gives Ray its own address, and a re-run stops the old Ray."""
    from parc.cli.compile import compile_spec

    spec = write_spec(RAY_DP.replace("IFNAME", ifname))
    r, _, files = compile_spec(str(spec), "vllm")
    assert files is not None, [d.message for d in r.diagnostics]
    d = write_out(files, tmp_path / "out")
    ray = _ray_log_bin(tmp_path)
    for k, ip in enumerate(["10.1.0.1", "10.1.0.2"]):
        got = run_emitted(d / "launch.sh", tmp_path, str(k), env={"VLLM_HOST_IP": ip, "RAY": str(ray)})
        calls = (tmp_path / "argv" / "ray.log").read_text().splitlines()
        assert calls[0] == f"stop | {ip}"                                  # safe to run again
        assert calls[1].startswith("start --head --port 6379" if k == 0 else "start --address 10.0.0.1:6379")
        assert f"--node-ip-address {ip}" in calls[1] and calls[1].endswith(f" | {ip}")
        if k == 0:
            argv, env = got["vllm"], got["vllm.env"]
            assert _opt(argv, "--data-parallel-size") == "8" and _opt(argv, "--data-parallel-backend") == "ray"
            assert _opt(argv, "--data-parallel-size-local") == "4"          # 8 GPUs / (tp 2)
            assert env["VLLM_HOST_IP"] == ip and env["NCCL_SOCKET_IFNAME"] == ifname
            assert env.get("GLOO_SOCKET_IFNAME") == (None if ifname.startswith("^") else ifname)
        else:
            assert "vllm" not in got
        (tmp_path / "argv" / "ray.log").unlink()


def test_node_address_without_vllm_host_ip(write_spec, tmp_path):
    """Without VLLM_HOST_IP the script finds an address itself (the host's first one here)."""
    from parc.cli.compile import compile_spec
    import shutil

    if not shutil.which("hostname"):
        pytest.skip("no `hostname` command on this machine")
    spec = write_spec(RAY_DP.replace("IFNAME", "no-such-if0"))
    r, _, files = compile_spec(str(spec), "vllm")
    d = write_out(files, tmp_path / "out")
    ray = _ray_log_bin(tmp_path)
    env = {k: v for k, v in __import__("os").environ.items() if k != "VLLM_HOST_IP"}
    env["RAY"] = str(ray)
    got = run_emitted(d / "launch.sh", tmp_path, "1", env=env, check=False)
    if got["returncode"]:
        assert "set VLLM_HOST_IP" in got["stderr"]       # no address at all: a clear stop
    else:
        call = (tmp_path / "argv" / "ray.log").read_text().splitlines()[1]
        ip = call.rsplit(" | ", 1)[1]
        assert ip and f"--node-ip-address {ip} " in call


def test_socket_ifname_reaches_every_shell_target(write_spec, tmp_path):
    """The cluster's interface is in the environment of torchrun, Megatron-LM and Slurm launches."""
    from parc.cli.compile import compile_spec

    spec = write_spec("""
    model "m" { from = llama3_8b }
    cluster "c" {
      nodes         = 2
      gpus_per_node = 8
      gpu           = h100_sxm
      inter_node    = ethernet(100Gb/s)
      socket_ifname = "=ens5"
    }
    mesh {
      dp = 8
      tp = 2
    }
    schedule {
      micro_batch  = 1
      global_batch = 64
    }
    train { zero = 1 }
    target torchrun { entrypoint = "train.py" }
    target megatron { extra_args = ["--mock-data", "--tokenizer-type", "NullTokenizer"] }
    target slurm { entrypoint = "train.py" }
    """)
    for target in ("torchrun", "megatron"):
        r, _, files = compile_spec(str(spec), target)
        assert files is not None, [d.message for d in r.diagnostics]
        d = write_out(files, tmp_path / target)
        env = run_emitted(d / "launch.sh", tmp_path, "1")["torchrun.env"]
        assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=ens5", "ens5"), target
    r, _, files = compile_spec(str(spec), "slurm")
    assert files is not None, [d.message for d in r.diagnostics]
    text = "\n".join(f.text for f in files)
    assert "NCCL_SOCKET_IFNAME" in text and "GLOO_SOCKET_IFNAME" in text
