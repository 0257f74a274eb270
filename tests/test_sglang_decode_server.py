"""SGLang's decode server and its decode step under two-batch overlap, each against numbers worked
out by hand: a server launched with ``--disaggregation-mode decode`` on its own only decodes; the
micro-batches of two-batch overlap run their GEMMs on half the rows; and SGLang's staged decode
schedule (python/sglang/srt/batch_overlap/operations_strategy.py, operations.py) hides each
DeepEP low-latency transfer only under the stages that run while it is in flight."""
from __future__ import annotations

import pytest

from support.specs import spec

DSV3 = "from = deepseek_v3\n  dtype = fp8"
S = 'model = "deepseek-ai/DeepSeek-V3"'
MESH = "dp = 16; tp = 1; ep = 16"
LOW = S + "; moe_a2a_backend = deepep; deepep_mode = low_latency"
TBO = "dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.9; two_batch_overlap = true"


def _plan(check_spec, serve: str, target: dict):
    r = check_spec(spec(DSV3, nodes=2, mesh=MESH, serve=serve, target=target))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    return r.plan


def _model(plan):
    from parc.cost.estimate import estimate
    from parc.cost.serve_step import StepModel

    est = estimate(plan, cache=False)
    return est, StepModel(plan, est)


def test_staged_exposure_by_hand():
    """A micro-batch's dispatch of 175 µs under 76 µs of cover waits 99 µs; its combine of 321 µs
    under 216 µs waits 105 µs; two micro-batches over 58 MoE layers: 2 · 58 · 204 µs."""
    from parc.cost.serve_step import staged_exposure

    assert staged_exposure(175e-6, 321e-6, 76e-6, 216e-6, 58) == pytest.approx(2 * 58 * 204e-6)
    # cover longer than the transfer hides it whole; one transfer hidden, the other not
    assert staged_exposure(100e-6, 200e-6, 150e-6, 250e-6, 58) == 0.0
    assert staged_exposure(100e-6, 300e-6, 150e-6, 250e-6, 3) == pytest.approx(2 * 3 * 50e-6)


def test_sglang_low_latency_decode_step_is_staged(check_spec):
    """DeepSeek-V3 at EP 16, 256 decode requests 500 tokens deep: each micro-batch of 128 tokens
    sends 128 · 8 · 7,168 FP8 bytes at DeepEP's 63 GB/s and gets back twice that in BF16 at
    74 GB/s (docs/legacy.md, EP 16), each plus the link's latency. The dispatch hides under the
    attention's input projections (DeepSeek-V3: 187,107,328 − 128 · 128 · (7,168 + 512) =
    61,278,208 parameters) and the shared expert (3 · 7,168 · 2,048 = 44,040,192); the combine
    under the attention kernel (128 requests × 500 tokens × 1,152 KV bytes, or 2 · 128 · (576 +
    512) FLOPs per cached token) and the output side (125,829,120 parameters); each GEMM at its
    roofline."""
    import numpy as np

    from parc.cost.comm import link_latency
    from parc.cost.serve_step import _shape

    plan = _plan(check_spec, TBO, {"sglang": LOW})
    est, sm = _model(plan)
    st = sm.distinct[0]
    assert (st.attn_in, st.attn_out, st.shared) == (61_278_208, 125_829_120, 44_040_192)
    alpha = link_latency(est.link_kind["inter_node"])
    half, cd = 128.0, 500.0
    dispatch = half * 8 * 7168 / 63e9 + alpha
    combine = half * 8 * 7168 * 2 / 74e9 + alpha
    wa, wm = sm.wbytes

    def gemm(params, wb):
        return max(params * wb / sm.hbm, 2 * params * half / (sm.gemm_rate * float(_shape(half, sm.half))))

    core = max(half * cd * 1152 / sm.kv_rate, half * cd * 2 * 128 * (576 + 512) / sm.attn_decode)
    cover_d = gemm(61_278_208, wa) + gemm(44_040_192, wm)
    cover_c = core + gemm(125_829_120, wa)
    want = 2 * 58 * (max(0.0, dispatch - cover_d) + max(0.0, combine - cover_c))
    assert want > 0
    t = sm._terms((st,), 256.0, 0.0, cd, 0.0)
    assert float(t["staged"][0, 0]) == pytest.approx(want)
    work = max(2 * t["weights"][0, 0], t["gemm_tbo"][0, 0]) + max(t["kv"][0, 0], t["attention"][0, 0]) \
        + t["elementwise"][0, 0]
    assert sm.phases(256.0, 0.0, cd, 0.0)[0].time == pytest.approx(float(work + want))
    # at least the bound of a perfect overlap, max(work, all-to-all)
    assert sm.phases(256.0, 0.0, cd, 0.0)[0].time >= max(work, float(t["comm"]["ep"][0, 0]))
    # a step with a prompt chunk under --deepep-mode auto runs the normal kernels: not staged
    auto = _plan(check_spec, TBO, {"sglang": S + "; moe_a2a_backend = deepep"})
    assert np.isnan(_model(auto)[1]._terms((st,), 16.0, 4096.0, cd, 500.0)["staged"][0, 0])


def test_vllm_dbo_keeps_the_overlap_bound(check_spec):
    """vLLM's dual-batch overlap is not SGLang's staged schedule: its step stays max(work,
    all-to-all) plus the rest."""
    plan = _plan(check_spec, TBO, {"vllm": S + "; all2all_backend = deepep_low_latency"})
    _, sm = _model(plan)
    t = sm._terms((sm.distinct[0],), 128.0, 0.0, 1500.0, 0.0)
    assert "staged" not in t
    work = max(2 * t["weights"][0, 0], t["gemm_tbo"][0, 0]) + max(t["kv"][0, 0], t["attention"][0, 0]) \
        + t["elementwise"][0, 0]
    ep = t["comm"]["ep"][0, 0]
    rest = sum(v[0, 0] for v in t["comm"].values()) - ep
    assert sm.phases(128.0, 0.0, 1500.0, 0.0)[0].time == pytest.approx(float(max(work, ep) + rest))


def test_two_batch_overlap_gemms_run_on_half_the_rows(check_spec):
    """Under two-batch overlap each micro-batch's GEMMs run on half the step's rows, so at the rate
    of a GEMM of that many rows (m / (m + gemm_half_size)): 128 tokens as two GEMMs of 64 rows;
    the LM head on the whole batch."""
    from parc.cost.serve_step import _shape

    plan = _plan(check_spec, TBO, {"sglang": LOW})
    _, sm = _model(plan)
    st = sm.distinct[0]
    t = sm._terms((st,), 128.0, 0.0, 1500.0, 0.0)
    h = sm.half
    per_expert = 128 * st.copies / st.local

    def rate(m):
        return float(_shape(m, h))

    want = (128 * st.gemm / rate(64) + 128 * st.head / rate(128) + 128 * st.gemm_expert / rate(per_expert / 2)) \
        / sm.gemm_rate
    assert float(t["gemm_tbo"][0, 0]) == pytest.approx(want)
    assert float(t["gemm_tbo"][0, 0]) > float(t["gemm"][0, 0])


def test_decode_server_only_decodes(check_spec):
    """A spec of SGLang's decode side alone (``disaggregation = decode``): its requests arrive
    prefilled, so every rank decodes at its running cap, --max-running-requests 512 over 16
    attention-DP ranks = 32, with 2,000 users waiting; no prompt step, and TTFT is the queue for
    a slot and the first decode step. A closed loop of 2,000 users over 16 ranks is 125 a rank;
    32 of them decode, the rest queue: each request takes 100 steps (the first decode and 99
    more), X = 32 / (99·τ) a rank, so the queue is 125 / X − 100·τ."""
    serve = ("dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.85; max_num_seqs = 512; "
             "prompt_tokens = 1000; output_tokens = 100; concurrency = 2000")
    plan = _plan(check_spec, serve, {"sglang": LOW + "; disaggregation = decode"})
    est, sm = _model(plan)
    sv = est.serving
    tau = sm.step(32.0, 0.0, 1050.0, 500.0)
    assert sv.batch == pytest.approx(32.0)
    assert sv.mixed == [] and sv.mixed_share == 0.0
    assert list(sv.ttft_terms) == ["queue", "first_decode"]
    assert sv.step == pytest.approx(tau)
    assert sv.ttft_terms["first_decode"] == pytest.approx(tau)
    x = 32 / (99 * tau)
    assert sv.ttft_terms["queue"] == pytest.approx(125 / x - 100 * tau)
    assert sv.output_tokens_per_s == pytest.approx(16 * x * 100)
    assert sv.limit == "seqs"


def test_explain_shows_no_prefill_for_a_decode_server(check_spec):
    """explain says what the cost model does for a decode server alone: no prompt step runs on
    it (its TTFT has no prefill term), so no prefill time is shown, in the text or the HTML; the
    same server colocated still shows its prefill."""
    from parc.report.explain import render_text
    from parc.report.explain_serve import html_rows

    serve = ("dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.85; max_num_seqs = 512; "
             "prompt_tokens = 1000; output_tokens = 100; concurrency = 2000")
    plan = _plan(check_spec, serve, {"sglang": LOW + "; disaggregation = decode"})
    est, _ = _model(plan)
    rows = {r[0]: r[1] for r in (line.split(None, 1) for line in render_text(plan, est, "s.par").splitlines()
                                 if line.startswith("  prefill"))}
    assert list(rows) == ["prefill"]
    assert rows["prefill"].startswith("none on this server") and "per prompt" not in rows["prefill"]
    html = dict(html_rows(est.to_json()["serving"], decode_only=True))
    assert html["prefill"].startswith("none on this server")

    colocated = _plan(check_spec, serve, {"sglang": LOW})
    est, _ = _model(colocated)
    text = render_text(colocated, est, "s.par")
    assert "  prefill      " in text and "a step of a prompt's chunk" in text and "none on this server" not in text
    assert "per prompt alone" in dict(html_rows(est.to_json()["serving"]))["prefill"]


def test_draw_shows_no_prefill_for_a_decode_server(check_spec):
    """draw's serving timeline runs what the cost model runs on a decode server alone: decode
    steps from the start, each as long as explain's decode step, no prompt chunk; its TTFT, TPOT
    and step are explain's, and its caption's TTFT is explain's line. The same server colocated
    still draws its prompt's chunks first."""
    from xml.etree import ElementTree as ET

    from parc.report.explain import render_text
    from parc.report.svg_serve import timeline

    serve = ("dp_attention = true; max_model_len = 4096; gpu_memory_utilization = 0.85; max_num_seqs = 512; "
             "prompt_tokens = 1000; output_tokens = 100; concurrency = 2000")
    plan = _plan(check_spec, serve, {"sglang": LOW + "; disaggregation = decode"})
    est, _ = _model(plan)
    root = ET.fromstring(timeline(plan, est))
    blocks = [e for e in root.iter() if (e.get("class") or "").startswith("block")]
    assert blocks and {e.get("data-kind") for e in blocks} == {"D"}
    texts = [e.text or "" for e in root.iter() if e.tag.endswith("text")]
    assert not any("prompt chunk" in t for t in texts)
    sv = est.to_json()["serving"]
    assert (float(root.get("data-ttft")), float(root.get("data-tpot")), float(root.get("data-step"))) == \
        (sv["ttft"], sv["tpot"], sv["step"])
    assert min(float(e.get("data-start")) for e in blocks) == 0.0
    for e in blocks:
        assert float(e.get("data-end")) - float(e.get("data-start")) == pytest.approx(
            est.serving.decode[int(e.get("data-rank"))].time)
    ttft = next(line.split(None, 1)[1] for line in render_text(plan, est, "s.par").splitlines()
                if line.startswith("  TTFT"))
    assert any(t.startswith("TTFT " + ttft + ";") for t in texts), (ttft, texts[:3])

    colocated = _plan(check_spec, serve, {"sglang": LOW})
    est, _ = _model(colocated)
    kinds = [e.get("data-kind") for e in ET.fromstring(timeline(colocated, est)).iter()
             if (e.get("class") or "").startswith("block")]
    assert kinds[0] == "P" and "D" in kinds
