"""Megatron-LM: every emitted flag is one Megatron's parser defines, and what Megatron derives
from the arguments (dp, microbatches, the layer split, the padded vocabulary) equals the plan."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from backends_support import ROOT, accepted_cases, run_emitted, write_out

FLAGS = {ln.strip() for ln in (ROOT / "tests/data/flags/megatron-core-0.20.0.txt").read_text().splitlines()
         if ln.strip() and not ln.startswith("#")}
CASES = [(s, f) for s, t, f in accepted_cases() if t == "megatron"]


def _megatron_parser():
    p = argparse.ArgumentParser(add_help=False)
    for name, typ, default in [("--tensor-model-parallel-size", int, 1), ("--pipeline-model-parallel-size", int, 1),
                               ("--context-parallel-size", int, 1), ("--expert-model-parallel-size", int, 1),
                               ("--expert-tensor-parallel-size", int, None), ("--micro-batch-size", int, None),
                               ("--global-batch-size", int, None), ("--num-layers", int, None),
                               ("--num-virtual-stages-per-pipeline-rank", int, None),
                               ("--decoder-first-pipeline-num-layers", int, None),
                               ("--decoder-last-pipeline-num-layers", int, None),
                               ("--pipeline-model-parallel-layout", str, None), ("--vocab-size", int, None),
                               ("--make-vocab-size-divisible-by", int, 128), ("--num-experts", int, None)]:
        p.add_argument(name, type=typ, default=default)
    return p


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """(spec, plan, torchrun argv, megatron argv, env) for node 0 of every accepted case."""
    pytest.importorskip("torch", reason="torch's own torchrun parser reads the emitted command line")
    from torch.distributed.run import get_args_parser

    out = []
    for spec, files in CASES:
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        d = write_out(files, tmp / "out")
        got = run_emitted(d / "launch.sh", tmp, "0")
        targs = get_args_parser().parse_args(got["torchrun"])
        plan = json.loads((d / "plan.json").read_text())
        out.append((spec, plan, targs, targs.training_script_args, got["torchrun.env"]))
    return out


def test_cases_cover_the_features():
    specs = {s for s, _ in CASES}
    assert {"examples/gpt3-175b-train.par", "examples/mixtral-8x7b-ep-train.par",
            "examples/custom-uneven-pipeline.par", "tests/data/specs/megatron-layout.par"} <= specs


def test_every_flag_is_megatrons(launched):
    for spec, plan, targs, margs, env in launched:
        unknown = [a for a in margs if a.startswith("--") and a not in FLAGS]
        assert not unknown, f"{spec}: {unknown}"
        assert targs.training_script == plan["targets"].get("megatron", {}).get("settings", {}).get(
            "entrypoint", "pretrain_gpt.py")


def test_derived_dp_and_microbatches_equal_the_plan(launched):
    for spec, plan, targs, margs, env in launched:
        a, _ = _megatron_parser().parse_known_args(margs)
        world = int(targs.nnodes) * int(targs.nproc_per_node)
        tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size
        assert world % (tp * pp * cp) == 0, spec                      # MEG-01
        dp = world // (tp * pp * cp)
        assert dp == plan["mesh"]["dp"], spec
        assert a.global_batch_size % (a.micro_batch_size * dp) == 0   # MEG-28
        assert a.global_batch_size // (a.micro_batch_size * dp) == plan["schedule"]["microbatches"], spec
        if a.num_experts:
            etp = a.expert_tensor_parallel_size
            assert etp is not None, "etp always explicit for MoE"
            assert world % (etp * a.expert_model_parallel_size * pp) == 0   # MEG-02
            assert a.num_experts % a.expert_model_parallel_size == 0        # MEG-05
        fsdp = "--use-megatron-fsdp" in margs
        # MEG-36: 1 with tp or cp; Megatron-FSDP asserts it is not 1 (validate_args)
        assert ("CUDA_DEVICE_MAX_CONNECTIONS" in env) == ((tp > 1 or cp > 1) and not fsdp), spec
        if "CUDA_DEVICE_MAX_CONNECTIONS" in env:
            assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
        if fsdp:   # Megatron-FSDP only supports the fsdp_dtensor checkpoint format
            assert margs[margs.index("--ckpt-format") + 1] == "fsdp_dtensor", spec


def _megatron_layers(a) -> list[int]:
    """Layers per virtual stage (in stage order) as Megatron-LM builds them from its arguments."""
    L, pp = a.num_layers, a.pipeline_model_parallel_size
    if a.pipeline_model_parallel_layout:
        return [s.count("t") for s in a.pipeline_model_parallel_layout.split("|")]
    v = a.num_virtual_stages_per_pipeline_rank or 1
    if a.decoder_first_pipeline_num_layers is not None:
        first, last = a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers
        mid = (L - first - last) // (pp - 2) if pp > 2 else 0
        assert pp <= 2 or (L - first - last) % (pp - 2) == 0               # MEG-24
        ranks = [first] + [mid] * (pp - 2) + [last]
    else:
        assert L % pp == 0                                                  # MEG-19
        ranks = [L // pp] * pp
    assert all(n % v == 0 for n in ranks)
    return [ranks[s % pp] // v for s in range(pp * v)]


def test_layer_split_equals_the_plan(launched):
    for spec, plan, targs, margs, env in launched:
        a, _ = _megatron_parser().parse_known_args(margs)
        want = plan["placement"]["layers"]
        if a.pipeline_model_parallel_size == 1:
            continue
        assert _megatron_layers(a) == want, spec
        assert sum(want) == a.num_layers


def test_uneven_splits_use_first_last_or_layout(launched):
    by = {spec: margs for spec, _, _, margs, _ in launched}
    assert "--decoder-first-pipeline-num-layers" in by["examples/custom-uneven-pipeline.par"]
    lay = by["tests/data/specs/megatron-layout.par"]
    assert lay[lay.index("--pipeline-model-parallel-layout") + 1] == "Ettttt|tttttt|ttttttt|ttttttL"
    assert "--num-virtual-stages-per-pipeline-rank" not in lay            # MEG-20: one of them only
    assert "--use-tp-pp-dp-mapping" in lay
    gpt = by["examples/gpt3-175b-train.par"]
    assert gpt[gpt.index("--num-virtual-stages-per-pipeline-rank") + 1] == "2"


def test_vocab_is_not_padded(launched):
    for spec, plan, targs, margs, env in launched:
        a, _ = _megatron_parser().parse_known_args(margs)
        step = a.make_vocab_size_divisible_by * a.tensor_model_parallel_size
        padded = -(-a.vocab_size // step) * step                           # MEG-10
        assert a.vocab_size == plan["model"]["vocab"]
        assert padded == plan["model"]["vocab"], spec


def test_model_flags_follow_the_model(launched):
    by = {spec: (plan, margs) for spec, plan, _, margs, _ in launched}
    plan, m = by["examples/mixtral-8x7b-ep-train.par"]
    for flag, value in [("--num-experts", "8"), ("--moe-router-topk", "2"), ("--expert-model-parallel-size", "8"),
                        ("--expert-tensor-parallel-size", "2"), ("--num-query-groups", "8")]:
        assert m[m.index(flag) + 1] == value
    assert {"--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--sequence-parallel",
            "--use-distributed-optimizer", "--bf16", "--group-query-attention"} <= set(m)
    plan, g = by["examples/gpt3-175b-train.par"]
    assert "--swiglu" not in g and "--disable-bias-linear" not in g
    assert g[g.index("--position-embedding-type") + 1] == "learned_absolute"
    assert g[g.index("--normalization") + 1] == "LayerNorm"
    plan, f = by["examples/llama3-8b-fsdp.par"]
    assert {"--use-megatron-fsdp", "--use-distributed-optimizer"} <= set(f)


def test_explain_reports_the_same_dp_and_microbatches(launched):
    from parc.cost import estimate as costmodel

    estimate = getattr(costmodel, "estimate", None)
    if estimate is None:
        pytest.skip("parc.cost.estimate.estimate does not exist yet")
    from parc.model.plan import plan_from_dict

    for spec, plan, targs, margs, env in launched:
        a, _ = _megatron_parser().parse_known_args(margs)
        world = int(targs.nnodes) * int(targs.nproc_per_node)
        dp = world // (a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size)
        j = estimate(plan_from_dict(plan)).to_json()
        j = json.loads(j) if isinstance(j, str) else j
        assert j["mesh"]["dp"] == dp, spec
        assert j["microbatches"] == a.global_batch_size // (a.micro_batch_size * dp), spec


FSDP_TP = """
model "m" {{ from = llama3_8b }}
cluster "c" {{
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
}}
mesh {{
  dp = {dp}
  tp = {tp}
}}
schedule {{
  micro_batch  = 1
  global_batch = 64
}}
train {{ zero = {zero} }}
target megatron {{ extra_args = ["--mock-data", "--tokenizer-type", "NullTokenizer"] }}
"""


@pytest.mark.parametrize("dp,tp,zero", [(8, 1, 3), (4, 2, 3), (4, 2, 1)])
def test_fsdp_launch_passes_megatrons_checks(dp, tp, zero, write_spec, tmp_path):
    """Megatron-LM's validate_args: with --use-megatron-fsdp, CUDA_DEVICE_MAX_CONNECTIONS must
    not be 1 (even when the user's shell exports it) and --ckpt-format must be fsdp_dtensor;
    without FSDP, tp > 1 needs it to be 1."""
    from parc.cli.compile import compile_spec

    spec = write_spec(FSDP_TP.format(dp=dp, tp=tp, zero=zero))
    r, _, files = compile_spec(str(spec), "megatron")
    assert files is not None, [d.message for d in r.diagnostics]
    d = write_out(files, tmp_path / "out")
    got = run_emitted(d / "launch.sh", tmp_path, "0", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    env, margs = got["torchrun.env"], got["torchrun"]
    if zero == 3:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1"
        assert margs[margs.index("--ckpt-format") + 1] == "fsdp_dtensor"
    else:
        assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and "--ckpt-format" not in margs
    warned = [x for x in r.diagnostics if x.code == "P656"]
    assert len(warned) == (1 if zero == 3 and tp > 1 else 0)
    if warned:
        assert warned[0].severity == "warning" and "tp = 2" in warned[0].message
        assert spec.read_text().splitlines()[warned[0].span.line - 1].startswith("train")


def test_hf_tokenizer_always_has_its_model(launched):
    """Megatron-LM's HuggingFaceTokenizer loads --tokenizer-model; no launch names it without."""
    seen = 0
    for spec, plan, targs, margs, env in launched:
        if "HuggingFaceTokenizer" in margs:
            seen += 1
            assert "--tokenizer-model" in margs, spec
    assert seen >= 1


def test_rotary_base_follows_the_model(launched):
    """--rotary-base is the model's rope_theta (Megatron's own default, 10000, is Llama 2's)."""
    by = {spec: margs for spec, _, _, margs, _ in launched}
    for spec, want in [("examples/llama3-70b-train.par", "500000"), ("examples/mixtral-8x7b-ep-train.par", "1000000")]:
        m = by[spec]
        assert m[m.index("--rotary-base") + 1] == want, spec
    assert "--rotary-base" not in by["examples/gpt3-175b-train.par"]        # learned positions
    for spec, plan, targs, margs, env in launched:
        a, _ = _megatron_parser().parse_known_args(margs)
        mpe = int(margs[margs.index("--max-position-embeddings") + 1])
        assert mpe >= int(margs[margs.index("--seq-length") + 1]), spec     # MEG-41


TOKENIZER = """
model "m" {{
  from    = llama3_8b
  seq_len = 2048
{model}
}}
cluster "c" {{
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
}}
mesh {{ dp = 8 }}
schedule {{
  micro_batch  = 1
  global_batch = 64
}}
train {{ zero = 1 }}
target megatron {{
{target}
}}
"""


@pytest.mark.parametrize("model,target,code,want", [
    ("", '  extra_args = ["--tokenizer-type", "HuggingFaceTokenizer"]', "P657", None),
    ("", '  tokenizer = "meta-llama/Meta-Llama-3-8B"\n  extra_args = ["--tokenizer-model", "x"]', "P025", None),
    ("", '  extra_args = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/t"]', None,
     {"--tokenizer-model": "/t", "--rotary-base": "500000"}),
    ("  rope_theta = 1M", '  tokenizer = "meta-llama/Meta-Llama-3-8B"', None,
     {"--tokenizer-type": "HuggingFaceTokenizer", "--tokenizer-model": "meta-llama/Meta-Llama-3-8B",
      "--rotary-base": "1000000"}),
])
def test_tokenizer_and_rope_from_the_spec(model, target, code, want, write_spec, tmp_path):
    from parc.cli.compile import compile_spec

    spec = write_spec(TOKENIZER.format(model=model, target=target))
    r, _, files = compile_spec(str(spec), "megatron")
    if code:
        errs = [d for d in r.errors if d.code == code]
        assert files is None and errs, [d.message for d in r.diagnostics]
        assert "extra_args" in spec.read_text().splitlines()[errs[0].span.line - 1]
        if "tokenizer =" not in target:
            assert 'tokenizer = "meta-llama/Meta-Llama-3-8B"' in errs[0].help
        return
    assert files is not None, [d.message for d in r.diagnostics]
    d = write_out(files, tmp_path / "out")
    argv = run_emitted(d / "launch.sh", tmp_path, "0")["torchrun"]
    for flag, value in want.items():
        assert argv[argv.index(flag) + 1] == value
