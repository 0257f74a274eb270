"""What a serving engine keeps at start-up (parc/cost/startup.py): the CUDA graphs vLLM and SGLang
capture, the weights their MoE kernels pad, vLLM's "Available KV cache memory" arithmetic, and the
rules that refuse a plan the engine would stop at start-up (P416, P417) or warn where SGLang's
graphs may not fit beside its pool (P418), each with the fix that passes."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from parc.cost import estimate as cm
from parc.cost import startup as S
from support.specs import assert_fires, assert_quiet

GIB = 1 << 30


# the default GPU: a 24 GB Ampere card as vLLM logs it (RTX 3090: 142 TFLOPS FP16 tensor, 936 GB/s)
def serve_spec(*, model="from = llama3_1_8b\n  dtype = fp16", gpu="gpu {\n    memory = 23.58GiB\n    flops = 142TFLOPS\n    hbm_bandwidth = 936GB/s\n  }",
               gpn=1, mesh="tp = 1", serve="", target='target vllm { model = "m" }') -> str:
    return f'''model "m" {{
  {model}
}}
cluster "c" {{
  nodes = 1
  gpus_per_node = {gpn}
  {gpu}
  intra_node = nvlink(450GB/s)
}}
mesh {{ {mesh} }}
serve {{
  max_model_len = 8192
{serve}}}
{target}
'''


def _startup(check_spec, text, targets=()):
    r = check_spec(text, targets)
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    return r, cm.estimate(r.plan).stages[0].startup


# --- the CUDA graphs each engine captures ---------------------------------------------------------

def test_vllm_captures_the_sizes_its_logs_name(check_spec):
    """vLLM 0.19's log of Llama-3.1-8B on an A100 (max_num_seqs 256 by default, 2048 batched tokens):
    "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"."""
    _, su = _startup(check_spec, serve_spec(gpu="gpu = a100_sxm_40gb", serve="  max_num_seqs = 256\n"))
    cap = su.capture
    assert (len(cap.piecewise), max(cap.piecewise), len(cap.full), max(cap.full)) == (51, 512, 35, 256)
    assert cap.piecewise[:6] == (1, 2, 4, 8, 16, 24) and cap.piecewise[-2:] == (496, 512)
    # fewer requests capture fewer sizes: 2 × 48 = 96 tokens, the decode batches up to 48
    _, su = _startup(check_spec, serve_spec(gpu="gpu = a100_sxm_40gb", serve="  max_num_seqs = 48\n"))
    assert (max(su.capture.piecewise), max(su.capture.full), len(su.capture.full)) == (96, 48, 9)
    # a step of 300 tokens caps the sizes and is captured itself
    _, su = _startup(check_spec, serve_spec(serve="  max_num_seqs = 256\n  max_num_batched_tokens = 300\n"))
    assert max(su.capture.piecewise) == 300 and 288 in su.capture.piecewise


def test_vllm_captures_up_to_1024_on_b200(check_spec):
    _, su = _startup(check_spec, serve_spec(gpu="gpu = b200", serve="  max_num_seqs = 1024\n"))
    assert max(su.capture.piecewise) == 1024 and max(su.capture.full) == 1024
    assert S.family(SimpleNamespace(name="b200")) == "sm100" and S.family(SimpleNamespace(name="x")) == "default"


def test_vllm_graph_estimate_grows_with_the_captured_sizes(check_spec):
    few = _startup(check_spec, serve_spec(serve="  max_num_seqs = 16\n"))[1].graphs
    many = _startup(check_spec, serve_spec(serve="  max_num_seqs = 256\n"))[1].graphs
    # 0.53 GiB for Llama-3.1-8B's 51 + 35 sizes, the log the piece constant is fitted on
    assert many / GIB == pytest.approx(0.53, abs=0.005)
    assert few < many / 3


def test_sglang_captures_its_decode_and_prefill_sizes(check_spec):
    """cuda_graph_max_bs 256 below 4 tp on an 80 GB GPU, 512 from tp 4; the prefill buckets up to
    the chunked prefill size (8192 there)."""
    sg = 'target sglang { model = "m" }'
    _, su = _startup(check_spec, serve_spec(gpu="gpu = h100_sxm", target=sg), ("sglang",))
    assert max(su.capture.full) == 256 and su.capture.full[:6] == (1, 2, 4, 8, 12, 16)
    assert max(su.capture.piecewise) == 8192 and su.capture.piecewise[:3] == (4, 8, 12)
    _, su4 = _startup(check_spec, serve_spec(gpu="gpu = h100_sxm", gpn=4, mesh="tp = 4", target=sg), ("sglang",))
    assert max(su4.capture.full) == 512
    # SGLang's reserve: 2 MiB per decode size of the largest, 8 MiB per prefill bucket
    assert su.graphs == (256 * 2 + len(su.capture.piecewise) * 8) * 2 ** 20


# --- the weights the MoE kernels pad ---------------------------------------------------------------

def test_mxfp4_experts_take_the_kernels_padding(check_spec):
    """gpt-oss-20b's 2880 × 2880 MXFP4 experts: vLLM's Marlin (A100) holds them as 2944 × 3072,
    9.0% more; the Triton kernels vLLM picks on an H100 round only the intermediate width, to 64
    (2880 already is)."""
    text = serve_spec(model="from = gpt_oss_20b", gpu="gpu = a100_sxm_80gb")
    r = check_spec(text)
    assert cm.serving_expert_pad(r.plan) == pytest.approx(2944 * 3072 / 2880 ** 2)
    r = check_spec(text.replace("a100_sxm_80gb", "h100_sxm"))
    assert cm.serving_expert_pad(r.plan) == 1.0
    # at tp 8 each GPU holds 360 of the 2880: Marlin's 384
    r = check_spec(serve_spec(model="from = gpt_oss_120b", gpu="gpu = a100_sxm_80gb", gpn=8, mesh="tp = 8"))
    assert cm.serving_expert_pad(r.plan) == pytest.approx(384 * 3072 / (360 * 2880))
    # a 16-bit checkpoint is held as stored
    assert cm.serving_expert_pad(check_spec(serve_spec(model="from = qwen3_30b_a3b")).plan) == 1.0


def test_nvfp4_checkpoint_of_kimi_k2_5(check_spec):
    """NVIDIA's NVFP4 Kimi-K2.5 checkpoint is published at 591 GB ("Nvidia releases Kimi K2.5
    NVFP4! (1T, 591GB)", forums.developer.nvidia.com/t/359810): Kimi K2's architecture (the
    language model Kimi-K2.5 keeps) with `checkpoint_format = nvfp4` holds 4-bit values and one
    E4M3 scale per 16 in its transformer layers, embedding and head in bf16, within 3% of that
    (its vision tower, in bf16, is not in the preset); at tp 4 on B200 each GPU holds a quarter
    of the split weights and a whole copy of what vLLM replicates."""
    from parc.cost.params import model_weight_bytes

    text = serve_spec(model="from = kimi_k2\n  checkpoint_format = nvfp4", gpu="gpu = b200", gpn=4, mesh="tp = 4")
    r = check_spec(text)
    total = model_weight_bytes(r.plan.model)
    assert total == pytest.approx(591e9, rel=0.03)
    per_gpu = cm.estimate(r.plan).memory.weights
    assert total / 4 < per_gpu < total / 4 * 1.02


# --- vLLM's arithmetic ------------------------------------------------------------------------------

def test_available_kv_memory_is_vllms_arithmetic(check_spec):
    _, su = _startup(check_spec, serve_spec(serve="  gpu_memory_utilization = 0.9\n"))
    assert su.budget == math.ceil(0.9 * 23.58 * GIB)
    assert su.kv == su.budget - su.weights - su.activations - su.sampler - su.graphs
    # the CUDA context is outside the budget: one GPU opens no NCCL group
    assert su.outside == 800_000_000 and su.slack == su.total - su.outside - su.budget
    # before 0.21 vLLM left the graphs' estimate in the KV cache
    assert su.logged_kv("0.19.0") == su.kv + su.graphs and su.logged_kv("0.33.0") == su.kv


def test_sglang_pool_is_mem_fraction_static_of_what_is_free(check_spec):
    from parc.cost.engine import memory_fraction

    r, su = _startup(check_spec, serve_spec(gpu="gpu = h100_sxm", target='target sglang { model = "m" }'),
                     ("sglang",))
    # the spec leaves mem_fraction_static to SGLang: the fraction it derives (parc.cost.engine)
    assert r.plan.serve.gpu_memory_utilization is None
    assert su.budget == pytest.approx((su.total - su.outside) * memory_fraction(r.plan))
    assert su.kv == su.budget - su.weights          # activations and graphs live in the slack


# --- P416: nothing left for the KV cache -----------------------------------------------------------

P416 = serve_spec(serve="  gpu_memory_utilization = 0.66\n")


def test_p416_fires_where_the_profile_and_graphs_leave_nothing(check_spec):
    # 0.66 × 23.58 GiB = 15.56 GiB holds the 14.96 GiB of weights (P402 is quiet) but not the
    # profiling pass and the 0.53 GiB of graphs beside them
    d = assert_fires(check_spec, P416, "P416", "gpu_memory_utilization")
    assert "No available memory for the cache blocks" in d.message and "CUDA graphs" in d.message
    assert not [x for x in check_spec(P416).diagnostics if x.code in ("P402", "P403")]
    fix = d.help.split("`gpu_memory_utilization = ")[1].split("`")[0]
    fixed = P416.replace("0.66", fix)
    for code in ("P416", "P403", "P417"):
        assert_quiet(check_spec, fixed, code)


def test_p416_quiet_where_one_sequence_fits(check_spec):
    assert_quiet(check_spec, P416.replace("0.66", "0.9"), "P416")


# --- P417: the budget exceeds what is free when vLLM starts (a warning: the context is assumed) ----

P417 = serve_spec(gpu="gpu = h100_sxm", gpn=8, mesh="tp = 8", serve="  gpu_memory_utilization = 0.99\n")


def test_p417_fires_where_context_and_nccl_leave_less_than_the_budget(check_spec):
    # 1% of 85.5 GB is 0.86 GB; the context (0.8 GB) and two NCCL communicators (world, tp: 0.54 GB)
    # take more before vLLM's snapshot
    d = assert_fires(check_spec, P417, "P417", "gpu_memory_utilization", severity="warning")
    assert "less than desired GPU memory utilization" in d.message and "cuda_context" in d.message
    fix = d.help.split("`gpu_memory_utilization = ")[1].split("`")[0]
    assert float(fix) == 0.98
    assert_quiet(check_spec, P417.replace("0.99", fix), "P417")


def test_p417_offers_no_fraction_that_another_check_refuses(check_spec):
    # a 9 GB context leaves about 0.64 of the GPU free, which no longer holds the weights beside
    # the profile: the largest fraction vLLM takes would be refused, so none is offered
    spec = P416.replace("0.66", "0.99").replace("intra_node", "cuda_context = 9GB\n  intra_node", 1)
    d = assert_fires(check_spec, spec, "P417", "gpu_memory_utilization", severity="warning")
    assert d.help is None


def test_p417_quiet_for_one_gpu_and_a_stated_context(check_spec):
    # one GPU opens no NCCL group: the context alone fits in the 1%
    assert_quiet(check_spec, serve_spec(gpu="gpu = h100_sxm", serve="  gpu_memory_utilization = 0.99\n"), "P417")
    small = P417.replace("intra_node", "cuda_context = 300MB\n  nccl_buffers = 64MiB\n  intra_node")
    assert_quiet(check_spec, small, "P417")


# --- P418: SGLang's graphs beside its pool ----------------------------------------------------------

P418 = serve_spec(gpu="gpu = h100_sxm", serve="  gpu_memory_utilization = 0.99\n", target='target sglang { model = "m" }')


def test_p418_warns_where_the_slack_is_smaller_than_sglangs_reserve(check_spec):
    d = assert_fires(check_spec, P418, "P418", "gpu_memory_utilization", severity="warning", targets=("sglang",))
    assert "SGLang's own estimate" in d.message and "derives the fraction itself" in d.message
    fix = d.help.split("`gpu_memory_utilization = ")[1].split("`")[0]
    assert_quiet(check_spec, P418.replace("0.99", fix), "P418", ("sglang",))


def test_p418_offers_no_fraction_where_none_leaves_room(check_spec):
    """The shape of LMSYS's DeepSeek-V3 decode server (sgl-project/sglang#6017: DP attention 72,
    --mem-fraction-static 0.835) on a small model: SGLang's estimate for its graphs, 512 × 2 MiB +
    512 × 72 × (3 + 1.5) MiB = 166,912 MiB (175 GB), exceeds the ~79 GB SGLang finds free, so no
    mem_fraction_static in (0, 1] leaves room and none is offered (the rule once offered -1.06)."""
    text = serve_spec(gpu="gpu = h100_sxm", gpn=72, mesh="dp = 72\n  tp = 1",
                      serve="  dp_attention = true\n  gpu_memory_utilization = 0.835\n",
                      target='target sglang {\n  model = "m"\n  disaggregation = decode\n}')
    d = assert_fires(check_spec, text, "P418", "gpu_memory_utilization", severity="warning", targets=("sglang",))
    assert "gpu_memory_utilization =" not in (d.help or "")
    assert "no mem_fraction_static leaves room" in d.message and "175 GB" in d.message
    # the same server with 8 attention-DP ranks: 512 × 2 + 512 × 8 × 4.5 = 19,456 MiB fits below a
    # fraction the rule offers, and the offered fraction quiets it
    small = text.replace("gpus_per_node = 72", "gpus_per_node = 8").replace("dp = 72", "dp = 8")
    d = assert_fires(check_spec, small, "P418", "gpu_memory_utilization", severity="warning", targets=("sglang",))
    fix = d.help.split("`gpu_memory_utilization = ")[1].split("`")[0]
    assert 0 < float(fix) < 0.835
    assert_quiet(check_spec, small.replace("0.835", fix), "P418", ("sglang",))


def test_p418_names_a_decode_servers_activations_as_the_startup_counts_them(check_spec):
    """No prefill runs on a decode server (--disaggregation-mode decode), so P418 does not call its
    activations a chunked prefill's: it names what the start-up model holds for them, a forward
    pass over max_num_batched_tokens a rank (SGLang's 8,192-token default over 8 attention-DP
    ranks: 1,024 tokens), in the start-up's own bytes. The same server colocated keeps the words."""
    from parc.units import gb

    text = serve_spec(gpu="gpu = h100_sxm", gpn=8, mesh="dp = 8\n  tp = 1",
                      serve="  dp_attention = true\n  gpu_memory_utilization = 0.835\n",
                      target='target sglang {\n  model = "m"\n  disaggregation = decode\n}')
    _, su = _startup(check_spec, text, ("sglang",))
    d = assert_fires(check_spec, text, "P418", "gpu_memory_utilization", severity="warning", targets=("sglang",))
    assert "chunked prefill" not in d.message
    assert f"the {gb(su.activations)} of activations of a 1,024-token forward pass" in d.message
    assert su.tokens == 1024
    colocated = text.replace("  disaggregation = decode\n", "")
    d = assert_fires(check_spec, colocated, "P418", "gpu_memory_utilization", severity="warning", targets=("sglang",))
    assert "of a chunked prefill's activations" in d.message and "forward pass" not in d.message


def test_p418_quiet_at_sglangs_usual_fraction(check_spec):
    assert_quiet(check_spec, P418.replace("0.99", "0.9"), "P418", ("sglang",))
    # vLLM plans are P417's
    assert_quiet(check_spec, P418.replace('target sglang { model = "m" }', 'target vllm { model = "m" }'), "P418")


@pytest.mark.parametrize("code", ["P416", "P417", "P418"])
def test_rules_have_docs(code):
    from parc.rules import registry, rule_docs

    assert code in registry() and rule_docs()[code]["doc"] and rule_docs()[code]["source"]


# --- SGLang's prefill and decode servers ------------------------------------------------------------

MIB = 1 << 20
ATTN_DP = dict(gpu="gpu = h100_sxm", gpn=4, mesh="dp = 4\n  tp = 1", serve="  dp_attention = true\n")


def _side(side: str, fraction: str = "  gpu_memory_utilization = 0.85\n") -> str:
    return serve_spec(**{**ATTN_DP, "serve": ATTN_DP["serve"] + fraction},
                      target=f'target sglang {{\n  model = "m"\n  disaggregation = {side}\n}}')


def test_sglang_prefill_server_reserves_no_decode_graphs(check_spec):
    """SGLang 0.5.23 gives a prefill server (--disaggregation-mode prefill) no decode CUDA graph
    (arg_groups/cuda_graph_hook.py apply_cuda_graph_disaggregation_roles) and reserve_for_graph_mb
    counts none, nor attention DP's padding: only the breakable prefill graph's 8 MiB per bucket,
    up to the server's 8,192-token chunk (memory_hook.py: prefill max_bs = chunked_prefill_size):
    58 buckets (4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1024 by 64, 1280..4096 by 256,
    4608..8192 by 512) = 464 MiB. Colocated, the same server reserves 512 × 2 MiB for its decode
    graphs and 512 × 4 × (3 + 1.5) MiB for attention DP besides: 10,704 MiB."""
    _, pre = _startup(check_spec, _side("prefill"), ("sglang",))
    assert pre.capture.full == () and len(pre.capture.piecewise) == 58
    assert pre.graphs == 464 * MIB
    colocated = serve_spec(**{**ATTN_DP, "serve": ATTN_DP["serve"] + "  gpu_memory_utilization = 0.85\n"},
                           target='target sglang { model = "m" }')
    _, both = _startup(check_spec, colocated, ("sglang",))
    assert both.graphs == 10704 * MIB
    # a stated --mem-fraction-static is taken as given: the pool is the same either way
    assert pre.budget == both.budget and pre.kv == both.kv


def test_sglang_decode_server_reserves_no_prefill_graph(check_spec):
    """A decode server captures no prefill graph: its reserve is the decode graphs' 512 × 2 MiB
    and attention DP's 512 × 4 × 4.5 MiB, 10,240 MiB."""
    _, dec = _startup(check_spec, _side("decode"), ("sglang",))
    assert dec.capture.piecewise == () and max(dec.capture.full) == 512
    assert dec.graphs == 10240 * MIB


def test_sglang_derives_a_prefill_servers_fraction_without_decode_graphs(check_spec):
    """mem_fraction_static left out (memory_hook.py handle_gpu_memory_settings): the reserve is
    512 MiB + 1.5 × 8,192 tokens + tp_size 4 / 8 × 1024 MiB + the 464 MiB of prefill graphs =
    13,776 MiB (above the 10 GiB floor); a decode server's activations scale with its running
    requests (max(512, 2048) tokens: 3,072 MiB) and its graphs' 10,240 MiB: 14,336 MiB."""
    from parc.cost.engine import memory_fraction

    r = check_spec(_side("prefill", ""), ("sglang",))
    mib = r.plan.cluster.gpu.memory / MIB
    assert memory_fraction(r.plan) == round((mib - 13776) / mib, 3)
    r = check_spec(_side("decode", ""), ("sglang",))
    assert memory_fraction(r.plan) == round((mib - (512 + 3072 + 512 + 10240)) / mib, 3)


def test_sglang_deepep_normal_captures_no_graph(check_spec):
    """deepep_mode normal disables both graphs (moe_hook.py _handle_a2a_moe: "Cuda graph is
    disabled because deepep_mode=`normal`"), after the memory settings have counted them."""
    text = serve_spec(model="from = qwen3_30b_a3b", gpu="gpu = h100_sxm", gpn=4, mesh="dp = 4\n  tp = 1\n  ep = 4",
                      serve="  dp_attention = true\n  gpu_memory_utilization = 0.85\n",
                      target='target sglang {\n  model = "m"\n  moe_a2a_backend = deepep\n  deepep_mode = normal\n}')
    _, su = _startup(check_spec, text, ("sglang",))
    assert su.capture.graphs == 0 and su.graphs == 0


def test_a_disaggregated_plans_pools_know_their_side(check_spec):
    from parc.model.pools import pool_plans

    text = serve_spec(gpu="gpu = h100_sxm", gpn=8, mesh="tp = 4",
                      serve="  kv_transfer = nixl\n  prefill { instances = 1 }\n  decode { instances = 1 }\n",
                      target='target sglang { model = "m" }')
    r = check_spec(text, ("sglang",))
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    (pp, pre), (dp_, dec) = pool_plans(r.plan)
    assert (pp.name, pre.role, dp_.name, dec.role) == ("prefill", "prefill", "decode", "decode")
    assert cm.estimate(pre).stages[0].startup.capture.full == ()
    assert cm.estimate(dec).stages[0].startup.capture.piecewise == ()
