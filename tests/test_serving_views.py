"""Every pool of a disaggregated plan where a user looks: explain's text, JSON and HTML page, and
`parc draw --what mesh|memory|timeline` show each pool (its instances and their GPUs) and the KV
transfer between them, and count every GPU the plan uses. And one serving plan, one set of
numbers: check, explain, draw and `parc plan --serve` agree on TTFT, TPOT, the step and the GPUs
of an instance, for every serving example."""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from parc.api import check_file
from parc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PD = str(ROOT / "examples" / "deepseek-v3-pd.par")
SERVING = sorted(str(p) for p in (ROOT / "examples").glob("*.par")
                 if "serve {" in p.read_text(encoding="utf-8"))


def _run(*argv) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(list(argv))
    return buf.getvalue()


def _svg(*argv) -> ET.Element:
    return ET.fromstring(_run("draw", *argv))


def test_the_examples_include_pools():
    assert PD in SERVING and len(SERVING) >= 5


def test_explain_text_shows_every_pool_and_counts_every_gpu():
    out = _run("explain", PD)
    # the example: 2 prefill instances of tp 8 (16 GPUs) and a decode engine of dp 2 · tp 8 (16)
    assert "Pools (32 GPUs in all" in out
    assert re.search(r"prefill\s+2\s+8\s+16\s+tp 8, ep 8", out)
    assert re.search(r"decode\s+1\s+16\s+16\s+dp 2, tp 8, ep 16", out)
    assert "Pool prefill, one instance:" in out and "Pool decode, one instance:" in out
    assert out.count("Mesh and rank map") == 2
    assert "KV transfer" in out


def test_explain_json_carries_every_pool():
    j = json.loads(_run("explain", PD, "--format", "json"))
    pools = j["serving"]["pools"]
    assert {k: (p["instances"], p["gpus_per_instance"], p["gpus"]) for k, p in pools.items()} == {
        "prefill": (2, 8, 16), "decode": (1, 16, 16)}
    for p in pools.values():
        assert p["rank_map"]["axes"]["tp"]["size"] == 8 and p["comm_per_token"]["tp"] > 0
        assert p["stages"] and p["engine"]["engine"] == "vllm"
    assert j["world_size"] == 32
    assert list(j["serving"]["ttft_terms"]) == ["queue", "prefill", "kv_transfer", "first_decode"]


def test_html_page_draws_and_counts_every_pool(tmp_path):
    page = tmp_path / "pd.html"
    main(["explain", PD, "--html", str(page)])
    text = page.read_text(encoding="utf-8")
    assert "prefill 2 × 8 GPUs (tp 8, ep 8) and decode 1 × 16 GPUs (dp 2, tp 8, ep 16)" in text
    assert ">32 (prefill 16 + decode 16)<" in text
    assert re.findall(r'<h2>Pool (\w+):', text) == ["prefill", "decode"]
    # each pool's rank map and memory, then the timeline of both
    assert re.findall(r'<svg [^>]*class="parc-(\w+)"', text) == ["mesh", "memory", "mesh", "memory", "timeline"]


def test_draw_mesh_and_memory_show_every_pool():
    for what in ("mesh", "memory"):
        root = _svg(PD, "--what", what)
        assert root.get("data-world") == "32" and root.get("data-pools") == "prefill:2x8,decode:1x16"
        inner = [e for e in root.iter() if e.tag.endswith("svg") and e is not root]
        assert len(inner) == 2, what
    mesh = _svg(PD, "--what", "mesh")
    gpus = [e for e in mesh.iter() if e.get("class") == "gpu"]
    assert len(gpus) == 8 + 16     # one instance of each pool


def test_draw_timeline_draws_both_pools_and_the_transfer():
    root = _svg(PD, "--what", "timeline")
    blocks = [e for e in root.iter() if (e.get("class") or "").startswith("block")]
    pools = {e.get("data-pool") for e in blocks}
    assert pools == {"prefill", "kv_transfer", "decode"}
    assert root.get("data-gpus") == "prefill:8,decode:16"
    labels = [e.text for e in root.iter() if e.tag.endswith("text")]
    assert "every GPU" not in labels and "KV transfer" in labels
    k = next(e for e in blocks if e.get("data-kind") == "K")
    p = max((e for e in blocks if e.get("data-kind") == "P"), key=lambda e: float(e.get("data-end")))
    d = min((e for e in blocks if e.get("data-kind") == "D"), key=lambda e: float(e.get("data-start")))
    assert float(k.get("data-start")) == pytest.approx(float(p.get("data-end")))
    assert float(d.get("data-start")) == pytest.approx(float(k.get("data-end")))


# --- one story per serving example ---------------------------------------------------------------

def _planner_numbers(path: str, plan):
    """``parc plan --serve``'s numbers for the example's own deployment: its instances costed by
    the planner's seam, the deployment by the search's evaluation."""
    from parc.planner.inputs import load_spec
    from parc.planner.serve_search import evaluate_deployment

    return evaluate_deployment(load_spec(path), plan)


@pytest.mark.parametrize("path", SERVING, ids=lambda p: Path(p).name)
def test_check_explain_draw_and_plan_tell_one_story(path):
    from parc.model.pools import instance_gpus, pool_plans

    r = check_file(path)
    assert not r.errors
    plan = r.plan
    gpus = {p.name: instance_gpus(pp.mesh) for p, pp in pool_plans(plan)} or {"serve": instance_gpus(plan.mesh)}
    j = json.loads(_run("explain", path, "--format", "json"))
    sv = j["serving"]
    if plan.pools:
        assert {k: p["gpus_per_instance"] for k, p in sv["pools"].items()} == gpus
    root = _svg(path, "--what", "timeline")
    assert (float(root.get("data-ttft")), float(root.get("data-tpot")), float(root.get("data-step"))) == \
        (sv["ttft"], sv["tpot"], sv["step"])
    assert root.get("data-gpus") == ",".join(f"{k}:{v}" for k, v in gpus.items())
    d = _planner_numbers(path, plan)
    assert (d.ttft, d.tpot, d.step) == (sv["ttft"], sv["tpot"], sv["step"])
    assert d.gpus_per_instance == gpus
    # check reads the same workload and replicas (P406/P407's helper)
    from parc.cost.estimate import estimate
    from parc.cost.serving import serve_load

    w, dec = serve_load(plan, estimate(plan))
    assert (w.prompt_tokens, w.output_tokens, w.concurrency) == tuple(
        sv["workload"][k] for k in ("prompt_tokens", "output_tokens", "concurrency"))
    assert dec.ranks == sv["replicas"]
