"""The imported spec's text: laid out line by line as ``parc fmt`` lays out the draft's text
(parc/importer/draft.py), without parsing it again where every value is one fmt writes back as
it is. For generated drafts, canonical or not, the text is fmt's text of the draft's statements,
byte for byte (or both refuse it alike)."""
from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parc.importer.draft import Draft, Entry, Item, Name, Placeholder, Unwritable
from parc.language import fmt
from parc.language.diagnostics import ParcError

# mostly what an import writes, some of what fmt would rewrite or refuse
NAMES = ["bf16", "fp8", "deepseek_v3", "a.b", "80GB", "450GB/s", "1f1b", "8", "1.5", "1_000", "true", "auto"] * 3 + [
    "1e-05", "use", "on", "x-y", "x y", "", "a.on"]
KEYS = ["tp", "dp", "gpu", "nodes", "max_num_seqs", "gpu_memory_utilization_fraction_of_the_device", "_k"] * 4 + [
    "use", "on", "auto", "x-y"]
ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=24)
TEXT = st.one_of(*[st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=24)] * 4, ANY_TEXT)
NUMBERS = st.one_of(st.integers(-10**6, 10**20), st.integers(-800, 800).map(lambda i: i / 8), st.floats())
SCALARS = st.one_of(NUMBERS, st.booleans(), st.sampled_from(NAMES).map(Name), TEXT, ANY_TEXT.map(Placeholder))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3), max_leaves=4)
NOTES = st.one_of(st.just(""), TEXT, st.text(max_size=140))


def _entries(keys=st.sampled_from(KEYS)):
    return st.dictionaries(keys, st.builds(Entry, VALUES, NOTES), max_size=4)


@st.composite
def drafts(draw):
    d = Draft(header=draw(st.lists(TEXT, max_size=2)))
    for name in draw(st.lists(st.sampled_from(["model", "cluster", "mesh", "train", "serve"]), unique=True)):
        d.blocks[name] = draw(_entries())
    for name in draw(st.lists(st.sampled_from(["model", "cluster", "serve"]), unique=True, max_size=2)):
        d.labels[name] = draw(st.one_of(TEXT, st.just("x" * 95)))
    for pool in draw(st.lists(st.sampled_from(["prefill", "decode"]), unique=True)):
        d.pools[pool] = draw(_entries())
    for t in draw(st.lists(st.sampled_from(["vllm", "sglang"]), unique=True)):
        d.targets[t] = draw(_entries())
        for key in draw(st.lists(st.sampled_from(["extra_args", "env"]), unique=True)):
            words = st.lists(st.one_of(TEXT, ANY_TEXT.map(Placeholder), st.sampled_from(NAMES).map(Name)), max_size=3)
            d.lists[(t, key)] = draw(st.lists(st.builds(Item, words, NOTES), max_size=3))
    return d


def _outcome(write):
    try:
        return write()
    except (ParcError, Unwritable) as e:
        return type(e).__name__


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drafts())
def test_the_text_is_fmts_text_of_the_drafts_statements(d):
    want = _outcome(lambda: fmt.format_text(d.plain_text()))
    assert _outcome(d.text) == want


def _draft() -> Draft:
    d = Draft(header=["Imported by `parc import` from serve.sh (sglang)."])
    d.labels["model"] = "deepseek-v3"
    d.set("model", "from", Name("deepseek_v3"), "serve.sh:7 --model-path deepseek-ai/DeepSeek-V3")
    d.set("cluster", "gpu", Placeholder("the GPU type"), "not in the launch")
    d.set("cluster", "gpus_per_node", 8)
    d.set("mesh", "tp", 16, "serve.sh:17 --tp-size 16")
    d.set("serve", "gpu_memory_utilization", 0.8, "serve.sh:21 --mem-fraction-static 0.8")
    d.pool("decode", "max_num_seqs", 128, "serve.sh:54")
    d.pools["prefill"] = {}
    d.target("sglang", "model", "deepseek-ai/DeepSeek-V3", "serve.sh:8")
    d.extra("sglang", "extra_args", ["--trust-remote-code"], "serve.sh:13: parc has no key for it")
    d.extra("sglang", "extra_args", ["--x", Placeholder("${X}")])
    d.extra("sglang", "env", ["A=1"])
    return d


def test_a_canonical_draft_is_laid_out_without_the_parser():
    """The drafts an import builds (names, numbers, strings, placeholders, lists with and
    without comments, empty pools) take the layout alone: fmt's parse is not called."""
    d = _draft()
    want = fmt.format_text(d.plain_text())
    with mock.patch.object(fmt, "format_text", side_effect=AssertionError("parsed again")):
        assert d.text() == want


def test_a_value_fmt_rewrites_goes_through_fmt():
    """``1e-05`` (a float's repr) fmt reads as the quantity ``1e`` minus ``05``; a block given
    as text keeps its own layout until fmt's: both take fmt's path, whose text they get."""
    d = _draft()
    d.set("serve", "gpu_memory_utilization", 1e-05)
    assert d.text() == fmt.format_text(d.plain_text())
    assert "gpu_memory_utilization = 1e - 05" in d.text()
    d = _draft()
    d.raw_blocks["cluster"] = ["cluster   {", "gpu =   h100", "}"]
    assert "cluster {\n  gpu = h100\n}" in d.text()


def test_the_drafts_limits_are_the_parsers():
    """The draft tells without the parser whether the parser would read its text: by the
    parser's own limits, restated (loading the parser to read them would undo the point)."""
    from parc.importer import draft
    from parc.language import parser

    assert (draft.MAX_INPUT, draft.MAX_STRING) == (parser.MAX_INPUT, parser.MAX_TOKEN)
