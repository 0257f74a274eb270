"""P6xx target rules: each names its target and fires only when that target is asked for."""
from __future__ import annotations

from support.specs import assert_fires, assert_quiet, spec

L70 = "from = llama3_70b"
SERVE = "max_model_len = 4096"
MEG = {"megatron": 'entrypoint = "pretrain_gpt.py"'}
VLLM = {"vllm": 'model = "meta-llama/Meta-Llama-3-70B-Instruct"'}
TORCH = {"torchrun": 'entrypoint = "train.py"'}
TRAIN64 = "micro_batch = 1; global_batch = 64"


def test_p601_vllm_cannot_train(check_spec):
    bad = spec(mesh="dp = 8", schedule=TRAIN64, train="zero = 3", target={"vllm": 'model = "m"'})
    assert_fires(check_spec, bad, "P601", "target vllm", target="vllm")
    r = check_spec(bad)
    assert {d.code[:2] for d in r.errors} == {"P6"}
    assert_quiet(check_spec, spec(mesh="dp = 8", serve=SERVE, target={"vllm": 'model = "m"'}), "P601")


def test_p602_required_fields(check_spec):
    bad = spec(L70, mesh="tp = 8", serve=SERVE, target={"vllm": "port = 8000"})
    d = assert_fires(check_spec, bad, "P602", "target vllm", target="vllm")
    assert "`model`" in d.message and "model =" in d.help
    assert_quiet(check_spec, spec(L70, mesh="tp = 8", serve=SERVE, target=VLLM), "P602")
    d = assert_fires(check_spec, spec(mesh="dp = 8", schedule=TRAIN64, target={"torchrun": "max_restarts = 1"}),
                     "P602", "target torchrun", target="torchrun")
    assert "`entrypoint`" in d.message


def test_p602_target_asked_on_the_command_line(check_spec):
    text = spec(L70, mesh="tp = 8", serve=SERVE)
    r = check_spec(text, ("vllm",))
    d = [x for x in r.diagnostics if x.code == "P602"][0]
    assert d.target == "vllm" and "--target vllm" in d.message
    assert_quiet(check_spec, text, "P602")


def test_p602_slurm_and_kubernetes_take_torchruns_entry_point(check_spec):
    alone = spec(mesh="dp = 8", schedule=TRAIN64, target={"slurm": 'partition = "gpu"'})
    d = assert_fires(check_spec, alone, "P602", "target slurm", target="slurm")
    assert "target torchrun" in d.help
    both = spec(mesh="dp = 8", schedule=TRAIN64,
                target={"torchrun": 'entrypoint = "train.py"; args = ["--x"]', "slurm": 'partition = "gpu"'})
    assert_quiet(check_spec, both, "P602")
    r = check_spec(both)
    assert r.plan.target_settings("slurm") == {"partition": "gpu", "entrypoint": "train.py", "args": ["--x"]}
    # a block's own entry point wins over torchrun's
    own = spec(mesh="dp = 8", schedule=TRAIN64,
               target={"torchrun": 'entrypoint = "train.py"', "kubernetes": 'entrypoint = "k8s.py"'})
    assert check_spec(own).plan.target_settings("kubernetes")["entrypoint"] == "k8s.py"


def test_p603_megatron_cannot_serve(check_spec):
    bad = spec(L70, mesh="tp = 8", serve=SERVE, target=MEG)
    assert_fires(check_spec, bad, "P603", "target megatron", target="megatron")
    assert_quiet(check_spec, spec(mesh="dp = 8", schedule=TRAIN64, target=MEG), "P603")


def test_p604_vllm_virtual_stages(check_spec):
    bad = spec("from = llama3_405b", nodes=2, mesh="pp = 2; tp = 8", schedule="virtual_stages = 2", serve=SERVE,
               target=VLLM)
    assert_fires(check_spec, bad, "P604", "virtual_stages = 2", target="vllm")
    assert_quiet(check_spec, bad.replace("schedule {\n  virtual_stages = 2\n}\n", ""), "P604")


def test_p605_vllm_context_parallel_with_dp_is_accepted(check_spec):
    """vLLM 0.33 accepts prefill context parallel with dp > 1 (its create_engine_config does: see
    test_vllm_judge); what it needs is an MLA model: a warning for a model with no MLA shape, quiet
    for one with it (before, the rule warned whatever the model, though the MLA keys say it)."""
    text = spec("from = llama3_8b; max_positions = 131072", mesh="dp = 4; cp = 2", serve="max_model_len = 131072",
                target=VLLM)
    r = check_spec(text, ("vllm",))
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    d = assert_fires(check_spec, text, "P605", "cp = 2", target="vllm", severity="warning")
    assert "multi-head latent attention" in d.message and "refuses to start" in d.message
    assert_quiet(check_spec, text.replace("cp = 2", "tp = 2"), "P605")
    mla = text.replace("from = llama3_8b", "from = deepseek_v2_lite")
    assert check_spec(mla, ("vllm",)).plan.model.is_mla
    assert_quiet(check_spec, mla, "P605")


def test_p606_vllm_expert_parallel_size(check_spec):
    bad = spec("from = mixtral_8x7b", mesh="dp = 2; tp = 4; ep = 2", serve=SERVE, target=VLLM)
    d = assert_fires(check_spec, bad, "P606", "ep = 2", target="vllm")
    assert "ep = 8" in d.help
    assert_quiet(check_spec, bad.replace("ep = 2", "ep = 8"), "P606")
    d = assert_fires(check_spec, bad.replace("ep = 2", "ep = 4\n  etp = 2"), "P606", "etp = 2", target="vllm")


def test_p607_megatron_schedule(check_spec):
    bad = spec(L70, nodes=8, mesh="pp = 4; dp = 2; tp = 8",
               schedule="pipeline = zero_bubble; virtual_stages = 2; " + TRAIN64,
               train="zero = 1; sequence_parallel = true; recompute = full", target=MEG)
    assert_fires(check_spec, bad, "P607", "pipeline = zero_bubble", target="megatron")
    assert_quiet(check_spec, bad.replace("zero_bubble", "interleaved_1f1b"), "P607")
    assert_quiet(check_spec, bad.replace('target megatron {\n  entrypoint = "pretrain_gpt.py"\n}', ""), "P607")


def test_p608_megatron_rank_order(check_spec):
    bad = spec(nodes=2, mesh="tp = 2; dp = 8", schedule=TRAIN64, train="zero = 1; sequence_parallel = true",
               target=MEG)
    r = check_spec(bad)
    d = [x for x in r.diagnostics if x.code == "P608"][0]
    assert d.target == "megatron" and "dp, tp" in d.help
    assert_quiet(check_spec, bad.replace("tp = 2\n  dp = 8", "dp = 8\n  tp = 2"), "P608")


def test_p609_megatron_moe_with_tp_wants_sp(check_spec):
    bad = spec("from = mixtral_8x7b; seq_len = 4096", nodes=2, mesh="dp = 8; tp = 2; ep = 8; etp = 2",
               schedule="micro_batch = 1; global_batch = 256", train="zero = 1; recompute = full", target=MEG)
    assert_fires(check_spec, bad, "P609", "train {", severity="warning", target="megatron")
    assert_quiet(check_spec, bad.replace("zero = 1", "zero = 1\n  sequence_parallel = true"), "P609")


def test_p610_torch_tied_embeddings_with_pipeline(check_spec):
    model = "layers = 16; hidden = 2048; heads = 16; ffn_hidden = 8192; vocab = 32000; tied_embeddings = true"
    bad = spec(model, mesh="pp = 2; dp = 4", schedule=TRAIN64, target=TORCH)
    assert_fires(check_spec, bad, "P610", "pp = 2", target="torch")
    assert_quiet(check_spec, bad.replace("tied_embeddings = true", "tied_embeddings = false"), "P610")
    assert_quiet(check_spec, bad.replace('target torchrun {\n  entrypoint = "train.py"\n}', ""), "P610")


def test_p611_torch_runtime_runs_any_etp_and_torchtitan_none(check_spec):
    # parc's torch runtime builds Megatron-LM's expert grid (parc/runtime/mesh.py) for any etp that
    # P112 and P113 accept: etp = 2 with tp = 4 (ep · etp = 4 · 2 = 8 divides dp·cp·tp = 4·1·4 = 16)
    # is not refused (P611 used to refuse it, after torchtitan's TOML-era "ETP=TP or ETP=1")
    bad = spec("from = mixtral_8x7b; seq_len = 4096", nodes=2, mesh="dp = 4; tp = 4; ep = 4; etp = 2",
               schedule="micro_batch = 1; global_batch = 64", train="zero = 1; sequence_parallel = true",
               target=TORCH)
    assert_quiet(check_spec, bad, "P611")
    # torchtitan 0.3.0 has no expert tensor parallelism at all: P632, and P611 (its rule before
    # 0.3.0, rules.toml until = "0.3.0") is not in force for the release parc launches
    from parc.rules import in_force

    titan = bad.replace('target torchrun {\n  entrypoint = "train.py"\n}',
                        'target torchtitan {\n  module = "m"\n  config = "c"\n}')
    assert_fires(check_spec, titan, "P632", "etp = 2", target="torchtitan", targets=("torchtitan",))
    assert_quiet(check_spec, titan, "P611", targets=("torchtitan",))
    assert not in_force("P611", "torchtitan", "0.3.0") and in_force("P632", "torchtitan", "0.3.0")


def test_p612_megatron_moe_bias_needs_etp1(check_spec):
    model = ("layers = 8; hidden = 2048; heads = 16; ffn_hidden = 8192; vocab = 32000; experts = 8; top_k = 2; "
             "bias = true")
    bad = spec(model, mesh="dp = 4; tp = 2; ep = 4; etp = 2", schedule=TRAIN64,
               train="zero = 1; sequence_parallel = true", target=MEG)
    assert_fires(check_spec, bad, "P612", "etp = 2", target="megatron")
    assert_quiet(check_spec, bad.replace("bias = true", "bias = false"), "P612")


def test_p613_megatron_expert_dp_with_dp_outside_pp(check_spec):
    model = "from = mixtral_8x7b; seq_len = 4096"
    bad = spec(model, nodes=2, mesh="dp = 2; pp = 2; tp = 4; ep = 8", schedule=TRAIN64,
               train="zero = 1; sequence_parallel = true", target=MEG)
    d = assert_fires(check_spec, bad, "P613", "dp = 2", target="megatron")
    assert "expert dp = dp·cp·tp / (ep·etp) = 8 / 8 = 1" in d.message
    assert_quiet(check_spec, bad.replace("dp = 2\n  pp = 2", "pp = 2\n  dp = 2"), "P613")


def test_p614_vllm_multinode_context_parallel(check_spec):
    bad = spec(L70, nodes=2, mesh="cp = 4; tp = 4", serve="max_model_len = 131072", target=VLLM)
    assert_quiet(check_spec, bad, "P614")  # 1 · 1 · 4 = 4 divides 2 nodes
    bad = spec("from = llama3_8b", nodes=3, gpn=4, mesh="cp = 12", serve="max_model_len = 131072", target=VLLM)
    d = assert_fires(check_spec, bad, "P614", "cp = 12", target="vllm")
    assert "leaving out cp" in d.message


def test_p615_deepspeed_zero_with_pipeline(check_spec):
    text = spec(nodes=1, mesh="pp = 2; dp = 4", schedule=TRAIN64, train="zero = 2")
    assert_quiet(check_spec, text, "P615")
    d = assert_fires(check_spec, text, "P615", "zero = 2", target="deepspeed", targets=("deepspeed",))
    assert "ZeRO-2 and ZeRO-3 are incompatible" in d.message
    assert_quiet(check_spec, text.replace("zero = 2", "zero = 1"), "P615", targets=("deepspeed",))


def test_p601_p602_point_at_the_block_and_name_the_specs_model(check_spec):
    from support.specs import line_of

    # --target vllm without a block: P602 points at the model vLLM must load and suggests its own id
    text = "# Mixtral on one node\n" + spec("from = mixtral_8x7b", mesh="tp = 8", serve=SERVE)
    r = check_spec(text, ("vllm",))
    d = [x for x in r.diagnostics if x.code == "P602"][0]
    assert d.span.line == line_of(text, 'model "m"') != 1
    assert '"mistralai/Mixtral-8x7B-v0.1"' in d.help and "Llama-3-8B" not in d.help
    # a model of its own (no preset, or a preset with another shape) gets its own name, not a Llama id
    own = spec("from = llama3_8b; layers = 16", mesh="tp = 8", serve=SERVE, target={"vllm": "port = 8000"})
    d = assert_fires(check_spec, own, "P602", "target vllm", target="vllm")
    assert '"/path/to/m"' in d.help and 'model "m"' in d.help and "meta-llama" not in d.help
    # a preset as it is: the id its shape was read from
    d = assert_fires(check_spec, spec(L70, mesh="tp = 8", serve=SERVE, target={"vllm": "port = 8000"}),
                     "P602", "target vllm", target="vllm")
    assert '"meta-llama/Meta-Llama-3-70B"' in d.help
    # torchrun asked for with no block: the train block, whose script it would run
    train = spec(mesh="dp = 8", schedule=TRAIN64)
    d = [x for x in check_spec(train, ("torchrun",)).diagnostics if x.code == "P602"][0]
    assert d.span.line == line_of(train, "train {")
    # P601: a training spec checked with --target vllm points at its train block
    d = [x for x in check_spec(train, ("vllm",)).diagnostics if x.code == "P601"][0]
    assert d.span.line == line_of(train, "train {") != 1
