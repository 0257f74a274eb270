"""What the language server answers, in process: the cursor's context in text that does not
parse, completion from parc's data, hover, definition and formatting (no protocol here; the
protocol is tests/test_lsp.py)."""
from __future__ import annotations

from pathlib import Path

from parc.lint.engine import lint_texts
from parc.lsp.analysis import analyse, definition, formatting
from parc.lsp.complete import complete
from parc.lsp.hover import hover
from parc.lsp.scan import context
from parc.language.diagnostics import apply_edits

ROOT = Path(__file__).resolve().parent.parent


def _at(text: str, marker: str = "|") -> tuple[str, int]:
    i = text.index(marker)
    return text[:i] + text[i + 1:], i


def labels(text: str) -> set[str]:
    t, i = _at(text)
    return {x.label for x in complete(t, i)}


def test_context_reads_broken_text():
    t, i = _at('model "m" { from = lla|\ncluster "c" {\n  nodes = 1\n  gp')
    ctx = context(t, i)
    assert ctx.blocks == [("model", "m")] and ctx.key == "from" and ctx.in_value and ctx.word == "lla"
    ctx = context(t, len(t))
    assert ctx.blocks == [("cluster", "c")] and ctx.key is None and ctx.word == "gp"
    t, i = _at('target vllm {\n  # a comment with { and "\n  po|')
    assert context(t, i).blocks == [("target", "vllm")]


def test_completion_from_parcs_data():
    assert {"model", "cluster", "mesh", "serve", "target"} <= labels("|")
    assert {"pp", "dp", "cp", "tp", "ep"} == labels("mesh { | }") - {"etp", "dcp"}
    assert {"llama3_8b", "llama3_70b"} <= labels('model "m" { from = | }')
    assert "h100_sxm" in labels('cluster "c" {\n  gpu = |\n}')
    assert {"vllm", "sglang", "torchrun", "megatron"} <= labels("target |")
    assert "port" in labels("target vllm {\n  |\n}") and "entrypoint" not in labels("target vllm {\n  |\n}")
    assert "entrypoint" in labels("target torchrun {\n  |\n}")
    assert {"1f1b", "gpipe", "interleaved_1f1b"} <= labels("schedule {\n  pipeline = |\n}")
    assert {"gpu", "topology", "group"} <= labels('cluster "c" {\n  |\n}')
    assert labels('use "|') == set()


def test_completion_items_carry_docs_and_snippets():
    t, i = _at('cluster "c" {\n  |\n}')
    item = next(x for x in complete(t, i) if x.label == "gpus_per_node")
    assert item.insert == "gpus_per_node = " and item.doc
    top = next(x for x in complete("", 0) if x.label == "mesh")
    assert top.snippet and top.insert.startswith("mesh {")


def _spec(tmp_path, text: str):
    p = tmp_path / "s.par"
    p.write_text(text)
    return str(p), analyse(lint_texts, str(p), text)


def test_hover_preset_and_definition(tmp_path):
    text = (ROOT / "examples" / "llama3-70b-serve.par").read_text()
    path = tmp_path / "serve.par"
    # the example imports a cluster: copy the spec beside its clusters folder's file
    (tmp_path / "clusters").mkdir()
    for use in ROOT.joinpath("examples", "clusters").glob("*.par"):
        (tmp_path / "clusters" / use.name).write_text(use.read_text())
    path.write_text(text)
    a = analyse(lint_texts, str(path), text)
    assert a.plan is not None
    at = text.index("llama3_70b") + 2
    assert "Grattafiori" in hover(a, at) or "source:" in hover(a, at)
    span = definition(a, at)
    assert span.file.endswith("models.toml") and span.line > 1
    if "use " in text:
        at = text.index('use "') + 6
        assert definition(a, at).file.startswith(str(tmp_path / "clusters"))
    mesh = text.index("mesh")
    assert "TTFT" in hover(a, mesh + 1)


def test_formatting_is_fmt(tmp_path):
    from parc.language.fmt import format_text

    messy = 'model "m" {\n  from=llama3_8b\n    seq_len = 4096\n}\n'
    edits = formatting("x.par", messy)
    assert apply_edits(messy, edits) == format_text(messy, "x.par")
    assert formatting("x.par", "model {") is None


def test_diagnostics_include_lint_style(tmp_path):
    text = (ROOT / "tests" / "data" / "render" / "advice.par").read_text()
    _, a = _spec(tmp_path, text)
    codes = {d.code for d in a.diagnostics}
    assert {"P401", "P502", "P551", "P552"} <= codes
