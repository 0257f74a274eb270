"""The deepspeed target: the config's numbers from the plan (hand-computed), the launch it runs,
and its own rules firing on the plans DeepSpeed cannot run and quiet on the same plans made valid."""
from __future__ import annotations

import json

from backends_support import run_emitted, write_out
from support.specs import assert_fires, assert_quiet, spec

T = ("deepspeed",)
ENTRY = 'entrypoint = "train.py"'
L8 = "from = llama3_8b; seq_len = 1024"   # short sequences: the plans fit in memory


def _files(check_spec, text):
    from parc.targets import deepspeed

    r = check_spec(text, T)
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    return {f.path: f for f in deepspeed.build(r.plan)}


def test_config_numbers_data_parallel(check_spec):
    files = _files(check_spec, spec(L8, gpn=8, mesh="dp = 8", schedule="micro_batch = 2; global_batch = 64",
                                    train="zero = 3", target={"deepspeed": ENTRY}))
    cfg = json.loads(files["ds_config.json"].text)
    # accumulation = 64 / (2 · 8) = 4; train_batch_size = 2 · 4 · 8 = 64
    assert cfg["train_batch_size"] == 64 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 4
    assert cfg["zero_optimization"] == {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                                        "reduce_bucket_size": 500_000_000}
    assert cfg["bf16"] == {"enabled": True} and "tensor_parallel" not in cfg and "pipeline" not in cfg
    assert "hostfile" not in files


def test_config_autotp_and_pipeline(check_spec):
    files = _files(check_spec, spec(L8, nodes=2, gpn=8, mesh="pp = 2; dp = 4; tp = 2",
                                    schedule="micro_batch = 1; global_batch = 32",
                                    target={"deepspeed": ENTRY + '; hosts = ["a", "b"]; overlap_comm = false'}))
    cfg = json.loads(files["ds_config.json"].text)
    # dp = 16 / (2 · 2) = 4; accumulation = 32 / (1 · 4) = 8. With AutoTP DeepSpeed counts the
    # batch over its own world, so train_batch_size is left for it to derive
    assert "train_batch_size" not in cfg and cfg["gradient_accumulation_steps"] == 8
    assert cfg["tensor_parallel"] == {"autotp_size": 2} and cfg["pipeline"] == {"stages": 2}
    assert cfg["zero_optimization"]["overlap_comm"] is False
    assert files["hostfile"].text == "a slots=8\nb slots=8\n"


def test_dualpipe_turns_partitioning_off(check_spec):
    files = _files(check_spec, spec(L8, gpn=8, mesh="pp = 2; dp = 4",
                                    schedule="pipeline = dualpipe_v; virtual_stages = 2; micro_batch = 1; "
                                             "global_batch = 32", target={"deepspeed": ENTRY}))
    cfg = json.loads(files["ds_config.json"].text)
    assert cfg["pipeline"] == {"stages": 2, "pipe_partitioned": False, "grad_partitioned": False}


def test_launch_line(check_spec, tmp_path):
    files = _files(check_spec, spec(L8, nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 32",
                                    target={"deepspeed": ENTRY + '; args = ["--lr", "3e-4"]; hosts = ["a", "b"]'}))
    d = write_out(list(files.values()), tmp_path / "out")
    got = run_emitted(d / "launch.sh", tmp_path, env={"MASTER_ADDR": ""})
    assert got["deepspeed"] == ["--hostfile", str(d / "hostfile"), "--num_nodes", "2", "--num_gpus", "8",
                                "--master_addr", "a", "--master_port", "29500", "train.py", "--lr", "3e-4",
                                "--deepspeed", "--deepspeed_config", str(d / "ds_config.json")]
    got = run_emitted(d / "launch.sh", tmp_path, env={"MASTER_ADDR": "10.1.1.1", "HOSTFILE": "/etc/hosts.ds"})
    assert got["deepspeed"][:2] == ["--hostfile", "/etc/hosts.ds"] and "10.1.1.1" in got["deepspeed"]


def test_launch_without_hosts_needs_hostfile(check_spec, tmp_path):
    files = _files(check_spec, spec(L8, nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 32",
                                    target={"deepspeed": ENTRY}))
    d = write_out(list(files.values()), tmp_path / "out")
    r = run_emitted(d / "launch.sh", tmp_path, check=False)
    assert r["returncode"] != 0 and "set HOSTFILE" in r["stderr"]


def test_one_node_has_no_hostfile(check_spec, tmp_path):
    files = _files(check_spec, spec(L8, gpn=4, mesh="dp = 4", schedule="micro_batch = 1; global_batch = 8",
                                    target={"deepspeed": ENTRY}))
    d = write_out(list(files.values()), tmp_path / "out")
    assert run_emitted(d / "launch.sh", tmp_path)["deepspeed"][:4] == ["--num_nodes", "1", "--num_gpus", "4"]



def test_one_node_keeps_the_master_port(check_spec, tmp_path):
    """On one node the launcher still opens the rendezvous on --master_port (runner.py passes it to
    deepspeed.launcher.launch as MASTER_PORT); a `master_port` the spec sets must reach it, or two
    jobs on one machine meet on DeepSpeed's default 29500."""
    files = _files(check_spec, spec(L8, gpn=4, mesh="dp = 4", schedule="micro_batch = 1; global_batch = 8",
                                    target={"deepspeed": ENTRY + "; master_port = 29612"}))
    d = write_out(list(files.values()), tmp_path / "out")
    argv = run_emitted(d / "launch.sh", tmp_path)["deepspeed"]
    assert argv[argv.index("--master_port") + 1] == "29612", argv
    # without the key, the launcher's own default stands (nothing is invented)
    files = _files(check_spec, spec(L8, gpn=4, mesh="dp = 4", schedule="micro_batch = 1; global_batch = 8",
                                    target={"deepspeed": ENTRY}))
    d = write_out(list(files.values()), tmp_path / "plain")
    assert "--master_port" not in run_emitted(d / "launch.sh", tmp_path)["deepspeed"]

# ---- rules: each fires on one spec and is quiet on the same spec made valid ----

def test_p685_trains_only(check_spec):
    text = spec(L8, mesh="tp = 8", serve="max_model_len = 4096", target={"deepspeed": ENTRY})
    assert_fires(check_spec, text, "P685", "target deepspeed", target="deepspeed", targets=T)
    assert_quiet(check_spec, spec(L8, target={"deepspeed": ENTRY}), "P685", targets=T)


def test_p686_context_parallel(check_spec):
    text = spec(L8, mesh="cp = 2; dp = 4", schedule="micro_batch = 1; global_batch = 32", target={"deepspeed": ENTRY})
    d = assert_fires(check_spec, text, "P686", "cp = 2", target="deepspeed", targets=T)
    assert "Ulysses" in d.message
    assert_quiet(check_spec, text.replace("cp = 2; dp = 4", "dp = 8").replace("cp = 2\n  dp = 4", "dp = 8"),
                 "P686", targets=T)


def test_p687_fp8(check_spec):
    text = spec(L8, train="zero = 1; precision = fp8", target={"deepspeed": ENTRY})
    assert_fires(check_spec, text, "P687", "precision = fp8", severity="warning", target="deepspeed", targets=T)
    assert_quiet(check_spec, text.replace("fp8", "bf16"), "P687", targets=T)


def test_p688_p689_schedules(check_spec):
    base = spec(L8, mesh="pp = 2; dp = 4", schedule="pipeline = PIPE; micro_batch = 1; global_batch = 32",
                target={"deepspeed": ENTRY})
    inter = base.replace("pipeline = PIPE", "pipeline = interleaved_1f1b\n  virtual_stages = 2")
    d = assert_fires(check_spec, inter, "P688", "pipeline = interleaved_1f1b", target="deepspeed", targets=T)
    assert "no interleaved pipeline" in d.message
    assert_fires(check_spec, base.replace("PIPE", "gpipe"), "P689", "pipeline = gpipe", severity="warning",
                 target="deepspeed", targets=T)
    for ok in ("1f1b", "gpipe"):
        assert_quiet(check_spec, base.replace("PIPE", ok), "P688", targets=T)
    assert_quiet(check_spec, base.replace("PIPE", "1f1b"), "P689", targets=T)


def test_p684_hosts(check_spec):
    text = spec(L8, nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 32",
                target={"deepspeed": ENTRY + '; hosts = HOSTS'})
    d = assert_fires(check_spec, text.replace("HOSTS", '["a"]'), "P684", "hosts", target="deepspeed", targets=T)
    assert "1 host for 2 nodes" in d.message
    d = assert_fires(check_spec, text.replace("HOSTS", '["a", "a"]'), "P684", "hosts", target="deepspeed", targets=T)
    assert "multiple entries" in d.message
    d = assert_fires(check_spec, text.replace("HOSTS", '["a", "b c"]'), "P684", "hosts", target="deepspeed",
                     targets=T)
    assert "bad entry" in d.message
    assert_quiet(check_spec, text.replace("HOSTS", '["a", "b"]'), "P684", targets=T)


def test_entrypoint_from_torchrun(check_spec):
    """A spec with only `target torchrun` compiles for deepspeed with torchrun's script."""
    from parc.targets import deepspeed

    r = check_spec(spec(L8, schedule="micro_batch = 1; global_batch = 8", target={"torchrun": ENTRY}), T)
    assert not r.errors
    assert 'train.py "${args[@]}" --deepspeed' in next(f.text for f in deepspeed.build(r.plan) if f.path == "launch.sh")
