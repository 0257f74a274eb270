"""The start-up facts parc reads from the engines against the engines' own code, in the judge
environments: the CUDA graph sizes vLLM 0.33 (VllmConfig._set_cudagraph_sizes) and SGLang 0.5.23
(cuda_graph_hook.py) capture, NixlConnector's kv_role check under prefill context parallelism
(P629, and the role the launch writes) and SGLang's decode-side check of decode context
parallelism in a disaggregated plan (P649). parc's verdict on each case is the engine's."""
from __future__ import annotations

import pytest

from parc.cost.estimate import estimate
from support import judges
from support import sglang as sglang_judge
from support.serving_specs import pd

VLLM_MARK = "@@vllm-judge "
MLA, GQA = "from = deepseek_v2_lite", "from = qwen3_30b_a3b"
SG = 'target sglang {\n  model = "m"\n}'
VL = 'target vllm {\n  model = "m"\n}'


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """``engine(name)``: the vLLM or SGLang judge, started when a test first asks for it."""
    procs = {}

    def get(name):
        if name not in procs:
            procs[name] = (sglang_judge.start(tmp_path_factory) if name == "sglang" else
                           judges.start("vllm", "PARC_VLLM_PYTHON", tmp_path_factory.mktemp("judge") / "stderr"))
        return procs[name]

    yield get
    for proc in procs.values():
        judges.stop(proc)


def _one_gpu(serve: str, target: str = VL) -> str:
    return f'''model "m" {{
  from = llama3_1_8b
}}
cluster "c" {{
  nodes = 1
  gpus_per_node = 1
  gpu = h100_sxm
  intra_node = nvlink(450GB/s)
}}
mesh {{ tp = 1 }}
serve {{
  max_model_len = 8192
{serve}}}
{target}
'''


# (max_num_seqs, max_num_batched_tokens): the defaults, few requests, a step below the largest size
VLLM_LIMITS = [(256, 2048), (1024, 8192), (48, 2048), (5, 2048), (256, 300), (512, 100), (1, 16)]


@pytest.mark.vllm
def test_vllm_capture_sizes_are_vllms(engine, check_spec):
    ours = []
    for seqs, tokens in VLLM_LIMITS:
        r = check_spec(_one_gpu(f"  max_num_seqs = {seqs}\n  max_num_batched_tokens = {tokens}\n"))
        ours.append(list(estimate(r.plan).stages[0].startup.capture.piecewise))
    answers = judges.ask(engine("vllm"), VLLM_MARK, [{"cudagraph_sizes": {"max_num_seqs": s, "max_num_batched_tokens": t}}
                                                  for s, t in VLLM_LIMITS])
    for limits, mine, got in zip(VLLM_LIMITS, ours, answers):
        assert mine == got["sizes"], (limits, mine, got)


@pytest.mark.vllm
def test_p629_is_nixlconnectors_role_check(engine, check_spec):
    """A prefill pool with cp 2 gets kv_producer, which vLLM accepts; a decode pool with cp 2 has
    kv_both (or, if it were written, kv_consumer), which it refuses: P629 fires exactly there."""
    from parc.model.pools import pool_plan
    from parc.targets.vllm import kv_transfer_config

    items, fired = [], []
    for prefill, decode in (("cp = 2; tp = 4", "tp = 8"), ("tp = 8", "cp = 2; tp = 4"), ("tp = 8", "tp = 8")):
        r = check_spec(pd(prefill, decode, model=MLA, nodes=2).replace(VL, VL.replace('"m"', '"m"\n  version = "0.33"')),
                       ("vllm",))
        fired.append("P629" in {d.code for d in r.diagnostics})
        for pool in r.plan.pools:
            role = kv_transfer_config(pool_plan(r.plan, pool), pool.name)["kv_role"]
            items.append((len(fired) - 1, {"nixl_pcp": {"pcp": pool.mesh.cp, "kv_role": role}}))
    answers = judges.ask(engine("vllm"), VLLM_MARK, [it for _, it in items])
    refused = [False] * len(fired)
    for (case, item), got in zip(items, answers):
        refused[case] |= not got["ok"]
        if item["nixl_pcp"]["pcp"] > 1 and item["nixl_pcp"]["kv_role"] == "kv_producer":
            assert got["ok"], got
    assert fired == refused == [False, True, False], (fired, refused, answers)


# (GPU preset, tp, spec's max_num_seqs or None): cuda_graph_max_bs 256 and 512, capped by the spec
SGLANG_CASES = [("h100_sxm", 1, None), ("h100_sxm", 4, None), ("h100_sxm", 1, 100), ("b200", 1, None)]


@pytest.mark.sglang
def test_sglang_capture_sizes_are_sglangs(engine, check_spec):
    ours, items = [], []
    for gpu, tp, seqs in SGLANG_CASES:
        text = _one_gpu(f"  max_num_seqs = {seqs}\n" if seqs else "", SG).replace("h100_sxm", gpu)
        text = text.replace("gpus_per_node = 1", f"gpus_per_node = {tp}").replace("tp = 1", f"tp = {tp}")
        cap = estimate(check_spec(text, ("sglang",)).plan).stages[0].startup.capture
        ours.append((list(cap.full), list(cap.piecewise)))
        items.append({"graph_sizes": {"max_bs": max(cap.full), "chunked_prefill": max(cap.piecewise)}})
    for case, (full, piecewise), got in zip(SGLANG_CASES, ours, sglang_judge.ask(engine("sglang"), items)):
        assert full == got["decode"] and piecewise == got["prefill"], (case, got)
    assert [max(f) for f, _ in ours] == [256, 512, 100, 512]


@pytest.mark.sglang
def test_p649_is_sglangs_decode_dcp_check(engine, check_spec):
    cases = [(GQA, 2), (MLA, 2), (GQA, 1)]
    fired = []
    for model, dcp in cases:
        decode = "tp = 8" + (f"; dcp = {dcp}" if dcp > 1 else "")
        r = check_spec(pd("tp = 8", decode, model=model, nodes=2).replace(VL, SG), ("sglang",))
        fired.append("P649" in {d.code for d in r.diagnostics})
    answers = sglang_judge.ask(engine("sglang"), [{"pd_decode_dcp": {"dcp": dcp, "mla": model == MLA}}
                                               for model, dcp in cases])
    assert fired == [not a["ok"] for a in answers] == [True, False, False], (fired, answers)
    assert "MLA or hybrid-MLA" in answers[0]["error"]


# (mesh, serve, sglang block): what decides which CUDA graphs a server keeps (cuda_graph_hook.py:
# apply_cuda_graph_disaggregation_roles, apply_cuda_graph_compatibility; moe_hook.py _handle_a2a_moe)
GRAPH_CASES = [
    ("tp = 4", "", ""),
    ("tp = 4", "", "disaggregation = prefill"),
    ("tp = 4", "", "disaggregation = decode"),
    ("pp = 2; tp = 2", "", ""),
    ("dp = 4; tp = 1; ep = 4", "dp_attention = true", "moe_a2a_backend = deepep; deepep_mode = normal"),
    ("dp = 4; tp = 1; ep = 4", "dp_attention = true; two_batch_overlap = true", "moe_a2a_backend = deepep"),
    ("dp = 4; tp = 1; ep = 4", "dp_attention = true", "moe_a2a_backend = deepep; deepep_mode = low_latency; "
                                                       "disaggregation = decode"),
]


@pytest.mark.sglang
def test_sglang_keeps_the_graphs_parc_counts(engine, check_spec, tmp_path):
    """A prefill server keeps no decode graph, a decode server no prefill graph; pipeline
    parallelism and two-batch overlap turn the breakable prefill graph off, DeepEP's normal mode
    both: parc's start-up counts exactly the graphs SGLang resolves for the launch parc writes."""
    from support.specs import spec
    from support.sglang import model_folder
    from parc.targets.sglang import server_lines

    ours, items = [], []
    for mesh, serve, block in GRAPH_CASES:
        text = spec("from = qwen3_30b_a3b", gpn=4, mesh=mesh, serve="max_model_len = 8192; "
                    "gpu_memory_utilization = 0.85" + (f"; {serve}" if serve else ""),
                    target={"sglang": 'model = "m"' + (f"; {block}" if block else "")})
        r = check_spec(text, ("sglang",))
        assert not r.errors, [(d.code, d.message) for d in r.errors]
        cap = estimate(r.plan).stages[0].startup.capture
        ours.append((bool(cap.full), bool(cap.piecewise)))
        folder = model_folder(r.plan.to_dict()["model"], tmp_path / f"m{len(items)}")
        argv = ["--model-path", folder] + [str(w) for line in server_lines(r.plan, 0) for w in line]
        items.append({"graph_backends": argv})
    got = sglang_judge.ask(engine("sglang"), items)
    assert [g["ok"] for g in got] == [True] * len(items), got
    theirs = [(g["decode"] != "disabled", g["prefill"] != "disabled") for g in got]
    assert ours == theirs, list(zip(GRAPH_CASES, ours, theirs))
    assert ours == [(True, True), (False, True), (True, False), (True, False), (False, False), (True, False),
                    (True, False)]
