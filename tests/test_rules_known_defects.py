"""P7xx known defects of a release: each rule fires on the releases its rules.toml entry names
(`since`, `until`) and keeps quiet on the release that fixed it, on the fixture pairs of
tests/data/known_defects/; and the family behaves as the others do in `parc rules`, SARIF and
lint's suppressions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from parc.api import check_file
from parc.cli.main import main
from parc.model import targets as T
from parc.rules import rule_docs
from parc.targets import load_rules
from support.serving_specs import pd

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "known_defects"
# fixture -> the P7 code it trips (None: quiet). Each rule has one that fires on an affected
# release and its neighbour that keeps quiet: on the release that fixed it where one exists,
# else on the plan that avoids the bug on the same release.
PAIRS = {
    "P701-fires-0.33": "P701", "P701-quiet-0.33": None,
    "P702-fires-0.5.21": "P702", "P702-quiet-0.5.22": None,
    "P703-fires-0.5.23": "P703", "P703-quiet-pp1-0.5.23": None,
    "P704-fires-0.26": "P704", "P704-quiet-0.27": None,
    "P705-fires-0.33": "P705", "P705-quiet-0.33": None,
    "P706-fires-0.29": "P706", "P706-quiet-0.30": None,
    "P708-fires-0.5.11": "P708", "P708-quiet-0.5.12": None,
    "P709-fires-0.5.16": "P709", "P709-quiet-0.5.17": None,
    "P710-fires-0.20.0": "P710", "P710-quiet-dp-0.20.0": None,
}
OSS = "from = gpt_oss_120b"          # sliding-window layers (attention_window 128), 8 KV heads
QWEN = "from = qwen3_30b_a3b"         # 4 KV heads, no MLA


def known(code: str) -> bool:
    """A known defect's code: P7, less P720-P729, the orchestrator targets' own rules (lws's
    DisaggregatedSet, rayserve), and P730-P739, TensorRT-LLM's own, which share the prefix and are
    no release's defect."""
    return code.startswith("P7") and not code.startswith(("P72", "P73"))


def _p7(result) -> list[str]:
    return [d.code for d in result.diagnostics if known(d.code)]


def _sglang_pd(prefill: str, decode: str, version: str, extra: str = "", model: str = OSS) -> str:
    text = pd(prefill, decode, model=model, nodes=2).replace('target vllm {\n  model = "m"\n}',
                                                            'target sglang {\n  model = "m"\n' + extra + "}")
    return text.replace("target sglang {\n", f"target sglang {{\n  version = \"{version}\"\n")


def _vllm_pd(prefill: str, decode: str, version: str, model: str = QWEN) -> str:
    return pd(prefill, decode, model=model, nodes=2).replace("target vllm {\n", f"target vllm {{\n  version = \"{version}\"\n")


# ------------------------------------------------------------------------------ the fixtures

def test_every_known_defect_has_a_fixture_pair():
    codes = sorted(c for c in load_rules() if known(c))
    assert codes == sorted({c for c in PAIRS.values() if c})
    assert sorted(p.stem for p in FIXTURES.glob("*.par")) == sorted(PAIRS)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_fixture(name):
    r = check_file(FIXTURES / f"{name}.par")
    assert not [d for d in r.errors if not d.code.startswith("P7")], [f"{d.code} {d.message}" for d in r.errors]
    want = PAIRS[name]
    assert _p7(r) == ([want] if want else []), [f"{d.code} {d.message}" for d in r.diagnostics]


# ------------------------------------------------------------------------------ P701

@pytest.mark.parametrize("version", T.versions("vllm"))
def test_p701_holds_for_every_vllm_release(check_spec, version):
    """Every release parc knows asserts in the handshake (0.26.0 to 0.33.0 wheels)."""
    d = next(d for d in check_spec(_vllm_pd("tp = 8", "tp = 4; instances = 2", version)).diagnostics
             if d.code == "P701")
    assert d.target == "vllm" and d.severity == "error"
    assert f"vLLM {version} cannot pull the KV cache of a prefill instance whose tp = 8 exceeds the 4 KV heads" \
        in d.message
    assert "(vllm#43523); no release parc knows (vLLM 0.26 to 0.33) fixes it" in d.message
    assert d.help.startswith("give the decode pool tp = 8 or more")


@pytest.mark.parametrize("prefill,decode,model,kv", [
    ("tp = 4; instances = 2", "tp = 2; instances = 4", QWEN, "nixl"),     # prefill tp = the 4 KV heads
    ("tp = 4; instances = 2", "tp = 8", QWEN, "nixl"),                    # decode tp above prefill tp
    ("tp = 8; ep = 8", "tp = 4; ep = 4; instances = 2", "from = deepseek_v2_lite", "nixl"),   # MLA
    ("tp = 8", "tp = 4; instances = 2", QWEN, "mooncake"),                # not NixlConnector
])
def test_p701_quiet(check_spec, prefill, decode, model, kv):
    text = pd(prefill, decode, kv=kv, model=model, nodes=2)
    assert "P701" not in _p7(check_spec(text))


def test_p701_leaves_tp_sizes_that_do_not_divide_to_p673(check_spec):
    r = check_spec(_vllm_pd("tp = 8", "tp = 3", "0.33", model="from = qwen3_30b_a3b; heads = 48; kv_heads = 4"))
    assert "P701" not in _p7(r)


# ------------------------------------------------------------------------------ P704, P705

# a hybrid MoE (recurrent layers beside attention) with 2 KV heads, as Qwen3.5 in vllm#42895
HYBRID = ("layers = 48; hidden = 2048; heads = 32; kv_heads = 2; head_dim = 128; vocab = 151936; "
          "ffn_hidden = 6144; experts = 128; top_k = 8; moe_ffn_hidden = 768; hybrid = true")


def _hybrid_pd(prefill: str, decode: str, version: str, model: str = HYBRID, kv: str = "nixl") -> str:
    text = pd(prefill, decode, kv=kv, model=model, nodes=2).replace("gpu           = h100_sxm", "gpu           = h200")
    return text.replace("target vllm {\n", f"target vllm {{\n  version = \"{version}\"\n")


@pytest.mark.parametrize("version", T.versions("vllm"))
def test_p704_holds_for_0_26_only(check_spec, version):
    """vllm#42895's pools (prefill tp 4, decode tp 1 over 2 KV heads): 0.26 asserts in the
    handshake, 0.27 on maps the larger decode blocks by their ratio."""
    r = check_spec(_hybrid_pd("tp = 4; instances = 2", "tp = 1; instances = 8", version))
    assert not [d for d in r.errors if not d.code.startswith("P7")], [f"{d.code} {d.message}" for d in r.errors]
    assert _p7(r) == (["P704"] if version == "0.26" else []), (version, _p7(r))


def test_p704_message_and_help(check_spec):
    text = _hybrid_pd("tp = 4; instances = 2", "tp = 1; instances = 8", "0.26")
    d = next(d for d in check_spec(text).diagnostics if d.code == "P704")
    assert d.target == "vllm" and d.severity == "error"
    assert d.message.startswith("vLLM 0.26 cannot move the KV cache between pools whose KV block sizes differ: "
                                "`m` is hybrid")
    assert "its 2 KV heads stop splitting past tp = 2, so prefill tp = 4 and decode tp = 1" in d.message
    assert '"HMA does not support different remote block size yet"' in d.message
    assert "(vllm#42895, vllm#41037); vLLM 0.27 and later fix it" in d.message
    assert d.help == 'pin `version = "0.27"` in `target vllm`, or give both pools the same tp'
    # at the decode pool's tp, the prefill pool's named beside it
    assert (text[d.span.start:d.span.end], text[d.related[0].span.start:d.related[0].span.end]) == ("tp = 1", "tp = 4")
    assert "decode {" in text.splitlines()[d.span.line - 1] and "prefill {" in text.splitlines()[d.related[0].span.line - 1]


@pytest.mark.parametrize("version", T.versions("vllm"))
def test_p705_holds_for_every_vllm_release(check_spec, version):
    r = check_spec(_hybrid_pd("tp = 2; instances = 4", "tp = 4; instances = 2", version))
    assert _p7(r) == ["P705"], (version, [f"{d.code} {d.message}" for d in r.diagnostics])
    d = next(d for d in r.diagnostics if d.code == "P705")
    assert "decode blocks smaller than the prefill's" in d.message
    assert "no release parc knows (vLLM 0.26 to 0.33) fixes it" in d.message
    assert d.help == "give both pools the same tp (prefill tp = 4)"
    # the help's way out is itself quiet
    assert not _p7(check_spec(_hybrid_pd("tp = 4; instances = 2", "tp = 4; instances = 2", version)))


@pytest.mark.parametrize("prefill,decode,model,kv", [
    ("tp = 2; instances = 4", "tp = 1; instances = 8", HYBRID, "nixl"),       # both at most the 2 KV heads
    ("tp = 4; instances = 2", "tp = 4; instances = 2", HYBRID, "nixl"),       # the same tp
    ("tp = 4; instances = 2", "tp = 1; instances = 8", HYBRID, "mooncake"),   # not NixlConnector
    ("tp = 4; instances = 2", "tp = 1; instances = 8", HYBRID.replace("; hybrid = true", ""), "nixl"),
])
def test_p704_p705_quiet(check_spec, prefill, decode, model, kv):
    for version in ("0.26", "0.33"):
        r = check_spec(_hybrid_pd(prefill, decode, version, model, kv))
        assert not {"P704", "P705"} & set(_p7(r)), (version, [f"{d.code} {d.message}" for d in r.diagnostics])


def test_hybrid_mla_pools_compare_tp(check_spec):
    """An MLA latent head is never split: a hybrid MLA model's block follows tp alone."""
    mla = "from = deepseek_v2_lite; hybrid = true"
    r = check_spec(_hybrid_pd("tp = 4; instances = 2", "tp = 2; instances = 4", "0.26", model=mla))
    d = next(d for d in r.diagnostics if d.code == "P704")
    assert "its latent KV head is never split" in d.message
    assert "P705" in _p7(check_spec(_hybrid_pd("tp = 2; instances = 4", "tp = 4; instances = 2", "0.33", model=mla)))


def test_p701_leaves_hybrid_models_to_vllms_mapping(check_spec):
    """vLLM's handshake exempts Mamba models from P701's check ("Mamba models can have replicated FA
    KV with tp_ratio < 0"): a decode tp below a prefill tp beyond the KV heads is P704's case."""
    r = check_spec(_hybrid_pd("tp = 4; instances = 2", "tp = 1; instances = 8", "0.33"))
    assert "P701" not in _p7(r)
    plain = HYBRID.replace("; hybrid = true", "")
    assert "P701" in _p7(check_spec(_hybrid_pd("tp = 4; instances = 2", "tp = 1; instances = 8", "0.33", plain)))


# ------------------------------------------------------------------------------ P706

@pytest.mark.parametrize("version", T.versions("vllm"))
def test_p706_holds_until_0_30(check_spec, version):
    """A prefill pool's cp = 2 over NixlConnector: 0.26 to 0.28's connector does not know prefill
    context parallelism, 0.29's configuration asserts against it, 0.30 runs it as kv_producer."""
    r = check_spec(_vllm_pd("cp = 2; tp = 4", "tp = 8", version, model="from = deepseek_v2_lite"))
    assert not [d for d in r.errors if not d.code.startswith("P7")], [f"{d.code} {d.message}" for d in r.errors]
    affected = version in ("0.26", "0.27", "0.28", "0.29")
    assert _p7(r) == (["P706"] if affected else []), (version, _p7(r))
    if affected:
        d = next(d for d in r.diagnostics if d.code == "P706")
        assert d.message.startswith(f"vLLM {version} cannot serve the prefill pool's cp = 2 under NixlConnector")
        assert '"NIXL does not support prefill context parallelism."' in d.message
        assert "vLLM 0.30 and later fix it" in d.message
        assert d.help == 'pin `version = "0.30"` in `target vllm`, or give the prefill pool cp = 1'


@pytest.mark.parametrize("prefill,decode,kv", [
    ("tp = 8", "tp = 8", "nixl"),                 # no prefill context parallelism
    ("cp = 2; tp = 4", "tp = 8", "mooncake"),     # not NixlConnector
    ("tp = 8", "cp = 2; tp = 4", "nixl"),         # the decode pool's cp: P629 from 0.29
])
def test_p706_quiet(check_spec, prefill, decode, kv):
    text = pd(prefill, decode, kv=kv, model="from = deepseek_v2_lite", nodes=2).replace(
        "target vllm {\n", 'target vllm {\n  version = "0.29"\n')
    assert "P706" not in _p7(check_spec(text))


# ------------------------------------------------------------------------------ P702, P703

@pytest.mark.parametrize("version,code", [("0.5.21", "P702"), ("0.5.22", None), ("0.5.23", None)])
def test_p702_holds_until_0_5_22(check_spec, version, code):
    r = check_spec(_sglang_pd("tp = 4; dp = 2", "tp = 8", version))
    assert _p7(r) == ([code] if code else []), [f"{d.code} {d.message}" for d in r.diagnostics]


def test_p702_message_names_the_fix(check_spec):
    d = next(d for d in check_spec(_sglang_pd("tp = 4; dp = 2", "tp = 8", "0.5.21")).diagnostics if d.code == "P702")
    assert d.message.startswith("SGLang 0.5.21 cannot move the sliding-window KV cache of `m` between pools of "
                                "different tensor parallelism (prefill tp = 4, decode tp = 8)")
    assert "(llm-d#2433, sglang#38552); SGLang 0.5.22 and later fix it" in d.message
    assert d.help.startswith('pin `version = "0.5.22"` in `target sglang`')
    # the help's first way out is itself quiet
    assert not _p7(check_spec(_sglang_pd("tp = 4; dp = 2", "tp = 8", "0.5.22")))


@pytest.mark.parametrize("prefill,decode,extra,model,kv", [
    ("tp = 8", "tp = 8", "", OSS, "nixl"),                                      # the same tp
    ("tp = 4; dp = 2", "tp = 8", '  extra_args = ["--disable-hybrid-swa-memory"]\n', OSS, "nixl"),
    ("tp = 4; dp = 2", "tp = 8", "", "from = qwen3_30b_a3b", "nixl"),          # no sliding window
    ("tp = 4; dp = 2", "tp = 8", '  transfer_backend = mori\n', OSS, None),     # a sender without SWA state
])
def test_p702_quiet(check_spec, prefill, decode, extra, model, kv):
    text = _sglang_pd(prefill, decode, "0.5.21", extra, model)
    if kv is None:
        text = text.replace("  kv_transfer = nixl\n", "")
    assert not _p7(check_spec(text)), [f"{d.code} {d.message}" for d in check_spec(text).diagnostics]


@pytest.mark.parametrize("version,code", [("0.5.21", "P702"), ("0.5.22", "P703"), ("0.5.23", "P703")])
def test_p703_holds_from_0_5_22(check_spec, version, code):
    """0.5.21 refuses every tp mismatch (P702); from 0.5.22 only a pipelined prefill's."""
    r = check_spec(_sglang_pd("tp = 4; pp = 2", "tp = 8", version))
    assert _p7(r) == [code], [f"{d.code} {d.message}" for d in r.diagnostics]
    d = next(d for d in r.diagnostics if d.code == code)
    if code == "P703":
        assert "pipeline parallelism (pp = 2)" in d.message and "(sglang#38552)" in d.message
        assert "no release parc knows (SGLang 0.5.22 to 0.5.23) fixes it" in d.message
        assert d.help.startswith("give both pools the same tp")


# ------------------------------------------------------------------------------ P708, P709

@pytest.mark.parametrize("version,code", [("0.5.11", "P708"), ("0.5.12", None), ("0.5.13", None), ("0.5.16", None),
                                          ("0.5.17", None), ("0.5.23", None)])
def test_p708_holds_until_0_5_12(check_spec, version, code):
    """A prefill pool of tp 8 into decode instances of tp 4 (Qwen3-30B-A3B, no MLA) over NIXL."""
    r = check_spec(_sglang_pd("tp = 8", "tp = 4; instances = 2", version, model=QWEN))
    assert _p7(r) == ([code] if code else []), [f"{d.code} {d.message}" for d in r.diagnostics]


def test_p708_message_and_help(check_spec):
    d = next(d for d in check_spec(_sglang_pd("tp = 8", "tp = 4; instances = 2", "0.5.11", model=QWEN)).diagnostics
             if d.code == "P708")
    assert d.message.startswith("SGLang 0.5.11 over NIXL cannot hand a model without MLA from a prefill pool of "
                                "larger tp to the decode pool (prefill tp = 8, decode tp = 4, 4 KV heads)")
    assert "waits for the KV heads of 2 prefill ranks" in d.message and d.message.endswith("SGLang 0.5.12 and later fix it")
    assert d.help.startswith('pin `version = "0.5.12"` in `target sglang`')


@pytest.mark.parametrize("prefill,decode,model,kv", [
    ("tp = 4; instances = 2", "tp = 8", QWEN, "nixl"),         # decode tp larger: P709's side, not P708's
    ("tp = 8", "tp = 4; instances = 2", QWEN, "mooncake"),     # Mooncake tags its chunks otherwise
    ("tp = 8", "tp = 4; instances = 2", "from = deepseek_v2_lite", "nixl"),   # MLA: one prefill rank read
])
def test_p708_quiet(check_spec, prefill, decode, model, kv):
    text = _sglang_pd(prefill, decode, "0.5.11", model=model).replace("kv_transfer = nixl", f"kv_transfer = {kv}")
    assert "P708" not in _p7(check_spec(text))


@pytest.mark.parametrize("version,code", [("0.5.11", None), ("0.5.12", None), ("0.5.13", "P709"), ("0.5.16", "P709"),
                                          ("0.5.17", None), ("0.5.23", None)])
def test_p709_holds_from_0_5_13_until_0_5_17(check_spec, version, code):
    """Prefill instances of tp 2 into a decode pool of tp 8, above Qwen3-30B-A3B's 4 KV heads."""
    r = check_spec(_sglang_pd("tp = 2; instances = 4", "tp = 8", version, model=QWEN))
    assert _p7(r) == ([code] if code else []), [f"{d.code} {d.message}" for d in r.diagnostics]
    if code:
        d = next(d for d in r.diagnostics if d.code == code)
        assert "(prefill tp = 2, decode tp = 8, 4 KV heads)" in d.message and "NIXL_ERR_NOT_FOUND" in d.message
        assert "(sglang#31295)" in d.message and d.help.startswith('pin `version = "0.5.17"`')


def test_p709_quiet_at_or_below_the_kv_heads(check_spec):
    """Decode tp 4 = the KV heads: every decode rank has a head slice of its own."""
    assert "P709" not in _p7(check_spec(_sglang_pd("tp = 2; instances = 2", "tp = 4; instances = 2", "0.5.16",
                                                   model=QWEN)))


def test_p7_rules_run_for_lws_with_their_engine(check_spec):
    """lws brings the rules of the engine it launches, P7 included, at that engine's release."""
    text = _sglang_pd("tp = 4; dp = 2", "tp = 8", "0.5.21") + 'target lws { engine = sglang }\n'
    assert "P702" in _p7(check_spec(text))


# ------------------------------------------------------------------------------ the family

def test_every_p7_entry_names_its_releases_and_public_reports():
    docs = rule_docs()
    for code, r in load_rules().items():
        if not known(code):
            continue
        d = docs[code]
        (target,) = r.targets
        assert d.get("since") in T.versions(target), code
        assert d.get("until") is None or d["until"] in T.versions(target), code
        assert d["issues"] and all(u.startswith("https://github.com/") for u in d["issues"]), code
        assert r.severity == "error" and r.family == "P7"


def test_parc_rules_lists_the_family_and_shows_the_issue(capsys):
    assert main(["rules", "P7"]) == 0
    out = capsys.readouterr().out
    assert "P702  sglang-swa-hybrid-heterogeneous-tp" in out and "P7 known defects" in out
    assert "(SGLang 0.5.11 to 0.5.21)" in out and "(vLLM 0.26 and later)" in out
    assert main(["rules", "P702"]) == 0
    page = capsys.readouterr().out
    assert "family P7 (known defects)" in page and "releases: SGLang 0.5.11 to 0.5.21" in page
    assert "fixed in: SGLang 0.5.22 and later" in page
    assert "public report: https://github.com/llm-d/llm-d/issues/2433" in page
    assert main(["rules", "P7", "--format", "json"]) == 0
    entries = {e["code"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries["P701"]["issues"][0] == "https://github.com/vllm-project/vllm/issues/43523"
    assert entries["P702"]["family_name"] == "known defects" and entries["P702"]["until"] == "0.5.22"


def test_parc_rules_for_a_release_keeps_only_its_defects(capsys):
    assert main(["rules", "P7", "--target", "sglang", "--version", "0.5.21"]) == 0
    old = capsys.readouterr().out
    assert main(["rules", "P7", "--target", "sglang", "--version", "0.5.23"]) == 0
    new = capsys.readouterr().out
    assert "P702" in old and "P703" not in old
    assert "P703" in new and "P702" not in new


def test_sarif_tags_the_family_and_links_the_issue():
    from parc.report.diagnostics.sarif import sarif_rules

    rules = {r["id"]: r for r in sarif_rules()}
    assert rules["P702"]["properties"]["tags"] == ["known-defect", "sglang"]
    assert rules["P702"]["helpUri"] == "https://github.com/llm-d/llm-d/issues/2433"
    assert "helpUri" not in rules["P673"]


def test_lint_suppresses_and_selects_the_family(tmp_path, capsys):
    src = (FIXTURES / "P702-fires-0.5.21.par").read_text()
    bad = tmp_path / "s.par"
    for line, quiet in ((src, False), (src.replace("decode { tp = 8 }", "decode { tp = 8 }  # parc: ignore[P7]"), True),
                        (src.replace("decode { tp = 8 }", "decode { tp = 8 }  # parc: ignore[P702]"), True)):
        bad.write_text(line)
        rc = main(["lint", "--format", "json", str(bad)])
        got = [d["code"] for d in json.loads(capsys.readouterr().out)["diagnostics"]]
        assert (rc, got) == ((0, []) if quiet else (1, ["P702"])), (line[-200:], got)
    bad.write_text(src)
    assert main(["lint", "--format", "json", "--ignore", "P7", str(bad)]) == 0
    capsys.readouterr()
    assert main(["lint", "--format", "json", "--select", "P7", str(bad)]) == 1
    assert [d["code"] for d in json.loads(capsys.readouterr().out)["diagnostics"]] == ["P702"]
