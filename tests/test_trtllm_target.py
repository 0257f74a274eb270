"""The trtllm target: trtllm-serve's options and the LLM API YAML from the plan (every option in
trtllm-serve's own table, every YAML key one of the LLM API's), TensorRT-LLM's KV memory rule and
capacity scheduler in the cost model against hand-computed cases, and its rules firing on the
plans its launch cannot carry and quiet on the same plans made valid.

TensorRT-LLM cannot be installed here (its wheel needs CUDA), so its parser does not judge the
launch: the options are checked against NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py
@00209af1 (its click options, each spelling below) and the YAML's keys against
tensorrt_llm/llmapi/llm_args.py (TorchLlmArgs, KvCacheConfig, SchedulerConfig field names)."""
from __future__ import annotations

import os
import subprocess

import pytest

from support.specs import assert_fires, assert_quiet, spec

T = ("trtllm",)
GIB = 1 << 30
# trtllm-serve's click options (serve.py @00209af1): the spellings parc may write
SERVE_OPTIONS = {"--backend", "--host", "--port", "--tp_size", "--tensor_parallel_size", "--pp_size",
                 "--pipeline_parallel_size", "--ep_size", "--moe_expert_parallel_size", "--max_batch_size",
                 "--max_num_tokens", "--max_seq_len", "--kv_cache_free_gpu_memory_fraction",
                 "--free_gpu_memory_fraction", "--extra_llm_api_options", "--config"}
# the LLM API keys parc writes in the YAML, each a field of llm_args.py, with the values it takes
LLM_API = {"dtype": {"auto", "bfloat16", "float16", "float32"}, "enable_attention_dp": {True},
           "scheduler_config.capacity_scheduler_policy": {"GUARANTEED_NO_EVICT", "MAX_UTILIZATION"},
           "kv_cache_config.dtype": {"auto", "fp8"}}
FP8_70B = "from = llama3_3_70b; dtype = fp8; checkpoint_format = modelopt_fp8"
NIM = ("max_model_len = 8192; max_num_seqs = 256; max_num_batched_tokens = 8192; kv_cache_dtype = fp8; "
       "prompt_tokens = 5000; output_tokens = 500; concurrency = 100")


def _check(check_spec, text):
    r = check_spec(text, T)
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    return r.plan


def _files(plan):
    from parc.targets import trtllm

    return {f.path: f for f in trtllm.build(plan)}


def _run(files, tmp_path) -> list[str]:
    """serve.sh run with trtllm-serve replaced by a recorder: its argv."""
    out = tmp_path / "out"
    out.mkdir()
    for f in files.values():
        (out / f.path).write_text(f.text)
    rec = tmp_path / "trtllm-serve"
    rec.write_text('#!/usr/bin/env bash\nprintf \'%s\\0\' "$@" > "$ARGV"\n')
    rec.chmod(0o755)
    env = {**os.environ, "TRTLLM_SERVE": str(rec), "ARGV": str(tmp_path / "argv")}
    subprocess.run(["bash", str(out / "serve.sh")], env=env, check=True, timeout=60)
    return (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]


def _yaml_keys(text: str) -> dict:
    """The YAML's leaves as dotted keys (parc writes block YAML of at most two levels)."""
    import yaml

    def flat(d, pre=""):
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{pre}{k}.") if isinstance(v, dict) else {f"{pre}{k}": v})
        return out

    return flat(yaml.safe_load(text))


def test_serve_sh_writes_the_plans_options(check_spec, tmp_path):
    """The NIM deployment of Llama 3.3 70B on 2 H100: tp 2, the stated limits as trtllm-serve's
    options, the FP8 KV cache and the capacity scheduler in the YAML."""
    text = spec(FP8_70B, gpn=2, mesh="tp = 2", serve=NIM + "; gpu_memory_utilization = 0.85",
                target={"trtllm": 'model = "nvidia/Llama-3.3-70B-Instruct-FP8"; capacity_scheduler_policy = max_utilization'})
    files = _files(_check(check_spec, text))
    assert set(files) == {"serve.sh", "extra_llm_api_options.yaml", "plan.json"}
    argv = _run(files, tmp_path)
    assert argv[0] == "nvidia/Llama-3.3-70B-Instruct-FP8"
    opts = dict(zip(argv[1::2], argv[2::2]))
    assert set(opts) <= SERVE_OPTIONS, set(opts) - SERVE_OPTIONS
    assert opts == {"--backend": "pytorch", "--host": "0.0.0.0", "--port": "8000", "--tp_size": "2", "--pp_size": "1",
                    "--max_batch_size": "256", "--max_num_tokens": "8192", "--max_seq_len": "8192",
                    "--kv_cache_free_gpu_memory_fraction": "0.85",
                    "--extra_llm_api_options": str(tmp_path / "out" / "extra_llm_api_options.yaml")}
    keys = _yaml_keys(files["extra_llm_api_options.yaml"].text)
    assert keys == {"scheduler_config.capacity_scheduler_policy": "MAX_UTILIZATION", "kv_cache_config.dtype": "fp8"}
    assert all(v in LLM_API[k] for k, v in keys.items())


def test_defaults_are_left_to_tensorrt_llm(check_spec, tmp_path):
    """A spec that states no limit, no policy and no KV dtype: no YAML, and trtllm-serve picks its
    own (2048 requests, 8192 tokens, 0.9 of the free memory, GUARANTEED_NO_EVICT)."""
    plan = _check(check_spec, spec("from = llama3_8b", gpn=1, mesh="tp = 1", serve="max_model_len = 8192",
                                   target={"trtllm": 'model = "meta-llama/Llama-3.1-8B-Instruct"'}))
    files = _files(plan)
    assert "extra_llm_api_options.yaml" not in files
    argv = _run(files, tmp_path)
    assert "--max_batch_size" not in argv and "--kv_cache_free_gpu_memory_fraction" not in argv
    from parc.cost.engine import capacity_policy, limits, memory_fraction

    lim = limits(plan)
    assert (lim.engine, lim.max_num_seqs, lim.max_num_batched_tokens) == ("trtllm", 2048, 8192)
    assert memory_fraction(plan) == 0.9 and capacity_policy(plan) == "guaranteed_no_evict"


def test_attention_dp_and_experts(check_spec, tmp_path):
    """Qwen3-235B-A22B as TensorRT-LLM's performance overview runs it on 8 H100: attention data
    parallel over 8 ranks and the experts over all of them: --tp_size 8 --ep_size 8 and
    enable_attention_dp."""
    text = spec("from = qwen3_235b_a22b; dtype = fp8; checkpoint_format = modelopt_fp8", gpn=8,
                mesh="dp = 8; tp = 1; ep = 8", serve="max_model_len = 4096; dp_attention = true",
                target={"trtllm": 'model = "nvidia/Qwen3-235B-A22B-FP8"'})
    files = _files(_check(check_spec, text))
    argv = _run(files, tmp_path)
    opts = dict(zip(argv[1::2], argv[2::2]))
    assert (opts["--tp_size"], opts["--pp_size"], opts["--ep_size"]) == ("8", "1", "8")
    assert _yaml_keys(files["extra_llm_api_options.yaml"].text) == {"enable_attention_dp": True}


# --- the cost model -------------------------------------------------------------------------------

def test_kv_cache_is_the_fraction_of_what_the_profile_leaves(check_spec):
    """KvCacheCreator._cal_max_tokens: (total − the profile's peak) × free_gpu_memory_fraction, the
    peak being the weights, a max_num_tokens forward pass and the memory outside torch."""
    from parc.cost.estimate import estimate

    plan = _check(check_spec, spec(FP8_70B, gpn=2, mesh="tp = 2", serve=NIM, target={"trtllm": 'model = "m"'}))
    su = estimate(plan).stages[0].startup
    assert su.engine == "trtllm"
    free = su.total - su.weights - su.activations - su.outside
    assert su.kv == pytest.approx(0.9 * free)
    assert su.graphs == 0 and su.sampler == 0


def test_guaranteed_no_evict_holds_prompt_and_outputs(check_spec):
    """GUARANTEED_NO_EVICT reserves every output token a request may make at admission: a running
    request holds P + O = 5,500 tokens; MAX_UTILIZATION takes blocks as tokens come: P + O/2 =
    5,250 on average (parc.cost.scheduler.Batcher.held)."""
    from parc.cost.engine import limits
    from parc.cost.estimate import estimate
    from parc.cost.scheduler import Batcher

    def batcher(policy):
        body = 'model = "m"' + (f"; capacity_scheduler_policy = {policy}" if policy else "")
        plan = _check(check_spec, spec(FP8_70B, gpn=2, mesh="tp = 2", serve=NIM, target={"trtllm": body}))
        lim = limits(plan)
        b = Batcher(step=None, prompt=5000, output=500, budget=lim.max_num_batched_tokens, seqs=lim.max_num_seqs,
                    kv_tokens=estimate(plan).kv_capacity_tokens, reserve=lim.reserved_output)
        return plan, b

    plan, gne = batcher(None)
    _, mu = batcher("max_utilization")
    assert gne.held == 5500 and mu.held == 5250
    assert gne.running_cap == pytest.approx(gne.kv_tokens / 5500)
    # the explain numbers follow: fewer requests run at once, the rest queue (TTFT rises)
    from parc.cost.estimate import estimate as est

    e_gne = est(plan)
    plan_mu = _check(check_spec, spec(FP8_70B, gpn=2, mesh="tp = 2", serve=NIM,
                                      target={"trtllm": 'model = "m"; capacity_scheduler_policy = max_utilization'}))
    e_mu = est(plan_mu)
    assert e_gne.serving.ttft > e_mu.serving.ttft


def test_tensorrt_llm_splits_layers_first_stages_heavier():
    """Mapping.pp_layers (torch.tensor_split): 61 layers on 4 stages are 16, 15, 15, 15."""
    from parc.model.params import engine_split

    assert engine_split("first", 61, 4) == [16, 15, 15, 15]
    assert engine_split("first", 80, 4) == [20] * 4


# --- the rules ------------------------------------------------------------------------------------

def _tr(mesh="tp = 8", gpn=8, model="from = llama3_8b", serve="max_model_len = 8192", **kw) -> str:
    """A spec for the trtllm target (serving unless ``schedule`` makes it training)."""
    return spec(model, gpn=gpn, mesh=mesh, serve=None if "schedule" in kw else serve,
                target={"trtllm": 'model = "m"'}, **kw)


QWEN_EP = _tr("tp = 8; ep = 4", model="from = qwen3_30b_a3b")
SPLIT = _tr("pp = 2", gpn=2, placement="layers = [15, 17]")
E5M2 = _tr("tp = 1", gpn=1, serve="max_model_len = 8192; kv_cache_dtype = fp8_e5m2")
ONLINE_FP8 = _tr("tp = 1", gpn=1, model="from = llama3_8b; dtype = fp8")
LAYERS = _tr("tp = 1", gpn=1, model="from = llama3_8b; layers = 30")


@pytest.mark.parametrize("code, fires, at, quiet, help_has", [
    # a training plan; the same model served
    ("P730", _tr("dp = 8", schedule="micro_batch = 1; global_batch = 8"), "target trtllm", _tr(), ""),
    # an engine of two nodes; the same in one node
    ("P731", _tr("tp = 16", nodes=2), "nodes", _tr(), ""),
    # data-parallel replicas without attention DP; one engine
    ("P732", _tr("dp = 4; tp = 2"), "dp = 4", _tr("tp = 2", gpn=2), ""),
    # attention data parallelism over ranks of tp 2: TensorRT-LLM's runs each rank's attention apart
    ("P732", _tr("dp = 4; tp = 2", serve="max_model_len = 8192; dp_attention = true"), "tp = 2",
     _tr("dp = 8; tp = 1", serve="max_model_len = 8192; dp_attention = true"), "dp = 8"),
    # ep 4 over tp_size 8 leaves parc's experts replicated twice, where TensorRT-LLM splits each
    # over moe_tp_size = 8 / 4 = 2: the spec must say etp = 2
    ("P732", QWEN_EP, "ep = 4", QWEN_EP.replace("ep = 4", "ep = 4\n  etp = 2"), ""),
    # a split other than TensorRT-LLM's own (the first stages heavier); its own
    ("P732", SPLIT, "layers = [15, 17]", SPLIT.replace("[15, 17]", "[16, 16]"), ""),
    # an E5M2 KV cache; FP8 E4M3
    ("P733", E5M2, "kv_cache_dtype", E5M2.replace("fp8_e5m2", "fp8"), ""),
    # an FP8 model from a 16-bit checkpoint; ModelOpt's FP8 checkpoint
    ("P733", ONLINE_FP8, "dtype = fp8", ONLINE_FP8.replace("dtype = fp8", "dtype = fp8\n  checkpoint_format = modelopt_fp8"),
     "modelopt_fp8"),
    # a model field no option carries; the checkpoint as published
    ("P620", LAYERS, "layers = 30", LAYERS.replace("\n  layers = 30", ""), ""),
])
def test_rule_fires_and_quiet(check_spec, code, fires, at, quiet, help_has):
    d = assert_fires(check_spec, fires, code, at, target="trtllm", targets=T)
    assert help_has in d.help
    assert_quiet(check_spec, quiet, code, T)


def test_p73_is_its_own_family():
    from parc.language.diagnostics import family

    assert (family("P730"), family("P725"), family("P701"), family("P620")) == ("P73", "P72", "P7", "P6")
