"""DeepSpeed itself judges parc's deepspeed launches: every launch parc emits for the examples and
test specs (the deepspeed target's, and each node's of every wrapper that runs DeepSpeed) runs
with a recording `deepspeed`, and its argv goes through DeepSpeed's own launcher
parser and hostfile reader and the config it names through DeepSpeed's DeepSpeedConfig
(tests/judges/deepspeed_judge.py); the degrees DeepSpeed derives must be the plan's. The other
way round, the specs parc refuses for DeepSpeed's reasons, built into a config and hostfile
anyway, are refused by DeepSpeed with the same message. All in an isolated virtual environment
that tests/judges/deepspeed_env.sh creates (never parc's own). The tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it).
PARC_DEEPSPEED_PYTHON names an existing environment's python instead."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends_support import ROOT, accepted_cases, run_emitted, write_out
from parc.model.targets import wrappers
from support import judges
from support.launched import engine_run, launched

JUDGES = ROOT / "tests" / "judges"
MARK = "@@deepspeed-judge "


@pytest.fixture(scope="module")
def ds_judge(tmp_path_factory):
    """One deepspeed_judge.py process for the module, fed one batch of launches a call."""
    proc = judges.start("deepspeed", "PARC_DEEPSPEED_PYTHON", tmp_path_factory.mktemp("judge") / "stderr",
                        env={"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0"})
    yield proc
    judges.stop(proc)


def _judge(proc, items: list) -> list[dict]:
    return judges.ask(proc, MARK, items)


def _launches(tmp_path_factory):
    """(spec, target, plan, judge item) for every deepspeed launch parc emits: the deepspeed
    target's, run with a recording launcher (where the spec names no hosts, HOSTFILE is a hostfile
    of the cluster's nodes), and every node's of each wrapper that runs DeepSpeed (a Slurm job, a
    TrainJob's pods, a PyTorchJob's, a SkyPilot task), as its tool starts it."""
    out = []
    for spec, t, files in accepted_cases():
        plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
        if t != "deepspeed" and not (t in wrappers() and engine_run(plan, t) == "deepspeed"):
            continue
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        for c in launched(t, files, tmp):
            if c["launcher"] == "deepspeed":
                out.append((spec, t, plan, {"argv": c["argv"], "cwd": str(tmp)}))
    return out


@pytest.mark.deepspeed
def test_deepspeed_accepts_what_parc_emits(ds_judge, tmp_path_factory):
    launches = _launches(tmp_path_factory)
    assert len(launches) >= 4
    # DeepSpeed under the schedulers too: each node's own launcher (--no_ssh) under Slurm, a TrainJob...
    assert {"deepspeed", "slurm", "trainjob", "kubernetes", "skypilot"} <= {t for _, t, _, _ in launches}
    for (spec, target, plan, item), v in zip(launches, _judge(ds_judge, [i for *_, i in launches])):
        spec = f"{spec} --target {target}"
        assert v["ok"], f"{spec}: DeepSpeed refuses {item['argv']}: {v.get('stage')}: {v.get('error')}"
        m, cl, sc, t = plan["mesh"], plan["cluster"], plan["schedule"], plan["train"]
        assert (v["world"], v["nodes"], v["gpus_per_node"]) == (m["pp"] * m["dp"] * m["cp"] * m["tp"], cl["nodes"],
                                                                [cl["gpus_per_node"]]), spec
        # the data-parallel size DeepSpeed's engine uses: world / (pipeline stages · AutoTP)
        assert (v["engine_dp"], v["pp"], max(v["autotp"], 1)) == (m["dp"], m["pp"], m["tp"]), spec
        assert (v["micro"], v["gas"], v["zero"]) == (sc["micro_batch"], sc["microbatches"], t["zero"]), spec
        if m["tp"] == 1:   # train_batch_size is given: DeepSpeed checked it against its own dp
            assert v["config_world"] == m["dp"] and v["train_batch_size"] == sc["global_batch"], spec
        assert v["bf16"] == (t["precision"] in ("bf16", "fp8")) and v["fp16"] == (t["precision"] == "fp16"), spec
        settings = plan["targets"].get("deepspeed", {}).get("settings", {})
        if settings.get("hosts"):
            assert v["hosts"] == settings["hosts"], spec
            if target == "deepspeed":   # a scheduler gives node 0's address itself
                assert v["master_addr"] == settings["hosts"][0], spec


@pytest.mark.deepspeed
def test_deepspeed_refuses_what_it_should(ds_judge, tmp_path):
    """The judge itself refuses a wrong config, so an accepting verdict means something: 8 GPUs of
    data parallelism cannot make a batch of 8 from micro batches of 2 ("8 != 2 * 1 * 8")."""
    (tmp_path / "c.json").write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                                 "gradient_accumulation_steps": 1}))
    v = _judge(ds_judge, [{"argv": ["--num_gpus", "8", "t.py", "--deepspeed_config", str(tmp_path / "c.json")],
                           "cwd": str(tmp_path)}])[0]
    assert not v["ok"] and "8 != 2 * 1 * 8" in v["error"]


# ----------------------------------------------------------------------------------------------
# The other direction: what parc refuses for DeepSpeed's reasons, DeepSpeed refuses too, with the
# message parc quotes. The deepspeed target builds its files for the refused plan anyway.

L8 = "from = llama3_8b"
TARGET = 'entrypoint = "train.py"'
# (rule, spec arguments for support.specs.spec, what DeepSpeed answers)
REFUSED = [
    # 24 is no multiple of micro_batch · dp = 1 · 16: DeepSpeed derives 24 // 16 = 1 accumulation
    # step and its _batch_assertion fails on 24 != 1 · 1 · 16
    ("P201", dict(model=L8, nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 24",
                  target={"deepspeed": TARGET}), "24 != 1 * 1 * 16"),
    ("P615", dict(model=L8, gpn=8, mesh="pp = 2; dp = 4", schedule="micro_batch = 1; global_batch = 32",
                  train="zero = 2", target={"deepspeed": TARGET}),
     "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    ("P684", dict(model=L8, nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 32",
                  target={"deepspeed": TARGET + '; hosts = ["gpu-a", "gpu-a"]'}),
     "Hostfile contains multiple entries for gpu-a"),
]


@pytest.mark.deepspeed
def test_deepspeed_refuses_what_parc_refuses(ds_judge, check_spec, tmp_path):
    from parc.targets import deepspeed
    from support.specs import spec

    items = []
    for code, kw, _ in REFUSED:
        r = check_spec(spec(**kw), ("deepspeed",))
        assert code in {d.code for d in r.errors}, (code, [f"{d.code} {d.message}" for d in r.diagnostics])
        d = write_out(deepspeed.build(r.plan), tmp_path / code)
        env = {"HOSTFILE": str(d / "hostfile")} if not (d / "hostfile").exists() else {}
        if r.plan.cluster.nodes > 1 and env:
            (d / "hostfile").write_text("".join(f"n{k} slots=8\n" for k in range(r.plan.cluster.nodes)))
        got = run_emitted(d / "launch.sh", tmp_path / (code + "-run"), env=env)
        items.append({"argv": got["deepspeed"], "cwd": str(d)})
    for (code, _, says), v in zip(REFUSED, _judge(ds_judge, items)):
        assert not v["ok"] and says in v["error"], (code, v)
