"""The known defects (P7xx) against the engines' own code, in the judge environments: vLLM 0.33,
a release P701 holds for, computes NixlConnector's handshake check with its own TransferTopology;
SGLang 0.5.23, a release P703 holds for (and P702's fixed one), runs its own KV sender's check
for a pipelined prefill server. parc's verdict on each pool pair is the engine's."""
from __future__ import annotations

import pytest

from support import judges
from support import sglang as sglang_judge
from support.serving_specs import pd

VLLM_MARK = "@@vllm-judge "
# (prefill tp, decode tp, model): NixlConnector pairs parc checks, for Qwen3-30B-A3B (4 KV heads)
# and DeepSeek-V2-Lite (MLA)
QWEN, MLA = "from = qwen3_30b_a3b", "from = deepseek_v2_lite"
PAIRS = [(8, 4, QWEN), (8, 2, QWEN), (8, 1, QWEN), (4, 2, QWEN), (4, 1, QWEN), (2, 1, QWEN), (4, 8, QWEN),
         (8, 8, QWEN), (8, 4, MLA)]


@pytest.fixture(scope="module")
def vllm_python(tmp_path_factory):
    proc = judges.start("vllm", "PARC_VLLM_PYTHON", tmp_path_factory.mktemp("judge") / "stderr")
    yield proc
    judges.stop(proc)


@pytest.fixture(scope="module")
def sglang_python(tmp_path_factory):
    proc = sglang_judge.start(tmp_path_factory)
    yield proc
    judges.stop(proc)


@pytest.mark.vllm
def test_p701_is_vllm_0_33s_handshake_check(vllm_python, check_spec):
    items, verdicts = [], []
    for pt, dt, model in PAIRS:
        r = check_spec(pd(f"tp = {pt}", f"tp = {dt}", model=model, nodes=2).replace(
            'model = "m"', 'model = "m"\n  version = "0.33"'), ("vllm",))
        verdicts.append("P701" in {d.code for d in r.diagnostics})
        items.append({"nixl_handshake": {"prefill_tp": pt, "decode_tp": dt, "kv_heads": r.plan.model.kv_heads,
                                         "mla": r.plan.model.is_mla}})
    answers = judges.ask(vllm_python, VLLM_MARK, items)
    for (pt, dt, model), fired, got in zip(PAIRS, verdicts, answers):
        assert fired == (not got["ok"]), (pt, dt, model, fired, got)
    assert sum(verdicts) == 3      # 8 -> 4, 8 -> 2, 8 -> 1 for 4 KV heads


@pytest.mark.sglang
def test_p703_is_sglang_0_5_23s_sender_check(sglang_python, check_spec):
    fired = []
    for pp in (1, 2):
        text = pd(f"tp = 4; pp = {pp}", "tp = 8", model="from = gpt_oss_120b", nodes=2).replace(
            'target vllm {\n  model = "m"\n}', 'target sglang {\n  model = "m"\n  version = "0.5.23"\n}')
        fired.append("P703" in {d.code for d in check_spec(text, ("sglang",)).diagnostics})
    answers = sglang_judge.ask(sglang_python, [{"swa_slice": {"pp_size": pp}} for pp in (1, 2)])
    assert fired == [not a["ok"] for a in answers] == [False, True], (fired, answers)
    assert "with pipeline parallelism yet" in answers[1]["error"]
