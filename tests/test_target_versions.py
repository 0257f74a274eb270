"""Versioned targets: a target block pins the release it launches (`version`, default the newest
its target.toml knows); rules.toml's `since`/`until` keep a rule to the releases it holds for,
and flags.toml gives each release's spelling of an option. A spec pinned to an old release gets
the old rule and flag, the default gets the new; an unknown release is refused with the list;
every `since`/`until` in the target folders names a known release."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from support.target_folder import package_with_target, run_parc

from parc.cli.main import main
from parc.model import targets as T
from support.specs import spec

ROOT = Path(__file__).resolve().parent.parent

# vLLM 0.26 to 0.29 refuse prefill context parallel with dp > 1 ("PCP does not support data
# parallelism yet.", vllm/config/parallel.py of those wheels); 0.30 dropped the check.
PCP_DP = dict(model="from = llama3_8b; max_positions = 131072", mesh="dp = 4; cp = 2",
              serve="max_model_len = 131072")


def _vllm(version: str | None = None, extra: str | None = None) -> dict:
    body = 'model = "m"'
    if version:
        body += f'; version = "{version}"'
    if extra:
        body += f"; extra_args = [{extra}]"
    return {"vllm": body}


def codes(result) -> set[str]:
    return {d.code for d in result.diagnostics}


# --- the release a block pins --------------------------------------------------------------------
def test_default_is_the_newest_known():
    known = T.versions("vllm")
    assert known == sorted(known, key=lambda v: tuple(int(x) for x in v.split(".")))   # oldest first
    assert T.newest("vllm") == known[-1] == "0.33"
    assert T.newest("megatron") == "0.20"
    assert T.newest("torchrun") is None and T.versions("json") == []


def test_every_target_takes_version_declared_once():
    """`version` comes from parc/targets/keys.toml, not from any target.toml."""
    for t in T.names():
        assert T.keys(t)["version"]["kind"] == "version", t
        assert "version" not in (T.spec(t).get("keys") or {}), f"{t} declares `version` itself"
        assert T.keys(t)["version"]["choices"] == T.versions(t)


def test_pinned_old_release_gets_the_old_rule(check_spec):
    old = check_spec(spec(**PCP_DP, target=_vllm("0.29")))
    d = next(d for d in old.diagnostics if d.code == "P664")
    assert d.severity == "error" and d.target == "vllm"
    assert d.message.startswith("vLLM 0.29 refuses prefill context parallel (cp = 2) with data parallelism (dp = 4)")
    assert "vLLM 0.30 and later accept it" in d.message
    assert "P664" not in codes(check_spec(spec(**PCP_DP, target=_vllm("0.30"))))   # `until` is excluded
    new = check_spec(spec(**PCP_DP, target=_vllm()))                                # the default: 0.33
    assert "P664" not in codes(new) and not new.errors


def test_release_rule_needs_both_cp_and_dp(check_spec):
    r = check_spec(spec(model=PCP_DP["model"], mesh="dp = 8", serve=PCP_DP["serve"], target=_vllm("0.26")))
    assert "P664" not in codes(r)


def test_pinned_old_release_gets_the_old_flag(check_spec):
    """`--disable-prefix-caching` exists from vLLM 0.33 (EnableDisableAction); 0.32 spells it
    `--no-enable-prefix-caching`; `--device-memory-utilization` exists from 0.31."""
    args = '"--disable-prefix-caching", "--device-memory-utilization=0.8"'
    mid = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target=_vllm("0.31", args)))
    assert [d.message for d in mid.diagnostics if d.code == "P665"] == [
        "vLLM 0.31 has no option `--disable-prefix-caching` (vLLM 0.33 and later only): it spells it "
        "`--no-enable-prefix-caching`"]
    new = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target=_vllm(None, args)))
    assert "P665" not in codes(new)


@pytest.mark.parametrize("version", [None, "0.26"])
def test_p665_an_option_the_engine_removed(check_spec, version):
    """`--swap-space` left vLLM's EngineArgs in 0.18 (vllm-project/vllm#36216): every release parc
    launches refuses it ("unrecognized arguments"), so P665 does too; without it, quiet."""
    r = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192",
                        target=_vllm(version, '"--swap-space", "32", "--trust-remote-code"')))
    got = [d for d in r.diagnostics if d.code == "P665"]
    assert [d.message.split(": ", 1)[1] for d in got] == ["it has no such option"], [d.message for d in got]
    assert "(vLLM before 0.18 only)" in got[0].message and got[0].severity == "error"
    assert "remove `--swap-space`" in got[0].help
    quiet = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target=_vllm(version, '"--trust-remote-code"')))
    assert "P665" not in codes(quiet)


def test_both_spellings_refused_where_each_is_unknown(check_spec):
    """vLLM 0.30: both options above are unknown (0.31 added one, 0.33 the other)."""
    args = '"--disable-prefix-caching", "--device-memory-utilization=0.8"'
    r = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target=_vllm("0.30", args)))
    assert len([d for d in r.diagnostics if d.code == "P665"]) == 2


def test_flags_table_lookup():
    assert T.flag("vllm", "gpu_memory_utilization", "0.26") == "--gpu-memory-utilization"
    assert T.flag("vllm", "gpu_memory_utilization", None) == "--gpu-memory-utilization"   # every release's
    assert T.flag("vllm", "disable_prefix_caching", "0.32") == "--no-enable-prefix-caching"
    with pytest.raises(KeyError):
        T.flag("vllm", "no_such_option", None)


def test_vllm_builder_asks_the_table_for_every_option():
    """No option name is written in the builder: every `--x` it emits is one flags.toml names."""
    src = (ROOT / "parc/targets/vllm/__init__.py").read_text()
    body = src[src.index("def _lines"):src.index("def serve_lines")]
    assert '"--' not in body
    emitted = {e["name"] for entry in T.flag_table("vllm").values() for e in entry["names"]}
    assert {"--tensor-parallel-size", "--prefill-context-parallel-size", "--headless"} <= emitted


def test_unknown_release_refused_with_the_list(check_spec):
    r = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target=_vllm("0.3")))
    d = next(d for d in r.diagnostics if d.code == "P016")
    assert d.message == "`0.3` is not a release parc knows for this target"
    assert "did you mean `0.33`?" in d.help
    assert "parc knows vLLM 0.26, 0.27, 0.28, 0.29, 0.30, 0.31, 0.32, 0.33 (default: the newest, 0.33)" in d.help
    r = check_spec(spec(mesh="tp = 8", serve="max_model_len = 8192", target={"vllm": 'model = "m"; version = 0.32'}))
    assert any(d.code == "P016" and "expects a release in double quotes" in d.message for d in r.diagnostics)


def test_target_without_releases_refuses_any_version(check_spec):
    r = check_spec(spec(target={"torchrun": 'entrypoint = "train.py"; version = "2.9"'}))
    d = next(d for d in r.diagnostics if d.code == "P016")
    assert "parc knows no releases of torchrun" in d.help


# --- the data is consistent ----------------------------------------------------------------------
def _rules_files():
    folder = ROOT / "parc" / "targets"
    yield folder / "rules.toml"
    for t in T.names():
        if (folder / t / "rules.toml").is_file():
            yield folder / t / "rules.toml"


def test_every_since_until_names_a_known_release():
    """Over every target folder: rule entries, audit entries and flags.toml spellings."""
    from parc.rules import registry
    from parc.targets import load_rules

    load_rules()
    reg = registry()
    seen = 0
    for path in _rules_files():
        docs = tomllib.loads(path.read_text())
        for code, doc in docs.items():
            if "since" in doc or "until" in doc:
                bound = [t for t in reg[code].targets if T.versions(t)]
                assert len(bound) == 1, f"{code}: since/until need exactly one target with releases, got {bound}"
                for k in ("since", "until"):
                    if k in doc:
                        assert doc[k] in T.versions(bound[0]), (path, code, k, doc[k])
                        seen += 1
            for t, audit in doc.get("targets", {}).items():
                for k in ("since", "until"):
                    if k in audit:
                        assert audit[k] in T.versions(t), (path, code, t, k, audit[k])
                        seen += 1
    for t in T.names():
        for what, entry in T.flag_table(t).items():
            for e in entry["names"]:
                for k in ("since", "until"):
                    if k in e:
                        # an option removed before the oldest release parc knows holds for none of them
                        older = k == "until" and not any(T.holds(t, v, None, e[k]) for v in T.versions(t))
                        assert e[k] in T.versions(t) or older, (t, what, k, e[k])
                        seen += 1
    assert seen >= 5


def test_every_known_release_has_date_and_source():
    for t in T.names():
        for v in T.versions(t):
            r = T.released(t, v)
            assert r.get("date") and r.get("source"), (t, v)
        assert len(set(T.versions(t))) == len(T.versions(t)), t


def test_since_before_until():
    for t in T.names():
        for entry in T.flag_table(t).values():
            for e in entry["names"]:
                if "since" in e and "until" in e:
                    assert T.versions(t).index(e["since"]) < T.versions(t).index(e["until"])


def test_holds_is_half_open():
    # known: 0.26 ... 0.33; [0.28, 0.30) holds for 0.28 and 0.29 only
    assert [v for v in T.versions("vllm") if T.holds("vllm", v, "0.28", "0.30")] == ["0.28", "0.29"]
    assert T.span_text("vllm", "0.28", "0.30") == "vLLM 0.28 to 0.29"
    assert T.span_text("vllm", "0.33", None) == "vLLM 0.33 and later"
    assert T.span_text("vllm", None, "0.30") == "vLLM before 0.30"
    with pytest.raises(ValueError):
        T.holds("vllm", "0.99")


# --- parc rules ----------------------------------------------------------------------------------
def _rules(capsys, *args) -> tuple[int, str, str]:
    rc = main(["rules", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_rules_lists_what_is_in_force(capsys):
    rc, out, _ = _rules(capsys, "--target", "vllm")
    table = {line.split()[0] for line in out.splitlines()[1:-1]}
    assert rc == 0 and "P664" not in table and "P665" in table and "P605" in table
    assert out.splitlines()[-1].startswith("in force for vLLM 0.33 (the newest parc knows")
    rc, out, _ = _rules(capsys, "--target", "vllm", "--version", "0.29")
    line = next(ln for ln in out.splitlines() if ln.startswith("P664"))
    assert rc == 0 and line.endswith("vllm (vLLM before 0.30)")
    assert out.splitlines()[-1].startswith("in force for vLLM 0.29 (the newest parc knows is 0.33")


def test_rules_json_lists_since_until(capsys):
    rc, out, _ = _rules(capsys, "--target", "vllm", "--version", "0.26", "--format", "json")
    entries = {e["code"]: e for e in json.loads(out)}
    assert rc == 0 and entries["P664"]["until"] == "0.30" and entries["P664"]["since"] is None
    assert entries["P664"]["targets_audit"]["vllm"]["until"] == "0.30"
    assert entries["P102"]["since"] is None and entries["P102"]["until"] is None


def test_rules_version_refusals(capsys):
    rc, _, err = _rules(capsys, "--target", "vllm", "--version", "0.3")
    assert rc == 2 and "vLLM 0.3 is not a release parc knows; did you mean 0.33?" in err
    assert "0.26, 0.27, 0.28, 0.29, 0.30, 0.31, 0.32, 0.33" in err
    rc, _, err = _rules(capsys, "--version", "0.33")
    assert rc == 2 and "--version needs --target" in err
    rc, _, err = _rules(capsys, "--target", "torchrun", "--version", "2.9")
    assert rc == 2 and "no releases of torchrun" in err


def test_scheduler_lists_its_family_rules_at_their_newest(capsys):
    """slurm serves with vLLM's commands: its list holds vLLM's rules of the newest release."""
    _, out, _ = _rules(capsys, "--target", "slurm")
    table = {line.split()[0] for line in out.splitlines()[1:]}
    assert "P665" in table and "P664" not in table


# --- a new target folder with releases, in a copy of the package --------------------------------
# Its rule is torchtitan's removal of expert tensor parallelism (PR#3167, 2026-04-30) in
# miniature: release 2.0 refuses `split = true`, which 1.0 ran; its option `--old-name` became
# `--new-name` in 2.0.
FOLDER = {
    "target.toml": '''
        display = "Relay"
        description = "a script that prints its option"
        modes = ["train", "serve"]
        launch = true

        [versions]
        known = ["1.0", "2.0"]
        [versions.released]
        "1.0" = { date = "2026-01-01", source = "a test" }
        "2.0" = { date = "2026-05-01", source = "a test" }

        [keys]
        split = { kind = "bool", doc = "split the experts" }
        ''',
    "flags.toml": '''
        [width]
        names = [{ name = "--old-name", until = "2.0" }, { name = "--new-name", since = "2.0" }]
        ''',
    "__init__.py": '''
        from parc.model.targets import flag, pinned
        from parc.targets.base import File


        def build(plan):
            from parc.targets.render import render

            opt = flag("relay", "width", pinned(plan, "relay"))
            return [File("relay.sh", render("relay/relay.sh.j2", opt=opt), True)]
        ''',
    "relay.sh.j2": '''
        echo {{ opt | q }} 8
        ''',
    "rules.py": '''
        from parc.rules import rule
        from parc.targets.base import settings


        @rule("P698", "relay-no-split", targets=("relay",))
        def no_split(plan, c):
            if settings(plan, "relay").get("split"):
                c.report(c.at("target.relay.split"), f"{c.release} removed splitting the experts")
        ''',
    "rules.toml": '''
        [P698]
        name = "relay-no-split"
        title = "Relay 2.0 cannot split experts"
        since = "2.0"
        doc = "Relay 2.0 removed expert splitting."
        ''',
}

SPEC = """
model "tiny" {{ layers = 4; hidden = 64; ffn_hidden = 128; heads = 4; kv_heads = 4; vocab = 256; seq_len = 32 }}
cluster "one" {{ nodes = 1; gpus_per_node = 2; gpu = h100_sxm; intra_node = nvlink(450GB/s) }}
mesh {{ dp = 2 }}
schedule {{ micro_batch = 1; global_batch = 8 }}
train {{ zero = 0 }}
target relay {{ {settings} }}
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return package_with_target(tmp_path_factory.mktemp("pkg"), "relay", FOLDER)


def parc(package, tmp_path, *args, settings=""):
    return run_parc(package, tmp_path, SPEC.format(settings=settings), *args)


def _script(package, tmp_path, settings) -> str:
    r = parc(package, tmp_path, "compile", "--target", "relay", "--format", "json", settings=settings)
    assert r.returncode == 0, r.stderr
    return {f["path"]: f["text"] for f in json.loads(r.stdout)["files"]}["relay.sh"]


def test_new_folder_pinned_old_gets_old_flag_default_new(package, tmp_path):
    assert _script(package, tmp_path, 'version = "1.0"').strip() == "echo --old-name 8"
    assert _script(package, tmp_path, "").strip() == "echo --new-name 8"


def test_new_folder_rule_holds_from_its_release(package, tmp_path):
    r = parc(package, tmp_path, "check", "--format", "json", settings='version = "1.0"; split = true')
    assert "P698" not in {d["code"] for d in json.loads(r.stdout)["diagnostics"]}
    r = parc(package, tmp_path, "check", "--format", "json", settings="split = true")
    found = [d for d in json.loads(r.stdout)["diagnostics"] if d["code"] == "P698"]
    assert r.returncode == 1 and found[0]["message"] == "Relay 2.0 removed splitting the experts"


def test_docs_have_a_section_per_target():
    """docs/targets.md: one `## name` section per target folder, naming each of its keys and,
    where it lists releases, every one of them."""
    text = (ROOT / "docs" / "targets.md").read_text()
    sections = {}
    for part in text.split("\n## ")[1:]:
        head, _, body = part.partition("\n")
        sections[head.strip()] = body
    for t in T.names():
        assert t in sections, f"docs/targets.md has no section `## {t}`"
        for key in T.spec(t).get("keys", {}):
            assert f"`{key}`" in sections[t], (t, key)
        for v in (T.versions(t)[0], T.newest(t)) if T.versions(t) else ():
            assert f"`{v}`" in sections[t], (t, v)


def test_the_release_bounds_check_reads_are_the_documentations():
    # `parc check` reads each rule's since/until from the entries' lines, not by parsing every
    # rules.toml: the reading must give what tomllib gives
    from parc.model.targets import release_bounds
    from parc.rules import rule_docs

    full = {code: {k: v for k, v in doc.items() if k in ("since", "until")} for code, doc in rule_docs().items()}
    assert release_bounds() == {code: b for code, b in full.items() if b}
    assert release_bounds()   # some rule holds only for some releases


# ------------------------------------------------------------------------------ SGLang 0.5.11 to 0.5.17

def test_p665_a_degree_whose_option_the_release_lacks(check_spec):
    """--dcp-size came with SGLang 0.5.15.post1: 0.5.13 cannot launch dcp = 2 (parc would have no
    option to write); 0.5.16 can."""
    from support.specs import spec

    def text(version):
        return spec("from = qwen3_30b_a3b", mesh="tp = 8; dcp = 2", serve="max_model_len = 4096",
                    target={"sglang": f'model = "m"; version = "{version}"'})
    d = next(d for d in check_spec(text("0.5.13")).diagnostics if d.code == "P665")
    assert d.message == "SGLang 0.5.13 has no option for dcp = 2: `--dcp-size` is in SGLang 0.5.16 and later only"
    assert "P665" not in {d.code for d in check_spec(text("0.5.16")).diagnostics}


@pytest.mark.parametrize("key,value,refused,taken", [
    ("transfer_backend", "mooncake_tcp", "0.5.12", "0.5.13"),
    ("moe_a2a_backend", "megamoe", "0.5.11", "0.5.12"),
    ("moe_a2a_backend", "pplx", "0.5.16", "0.5.17"),
    ("moe_a2a_backend", "deepep_v2", "0.5.17", "0.5.21"),
])
def test_p665_a_choice_the_release_does_not_take(check_spec, key, value, refused, taken):
    """Each release's parser takes the backends its wheel lists (MOE_A2A_BACKEND_CHOICES,
    DISAGG_TRANSFER_BACKEND_CHOICES): an older one refuses a later backend as an invalid choice."""
    from support.specs import spec

    def text(version):
        return spec("from = deepseek_v3", nodes=2, mesh="tp = 16; ep = 16", serve="max_model_len = 4096",
                    target={"sglang": f'model = "m"; {key} = {value}; version = "{version}"'})
    d = next(d for d in check_spec(text(refused)).diagnostics if d.code == "P665")
    assert d.message == (f"SGLang {refused} has no {key} `{value}`: its parser takes it from SGLang {taken} on")
    assert d.help == f'choose another {key}, or pin `version = "{taken}"` or later in `target sglang`'
    assert "P665" not in {d.code for d in check_spec(text(taken)).diagnostics}
