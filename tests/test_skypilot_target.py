"""The skypilot target: the task's resources, the setup that writes the launch of the engine it
runs, the run that starts it with SkyPilot's variables, and its own rules (P641-P643), each
firing on one spec and quiet on the same spec made valid. (tests/test_skypilot_judge.py has
SkyPilot's own parser read the tasks and run them.)"""
from __future__ import annotations

import subprocess

import pytest
import yaml

from support.specs import assert_fires, assert_quiet, spec

TRAIN = {"torchrun": 'entrypoint = "train.py"'}
VLLM = 'model = "m"'
SERVE = "max_model_len = 4096"


def files(r) -> dict[str, str]:
    from parc.targets import skypilot

    return {f.path: f.text for f in skypilot.build(r.plan)}


def task(r) -> dict:
    return yaml.safe_load(files(r)["task.yaml"])


def test_a_training_task_runs_torchrun_launch_on_every_node(check_spec):
    from parc.targets import torchrun

    r = check_spec(spec(nodes=2, mesh="dp = 16", target=TRAIN), ("skypilot",))
    assert not [d for d in r.errors if d.code.startswith("P6")], [(d.code, d.message) for d in r.errors]
    t = task(r)
    # 2 nodes of 8 H100 (h100_sxm is SkyPilot's H100); nodes linked by InfiniBand: the best network tier
    assert t["num_nodes"] == 2
    assert t["resources"] == {"accelerators": "H100:8", "network_tier": "best"}
    # the setup writes torchrun's own launch.sh, byte for byte
    launch = next(f.text for f in torchrun.node_files(r.plan, entrypoint="train.py", arg_lines=[]) if f.executable)
    assert "\n" + launch in t["setup"]
    assert 'MASTER_ADDR="${SKYPILOT_NODE_IPS%%$\'\\n\'*}"' in t["run"]
    assert t["run"].rstrip().endswith('/launch.sh "$SKYPILOT_NODE_RANK"')


def test_a_served_task_opens_the_port(check_spec):
    r = check_spec(spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM + "; port = 8080"}), ("skypilot",))
    t = task(r)
    # one node: no network tier asked, vLLM's serve.sh runs without a rank
    assert t["resources"] == {"accelerators": "H100:8", "ports": 8080}
    assert t["run"].rstrip().endswith("/serve.sh")


def test_keys_land_in_the_resources(check_spec):
    block = ('name = "run-1"; accelerator = "H100-MEGA"; infra = "gcp/us-central1"; use_spot = true; '
             'disk_size = 512; network_tier = standard; image_id = "docker:nvcr.io/nvidia/pytorch:25.01-py3"; '
             'workdir = "."')
    r = check_spec(spec(nodes=2, mesh="dp = 16", target={**TRAIN, "skypilot": block}), ("skypilot",))
    t = task(r)
    assert (t["name"], t["workdir"]) == ("run-1", ".")
    assert t["resources"] == {"accelerators": "H100-MEGA:8", "infra": "gcp/us-central1", "use_spot": True,
                              "disk_size": 512, "network_tier": "standard",
                              "image_id": "docker:nvcr.io/nvidia/pytorch:25.01-py3"}


def test_cpus_and_memory_are_the_nodes_request(check_spec):
    """SkyPilot's `cpus` and `memory` (vCPUs and GB a node needs: a number, or "N+" for at least N,
    sky/utils/schemas.py): vLLM's SkyPilot recipes ask for `cpus: 100+`, `memory: 1000+`."""
    block = 'cpus = "100+"; memory = "1000+"'
    r = check_spec(spec(nodes=2, mesh="dp = 16", train="zero = 3", target={**TRAIN, "skypilot": block}), ("skypilot",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    res = task(r)["resources"]
    assert (res["cpus"], res["memory"]) == ("100+", "1000+")
    r = check_spec(spec(nodes=2, mesh="dp = 16", target={**TRAIN, "skypilot": ""}), ("skypilot",))
    assert not {"cpus", "memory"} & set(task(r)["resources"])


def test_the_specs_setup_runs_after_parcs(check_spec):
    r = check_spec(spec(target={**TRAIN, "skypilot": 'setup = "pip install -r requirements.txt"'}), ("skypilot",))
    setup = task(r)["setup"]
    # (plan.json, written before, holds the block's settings too: the last occurrence is the command)
    assert setup.index("chmod +x") < setup.rindex("\npip install -r requirements.txt\n")


@pytest.mark.parametrize("arg", ["PARC_EOF", "a\nPARC_EOF_0000000000000000\nb", "é ünïcode", "tab\there"])
def test_any_argument_survives_the_here_document_and_the_yaml(check_spec, tmp_path, arg):
    """A here-document's delimiter carries its text's hash, so no argument line can close it; a
    script that is not printable ASCII is written as a double-quoted YAML scalar instead of a block."""
    r = check_spec(spec(target={"torchrun": f'entrypoint = "train.py"; args = [{_par(arg)}]'}), ("skypilot",))
    t = task(r)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-c", t["setup"]], env=env, check=True)
    [folder] = (tmp_path / ".parc").iterdir()
    from parc.targets import torchrun

    want = next(f.text for f in torchrun.node_files(r.plan, entrypoint="train.py", arg_lines=[[arg]]) if f.executable)
    assert (folder / "launch.sh").read_text() == want


def _par(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def test_output_is_the_same_on_every_run(check_spec):
    from parc.targets import skypilot

    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM}), ("skypilot",))
    assert skypilot.build(r.plan) == skypilot.build(r.plan)


# ------------------------------------------------------------------------------------ rules

def test_p641_gpu_without_a_skypilot_name(check_spec):
    custom = spec(target=TRAIN).replace("gpu           = h100_sxm",
                                        "gpu { memory = 80GB\n    flops = 989TFLOPS\n    hbm_bandwidth = 3TB/s }")
    d = assert_fires(check_spec, custom, "P641", "gpu {", target="skypilot", targets=("skypilot",))
    assert "`custom`" in d.message
    named = custom.replace('entrypoint = "train.py"', 'entrypoint = "train.py"\n}\ntarget skypilot {\n  accelerator = "H100"')
    assert_quiet(check_spec, named, "P641", ("skypilot",))


def test_p642_accelerator_with_a_count(check_spec):
    bad = spec(target={**TRAIN, "skypilot": 'accelerator = "H100:8"'})
    d = assert_fires(check_spec, bad, "P642", "accelerator", target="skypilot", targets=("skypilot",))
    assert "H100:8:8" in d.message
    assert_quiet(check_spec, bad.replace('"H100:8"', '"H100"'), "P642", ("skypilot",))


@pytest.mark.parametrize("good", ["aws", "AWS/us-east-1/us-east-1a", "k8s", "kubernetes/ctx/with/slashes", "*",
                                  "*/eu-west-1"])
def test_p643_infra(check_spec, good):
    bad = spec(target={**TRAIN, "skypilot": 'infra = "amazon"'})
    d = assert_fires(check_spec, bad, "P643", "infra", target="skypilot", targets=("skypilot",))
    assert "amazon" in d.message
    assert_quiet(check_spec, bad.replace('"amazon"', f'"{good}"'), "P643", ("skypilot",))


def test_parc_rules_lists_skypilot_rules(capsys):
    from parc.cli.main import main

    assert main(["rules", "--target", "skypilot"]) == 0
    codes = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert {"P641", "P642", "P643"} <= codes


def test_run_takes_the_head_address_on_a_thousand_nodes(check_spec, tmp_path):
    """`printf ... | head -n 1` under pipefail ends with SIGPIPE (141) when head closes the pipe
    before printf has written every address: run must hand node 0's address to every node of a
    long SKYPILOT_NODE_IPS and start the launch."""
    import os

    r = check_spec(spec(nodes=1024, gpn=8, mesh="dp = 8192", schedule="micro_batch = 1; global_batch = 8192",
                        target=TRAIN), ("skypilot",))
    run = task(r)["run"].replace('exec bash "$HOME', 'echo "MASTER_ADDR=$MASTER_ADDR" # "$HOME')
    ips = "\n".join(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}-{'x' * 40}" for i in range(1024))
    env = dict(os.environ, SKYPILOT_NODE_RANK="5", SKYPILOT_NODE_IPS=ips, SKYPILOT_NUM_GPUS_PER_NODE="8")
    for _ in range(5):
        p = subprocess.run(["bash", "-c", run], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (p.returncode, p.stderr)
        assert p.stdout == f"MASTER_ADDR=10.0.0.0-{'x' * 40}\n"
