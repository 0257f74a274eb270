"""The serving rules of issue #15 for vLLM: decode context parallel, EPLB, the all-to-all backend,
the KV connector of a disaggregated plan (P121-P126 for both engines, P666-P673 vLLM's own), each
with a spec that trips it and one that passes, and the flags the vllm target emits for them.
vLLM's own verdict on the same plans is tests/test_vllm_judge.py's."""
from __future__ import annotations

import json

import pytest

from support.serving_specs import CASES, DS, L70, VLLM, pd
from support.specs import spec

@pytest.mark.parametrize("code,bad,good", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_and_keeps_quiet(check_spec, code, bad, good):
    fired = check_spec(bad, ("vllm",))
    assert code in {d.code for d in fired.diagnostics}, [f"{d.code} {d.message}" for d in fired.diagnostics]
    quiet = check_spec(good, ("vllm",))
    assert code not in {d.code for d in quiet.diagnostics}, [f"{d.code} {d.message}" for d in quiet.diagnostics]


def test_eplb_message_gives_the_next_multiple(check_spec):
    r = check_spec(CASES[4][1], ("vllm",))
    d = next(d for d in r.errors if d.code == "P125")
    # 256 + 0 = 256 over ep 3: the next multiple of 3 is 258 = 3 x 86, so 2 redundant experts
    assert "256 do not divide over ep = 3" in d.message and "redundant_experts = 2 (258 = 3 × 86)" in d.help
    assert "refuses it only when it builds the model" in d.message


def test_dcp_eplb_all2all_flags(check_spec):
    from parc.targets.vllm import serve_lines

    r = check_spec(spec(DS, mesh="dp = 8; ep = 8; dcp = 1", serve="max_model_len = 4096; eplb = true; "
                        "redundant_experts = 8; eplb_interval = 2000",
                        target={"vllm": 'model = "m"; all2all_backend = deepep_high_throughput'}), ("vllm",))
    words = [str(w) for ln in serve_lines(r.plan, None) for w in ln]
    assert "--decode-context-parallel-size" not in words
    i = words.index("--eplb-config")
    # only the keys the spec sets; vLLM's EPLBConfig defaults window_size to 1000
    assert json.loads(words[i + 1]) == {"step_interval": 2000, "num_redundant_experts": 8}
    assert "--enable-eplb" in words and words[words.index("--all2all-backend") + 1] == "deepep_high_throughput"
    r = check_spec(spec(L70, nodes=2, mesh="tp = 16; dcp = 2", placement="tp on inter_node",
                        serve="max_model_len = 4096", target=VLLM), ("vllm",))
    words = [str(w) for ln in serve_lines(r.plan, 0) for w in ln]
    assert words[words.index("--decode-context-parallel-size") + 1] == "2"


def test_pooled_plan_compiles_one_launch_per_pool(check_spec):
    from parc.targets.vllm import build

    r = check_spec(pd("instances = 4; tp = 4; ep = 4", "tp = 8\n  ep = 8", kv="mooncake", model="from = mixtral_8x7b",
                       nodes=3), ("vllm",))
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    files = {f.path: f.text for f in build(r.plan)}
    assert sorted(files) == ["decode-serve.sh", "plan.json", "prefill-serve.sh", "proxy.sh"]
    # 4 prefill instances of 4 GPUs: two share a node, each its own GPUs and port
    pre = files["prefill-serve.sh"]
    assert "gpus=(0,1,2,3 4,5,6,7)" in pre and "port=$(( 8100 + slot ))" in pre
    assert '\'{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}\'' in pre
    assert '"kv_role":"kv_consumer"' in files["decode-serve.sh"]
    # the proxy's ports: instance i of the prefill pool listens on 8100 + i % 2
    assert "--prefiller-ports 8100 8101 8100 8101" in files["proxy.sh"]
    assert "--decoder-ports 8200" in files["proxy.sh"]


def test_p667_dcp_spanning_tp_and_prefill_cp(check_spec):
    # beside prefill context parallel vLLM lets dcp span tp · cp (P666), but judges it against tp
    # alone on a grouped-query model: 32 > 16 // 8 KV heads = 2
    text = spec("from = llama3_8b; max_positions = 131072", nodes=4, mesh="tp = 16; cp = 2; dcp = 32",
                serve="max_model_len = 131072", target=VLLM)
    r = check_spec(text, ("vllm",))
    d = next(d for d in r.errors if d.code == "P667")
    assert "exceeds tp // kv_heads = 16 // 8 = 2" in d.message and "against tp alone" in d.message
    assert "P666" not in {x.code for x in r.diagnostics}
    ok = check_spec(text.replace("dcp = 32", "dcp = 2"), ("vllm",))
    assert "P667" not in {x.code for x in ok.diagnostics}
    # without prefill context parallel a dcp that does not divide tp stays P121's
    r = check_spec(spec("from = llama3_8b", nodes=2, mesh="tp = 16; dcp = 32", serve="max_model_len = 4096",
                        target=VLLM), ("vllm",))
    assert {"P121"} <= {x.code for x in r.errors} and "P667" not in {x.code for x in r.errors}
