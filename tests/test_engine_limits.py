"""The engine's own limits (parc.cost.engine): a serve key the spec leaves out is the engine's
default for the pinned release, not written on the command line, and explain says so; a key it
gives means what that engine means by it. With the rules of the scheduler and speculative keys
(P412–P415) as fire/quiet pairs, and those keys on each engine's command line."""
from __future__ import annotations

import json

import pytest

from support.specs import assert_fires, assert_quiet, only, spec
from support.sglang_cmd import argv as _argv, compile_plan as _sglang, opts as _opts

L8 = "from = llama3_8b"
S = 'model = "m"'


def _plan(check_spec, text, targets=()):
    r = check_spec(text, targets)
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    return r.plan


def _vllm_argv(plan) -> list[str]:
    from parc.targets import vllm

    text = next(f.text for f in vllm.build(plan) if f.path in ("serve.sh", "launch.sh", "prefill.sh"))
    return text.split()


# --- defaults ------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu,seqs,tokens", [("h100_sxm", 1024, 8192), ("a100_sxm_80gb", 256, 2048),
                                              ("h200", 1024, 8192), ("b200", 1024, 16384),
                                              ("l40s", 256, 2048)])
def test_vllm_defaults_by_gpu_memory(check_spec, gpu, seqs, tokens):
    """vLLM 0.33's EngineArgs.get_batch_defaults: 1,024 sequences on GPUs of 70 GiB or more other
    than the A100, 256 below; 16,384 batched tokens from 160 GiB, 8,192 from 70 GiB, else 2,048."""
    from parc.cost.engine import limits

    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="", target={"vllm": S}).replace(
        "gpu           = h100_sxm", f"gpu           = {gpu}"))
    lim = limits(plan)
    assert (lim.engine, lim.release) == ("vllm", "0.33")
    assert (lim.max_num_seqs, lim.max_num_batched_tokens) == (seqs, tokens)
    # max_model_len: the model's own context (llama3_8b: 8,192 positions)
    assert lim.max_model_len == plan.model.max_positions == 8192
    assert lim.stated == ()


def test_left_out_keys_are_not_written_and_given_ones_are(check_spec):
    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="", target={"vllm": S}))
    argv = _vllm_argv(plan)
    assert not {"--max-model-len", "--max-num-seqs", "--max-num-batched-tokens"} & set(argv)
    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", target={"vllm": S},
                                  serve="max_model_len = 4096; max_num_seqs = 64; max_num_batched_tokens = 4096"))
    argv = _vllm_argv(plan)
    for flag, v in (("--max-model-len", "4096"), ("--max-num-seqs", "64"), ("--max-num-batched-tokens", "4096")):
        assert argv[argv.index(flag) + 1] == v


def test_sglang_leaves_its_own_defaults_to_itself(check_spec, tmp_path):
    plan, files = _sglang(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="", target={"sglang": S}))
    o = _opts(_argv(files, tmp_path))
    assert not {"--context-length", "--max-running-requests", "--chunked-prefill-size"} & set(o)
    plan, files = _sglang(check_spec, spec(L8, gpn=1, mesh="tp = 1", target={"sglang": S},
                                           serve="max_model_len = 4096; max_num_seqs = 64; max_num_batched_tokens = 4096"))
    o = _opts(_argv(files, tmp_path / "b"))
    assert (o["--context-length"], o["--max-running-requests"], o["--chunked-prefill-size"]) == ("4096", "64", "4096")



def test_memory_fraction_left_out_is_the_engines(check_spec, tmp_path):
    """gpu_memory_utilization left out is vLLM 0.33's CacheConfig default 0.92 and SGLang's own
    mem_fraction_static; neither launch writes it, and the memory model uses the engine's."""
    from parc.cost.engine import memory_fraction

    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="", target={"vllm": S}))
    assert "--gpu-memory-utilization" not in _vllm_argv(plan)
    assert memory_fraction(plan) == 0.92
    plan, files = _sglang(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="", target={"sglang": S}))
    assert "--mem-fraction-static" not in _opts(_argv(files, tmp_path))
    # 0.5.23 arg_groups/memory_hook.py on an 81,559 MiB H100 at tp 1 (not MLA): chunked prefill
    # 8192, decode CUDA graphs up to 256; reserve 512 + 8192 × 1.5 + 1 × 1 / 8 × 1024 + 256 × 2
    # + 8 MiB × 58 prefill graph sizes = 13,904 MiB (above the 10 GiB floor)
    want = round((81559 - (512 + 8192 * 1.5 + 128 + 256 * 2 + 58 * 8)) / 81559, 3)
    assert memory_fraction(plan) == want
    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="gpu_memory_utilization = 0.8",
                                  target={"vllm": S}))
    argv = _vllm_argv(plan)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8" and memory_fraction(plan) == 0.8


def test_sglang_memory_fraction_follows_the_release(check_spec):
    """MLA (DeepSeek-V3): the prefill graph reserve is 1.5 GiB; DeepEP adds 2 GiB and 1 GiB more
    for the breakable prefill graph; tp 8 adds 1 GiB (memory_hook.py, reserve_for_graph_mb,
    reserve_for_deepep_a2a_mb)."""
    from parc.cost.engine import memory_fraction, memory_fraction_note

    text = spec("from = deepseek_v3", gpn=8, mesh="tp = 8; ep = 8", serve="",
                target={"sglang": S + "\nmoe_a2a_backend = deepep"}).replace(
        "gpu           = h100_sxm", "gpu           = h200")
    plan = _plan(check_spec, text)
    mib = plan.cluster.gpu.memory / 2**20
    reserve = 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 1536 + 1024 + 2048
    assert memory_fraction(plan) == round((mib - reserve) / mib, 3)
    assert "SGLang 0.5.23's default" in memory_fraction_note(plan)


MOE = "from = mixtral_8x7b"


def test_sglang_divides_its_limits_over_the_attention_dp_ranks(check_spec):
    """SGLang 0.5.23: --max-running-requests N gives each of the attn_dp ranks max(1, N // attn_dp)
    (kv_cache_configurator.py resolve_max_num_reqs), and the chunked prefill size is divided too
    (parallel_hook.py); vLLM's max_num_seqs is per data-parallel rank."""
    from parc.cost.engine import limits

    text = spec(MOE, gpn=8, mesh="dp = 8; tp = 1; ep = 8",
                serve="dp_attention = true; max_model_len = 4096; max_num_seqs = 256; max_num_batched_tokens = 16384",
                target={"sglang": S})
    plan = _plan(check_spec, text)
    lim = limits(plan, kv_tokens=10**6)
    assert (lim.engine, lim.attn_dp, lim.max_num_seqs, lim.max_num_batched_tokens) == ("sglang", 8, 32, 2048)
    # capped at the KV cache's tokens // 2 per rank
    assert limits(plan, kv_tokens=40).max_num_seqs == 20
    plan = _plan(check_spec, text.replace("target sglang", "target vllm"))
    lim = limits(plan, kv_tokens=10**6)
    assert (lim.engine, lim.max_num_seqs, lim.max_num_batched_tokens) == ("vllm", 256, 16384)


def test_sglang_derives_its_running_requests_from_the_kv_cache(check_spec):
    """Left out: per rank min(clamp(KV tokens / context × 512, 2048, 4096), KV tokens // 2)."""
    from parc.cost.engine import limits

    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="max_model_len = 8192", target={"sglang": S}))
    assert limits(plan, kv_tokens=40_000).max_num_seqs == min(max(min(int(40_000 / 8192 * 512), 4096), 2048), 20_000)
    assert limits(plan, kv_tokens=3_000).max_num_seqs == 1_500
    assert limits(plan, kv_tokens=10**8).max_num_seqs == 4096


def test_explain_says_whose_each_limit_is(check_spec):
    from parc.cost.estimate import estimate
    from parc.report.explain import render_text

    plan = _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="max_num_seqs = 64", target={"vllm": S}))
    out = render_text(plan, estimate(plan, cache=False), "s.par")
    assert "max_num_seqs 64 per rank (the spec's)" in out
    assert "max_num_batched_tokens 8,192 per rank (vLLM's default)" in out
    assert "max_model_len 8,192 (vLLM's default)" in out
    assert "(the engine's default: the model's context)" in out


def test_a_pool_takes_its_own_max_num_seqs(check_spec):
    from parc.cost.estimate import estimate

    text = (spec("from = llama3_70b", nodes=2, mesh="tp = 8",
                 serve="max_model_len = 8192; kv_transfer = nixl; max_num_seqs = 64; concurrency = 64",
                 target={"vllm": S})
            .replace("  concurrency = 64\n", "  concurrency = 64\n  prefill {\n    max_num_seqs = 8\n  }\n"
                     "  decode {\n    instances = 1\n  }\n"))
    plan = _plan(check_spec, text)
    pools = estimate(plan, cache=False).serving.pools
    assert pools["prefill"]["limits"].max_num_seqs == 8 and pools["decode"]["limits"].max_num_seqs == 64
    from parc.model.pools import pool_plans

    argv = {p.name: _vllm_argv(pp) for p, pp in pool_plans(plan)}
    assert argv["prefill"][argv["prefill"].index("--max-num-seqs") + 1] == "8"


# --- the scheduler and speculative keys -----------------------------------------------------------

DSV3 = "from = deepseek_v3\n  dtype = fp8"


def test_speculative_and_overlap_reach_both_engines(check_spec, tmp_path):
    serve = ("dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.9; two_batch_overlap = true; speculative = mtp; "
             "speculative_tokens = 2; acceptance_rate = 0.8")
    text = spec(DSV3, nodes=2, gpn=8, mesh="dp = 16; tp = 1; ep = 16", serve=serve, target={"vllm": S})
    argv = _vllm_argv(_plan(check_spec, text))
    assert "--enable-dbo" in argv
    assert json.loads(argv[argv.index("--speculative-config") + 1].strip("'")) == {
        "method": "mtp", "num_speculative_tokens": 2}
    plan, files = _sglang(check_spec, text.replace("target vllm", "target sglang"))
    o = _opts(_argv(files, tmp_path, "0"))
    assert o["--enable-two-batch-overlap"] is True
    assert (o["--speculative-algorithm"], o["--speculative-num-steps"], o["--speculative-eagle-topk"],
            o["--speculative-num-draft-tokens"]) == ("NEXTN", "2", "1", "3")


def test_speculative_decoding_yields_its_accepted_tokens(check_spec):
    """k = 2 drafts at acceptance 0.8 give (1 − 0.8³)/(1 − 0.8) = 2.44 tokens a step: TPOT is
    the step over 2.44; the MTP layer is loaded (its weights count) and drafts on the last stage."""
    from parc.cost.estimate import estimate

    base = "dp_attention = true; max_model_len = 4096; prompt_tokens = 1000; output_tokens = 200; concurrency = 64"
    plain = estimate(_plan(check_spec, spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16", serve=base)))
    spec_ = estimate(_plan(check_spec, spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16", serve=base
                                            + "; speculative = mtp; speculative_tokens = 2; acceptance_rate = 0.8")))
    sv = spec_.serving
    assert sv.accepted == pytest.approx((1 - 0.8 ** 3) / 0.2)
    assert sv.tpot == pytest.approx(sv.step / sv.accepted)
    assert sv.decode[-1].draft > 0
    assert spec_.stages[-1].parts["mtp"] > 0 and "mtp" not in plain.stages[-1].parts
    assert sv.tpot < plain.serving.tpot


def test_two_batch_overlap_hides_the_all_to_all(check_spec):
    from parc.cost.estimate import estimate

    from parc.cost.serve_step import StepModel

    base = "dp_attention = true; max_model_len = 4096"
    mesh = "dp = 16; tp = 1; ep = 16"

    def step(serve, d, p):
        plan = _plan(check_spec, spec(DSV3, nodes=2, mesh=mesh, serve=serve))
        return StepModel(plan, estimate(plan, cache=False)).phases(d, p, 1500.0, 500.0)[0]

    # a step of 16 decode requests and a 4,096-token prompt chunk: the all-to-all is as long as
    # the compute, which hides it; a decode step of 64 is memory-bound, and reading the weights
    # twice costs more than the overlap saves
    plain, ph = step(base, 16, 4096.0), step(base + "; two_batch_overlap = true", 16, 4096.0)
    assert step(base + "; two_batch_overlap = true", 64, 0.0).time > step(base, 64, 0.0).time
    assert ph.overlapped and ph.comm["ep"] > 0
    # the all-to-all under the rest, which reads the weights for both micro-batches: the step is
    # at least each of them, and less than the two one after the other
    assert ph.time >= ph.comm["ep"] and ph.time >= 2 * ph.weights
    assert ph.time < plain.time < (plain.weights + plain.kv + plain.compute + plain.elementwise
                                   + sum(plain.comm.values()))


def test_deepep_low_latency_at_its_measured_rate(check_spec):
    """DeepEP's low-latency kernels at EP 16: dispatch at 63 GB/s (FP8), combine at 74 GB/s
    (BF16) on a 50 GB/s NIC (deepseek-ai/DeepEP docs/legacy.md); this cluster's NIC is 50 GB/s."""
    from parc.cost.estimate import estimate
    from parc.cost.serve_step import StepModel

    text = spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16", serve="dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.9",
                target={"sglang": S + "; moe_a2a_backend = deepep; deepep_mode = low_latency"})
    plan = _plan(check_spec, text)
    est = estimate(plan, cache=False)
    sm = StepModel(plan, est)
    n, st = 128.0, sm.distinct[0]
    lat = est.link_kind["inter_node"]
    from parc.cost.comm import link_latency

    want = (n * 8 * 7168 * 1 / 63e9 + link_latency(lat) + n * 8 * 7168 * 2 / 74e9 + link_latency(lat)) * st.moe_layers
    assert float(sm._terms((st,), n, 0.0, 0.0, 0.0)["comm"]["ep"][0, 0]) == pytest.approx(want)


# --- rules ---------------------------------------------------------------------------------------

def test_p412_speculative_without_acceptance_rate(check_spec):
    text = spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16", serve="dp_attention = true; speculative = mtp")
    d = assert_fires(check_spec, text, "P412", "speculative = mtp", severity="warning")
    assert "acceptance_rate" in d.help
    assert_quiet(check_spec, text.replace("speculative = mtp", "speculative = mtp\n  acceptance_rate = 0.8"), "P412")


def test_p413_speculative_needs_its_draft(check_spec):
    text = spec(L8, gpn=1, mesh="tp = 1", serve="speculative = eagle3\n acceptance_rate = 0.7")
    assert_fires(check_spec, text, "P413", "speculative = eagle3")
    assert_quiet(check_spec, text.replace("acceptance_rate = 0.7",
                                          'acceptance_rate = 0.7\n  draft_model = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"'),
                 "P413")
    mtp = spec(L8, gpn=1, mesh="tp = 1", serve="speculative = mtp\n acceptance_rate = 0.7")
    assert "mtp_layers = 0" in assert_fires(check_spec, mtp, "P413", "speculative = mtp").message
    assert_quiet(check_spec, spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16",
                                  serve="dp_attention = true; speculative = mtp; acceptance_rate = 0.8"), "P413")


def test_p414_two_batch_overlap_needs_an_all_to_all(check_spec):
    text = spec(L8, gpn=1, mesh="tp = 1", serve="two_batch_overlap = true")
    assert_fires(check_spec, text, "P414", "two_batch_overlap", severity="warning")
    assert_quiet(check_spec, spec(DSV3, nodes=2, mesh="dp = 16; tp = 1; ep = 16",
                                  serve="dp_attention = true; two_batch_overlap = true"), "P414")


def test_p415_one_load_at_a_time(check_spec):
    text = spec(L8, gpn=1, mesh="tp = 1", serve="concurrency = 8\n request_rate = 2.5")
    d = assert_fires(check_spec, text, "P415", "request_rate", severity="warning")
    assert "uses the rate" in d.message
    assert_quiet(check_spec, text.replace(" request_rate = 2.5\n", ""), "P415")


def test_a_request_rate_drives_explain(check_spec):
    from parc.cost.estimate import estimate

    low = estimate(_plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="request_rate = 1\n prompt_tokens = 1000")))
    high = estimate(_plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="request_rate = 20\n prompt_tokens = 1000")))
    assert low.serving.workload.request_rate == 1 and low.serving.workload.concurrency is None
    assert high.serving.ttft > low.serving.ttft and high.serving.limit == "rate"
    assert high.serving.output_tokens_per_s == pytest.approx(20 * 128)
    over = estimate(_plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve="request_rate = 10000")))
    assert over.serving.limit == "unstable"


def test_sglang_runs_prompt_steps_apart_and_explain_and_the_timeline_say_so(check_spec):
    """SGLang 0.5.23 does not mix prompt chunks into decode steps (enable_mixed_chunk off, prefill
    first): its decode batch is not bounded by the chunked prefill size, explain names the prompt
    step, and the timeline draws a prompt step after the decode steps that carry no chunk."""
    from xml.etree import ElementTree as ET

    from parc.cost.estimate import estimate
    from parc.report.explain import render_text
    from parc.report.svg_serve import timeline

    serve = "max_model_len = 4096; prompt_tokens = 2000; output_tokens = 201; concurrency = 64"
    plans = {t: _plan(check_spec, spec(L8, gpn=1, mesh="tp = 1", serve=serve, target={t: S})) for t in ("sglang", "vllm")}
    est = {t: estimate(p, cache=False) for t, p in plans.items()}
    assert est["sglang"].serving.limits.mixed is False and est["vllm"].serving.limits.mixed is True
    out = render_text(plans["sglang"], est["sglang"], "s.par")
    assert "prompt step" in out and "apart from the decode steps" in out and "mixed step" not in out
    assert "mixed step" in render_text(plans["vllm"], est["vllm"], "s.par")
    svg = ET.fromstring(timeline(plans["sglang"], est["sglang"], steps=12))
    blocks = [b for b in svg.iter("{http://www.w3.org/2000/svg}rect") if "block" in (b.get("class") or "")]
    kinds = [b.get("class").split()[-1] for b in blocks]
    assert "M" not in kinds and kinds.count("P") > 1
    # each prompt step after the first prompt's own follows a decode step
    assert all(kinds[i - 1] == "D" for i in range(1, len(kinds)) if kinds[i] == "P" and "D" in kinds[:i])
