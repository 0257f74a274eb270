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
