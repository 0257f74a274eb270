"""The trainjob target: the TrainJob's sizes, the torchrun command its pods run (the torchrun
target's launcher options with the trainer's PET_ variables), the runtime patch, and its own
rules (P680-P682), each firing on one spec and quiet on the same spec made valid.
(tests/test_trainjob_judge.py has Kubernetes, Kubeflow Trainer and torchrun judge the manifests.)"""
from __future__ import annotations

import pytest
import yaml

from support.specs import assert_fires, assert_quiet, spec

TJ = 'entrypoint = "train.py"'


def manifest(r) -> list[dict]:
    from parc.targets import trainjob

    return list(yaml.safe_load_all(next(f.text for f in trainjob.build(r.plan) if f.path == "trainjob.yaml")))


def at(argv, flag):
    return argv[argv.index(flag) + 1]


def test_sizes_and_resources_are_the_plans(check_spec):
    # 4 nodes of 8 GPUs, dp 4 · tp 8 = 32 ranks: 4 pods, 8 processes and 8 GPUs each;
    # the default CPU and memory are 4 cores and 32 GiB per GPU: 32 cores, 256 GiB
    r = check_spec(spec(nodes=4, mesh="dp = 4; tp = 8", target={"trainjob": TJ}), ("trainjob",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    [cm, job] = manifest(r)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "m-plan" and "plan.json" in cm["data"]
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                         "name": "torch-distributed"}
    t = job["spec"]["trainer"]
    assert (t["numNodes"], t["numProcPerNode"]) == (4, 8)
    assert t["resourcesPerNode"] == {"requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 8},
                                     "limits": {"nvidia.com/gpu": 8}}
    assert "image" not in t   # the runtime's own image
    assert t["env"][0] == {"name": "PARC_PLAN", "value": "/etc/parc/plan.json"}


# nodes, max_restarts -> the torchrun options (the torchrun target's rendezvous, PET_ for its variables)
RDZV = [
    (1, 0, ["--nnodes", "1", "--nproc-per-node", "8", "--standalone", "--max-restarts", "0"]),
    (2, 0, ["--nnodes", "2", "--nproc-per-node", "8", "--node-rank", "$(PET_NODE_RANK)", "--rdzv-backend", "static",
            "--master-addr", "$(PET_MASTER_ADDR)", "--master-port", "$(PET_MASTER_PORT)", "--max-restarts", "0"]),
    (2, 3, ["--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", "--rdzv-id", None, "--max-restarts", "3"]),
]


@pytest.mark.parametrize("nodes,restarts,want", RDZV)
def test_the_command_is_the_torchrun_targets(check_spec, nodes, restarts, want):
    from parc.targets.base import plan_id

    body = TJ + (f"; max_restarts = {restarts}" if restarts else "")
    r = check_spec(spec(nodes=nodes, mesh=f"dp = {8 * nodes}", target={"trainjob": body}), ("trainjob",))
    t = manifest(r)[1]["spec"]["trainer"]
    want = [w if w is not None else "parc-" + plan_id(r.plan) for w in want]
    assert t["command"] == ["torchrun"] + want + ["train.py"]
    assert "args" not in t


def test_entry_point_and_arguments_come_from_target_torchrun(check_spec):
    """The keys target trainjob leaves out are target torchrun's (target.toml's `inherits`)."""
    r = check_spec(spec(nodes=2, mesh="dp = 16", train="zero = 3", target={"torchrun": 'entrypoint = "pretrain.py"; '
                                                                      'args = ["--lr", "3e-4"]; max_restarts = 1',
                                                         "trainjob": 'name = "run"'}), ("trainjob",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    t = manifest(r)[1]["spec"]["trainer"]
    assert t["command"][-1] == "pretrain.py" and t["args"] == ["--lr", "3e-4"]
    assert at(t["command"], "--max-restarts") == "1" and at(t["command"], "--rdzv-backend") == "c10d"


def test_a_dollar_in_a_value_stays_literal(check_spec):
    """The kubelet substitutes $(NAME) in the command and args; a value's own `$` is `$$`."""
    r = check_spec(spec(target={"trainjob": 'entrypoint = "run$(HOME).py"; args = ["--x=$(USER)"]'}), ("trainjob",))
    t = manifest(r)[1]["spec"]["trainer"]
    assert t["command"][-1] == "run$$(HOME).py" and t["args"] == ["--x=$$(USER)"]


def test_settings_reach_the_manifest(check_spec):
    body = (TJ + '; name = "pretrain"; namespace = "ml"; runtime = "torch-h100"; runtime_kind = TrainingRuntime; '
            'image = "registry.local/train:1"; cpu = 96; memory = 1TiB; shm_size = 64GiB; '
            'rdma_resource = "rdma/hca"; rdma_devices = 2')
    r = check_spec(spec(nodes=2, mesh="dp = 16", train="zero = 3", target={"trainjob": body}), ("trainjob",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    [cm, job] = manifest(r)
    assert (job["metadata"], cm["metadata"]) == ({"name": "pretrain", "namespace": "ml"},
                                                 {"name": "pretrain-plan", "namespace": "ml"})
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                         "name": "torch-h100"}
    t = job["spec"]["trainer"]
    assert t["image"] == "registry.local/train:1"
    assert t["resourcesPerNode"] == {"requests": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": 8, "rdma/hca": 2},
                                     "limits": {"nvidia.com/gpu": 8, "rdma/hca": 2}}
    [patch] = job["spec"]["runtimePatches"]
    [rj] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rj["template"]["spec"]["template"]["spec"]
    assert patch["manager"] == "parc/compile" and rj["name"] == "node"
    assert pod["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert pod["volumes"][1] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    assert pod["volumes"][0]["configMap"] == {"name": "pretrain-plan"}


def test_output_is_the_same_on_every_run(check_spec):
    from parc.targets import trainjob

    r = check_spec(spec(nodes=4, mesh="dp = 4; tp = 8", target={"trainjob": TJ}), ("trainjob",))
    assert trainjob.build(r.plan) == trainjob.build(r.plan)


# ------------------------------------------------------------------------------------ rules

def test_p680_trainjob_trains_only(check_spec):
    bad = spec(mesh="tp = 8", serve="max_model_len = 4096", target={"trainjob": TJ})
    assert_fires(check_spec, bad, "P680", "target trainjob", target="trainjob")
    assert_quiet(check_spec, spec(target={"trainjob": TJ}), "P680")


@pytest.mark.parametrize("key,value", [("name", "7b-train"), ("name", "a" * 41), ("namespace", "Training"),
                                       ("rdma_resource", "rdma shared"), ("runtime", "r" * 254)])
def test_p681_kubernetes_names(check_spec, key, value):
    bad = spec(target={"trainjob": f'{TJ}; {key} = "{value}"'})
    d = assert_fires(check_spec, bad, "P681", f"{key} =", target="trainjob")
    assert f"`{key}`" in d.message
    good = {"name": "train-7b", "namespace": "training", "rdma_resource": "rdma/rdma_shared_device_a",
            "runtime": "torch-distributed"}[key]
    assert_quiet(check_spec, bad.replace(f'"{value}"', f'"{good}"'), "P681")


def test_p682_multi_node_on_infiniband_asks_for_rdma(check_spec):
    bad = spec(nodes=2, mesh="dp = 16", train="zero = 3", target={"trainjob": TJ})
    assert_fires(check_spec, bad, "P682", "inter_node", severity="warning", target="trainjob")
    assert_quiet(check_spec, bad.replace(TJ, TJ + '; rdma_resource = "rdma/hca"'), "P682")
    assert_quiet(check_spec, spec(target={"trainjob": TJ}), "P682")   # one node: NVLink only


def test_p602_asks_for_the_entry_point(check_spec):
    d = assert_fires(check_spec, spec(target={"trainjob": 'name = "x"'}), "P602", "target trainjob",
                     target="trainjob")
    assert "entrypoint" in d.message


def test_parc_rules_lists_trainjob_and_torch_rules(capsys):
    from parc.cli.main import main

    assert main(["rules", "--target", "trainjob"]) == 0
    codes = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert {"P680", "P681", "P682", "P610"} <= codes
    assert "P661" not in codes and "P675" not in codes


def test_no_python_runs_the_entrypoint_as_a_program(check_spec):
    """`no_python = true` is torchrun's --no-python: the entry point is a program (`python3 -c ...`,
    as Kubeflow Trainer's multi-node example runs), not a Python script; set in target torchrun
    it reaches the TrainJob too (target.toml's `inherits`), and target torchrun's own launch."""
    from parc.targets import torchrun

    body = 'entrypoint = "python3"; args = ["-c", "print(1)"]; no_python = true'
    r = check_spec(spec(nodes=2, mesh="dp = 16", train="zero = 3", target={"trainjob": body}), ("trainjob",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    t = manifest(r)[1]["spec"]["trainer"]
    assert t["command"][-2:] == ["--no-python", "python3"] and t["args"] == ["-c", "print(1)"]
    r = check_spec(spec(nodes=2, mesh="dp = 16", train="zero = 3", target={"torchrun": body, "trainjob": ""}),
                   ("trainjob", "torchrun"))
    assert "--no-python" in manifest(r)[1]["spec"]["trainer"]["command"]
    launch = next(f.text for f in torchrun.build(r.plan) if f.path == "launch.sh")
    assert "--no-python" in launch
    r = check_spec(spec(nodes=2, mesh="dp = 16", target={"trainjob": TJ}), ("trainjob",))
    assert "--no-python" not in manifest(r)[1]["spec"]["trainer"]["command"]
