"""The torchrun launch: torch's own parser reads the intended world from every node's script,
launch.sh finds the node's rank, and a real 1-node CPU launch rebuilds the plan's mesh."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backends_support import ROOT, compile_rel, run_emitted, write_out

# (spec, rendezvous the launch must use)
CASES = [("examples/llama3-70b-train.par", "static"), ("examples/llama3-8b-fsdp.par", "standalone"),
         ("tests/data/specs/c10d-torchrun.par", "c10d"),
         # max_restarts = 2 over 2 nodes: static rendezvous would restart only the failed node
         ("tests/data/specs/slurm-kubernetes.par", "c10d")]


@pytest.fixture(scope="module")
def torch_parser():
    pytest.importorskip("torch", reason="torch's own torchrun parser reads the emitted command line")
    from torch.distributed.run import config_from_args, get_args_parser

    return get_args_parser, config_from_args


def _parse(torch_parser, argv, monkeypatch):
    get_args_parser, config_from_args = torch_parser
    for k in list(os.environ):
        if k.startswith("PET_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = get_args_parser().parse_args(argv)
    config, cmd, cmd_args = config_from_args(args)
    return args, config, cmd_args


@pytest.mark.parametrize("spec,rdzv", CASES)
def test_torch_parses_every_node(spec, rdzv, tmp_path, torch_parser, monkeypatch):
    r, _, files = compile_rel(spec, "torchrun")
    plan = r.plan
    s = plan.targets["torchrun"].settings
    out = write_out(files, tmp_path / "out")
    cl = plan.cluster
    seen_ids, seen_masters = set(), set()
    for k in range(cl.nodes):
        got = run_emitted(out / "launch.sh", tmp_path, str(k))   # one script, every node
        args, config, cmd_args = _parse(torch_parser, got["torchrun"], monkeypatch)
        assert args.nnodes == str(cl.nodes)
        assert args.nproc_per_node == str(cl.gpus_per_node)
        assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (cl.nodes, cl.nodes, cl.gpus_per_node)
        assert config.max_restarts == s.get("max_restarts", 0)
        assert args.training_script == s["entrypoint"]
        assert args.training_script_args == list(s.get("args", []))
        env = got["torchrun.env"]
        assert env["PARC_PLAN"] == str(out / "plan.json")
        assert int(env["OMP_NUM_THREADS"]) >= 1
        if config.max_restarts > 0 and cl.nodes > 1:
            # a restart must bring every node into a new round: only c10d re-rendezvouses them all
            assert config.rdzv_backend == "c10d"
        if rdzv == "standalone":
            assert cl.nodes == 1 and args.standalone
        elif rdzv == "static":
            assert not args.standalone and args.rdzv_backend == "static" and args.rdzv_endpoint == ""
            assert args.node_rank == k and config.rdzv_configs["rank"] == k
            seen_masters.add((args.master_addr, args.master_port))
        else:
            assert not args.standalone and args.rdzv_backend == "c10d"
            assert args.rdzv_endpoint == s.get("rdzv_endpoint", "10.0.0.1:29500") == config.rdzv_endpoint
            assert "localhost" not in args.rdzv_endpoint and "127.0.0.1" not in args.rdzv_endpoint
            seen_ids.add(config.run_id)
    # one world: every node names the same rendezvous
    if rdzv == "static":
        assert seen_masters == {("10.0.0.1", 29500)}
    if rdzv == "c10d":
        assert len(seen_ids) == 1 and next(iter(seen_ids)) != "none"


def test_launch_sh_takes_the_rank_from_argument_or_scheduler(tmp_path):
    r, _, files = compile_rel("examples/llama3-70b-train.par", "torchrun")
    out = write_out(files, tmp_path / "out")
    launch = out / "launch.sh"

    def rank_of(*args, env=None):
        got = run_emitted(launch, tmp_path, *args, env=env)
        argv = got["torchrun"]
        return int(argv[argv.index("--node-rank") + 1])

    assert rank_of("3") == 3
    assert rank_of(env={"NODE_RANK": "5"}) == 5
    assert rank_of(env={"SLURM_NODEID": "7", "NODE_RANK": "1"}) == 7
    assert rank_of("2", env={"SLURM_NODEID": "7"}) == 2
    for bad in (["8"], ["-1"], ["x"], ["07"], []):
        got = run_emitted(launch, tmp_path, *bad, check=False)
        assert got["returncode"] == 2 and "usage" in got["stderr"] and "torchrun" not in got


def test_static_multi_node_needs_master_addr(tmp_path):
    r, _, files = compile_rel("examples/llama3-70b-train.par", "torchrun")
    out = write_out(files, tmp_path / "out")
    got = run_emitted(out / "launch.sh", tmp_path, "1", env={"MASTER_ADDR": ""}, check=False)
    assert got["returncode"] != 0 and "MASTER_ADDR" in got["stderr"] and "torchrun" not in got


SPEC = """
model "tiny" {{
  layers     = 4
  hidden     = 64
  ffn_hidden = 128
  heads      = 4
  kv_heads   = 4
  vocab      = 256
  seq_len    = 32
}}

cluster "cpu" {{
  nodes         = 1
  gpus_per_node = {world}
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}}

mesh {{
{mesh}
}}

schedule {{
  micro_batch  = 1
  global_batch = 8
}}

train {{ zero = 0 }}

target torchrun {{
  entrypoint = {entry}
  args       = [{report}, "two words", "$(touch pwned)"]
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("world,mesh", [(2, "  pp = 2"), (4, "  dp = 2\n  tp = 2")])
def test_real_cpu_launch(world, mesh, tmp_path, write_spec):
    """Launch the emitted plan with the real torchrun: gloo on this CPU, 2 and 4 processes."""
    pytest.importorskip("torch", reason="a real torchrun launch needs torch")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.access(torchrun, os.X_OK):
        pytest.skip(f"no torchrun beside this Python ({torchrun})")
    report = tmp_path / "report.json"
    probe = ROOT / "tests" / "data" / "torchrun_probe.py"
    spec = write_spec(SPEC.format(world=world, mesh=mesh, entry=json.dumps(str(probe)),
                                  report=json.dumps(str(report))))
    from parc.cli.compile import compile_spec

    r, _, files = compile_spec(spec, "torchrun", root=tmp_path)
    assert files is not None, [d.message for d in r.errors]
    out = write_out(files, tmp_path / "out")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_", "MASTER_", "NODE_RANK"))}
    # the torchrun installed beside this Python, in case PATH finds another one first
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               TORCHRUN=torchrun)
    p = subprocess.run(["bash", str(out / "launch.sh"), "0"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ranks = json.loads(report.read_text())
    assert [x["rank"] for x in ranks] == list(range(world))
    for x in ranks:
        assert x["world"] == x["plan_world"] == world
        assert x["local_world"] == world and x["local_rank"] == x["rank"] and x["node"] == 0
        assert x["coords"] == x["expected_coords"]
        assert x["groups"] == x["expected_groups"]
        assert x["args"] == ["two words", "$(touch pwned)"]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("endpoint,bad", [("localhost:29400", True), ("127.0.0.1:29400", True),
                                          ("node001:29400", False)])
def test_local_endpoint_on_several_nodes_is_refused(endpoint, bad, check_spec):
    text = (ROOT / "tests/data/specs/c10d-torchrun.par").read_text().replace("rdzv.example.internal:29400", endpoint)
    r = check_spec(text, targets=("torchrun",))
    assert ("P653" in {d.code for d in r.errors}) == bad


def test_slurm_launch_with_restarts_rendezvouses_every_node_again(tmp_path, torch_parser, monkeypatch):
    """Slurm runs the same launch.sh on every node; with max_restarts it must use c10d with one
    id at the first node, which torch's parser reads back."""
    r, _, files = compile_rel("tests/data/specs/slurm-kubernetes.par", "slurm")
    out = write_out(files, tmp_path / "out")
    ids = set()
    for k in range(r.plan.cluster.nodes):
        got = run_emitted(out / "launch.sh", tmp_path, env={"SLURM_NODEID": str(k), "MASTER_PORT": "29511"})
        args, config, _ = _parse(torch_parser, got["torchrun"], monkeypatch)
        assert config.max_restarts == 2
        assert config.rdzv_backend == "c10d" and config.rdzv_endpoint == "10.0.0.1:29511"
        ids.add(config.run_id)
    assert len(ids) == 1 and next(iter(ids)).startswith("parc-")


RESTART_SPEC = """
model "tiny" {
  layers     = 2
  hidden     = 64
  ffn_hidden = 128
  heads      = 4
  kv_heads   = 4
  vocab      = 256
  seq_len    = 32
}

cluster "two" {
  nodes         = 2
  gpus_per_node = 1
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = ethernet(100Gb/s)
}

mesh { dp = 2 }

schedule {
  micro_batch  = 1
  global_batch = 2
}

train { zero = 0 }

target torchrun {
  entrypoint   = ENTRY
  args         = [REPORT, MARKS]
  max_restarts = 1
}
"""


@pytest.mark.slow
def test_a_failed_node_restarts_the_whole_world(tmp_path, write_spec):
    """Two nodes (two torchrun agents on this machine), max_restarts = 1: once the world has
    met, the worker of node 1 fails while node 0's waits as if blocked in a collective. Both
    agents must start a new round together and the world of 2 meet again. Under a static
    rendezvous node 0's agent never notices: node 1's new worker waits alone and the launch fails."""
    import socket

    report = tmp_path / "report.jsonl"
    probe = ROOT / "tests" / "data" / "torchrun_restart_probe.py"
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = write_spec(RESTART_SPEC.replace("ENTRY", json.dumps(str(probe))).replace("REPORT", json.dumps(str(report)))
                      .replace("MARKS", json.dumps(str(marks))))
    from parc.cli.compile import compile_spec

    r, _, files = compile_spec(spec, "torchrun", root=tmp_path)
    assert files is not None, [d.message for d in r.errors]
    out = write_out(files, tmp_path / "out")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_", "MASTER_", "NODE_RANK", "TORCHELASTIC"))}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PARC_FAIL_NODE="1", PYTHONPATH=str(ROOT),
               TORCHRUN=os.path.join(os.path.dirname(sys.executable), "torchrun"))
    procs = [subprocess.Popen(["bash", str(out / "launch.sh"), str(k)], cwd=tmp_path, env=dict(env, PARC_TEST_NODE=str(k)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for k in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0])
    except subprocess.TimeoutExpired:
        pass
    finally:
        import signal

        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    rows = [json.loads(x) for x in report.read_text().splitlines()]
    assert sorted((x["rank"], x["world"]) for x in rows) == [(0, 2), (1, 2)]
    assert sorted(x["node"] for x in rows) == ["0", "1"]
