"""The wrappers (slurm, kubernetes, trainjob, skypilot, lws) and the engines they run
(parc/targets/engines.py): which engine a plan runs, that the engine's rules judge the plan under
the wrapper, the engine's launch on each node, and the wrapper rules P617 and P618 (and P600's
several servers), each firing on one spec and quiet on the same spec made valid.
tests/test_launch_carries_plan.py reads the degrees back from every launch."""
from __future__ import annotations

import json

import pytest
import yaml

from backends_support import run_emitted, write_out
from support.specs import assert_fires, assert_quiet, spec

TRAIN = 'entrypoint = "train.py"'
SERVE = "max_model_len = 4096"
MEGATRON = 'tokenizer = "meta-llama/Meta-Llama-3-8B"'


# --- which engine -------------------------------------------------------------------------------
# (wrapper, its block's settings, the spec's target blocks, mode) -> the engine it runs
ENGINES = [
    ("slurm", {}, ["torchrun"], "train", "torchrun"),
    ("slurm", {}, ["megatron"], "train", "megatron"),                    # the spec's one engine block
    ("slurm", {}, [], "train", "torchrun"),                              # none: the default to train
    ("slurm", {}, [], "serve", "vllm"),                                  # ... and to serve
    ("slurm", {}, ["sglang"], "serve", "sglang"),
    ("slurm", {}, ["megatron", "torchrun"], "train", "torchrun"),        # several: the default (P618 warns)
    ("slurm", {}, ["megatron", "torchtitan"], "train", "torchtitan"),    # several, no default (P618 refuses)
    ("slurm", {"engine": "megatron"}, ["megatron", "torchrun"], "train", "megatron"),
    ("slurm", {"entrypoint": "t.py"}, ["megatron"], "train", "torchrun"),  # its own script is torchrun's (P618)
    ("kubernetes", {}, ["deepspeed"], "train", "deepspeed"),
    ("trainjob", {}, ["torchtitan"], "train", "torchtitan"),
    ("trainjob", {}, ["vllm"], "serve", None),                           # trainjob runs nothing that serves
    ("skypilot", {}, ["vllm", "megatron"], "serve", "vllm"),             # blocks of the plan's mode count
    ("lws", {}, ["sglang"], "serve", "sglang"),
    ("lws", {"engine": "vllm"}, ["sglang"], "serve", "vllm"),
]


@pytest.mark.parametrize("wrapper,own,blocks,mode,want", ENGINES)
def test_the_engine_a_wrapper_runs(wrapper, own, blocks, mode, want):
    from parc.model.targets import engine

    assert engine(wrapper, own, mode, blocks + [wrapper]) == want


def test_the_engines_rules_judge_the_plan_under_the_wrapper(check_spec):
    """A wrapper brings the engine it runs as a rule family: Megatron-LM's rank-order rule under
    slurm, DeepSpeed's context-parallel rule under trainjob, torchtitan's config rule under
    kubernetes and SGLang's under skypilot fire at the plan, though the spec names no block of
    them; with another engine they stay quiet."""
    cases = [
        ("P608", spec(mesh="tp = 2; dp = 4", target={"slurm": "engine = megatron"}), "dp = 4", "megatron",
         {"slurm": "engine = torchrun", "torchrun": TRAIN}),
        ("P686", spec(mesh="cp = 2; dp = 4", model="from = llama3_8b; seq_len = 1024",
                      schedule="micro_batch = 1; global_batch = 32",
                      target={"trainjob": "engine = deepspeed", "torchrun": TRAIN}), "cp = 2", "deepspeed",
         {"trainjob": "engine = torchrun", "torchrun": TRAIN}),
    ]
    for code, text, at, engine, other in cases:
        wrapper = next(iter(k for k in ("slurm", "trainjob") if f"target {k}" in text))
        assert_fires(check_spec, text, code, at, target=engine, targets=(wrapper,))
        quiet = text[:text.index("target ")] + "".join(f"target {k} {{\n  {v}\n}}\n" for k, v in other.items())
        assert_quiet(check_spec, quiet, code, targets=(wrapper,))
    custom = ('layers = 8; hidden = 1024; heads = 16; kv_heads = 8; ffn_hidden = 4096; vocab = 32000; '
              'seq_len = 2048')
    text = spec(model=custom, mesh="dp = 8", target={"kubernetes": 'engine = torchtitan; image = "img:1"'})
    r = check_spec(text, ("kubernetes",))
    assert "P631" in {d.code for d in r.errors}, [(d.code, d.message) for d in r.diagnostics]
    text = spec(mesh="cp = 2; tp = 4", serve=SERVE, target={"sglang": 'model = "m"', "skypilot": "engine = sglang"})
    assert "P692" in {d.code for d in check_spec(text, ("skypilot",)).errors}
    assert "P692" not in {d.code for d in check_spec(text.replace("engine = sglang", "engine = vllm")
                                                     .replace("target sglang", "target vllm"), ("skypilot",)).errors}


# --- P617 ---------------------------------------------------------------------------------------
def test_p617_an_engine_that_cannot_run_the_mode(check_spec):
    text = spec(mesh="tp = 8", serve=SERVE, target={"vllm": 'model = "m"', "slurm": "engine = megatron"})
    d = assert_fires(check_spec, text, "P617", "engine = megatron", target="slurm", targets=("slurm",))
    assert "Megatron-LM trains: this spec serves" in d.message and "`engine = vllm` or `engine = sglang`" in d.help
    assert_quiet(check_spec, text.replace("engine = megatron", "engine = vllm"), "P617", targets=("slurm",))


def test_p617_a_wrapper_key_the_engine_would_drop(check_spec):
    text = spec(mesh="tp = 2; dp = 4", target={"megatron": MEGATRON, "slurm": 'engine = megatron\n  args = ["--x"]'})
    d = assert_fires(check_spec, text, "P617", "args", target="slurm", targets=("slurm",))
    assert "would be dropped" in d.message and "`engine = torchrun`" in d.help
    assert_quiet(check_spec, text.replace('  args = ["--x"]\n', ""), "P617", targets=("slurm",))
    # the same key in target torchrun's own block is torchrun's: nothing to drop under megatron
    moved = text.replace('  args = ["--x"]\n', "") + 'target torchrun {\n  args = ["--x"]\n}\n'
    assert_quiet(check_spec, moved, "P617", targets=("slurm",))


# --- P618 ---------------------------------------------------------------------------------------
def test_p618_several_engine_blocks_and_the_default_among_them(check_spec):
    text = spec(mesh="tp = 2; dp = 4", target={"megatron": MEGATRON, "torchrun": TRAIN, "slurm": 'partition = "gpu"'})
    d = assert_fires(check_spec, text, "P618", "target slurm", severity="warning", target="slurm", targets=("slurm",))
    assert "it runs torchrun's (its default)" in d.message
    assert d.help == "say which in `target slurm { ... }`: `engine = torchrun` or `engine = megatron`"
    assert_quiet(check_spec, text.replace('partition = "gpu"', "engine = megatron"), "P618", targets=("slurm",))
    # without a block of its own (--target slurm), it points at the block of the engine it runs
    text = spec(mesh="tp = 2; dp = 4", target={"megatron": MEGATRON, "torchrun": TRAIN})
    assert_fires(check_spec, text, "P618", "target torchrun", severity="warning", target="slurm", targets=("slurm",))


def test_p618_several_engine_blocks_without_the_default(check_spec):
    text = spec(mesh="dp = 8", target={"megatron": MEGATRON, "torchtitan": "", "skypilot": 'name = "x"'})
    d = assert_fires(check_spec, text, "P618", "target skypilot", target="skypilot", targets=("skypilot",))
    assert "cannot tell which to run" in d.message
    assert_quiet(check_spec, text.replace('name = "x"', "engine = torchtitan"), "P618", targets=("skypilot",))


# --- P602 and P650 follow the engine ---------------------------------------------------------------
def test_p602_asks_for_the_script_only_when_the_wrapper_runs_torchrun(check_spec):
    text = spec(mesh="tp = 2; dp = 4", target={"slurm": 'partition = "gpu"'})
    assert_fires(check_spec, text, "P602", "target slurm", target="slurm", targets=("slurm",))
    assert_quiet(check_spec, text + f"target megatron {{\n  {MEGATRON}\n}}\n", "P602", targets=("slurm",))
    # a DeepSpeed launch asks for DeepSpeed's script, at its own block
    text = spec(mesh="dp = 8", target={"deepspeed": 'hosts = ["a"]', "trainjob": "engine = deepspeed"})
    assert_fires(check_spec, text, "P602", "target deepspeed", target="deepspeed", targets=("trainjob",))


def test_p650_suggests_the_engines_image(check_spec):
    text = spec(mesh="tp = 8", serve=SERVE, target={"sglang": 'model = "m"', "kubernetes": 'name = "x"'})
    d = assert_fires(check_spec, text, "P650", "target kubernetes", target="kubernetes", targets=("kubernetes",))
    assert 'image = "lmsysorg/sglang:v0.5.23"' in d.help and "SGLang" in d.help


def test_p600_several_sglang_servers_are_no_pytorchjob(check_spec):
    # dp 2 replicas of tp 8 on two nodes: two SGLang servers (SGLang refuses --dp-size with --nnodes)
    text = spec(nodes=2, mesh="dp = 2; tp = 8", serve=SERVE,
                target={"sglang": 'model = "m"', "kubernetes": 'image = "img:1"'})
    d = assert_fires(check_spec, text, "P600", "dp = 2", target="kubernetes", targets=("kubernetes",))
    assert "2 servers of 1 node each" in d.message and "lws" in d.help
    assert_quiet(check_spec, text.replace("dp = 2; tp = 8", "pp = 2; tp = 8").replace("dp = 2\n  tp = 8", "pp = 2\n  tp = 8"),
                 "P600", targets=("kubernetes",))


# --- the engine's launch on each node --------------------------------------------------------------
def _build(check_spec, text, target):
    from parc.targets import get

    r = check_spec(text, (target,))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    return r, get(target).build(r.plan)


def test_deepspeed_under_a_scheduler_starts_every_node_itself(check_spec, tmp_path):
    """Each node runs DeepSpeed's launcher with --no_ssh and its own node rank (runner.py hands
    it to launch.py, which picks the node's GPUs from the world info by rank), node 0's address
    from the scheduler, and the deepspeed target's config; the hostfile only gives each node's
    slots."""
    from parc.targets import deepspeed

    text = spec(model="from = llama3_8b; seq_len = 1024", nodes=2, mesh="dp = 16",
                schedule="micro_batch = 1; global_batch = 32", target={"deepspeed": TRAIN + "; master_port = 29611"})
    r, files = _build(check_spec, text, "slurm")
    d = write_out(files, tmp_path / "out")
    assert (d / "ds_config.json").read_text() == deepspeed.config_json(r.plan)
    assert (d / "hostfile").read_text() == "node-0 slots=8\nnode-1 slots=8\n"
    for k in (0, 1):
        argv = run_emitted(d / "launch.sh", tmp_path, str(k), env={"MASTER_ADDR": "gpu000"})["deepspeed"]
        assert argv[:12] == ["--hostfile", f"{d}/hostfile", "--no_ssh", "--node_rank", str(k), "--master_addr",
                             "gpu000", "--master_port", "29611", "--num_nodes", "2", "--num_gpus"]
        assert argv[-3:] == ["--deepspeed", "--deepspeed_config", f"{d}/ds_config.json"]


def test_torchtitan_under_kubernetes_is_the_torchtitan_targets_launch(check_spec, tmp_path):
    """The pod runs torchtitan's own launch.sh from the ConfigMap with the operator's RANK: the
    same torchrun argv, node by node, as the torchtitan target's script."""
    from parc.targets import torchtitan

    text = spec(nodes=2, mesh="dp = 8; tp = 2", schedule="micro_batch = 1; global_batch = 64",
                target={"torchtitan": "", "kubernetes": 'image = "img:1"'})
    r, files = _build(check_spec, text, "kubernetes")
    docs = list(yaml.safe_load_all(files[0].text))
    cm = docs[0]["data"]
    own = write_out(torchtitan.build(r.plan), tmp_path / "tt")
    assert cm["launch.sh"] == (own / "launch.sh").read_text()
    job = docs[-1]["spec"]["pytorchReplicaSpecs"]
    assert [job[k]["template"]["spec"]["containers"][0]["command"] for k in ("Master", "Worker")] == \
        [["bash", "/etc/parc/launch.sh", "$(RANK)"]] * 2


def test_an_engines_keys_reach_it_from_the_wrapper_only_for_torchrun(check_spec):
    """slurm's entrypoint and args are torchrun's: with engine torchrun they are the script each
    node starts; P617 keeps them from another engine."""
    from parc.targets.engines import launch

    text = spec(model="from = llama3_8b; seq_len = 1024", mesh="dp = 8", train="zero = 3",
                target={"slurm": 'entrypoint = "mine.py"; args = ["--lr", "1"]'})
    r = check_spec(text, ("slurm",))
    assert not r.errors
    run = launch(r.plan, "slurm").runs[0]
    assert run.leader[0][run.args_from - 1:] == ("mine.py", "--lr", "1")


def test_lws_runs_the_spec_s_one_serving_engine(check_spec):
    text = spec(mesh="tp = 8", serve=SERVE, target={"sglang": 'model = "m"', "lws": 'name = "x"'})
    r, files = _build(check_spec, text, "lws")
    docs = list(yaml.safe_load_all(files[0].text))
    c = docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert c["command"][:3] == ["python3", "-m", "sglang.launch_server"] and c["image"].startswith("lmsysorg/sglang")
    assert json.loads(docs[0]["data"]["plan.json"])["targets"]["lws"]["settings"] == {"name": "x"}
