"""The megatron_deepspeed target: Megatron-DeepSpeed's own arguments and ds_config.json from the
plan (hand-computed), the launch under either runner, the fields it cannot say (P620), and its
own rules firing on the plans the fork cannot run and quiet on the same plans made valid."""
from __future__ import annotations

import json
from pathlib import Path

from backends_support import run_emitted, write_out
from support.launched import options
from support.specs import assert_fires, assert_quiet, spec

T = ("megatron_deepspeed",)
L8 = "from = llama3_8b; seq_len = 1024"   # 8 KV heads, vocab 128256, RoPE base 500000


def _files(check_spec, text):
    from parc.targets import megatron_deepspeed

    r = check_spec(text, T)
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    return {f.path: f for f in megatron_deepspeed.build(r.plan)}


def test_deepspeed_runner_with_pipeline(check_spec, tmp_path):
    files = _files(check_spec, spec(L8, gpn=8, mesh="pp = 2; dp = 2; tp = 2",
                                    schedule="micro_batch = 2; global_batch = 64", train="zero = 1",
                                    target={"megatron_deepspeed": ""}))
    rec = run_emitted(write_out(list(files.values()), tmp_path / "out") / "launch.sh", tmp_path)
    argv = rec["deepspeed"]
    i = argv.index("pretrain_gpt.py")
    launcher, o = options(argv[:i]), options(argv[i + 1:])
    assert (launcher["--num_nodes"], launcher["--num_gpus"]) == ("1", "8")
    assert (o["--tensor-model-parallel-size"], o["--pipeline-model-parallel-size"]) == ("2", "2")
    assert "--no-pipeline-parallel" not in o and o["--deepspeed"] is True and o["--zero-stage"] == "1"
    assert (o["--num-key-value-heads"], o["--rotary-position-embeddings-theta"]) == ("8", "500000")
    # NullTokenizer adds its end-of-document token: 128255 + 1 = 128256, padded to a multiple of 128 · 2
    assert (o["--tokenizer-type"], o["--vocab-size"]) == ("NullTokenizer", "128255")
    assert o["--normalization"] == "rmsnorm" and "--use-rotary-position-embeddings" in o
    cfg = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    assert o["--deepspeed_config"].endswith("/ds_config.json")
    # dp = 8 / (2 · 2) = 2; accumulation = 64 / (2 · 2) = 16; no AutoTP or pipeline keys (the fork's own)
    assert cfg == {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 16,
                   "bf16": {"enabled": True},
                   "zero_optimization": {"stage": 1, "overlap_comm": True, "contiguous_gradients": True,
                                         "reduce_bucket_size": 500000000}}


def test_torchrun_runner_without_pipeline(check_spec, tmp_path):
    files = _files(check_spec, spec(L8, gpn=8, mesh="dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 8",
                                    train="zero = 2; sequence_parallel = true; recompute = full",
                                    target={"megatron_deepspeed": 'runner = torchrun\n tokenizer = "tok.model"'}))
    rec = run_emitted(write_out(list(files.values()), tmp_path / "out") / "launch.sh", tmp_path)
    o = options(rec["torchrun"][rec["torchrun"].index("pretrain_gpt.py") + 1:])
    assert o["--no-pipeline-parallel"] is True and o["--sequence-parallel"] is True
    assert (o["--tokenizer-type"], o["--tokenizer-model"]) == ("GPTSentencePieceTokenizer", "tok.model")
    assert "--vocab-size" not in o
    assert (o["--recompute-granularity"], o["--recompute-method"], o["--recompute-num-layers"]) == ("full", "uniform", "1")
    assert rec["torchrun.env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"    # validate_args: sequence parallelism
    cfg = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    assert (cfg["train_batch_size"], cfg["gradient_accumulation_steps"], cfg["zero_optimization"]["stage"]) == (8, 2, 2)


def test_a_moe_model_is_refused_not_launched_dense(check_spec):
    d = assert_fires(check_spec, spec("from = mixtral_8x7b; seq_len = 1024", nodes=4, mesh="dp = 4; tp = 8",
                                      schedule="micro_batch = 1; global_batch = 16", train="zero = 3",
                                      target={"megatron_deepspeed": ""}),
                     "P620", "from = mixtral_8x7b", target="megatron_deepspeed", targets=T)
    assert "DeepSpeed-MoE" in d.message


def test_an_uneven_split_of_the_specs_own_is_refused_not_ignored(check_spec):
    """The fork's PipelineModule cuts the layers itself; a split the spec states that is not even
    cannot be said, and was dropped without a word."""
    text = spec(L8, mesh="pp = 4; dp = 2", placement="layers = [7, 9, 9, 7]",
                schedule="micro_batch = 1; global_batch = 32", train="zero = 1", target={"megatron_deepspeed": ""})
    d = assert_fires(check_spec, text, "P620", "layers = [7, 9, 9, 7]", target="megatron_deepspeed", targets=T)
    assert "[7, 9, 9, 7]" in d.message
    assert_quiet(check_spec, text.replace("[7, 9, 9, 7]", "[8, 8, 8, 8]"), "P620", targets=T)


# ---- rules: each fires on one spec and is quiet on the same spec made valid ----

def test_p698_kv_heads_are_split_never_replicated(check_spec):
    # 4 KV heads: tp = 8 replicates each twice in Megatron-LM; the fork stops
    text = spec(L8 + "; kv_heads = 4", mesh="tp = 8", schedule="micro_batch = 1; global_batch = 8", train="zero = 0",
                target={"megatron_deepspeed": ""})
    d = assert_fires(check_spec, text, "P698", "tp = 8", target="megatron_deepspeed", targets=T)
    assert "never replicates" in d.message
    assert_quiet(check_spec, text.replace("tp = 8", "dp = 2\n  tp = 4"), "P698", targets=T)
    r = check_spec(text.replace("target megatron_deepspeed", "target megatron"), ("megatron",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]     # Megatron-LM replicates them


def test_p699_no_dualpipe(check_spec):
    text = spec(L8, mesh="pp = 2; dp = 4", schedule="pipeline = dualpipe_v; virtual_stages = 2; micro_batch = 1; global_batch = 32",
                train="zero = 1", target={"megatron_deepspeed": ""})
    assert_fires(check_spec, text, "P699", "pipeline = dualpipe_v", target="megatron_deepspeed", targets=T)
    assert_quiet(check_spec, text.replace("dualpipe_v", "1f1b").replace("virtual_stages = 2", ""), "P699", targets=T)


def test_deepspeeds_own_refusals_come_along(check_spec):
    text = spec(L8, mesh="pp = 2; dp = 4", schedule="micro_batch = 1; global_batch = 32", train="zero = 2",
                target={"megatron_deepspeed": ""})
    assert_fires(check_spec, text, "P615", "zero = 2", target="deepspeed", targets=T)
    r = check_spec(text.replace("zero = 2", "zero = 1"), T)
    assert not r.errors, [(d.code, d.message) for d in r.errors]     # no P602 for a deepspeed block it lacks


def test_every_scheduler_runs_it_with_the_plan(check_spec, tmp_path):
    """slurm, kubernetes, trainjob and skypilot with `engine = megatron_deepspeed`: every node's
    pretrain_gpt.py is given the plan's degrees and batch, and its ds_config.json agrees."""
    import json as _json

    from parc.targets import get
    from support.launched import launched, split

    extra = {"kubernetes": 'image = "img"', "trainjob": 'image = "img"', "skypilot": ""}
    for wrapper in ("slurm", "kubernetes", "trainjob", "skypilot"):
        text = spec(L8, nodes=2, mesh="pp = 2; dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 32",
                    train="zero = 1", target={T[0]: "", wrapper: f"engine = megatron_deepspeed; {extra.get(wrapper, '')}"})
        r = check_spec(text, (wrapper,))
        assert not r.errors, (wrapper, [f"{d.code} {d.message}" for d in r.errors])
        files = get(wrapper).build(r.plan)
        plan = _json.loads(next(f.text for f in files if f.path.endswith("plan.json")))
        seen = 0
        for c in launched(wrapper, files, tmp_path / wrapper):
            if c["launcher"] != "torchrun":
                continue
            launcher, program = split(c["argv"], "torchrun")
            o = options(program[1:])
            assert program[0] == "pretrain_gpt.py" and o["--deepspeed"] is True, (wrapper, c["argv"])
            assert (launcher["--nnodes"], launcher["--nproc-per-node"]) == ("2", "8"), wrapper
            assert (o["--tensor-model-parallel-size"], o["--pipeline-model-parallel-size"]) == ("2", "2"), wrapper
            assert (o["--micro-batch-size"], o["--global-batch-size"], o["--zero-stage"]) == ("1", "32", "1"), wrapper
            cfg = _json.loads(Path(o["--deepspeed_config"]).read_text())
            # dp = 16 / (2 · 2) = 4: accumulation 32 / (1 · 4) = 8
            assert (cfg["train_batch_size"], cfg["gradient_accumulation_steps"]) == (32, 8), wrapper
            assert plan["mesh"]["dp"] == 4
            seen += 1
        assert seen >= 1, wrapper


def test_the_other_nodes_get_cuda_device_max_connections(check_spec, tmp_path):
    """The deepspeed launcher exports to the other nodes only NCCL_*, PYTHON*, UCX*, MV2*, MLFLOW*
    and its environment file's lines (runner.py EXPORT_ENVS, DS_ENV_FILE): the variable the fork's
    sequence parallelism asks for reaches them through the file."""
    files = _files(check_spec, spec(L8, nodes=2, mesh="pp = 2; dp = 4; tp = 2",
                                    schedule="micro_batch = 1; global_batch = 32",
                                    train="zero = 1; sequence_parallel = true", target={"megatron_deepspeed": ""}))
    assert files["deepspeed_env"].text == "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    d = write_out(list(files.values()), tmp_path / "out")
    (tmp_path / "hosts").write_text("a slots=8\nb slots=8\n")
    rec = run_emitted(d / "launch.sh", tmp_path, env={"HOSTFILE": str(tmp_path / "hosts")})
    assert Path(rec["deepspeed.env"]["DS_ENV_FILE"]) == d / "deepspeed_env"
    one = _files(check_spec, spec(L8, mesh="pp = 2; dp = 2; tp = 2", schedule="micro_batch = 1; global_batch = 32",
                                  train="zero = 1; sequence_parallel = true", target={"megatron_deepspeed": ""}))
    assert "deepspeed_env" not in one       # one node: launch.sh's own environment is every rank's


def test_a_megatron_deepspeed_plan_is_costed_as_deepspeeds_framework(check_spec):
    """The fork runs DeepSpeed's engine (its ZeRO, its gradient accumulation): explain and the planner
    cost its plans with frameworks.toml's `deepspeed` entry, not the default Megatron-LM's."""
    r = check_spec(spec(L8, gpn=8, mesh="pp = 2; dp = 2; tp = 2", schedule="micro_batch = 2; global_batch = 64",
                        train="zero = 1", target={"megatron_deepspeed": ""}), T)
    assert r.plan.train.framework == "deepspeed"
