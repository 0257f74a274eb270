"""What explain's rows say agrees with the numbers beside them: the weights' precision is the
one they are stored in, a serving plan shows no training collective, and the HTML page's
communication table carries the columns of the text's."""
from __future__ import annotations

import re
from pathlib import Path

from parc.api import check_file
from parc.cost.estimate import estimate
from parc.report.explain import render_text
from parc.report.html import explain_page

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"


def _explain(name: str):
    r = check_file(EX / name) if "/" not in name else check_file(ROOT / name)
    est = estimate(r.plan)
    return r.plan, est, render_text(r.plan, est, name), explain_page(r.plan, est)


def _weights_row(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.strip().startswith("weights "))


def test_fp8_serving_weights_are_labelled_at_one_byte():
    plan, est, text, _ = _explain("deepseek-v3-wide-ep.par")
    row = _weights_row(text)
    assert "fp8" in row and "1 B/param" in row and "bf16, 2 B/param" not in row, row


def test_fp8_training_keeps_bf16_weights_and_says_so():
    plan, est, text, _ = _explain("examples/published/deepseek_v3.par")
    row = _weights_row(text)
    assert "bf16, 2 B/param" in row and "FP8 GEMMs on copies" in row, row
    assert est.state_bytes.weights == 2


def test_a_serving_plan_shows_no_training_collective():
    for name in ("deepseek-v3-wide-ep.par", "llama3-70b-serve.par", "llama3-405b-serve-2node.par"):
        plan, est, text, page = _explain(name)
        comm = text.split("Communication per GPU", 1)[1].split("\n\n", 1)[0]
        assert "gradient" not in comm and not re.search(r"^\s+dp\s", comm, re.M), comm
        html = page.split('id="communication"', 1)[1].split("</section>", 1)[0]
        assert "<td>dp</td>" not in html and "gradient" not in html


def test_the_html_communication_table_carries_the_texts_columns():
    for name, cols in (("llama3-70b-train.par", ["axis", "collective", "bytes", "link", "bandwidth", "algorithm",
                                                  "time", "exposed"]),
                       ("deepseek-v3-wide-ep.par", ["axis", "collective", "bytes", "link", "bandwidth", "algorithm",
                                                    "time"])):
        plan, est, text, page = _explain(name)
        html = page.split('id="communication"', 1)[1].split("</section>", 1)[0]
        assert re.findall(r"<th>([^<]*)</th>", html) == cols, name
        head = text.split("Communication per GPU", 1)[1].splitlines()[1].split()
        assert head == cols, head
        # the same cells: the text's rows, word for word, are the page's
        rows = [ln.split("  ") for ln in text.split("Communication per GPU", 1)[1].split("\n\n")[0].splitlines()[3:]]
        for r in rows:
            cells = [c.strip() for c in r if c.strip()]
            assert f"<td>{cells[0]}</td>" in html and all(c in html for c in cells), (cells, html)


def _compute_row(tmp_path, capsys, train: str, extra: str = "") -> str:
    """`parc explain`'s compute row of llama3-70b-train.par (64 H100s) with ``train`` lines added
    to its train block and ``extra`` after it, without its target blocks."""
    from parc.cli.main import main

    text = (EX / "llama3-70b-train.par").read_text(encoding="utf-8").split("target ", 1)[0]   # no engine's rules
    (tmp_path / "clusters").mkdir(exist_ok=True)
    cluster = EX / "clusters" / "dgx-h100-8node.par"
    (tmp_path / "clusters" / cluster.name).write_text(cluster.read_text(encoding="utf-8"), encoding="utf-8")
    text = text.replace("  recompute         = selective\n", f"  recompute         = selective\n{train}") + extra
    spec = tmp_path / "plan.par"
    spec.write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert main(["explain", str(spec)]) == 0, capsys.readouterr().err
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("compute "))


def test_the_gemm_rate_of_the_largest_shapes_is_the_one_of_the_plans_precision(tmp_path, capsys):
    """FP8 GEMMs run at the FP8 matmul benchmark (H100 SXM: 70.9% of the FP8 peak, gpus.toml),
    not BF16's 80.3%; the output head stays BF16 and is said to."""
    bf16 = _compute_row(tmp_path, capsys, "")
    assert "(BF16 peak; 80.3% for the largest shapes)" in bf16, bf16
    fp8 = _compute_row(tmp_path, capsys, "  precision = fp8\n")
    assert "(FP8 peak; 70.9% for the largest shapes; the output head's in BF16 at 80.3% of 989TFLOP/s)" in fp8, fp8
    # a recipe that keeps the weight gradients in BF16 (torchao's rowwise_with_gw_hp) says so
    hp = _compute_row(tmp_path, capsys, "  precision = fp8\n  fp8_recipe = rowwise_with_gw_hp\n  framework = torchtitan\n")
    assert "70.9% for the largest shapes; the output head's and the weight gradients' in BF16 at 80.3%" in hp, hp
    # a recipe with its own kernel rate (DeepGEMM's blockwise: 78.3%, kernels.toml)
    block = _compute_row(tmp_path, capsys, "  precision = fp8\n  fp8_recipe = blockwise\n")
    assert "(FP8 peak; 78.3% for the largest shapes;" in block, block


def test_a_profile_scales_the_fp8_gemm_rate_as_the_cost_model_does(tmp_path, capsys):
    """A profile's gemm_efficiency of 0.6 scales FP8's rate alike: 70.9% × 0.6 / 80.3% = 53%."""
    row = _compute_row(tmp_path, capsys, "  precision = fp8\n", 'profile "lab" {\n  gemm_efficiency = 0.6\n}\n')
    assert "(FP8 peak; 53% for the largest shapes; the output head's in BF16 at 60% of 989TFLOP/s)" in row, row
