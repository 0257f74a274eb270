"""The real-config corpus: launch configs published by others (``tests/wild/``), each with the
``.par`` that states the same plan.

For every entry: the original is the text that was published (its ``#|`` header names the
source and its hash); the ``.par`` is in ``parc fmt``'s layout; ``parc check --target T`` accepts
it, or refuses it only with rules whose ``parc rules CODE`` audit names where the engine itself
refuses the plan (unless the entry says which missing work makes parc refuse it); parc's launch
for T is compared with the original's, both run under recorders and read by the corpus's own
per-engine readers (``tests/support/wild*.py``, written from the engines' parsers, never from
parc's builders). Every difference must be listed in ``tests/wild/corpus.toml`` with its reason
or gap, and every listed difference must still occur. ``docs/targets.md`` carries the table.

Under ``PARC_JUDGES`` the engines' own code reads both launches too: vLLM's and SGLang's server
parsers (every server setting they find differing must be one the corpus lists, and no other),
DeepSpeed's launcher and DeepSpeedConfig (the same world, batch, ZeRO, AutoTP, stages and
precision), SkyPilot's Task.from_yaml_config (both tasks valid, the same nodes and an accelerator
the original allows); and the tables the corpus's readers use are regenerated from vLLM's,
SGLang's and torchtitan's own code and must be the committed ones."""
from __future__ import annotations

import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest

from parc.language.diagnostics import ParcError
from support import wild
from support.snapshot import updating
from support.wild_docs import replace_section, section

ENTRIES = wild.corpus()
NAMES = [e.name for e in ENTRIES]
ROOT = wild.ROOT
DOCS = ROOT / "docs" / "targets.md"
# what an audit entry says when the engine does not refuse the plan itself
NOT_A_REFUSAL = ("runs", "not checked", "not applicable")


def _entry(name: str) -> wild.Entry:
    return next(e for e in ENTRIES if e.name == name)


@cache
def _checked(name: str):
    from parc.api import check_file

    e = _entry(name)
    return check_file(e.par, [e.target], root=ROOT)


@cache
def _compared(name: str):
    """(original launches, emitted launches or None, differences) of an entry."""
    from parc import targets

    e = _entry(name)
    tmp = Path(tempfile.mkdtemp(prefix="parc-wild-"))
    try:
        original = wild.original_launches(e, tmp)
        r = _checked(name)
        if r.plan is None:
            codes = ", ".join(sorted({d.code for d in r.errors}))
            return original, None, [{"key": "compile", "original": "launches", "emitted": f"no plan ({codes})"}]
        try:
            files = targets.get(e.target).build(r.plan)
        except ParcError as x:   # a plan with errors may not build at all: the builder says what it lacks
            return original, None, [{"key": "compile", "original": "launches", "emitted": f"build fails ({x.diagnostic.code})"}]
        emitted = wild.emitted_launches(e.target, files, tmp)
        return original, emitted, wild.compare(original, emitted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_corpus_covers_every_target():
    from parc.model.targets import names

    assert len(ENTRIES) >= 30, len(ENTRIES)
    assert len(set(NAMES)) == len(NAMES), "entry names repeat"
    missing = set(names()) - {"json"} - {e.target for e in ENTRIES}
    assert not missing, f"no corpus entry for {sorted(missing)}"


ORIGINALS = sorted(p for p in (ROOT / "tests" / "wild").glob("*/*") if p.name != "plan.par" and p.parent.name != "engines")


@pytest.mark.parametrize("path", ORIGINALS, ids=[p.relative_to(ROOT / "tests" / "wild").as_posix() for p in ORIGINALS])
def test_each_original_is_the_published_text_with_its_source(path):
    head, _ = wild.split_header(path.read_text(encoding="utf-8"))
    assert head and head[0].startswith("source: "), f"{path.name}: no '#| source:' header"
    assert "commit: " in head[1] or "(read " in head[0], f"{path.name}: neither a commit nor the date it was read"
    wild.original_text(path)     # the text below the header hashes to the header's sha256


def test_every_entry_folder_is_listed():
    folders = {p.name for p in (ROOT / "tests" / "wild").iterdir() if p.is_dir() and p.name != "engines"}
    assert folders == set(NAMES), folders ^ set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_par_is_in_fmt_layout(name):
    from parc.language import fmt

    text = _entry(name).par.read_text(encoding="utf-8")
    assert fmt.format_text(text) == text, f"{name}/plan.par is not in parc fmt's layout"


def _audit(code: str, target: str) -> tuple[str, str]:
    """(where the engine fails, its source) for ``code`` under ``target``, following same_as."""
    from parc.cli.rules import catalog

    e = next(c for c in catalog() if c["code"] == code)
    if target in e["targets"]:       # a rule of the target itself: its entry cites the engine
        return "argument check", e["source"] or ""
    audit = e["targets_audit"]
    seen = set()
    while target in audit and "same_as" in audit[target] and target not in seen:
        seen.add(target)
        target = audit[target]["same_as"]
    a = audit.get(target, {})
    return a.get("fails", ""), a.get("source", "")


@pytest.mark.parametrize("name", NAMES)
def test_parc_accepts_it_or_refuses_it_for_the_engines_reason(name):
    e = _entry(name)
    r = _checked(name)
    got = sorted({d.code for d in r.errors})
    assert got == sorted(e.errors), (f"{name}: parc check --target {e.target} reports {got}, corpus.toml lists "
                                     f"{sorted(e.errors)}:\n" + "\n".join(f"{d.code} {d.message}" for d in r.errors))
    assert not e.errors_gap or e.errors, f"{name}: errors_gap names work for a refusal that is gone: remove it"
    if e.errors_gap:
        return
    for code in got:
        fails, source = _audit(code, e.target)
        assert fails and fails not in NOT_A_REFUSAL and source, (
            f"{name}: {code} refuses a plan {e.target} does not itself refuse (audit: {fails!r}); name the "
            f"missing work in errors_gap or fix the rule")


def _listing(diffs) -> str:
    return "\n".join(f'[[entry.differs]]\nkey = "{d["key"]}"\noriginal = {d["original"]!r}\nemitted = {d["emitted"]!r}\n'
                     for d in diffs).replace("'", '"')


@pytest.mark.parametrize("name", NAMES)
def test_parcs_launch_equals_the_original_but_for_the_listed_differences(name):
    e = _entry(name)
    _, _, diffs = _compared(name)
    key = lambda d: (d["key"], d["original"], d["emitted"])
    found = {key(d) for d in diffs}
    listed = {key(d) for d in e.differs}
    new = [d for d in diffs if key(d) not in listed]
    gone = [d for d in e.differs if key(d) not in found]
    assert not new and not gone, (
        f"{name}: differences not listed in tests/wild/corpus.toml (give each a reason or a gap):\n"
        f"{_listing(new)}\nlisted but no longer found (remove them; if a gap closed, say so):\n{_listing(gone)}")


def test_every_difference_says_why():
    bad = [(e.name, d["key"]) for e in ENTRIES for d in e.differs
           if bool(d.get("reason")) == bool(d.get("gap")) or set(d) - {"key", "original", "emitted", "reason", "gap"}]
    assert not bad, f"each difference needs exactly one of reason or gap: {bad}"


def test_the_targets_page_carries_the_corpus_table():
    page = DOCS.read_text(encoding="utf-8")
    want = replace_section(page, section(ENTRIES))
    if updating():
        DOCS.write_text(want, encoding="utf-8")
        return
    assert page == want, "docs/targets.md's Real configs table is not the corpus's; PARC_UPDATE_GOLDEN=1 rewrites it"


def test_the_comparison_finds_a_changed_setting():
    """The comparator is not blind: a launch with one degree changed differs in exactly that."""
    from support.wild_launch import Launch

    a = [Launch("vllm", "serve", {"vllm.tensor_parallel_size": 8, "vllm.model": "m"})]
    b = [Launch("vllm", "serve", {"vllm.tensor_parallel_size": 4, "vllm.model": "m"})]
    assert wild.compare(a, b) == [{"key": "serve/vllm.tensor_parallel_size", "original": "8", "emitted": "4"}]
    same = [Launch("vllm", "serve", {"vllm.model": "m", "vllm.tensor_parallel_size": 1})]
    assert wild.compare(same, [Launch("vllm", "serve", {"vllm.model": "m"})]) == []   # 1 is vLLM's default


# -- the engines' own parsers (PARC_JUDGES) ---------------------------------------------------
SERVER_ENGINES = ("vllm", "sglang")
JUDGED = [e.name for e in ENTRIES if e.target in ("vllm", "sglang", "lws", "skypilot")]


@pytest.fixture(scope="module")
def server_judge(tmp_path_factory):
    """judge(engine, launches) -> each launch's settings as the engine's own parser stores them:
    one wild_judge.py process an engine, in that engine's judge environment."""
    from support import judges

    procs = {}

    def ask(engine: str, launches: list) -> list[dict]:
        if engine not in procs:
            procs[engine] = judges.start(engine, f"PARC_{engine.upper()}_PYTHON",
                                         tmp_path_factory.mktemp("judge") / "stderr", script=["wild_judge.py", engine])
        return judges.ask(procs[engine], f"@@wild-{engine} ", [{"argv": la.argv, "cwd": la.cwd} for la in launches])

    yield ask
    for p in procs.values():
        judges.stop(p)


def _without(argv: list, words: list) -> list:
    """``argv`` less the first run of ``words`` in it."""
    for i in range(len(argv) - len(words) + 1):
        if argv[i:i + len(words)] == words:
            return argv[:i] + argv[i + len(words):]
    raise AssertionError(f"{words} not in {argv}")


def _as_judged(launches, ask, refused: list | None = None):
    """The launches with each server's settings replaced by what its engine's parser stores.
    ``refused``: words the pinned release refuses (the entry's ``judge_refuses``): the engine must
    refuse the launch with them, and is asked again without them."""
    from dataclasses import replace

    from support.wild_argv import sglang_resolved
    from support.wild_launch import IGNORED

    out = []
    for la in launches:
        if la.engine not in SERVER_ENGINES:
            out.append(la)
            continue
        if refused:
            (got,) = ask(la.engine, [la])
            assert not got["ok"], f"{la.engine} now takes {refused}: remove judge_refuses"
            la = replace(la, argv=_without(la.argv, refused))
        (got,) = ask(la.engine, [la])
        assert got["ok"], f"{la.engine}'s own parser refuses {la.argv}: {got['error']}"
        s = sglang_resolved(got["settings"]) if la.engine == "sglang" else got["settings"]
        kept = {k: v for k, v in la.settings.items() if not k.startswith(la.engine + ".")}
        kept.update({f"{la.engine}.{k}": v for k, v in s.items() if k not in IGNORED[la.engine]})
        out.append(replace(la, settings=kept))
    return out


@pytest.mark.parametrize("name", JUDGED)
def test_the_engines_own_parsers_find_the_listed_differences(name, server_judge, tmp_path):
    """vLLM's and SGLang's own parsers read the original's servers and parc's: both parse, and the
    server settings that differ are exactly those the corpus lists (the corpus's readers agree
    with the engines')."""
    from parc import targets

    e = _entry(name)
    original = wild.original_launches(e, tmp_path)
    r = _checked(name)
    try:
        emitted = wild.emitted_launches(e.target, targets.get(e.target).build(r.plan), tmp_path) if r.plan else []
    except Exception:        # a plan with errors that does not build: only the original is judged
        emitted = []
    refused = e.original.get("judge_refuses")
    refused = refused if isinstance(refused, list) else None     # a string is SkyPilot's message
    judged = _as_judged(original, server_judge, refused)
    got = wild.compare(judged, _as_judged(emitted, server_judge)) if emitted else []
    server = lambda k: any(f"/{x}." in k for x in SERVER_ENGINES)
    found = {d["key"] for d in got if server(d["key"])}
    gone = {w[2:].replace("-", "_") for w in refused or [] if w.startswith("--")}   # judged without them
    listed = {d["key"] for d in e.differs if server(d["key"]) and d["key"].rsplit(".", 1)[-1] not in gone
              } if emitted else set()
    assert found == listed, (f"{name}: the engines' parsers see {sorted(found - listed)} differ, not listed; "
                             f"the corpus lists {sorted(listed - found)}, which they do not see")


@pytest.mark.parametrize("engine", SERVER_ENGINES)
def test_the_option_tables_are_the_engines(engine):
    """tests/wild/engines/<engine>.json is what the pinned release's parser lists today."""
    import json
    import subprocess

    from support import judges

    py = judges.python(engine, f"PARC_{engine.upper()}_PYTHON")
    out = subprocess.run([py, str(ROOT / "tests" / "judges" / "wild_options.py"), engine], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    committed = json.loads((ROOT / "tests" / "wild" / "engines" / f"{engine}.json").read_text())
    assert json.loads(out) == committed, f"regenerate tests/wild/engines/{engine}.json with tests/judges/wild_options.py"


def test_the_torchtitan_config_functions_are_torchtitans():
    """tests/wild/engines/torchtitan.json is what torchtitan 0.3.0's config functions set today."""
    import json
    import subprocess

    from support import judges

    py = judges.python("torchtitan", "PARC_TORCHTITAN_PYTHON")
    out = subprocess.run([py, str(ROOT / "tests" / "judges" / "wild_torchtitan_configs.py")], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    committed = json.loads((ROOT / "tests" / "wild" / "engines" / "torchtitan.json").read_text())
    assert json.loads(out) == committed, "regenerate it with tests/judges/wild_torchtitan_configs.py"


DEEPSPEED = [e.name for e in ENTRIES if e.target == "deepspeed"]


def _ds_item(la, tmp: Path) -> dict:
    """A `deepspeed` launch for DeepSpeed's judge, its files named by absolute paths (the judge
    reads them from its own folder). A config handed over by HF Trainer (``--deepspeed PATH``, its
    "auto" values filled from the Trainer's own arguments, transformers/integrations/deepspeed.py)
    is given as the filled config DeepSpeed then receives."""
    import json

    argv, cwd = list(la.argv), Path(la.cwd)
    for i, w in enumerate(argv):
        if w.startswith("--hostfile="):
            argv[i] = "--hostfile=" + str(cwd / w.split("=", 1)[1])
        elif i and argv[i - 1] in ("--hostfile", "-H", "--deepspeed_config"):
            argv[i] = str(cwd / w)
    if "--deepspeed_config" not in argv and not any(w.startswith("--deepspeed_config=") for w in argv):
        config: dict = {}
        for k, v in la.settings.items():
            if k.startswith("ds."):
                node = config
                *path, leaf = k[3:].split(".")
                for p in path:
                    node = node.setdefault(p, {})
                node[leaf] = v
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "ds_config.json").write_text(json.dumps(config))
        argv += ["--deepspeed_config", str(tmp / "ds_config.json")]
    return {"argv": argv, "cwd": str(cwd)}
# what DeepSpeed's own launcher and DeepSpeedConfig derive, and the corpus's name of each
DS_FIELDS = {"world": "deepspeed.num_gpus", "nodes": "deepspeed.num_nodes", "train_batch_size": "ds.train_batch_size",
             "micro": "ds.train_micro_batch_size_per_gpu", "gas": "ds.gradient_accumulation_steps",
             "zero": "ds.zero_optimization.stage", "overlap_comm": "ds.zero_optimization.overlap_comm",
             "autotp": "ds.tensor_parallel.autotp_size", "pp": "ds.pipeline.stages", "bf16": "ds.bf16.enabled",
             "fp16": "ds.fp16.enabled"}


@pytest.mark.parametrize("name", DEEPSPEED)
def test_deepspeed_derives_the_same_run_from_both_launches(name, tmp_path, tmp_path_factory):
    """DeepSpeed's own launcher parser, hostfile reader and DeepSpeedConfig (tests/judges/
    deepspeed_judge.py) read the original's `deepspeed` launch and parc's: the world, nodes, batch
    arithmetic, ZeRO stage, AutoTP, pipeline stages and precision they derive are equal, but for
    the settings the corpus lists as differing."""
    from support import judges

    from parc import targets

    e = _entry(name)
    original = [la for la in wild.original_launches(e, tmp_path) if la.argv]
    if not original:
        pytest.skip(f"{name}: the original is not started by DeepSpeed's launcher")
    emitted = [la for la in wild.emitted_launches(e.target, targets.get(e.target).build(_checked(name).plan), tmp_path)
               if la.argv]
    proc = judges.start("deepspeed", "PARC_DEEPSPEED_PYTHON", tmp_path_factory.mktemp("judge") / "stderr")
    try:
        a, b = judges.ask(proc, "@@deepspeed-judge ", [_ds_item(la, tmp_path / f"ds{i}")
                                                       for i, la in enumerate((original[0], emitted[0]))])
    finally:
        judges.stop(proc)
    assert a["ok"] and b["ok"], (a, b)
    listed = {d["key"].split("/", 1)[1] for d in e.differs}
    differ = {f for f, key in DS_FIELDS.items() if a[f] != b[f] and key not in listed}
    assert not differ, {f: (a[f], b[f]) for f in differ}


SKYPILOT = [e.name for e in ENTRIES if e.target == "skypilot"]


@pytest.mark.parametrize("name", SKYPILOT)
def test_skypilot_reads_both_tasks_alike(name, tmp_path_factory):
    """SkyPilot's own Task.from_yaml_config reads the published task and parc's: both are valid
    tasks of the same node count, and parc's accelerator is one the original allows."""
    from support import judges

    from parc import targets

    e = _entry(name)
    files = e.original["file"] if isinstance(e.original["file"], list) else [e.original["file"]]
    texts = [wild.original_text(e.folder / f) for f in files]
    r = _checked(name)
    try:
        built = {f.path: f.text for f in targets.get(e.target).build(r.plan)} if r.plan else {}
    except Exception:
        built = {}
    items = [{"text": t} for t in texts + ([built["task.yaml"]] if "task.yaml" in built else [])]
    proc = judges.start("skypilot", "PARC_SKYPILOT_PYTHON", tmp_path_factory.mktemp("judge") / "stderr",
                        timeout=900, script=["wild_judge.py", "skypilot"])
    try:
        got = judges.ask(proc, "@@wild-skypilot ", items)
    finally:
        judges.stop(proc)
    refused = e.original.get("judge_refuses")
    if refused:          # SkyPilot's pinned release refuses the published task: say so, judge parc's
        assert not got[0]["ok"] and refused in got[0]["error"], (got[0], refused)
        got = got[1:]
    assert all(g["ok"] for g in got), got
    if len(got) == 2:
        orig, ours = got
        assert ours["num_nodes"] == orig["num_nodes"]
        assert set(ours["accelerators"]) <= set(orig["accelerators"]), (ours, orig)


def test_a_refusal_counts_only_where_the_engine_refuses():
    """The audit the check test reads: Megatron-LM itself refuses a mesh larger than the world
    (P101, validate_args), while no serving engine refuses a TP group across nodes (P301 has no
    engine audit), so an entry refused by P301 must name the missing work."""
    fails, source = _audit("P101", "megatron")
    assert fails not in NOT_A_REFUSAL and "megatron" in source
    fails, source = _audit("P301", "sglang")
    assert not (fails and fails not in NOT_A_REFUSAL and source)


def test_a_script_writes_nothing_outside_its_sandbox(tmp_path):
    """A published script that writes a fixed /tmp path (TensorRT-LLM's benchmarking guide writes
    its LLM API file to /tmp/extra-llm-api-config.yml) writes it inside the sandbox instead, and
    the recorded command names the file it really wrote."""
    from support import wild_shell

    probe = f"/tmp/parc-wild-probe-{tmp_path.name}.yml"
    script = f"f={probe}\ncat << EOF > $f\nkey: 1\nEOF\nvllm serve m --config $f\n"
    records = wild_shell.run(script, tmp_path / "box")
    assert not Path(probe).exists()
    written = Path(records[0]["argv"][-1])
    assert written.is_relative_to(tmp_path / "box") and written.read_text() == "key: 1\n"
