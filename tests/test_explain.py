"""parc explain: JSON keys and values, the text tables, refusals."""
from __future__ import annotations

import json
import sys
import types

import pytest

from conftest import ROOT
from parc.api import check_file, load_plan
from parc.cli.main import main
from parc.cost import estimate as cm

DATA = ROOT / "tests" / "data" / "explain"
TRAIN = DATA / "llama3-70b-train.par"
SERVE = DATA / "llama3-70b-serve.par"
MOE = DATA / "mixtral-ep-train.par"

# the keys scripts rely on (docs/json.md)
KEYS = {
    "world_size": None, "mesh": {"order", "pp", "dp", "cp", "tp", "ep"},
    "params": {"total", "most_loaded_gpu"}, "microbatches": None, "bubble_fraction": None,
    "inflight_microbatches": None,
    "memory_per_gpu": {"weights", "grads", "optimizer", "activations", "kv_cache", "total", "capacity"},
    "activation_bytes_per_layer": None, "kv_cache": {"bytes_per_token_per_gpu", "capacity_tokens"},
    "comm_per_step": {"tp", "cp", "dp", "pp", "ep"}, "tokens_per_step": None, "model_flops_per_step": None,
    "step_time": None, "mfu": None,
}


def explain_json(capsys, path, *extra):
    rc = main(["explain", str(path), "--format", "json", *extra])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


@pytest.mark.parametrize("path", [TRAIN, SERVE, MOE])
def test_json_has_contract_keys(capsys, path):
    j = explain_json(capsys, path)
    for key, sub in KEYS.items():
        assert key in j, key
        if sub:
            assert sub <= set(j[key]), (key, sub - set(j[key]))


def test_json_training_values(capsys):
    j = explain_json(capsys, TRAIN)
    assert j["world_size"] == 64
    assert j["mesh"] == {"order": ["pp", "dp", "cp", "tp"], "pp": 4, "dp": 2, "cp": 1, "tp": 8, "ep": 1, "etp": 1}
    assert j["microbatches"] == 1024 // 2
    # interleaved, v = 2: (p-1)/(v·m+p-1); first stage holds p(1 + (p-1)/(p·v)) microbatches
    assert j["bubble_fraction"] == pytest.approx(3 / (2 * 512 + 3))
    assert j["inflight_microbatches"] == pytest.approx(4 * (1 + 3 / 8))
    mem = j["memory_per_gpu"]
    assert mem["capacity"] == 85520809984
    assert mem["total"] <= mem["capacity"] and mem["kv_cache"] == 0
    parts = ("weights", "grads", "optimizer", "activations", "kv_cache", "fp8_weights", "cuda_context",
             "nccl_buffers", "fragmentation")
    assert abs(mem["total"] - sum(mem[k] for k in parts)) <= len(parts)
    # bf16 weights, fp32 main grads: grads are exactly twice the weights; Adam's 12 B over dp = 2
    assert mem["grads"] == pytest.approx(2 * mem["weights"], abs=2)
    assert mem["optimizer"] == pytest.approx(3 * mem["weights"], abs=2)
    stage = j["stages"][j["most_loaded_stage"]]
    assert mem["weights"] == 2 * stage["params"]
    assert j["params"]["most_loaded_gpu"] == max(s["params"] for s in j["stages"])
    assert j["kv_cache"] == {"bytes_per_token_per_gpu": 0, "capacity_tokens": 0, "max_concurrent_seqs": 0}
    assert j["tokens_per_step"] == 1024 * 8192
    assert j["comm_per_step"]["tp"] > j["comm_per_step"]["dp"] > 0
    assert j["comm_per_step"]["cp"] == 0 and j["comm_per_step"]["ep"] == 0
    assert j["comm_link"]["tp"] == "intra_node" and j["comm_link"]["dp"] == "inter_node"
    assert 0 < j["mfu"] < 1 and j["step_time"] > 0
    assert j["rank_map"]["axes"]["tp"]["nodes_spanned"] == 1
    assert j["diagnostics"] == []


def test_json_serving_values(capsys):
    j = explain_json(capsys, SERVE)
    assert j["mode"] == "serve" and j["world_size"] == 4
    assert j["kv_cache"]["bytes_per_token_per_gpu"] == 81_920
    assert j["kv_cache"]["capacity_tokens"] > 8192
    assert j["microbatches"] == 0 and j["bubble_fraction"] == 0 and j["step_time"] == 0 and j["mfu"] == 0
    mem = j["memory_per_gpu"]
    assert mem["grads"] == mem["optimizer"] == 0
    # the engine's profiling pass: 2 · 2048 tokens (vLLM's default chunk on an A100) · (2 · 8192 + 3 · 28672/4)
    assert mem["activations"] == 2 * 2048 * (2 * 8192 + 3 * 28672 // 4)
    # vLLM's budget (0.9 of the GPU) holds all but the CUDA context and NCCL buffers, which come
    # before its memory snapshot; the whole stays within the GPU
    assert mem["total"] - mem["cuda_context"] - mem["nccl_buffers"] <= 0.9 * mem["capacity"] < mem["total"]
    assert mem["total"] <= mem["capacity"]
    assert "P404" in [d["code"] for d in j["diagnostics"]]   # warnings ride along


def test_json_moe(capsys):
    j = explain_json(capsys, MOE)
    assert j["mesh"]["ep"] == 8 and j["comm_per_step"]["ep"] > 0
    assert j["params"]["by_part"]["experts"] > 0
    assert set(j["rank_map"]["axes"]) >= {"ep", "etp"}


def test_text_report(capsys):
    assert main(["explain", str(TRAIN)]) == 0
    out = capsys.readouterr().out
    for heading in ("Mesh and rank map", "Memory per GPU", "Communication per GPU per step",
                    "Schedule and time"):
        assert heading in out
    assert "TP stays inside a node" in out
    lines = out.splitlines()
    # the communication table's columns line up
    i = next(n for n, ln in enumerate(lines) if ln.strip().startswith("axis  collective"))
    rows = [ln for ln in lines[i + 2:i + 5] if ln.strip()]
    link_col = lines[i].index("link")
    assert all(r[link_col:].startswith(("intra_node", "inter_node")) for r in rows)
    assert f"MFU          {100 * cm.estimate(load_plan(TRAIN)).mfu:.3g}%" in out


def test_explains_a_spec_with_errors_and_names_the_overflow(capsys, tmp_path):
    """A plan that does not fit is explained as written (exit 1): its errors first, then the
    numbers, with the memory error's fix under the memory table; JSON carries the full estimate
    with the errors among its diagnostics."""
    bad = DATA / "train-memory-too-big.par"
    assert main(["explain", str(bad)]) == 1
    cap = capsys.readouterr()
    assert "P401" in cap.err and "cannot explain" not in cap.err
    p401 = next(d for d in check_file(bad).diagnostics if d.code == "P401")
    assert "The spec has 1 error (P401, listed above); the numbers below are the plan as written." in cap.out
    memory = cap.out[cap.out.index("Memory per GPU"):cap.out.index("Communication per GPU")]
    assert "OVER" in memory and f"does not fit (P401): {p401.help}" in memory
    assert main(["explain", str(bad), "--format", "json"]) == 1
    cap = capsys.readouterr()
    assert cap.err == ""
    j = json.loads(cap.out)
    assert [d["code"] for d in j["diagnostics"] if d["severity"] == "error"] == ["P401"]
    mem = j["memory_per_gpu"]
    assert mem["total"] > mem["capacity"] and j["step_time"] > 0
    page = tmp_path / "page.html"
    assert main(["explain", str(bad), "--html", str(page)]) == 1
    html = page.read_text()
    assert "The spec has 1 error; the numbers below are the plan as written." in html
    assert "Does not fit (P401): " in html and 'class="card bad"' in html


@pytest.mark.parametrize("text", [
    'model "m" { from = llama3_8b }\nmesh { tp = 2 }\n',    # no cluster to place it on
    'model "m" { from = llama3_8b }\ncluster "c" {\n  nodes = 1\n  gpus_per_node = 8\n  gpu = h100_sxm\n}\n'
    'mesh {\n  tp = 3\n  dp = auto\n}\ntrain {}\n',          # dp = 8 / 3 is no whole size
], ids=["no-cluster", "auto-not-whole"])
def test_refuses_only_a_mesh_that_cannot_be_laid_out(capsys, tmp_path, text):
    """No numbers follow from a spec whose mesh cannot be laid out on ranks: it is refused with
    its errors, not explained and not a traceback."""
    spec = tmp_path / "spec.par"
    spec.write_text(text)
    assert main(["explain", str(spec)]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "cannot explain" in cap.err and "Traceback" not in cap.err


def test_target_rules_apply(capsys):
    assert main(["explain", str(TRAIN), "--target", "vllm"]) == 1
    assert "P601" in capsys.readouterr().err


def test_missing_file(capsys, tmp_path):
    assert main(["explain", str(tmp_path / "nope.par")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_html_without_module(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "parc.report.html", None)
    out = tmp_path / "p.html"
    assert main(["explain", str(TRAIN), "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "parc.report.html" in err
    assert not out.exists()


def test_html_with_module(capsys, tmp_path, monkeypatch):
    seen = {}

    def explain_page(plan, est, diagnostics=()):
        seen["args"] = (plan, est)
        return f"<html>{est.world_size}</html>"

    fake = types.ModuleType("parc.report.html")
    fake.explain_page = explain_page
    monkeypatch.setitem(sys.modules, "parc.report.html", fake)
    out = tmp_path / "p.html"
    assert main(["explain", str(TRAIN), "--html", str(out), "--format", "json"]) == 0
    assert out.read_text() == "<html>64</html>"
    assert isinstance(seen["args"][1], cm.Estimate)
    assert json.loads(capsys.readouterr().out)["world_size"] == 64


def test_json_serving_comm_is_per_token(capsys):
    j = explain_json(capsys, SERVE)
    assert set(j["comm_per_step"].values()) == {0}
    # two all-reduces of one token's hidden state per layer, 80 layers, tp = 4
    assert j["comm_per_token"]["tp"] == 80 * 2 * cm.allreduce_bytes(8192 * 2, 4)
    # α-β (parc.cost.comm.allreduce_times): 160 all-reduces of S = 16,384 B over 4 A100s (no
    # NVLS); the tree's 2·log2(4) = 4 steps of 2 µs beat the ring's 2·3 = 6, and it moves 2S per
    # call over 300 GB/s: 160 · (4 · 2e-6 + 2 · 16384 / 300e9) = 1.29748 ms
    # (the old bandwidth-only figure, 13.1 µs, left out the 960 latency steps a token pays)
    assert j["comm_time_per_token"]["tp"] == pytest.approx(160 * (4 * 2e-6 + 2 * 16384 / 300e9))
    assert j["comm_algorithm"]["tp"] == "tree"


def test_a_serving_plan_that_does_not_fit_names_the_smallest_mesh(capsys, tmp_path):
    spec = tmp_path / "big.par"
    spec.write_text('model "llama3-70b" { from = llama3_70b }\n'
                    'cluster "one" {\n  nodes = 1\n  gpus_per_node = 1\n  gpu = a100_sxm_80gb\n}\n'
                    'mesh { tp = 1 }\nserve { max_model_len = 4096 }\n')
    assert main(["explain", str(spec)]) == 1
    out = capsys.readouterr().out
    table = out[out.index("Memory per GPU"):]
    lines = table.splitlines()
    total = next(i for i, ln in enumerate(lines) if ln.strip().startswith("total"))
    assert lines[total].endswith("OVER")
    assert lines[total + 1].startswith("  does not fit (P402): the smallest mesh that holds the weights")


def test_explain_states_the_context_each_engine_derives(check_spec):
    # Llama 3.1 (131072 positions, llama3 RoPE scaling of factor 8 from 8192) for vLLM and SGLang:
    # both read the positions as already scaled; a linear scaling of factor 2 over them doubles it
    from parc.cost.estimate import estimate
    from parc.report.explain_serve import kv_lines
    from support.specs import spec

    text = spec("from = llama3_1_8b", mesh="tp = 8", serve="max_model_len = 65536",
                target={"vllm": 'model = "m"', "sglang": 'model = "m"'})
    r = check_spec(text)
    lines = [ln for ln in kv_lines(r.plan, estimate(r.plan)) if "context:" in ln]
    assert [ln.split(" tokens ")[1].split(" derives")[0] for ln in lines] == ["vLLM", "SGLang"]
    assert all("of the 131,072 tokens" in ln and "llama3 RoPE scaling already counted" in ln for ln in lines)
    r = check_spec(text.replace("from = llama3_1_8b", "from = llama3_1_8b\n  rope_scaling = linear\n  rope_factor = 2"))
    lines = [ln for ln in kv_lines(r.plan, estimate(r.plan)) if "context:" in ln]
    assert "131,072 positions × linear factor 2 = 262,144" in lines[0]
