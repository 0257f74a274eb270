"""Megatron-DeepSpeed itself judges parc's megatron_deepspeed launches: every launch parc emits for
the examples and test specs (and the corpus's Llama-2 recipe) runs with recording launchers, and
the arguments pretrain_gpt.py is given go through the fork's argument parsing and the config they
name through DeepSpeed's DeepSpeedConfig (tests/judges/megatron_deepspeed_judge.py, in the DeepSpeed
judge's environment, tests/judges/deepspeed_env.sh); the degrees, batch and model the fork derives
must be the plan's. The fork is on no package registry: its parser is rebuilt from the table of its
options (tests/wild/engines/megatron_deepspeed.json), or, with PARC_MEGATRON_DEEPSPEED_SRC naming a
checkout of deepspeedai/Megatron-DeepSpeed, is its own megatron/arguments.py. The other way round,
the plans parc refuses for the fork's reasons are refused by it. The tests run when PARC_JUDGES asks
for them (tests/support/judges.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends_support import ROOT, accepted_cases
from support import judges, wild
from support.launched import launched, split

MARK = "@@megatron-deepspeed-judge "
T = "megatron_deepspeed"


@pytest.fixture(scope="module")
def mds_judge(tmp_path_factory):
    proc = judges.start("deepspeed", "PARC_DEEPSPEED_PYTHON", tmp_path_factory.mktemp("judge") / "stderr",
                        env={"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0"}, script=["megatron_deepspeed_judge.py"])
    yield proc
    judges.stop(proc)


def _items(files, tmp: Path) -> list[dict]:
    """The judge's items for every pretrain_gpt.py a launch of ``files`` starts."""
    out = []
    for c in launched(T, files, tmp):
        if c["launcher"] in ("torchrun", "deepspeed"):
            launcher, program = split(c["argv"], c["launcher"])
            world = (int(launcher.get("--nnodes", 1)) * int(launcher.get("--nproc-per-node", 1))
                     if c["launcher"] == "torchrun" else int(launcher["--num_nodes"]) * int(launcher["--num_gpus"]))
            out.append({"argv": program[1:], "world": world, "cwd": str(tmp)})
    return out


def _check(v: dict, plan: dict, what: str) -> None:
    assert v["ok"], f"{what}: Megatron-DeepSpeed refuses it: {v.get('stage')}: {v.get('error')}"
    m, sc, t, md = plan["mesh"], plan["schedule"], plan["train"], plan["model"]
    assert (v["tp"], v["pp"], v["dp"]) == (m["tp"], m["pp"], m["dp"]), what
    assert (v["micro"], v["global"], v["zero_stage"]) == (sc["micro_batch"], sc["global_batch"], t["zero"]), what
    assert (v["ds_micro"], v["ds_train_batch_size"], v["ds_gas"], v["ds_zero"]) == (
        sc["micro_batch"], sc["global_batch"], sc["microbatches"], t["zero"]), what
    assert v["no_pipeline_parallel"] == (m["pp"] == 1), what
    assert (v["layers"], v["hidden"], v["ffn_hidden"], v["heads"], v["kv_heads"], v["seq_len"]) == (
        md["layers"], md["hidden"], md["ffn_hidden"], md["heads"], md["kv_heads"], md["seq_len"]), what
    assert v["swiglu"] == (md["mlp"] == "swiglu") and v["rope"] == (md["position"] == "rope"), what
    assert v["normalization"] == md["norm"] and v["bias"] == md["bias"] and v["untied"] == (not md["tied_embeddings"])
    if md["position"] == "rope":
        assert v["rope_theta"] == md["rope_theta"], what
    assert v["norm_eps"] == (1e-5 if md["norm_eps"] is None else md["norm_eps"]), what   # unset: the fork's default
    if v["padded_vocab"] is not None:      # NullTokenizer: the model's vocabulary exactly, no padding
        assert v["padded_vocab"] == md["vocab"], what
    assert v["bf16"] == (t["precision"] in ("bf16", "fp8")) == v["ds_bf16"], what


@pytest.mark.deepspeed
def test_megatron_deepspeed_accepts_what_parc_emits(mds_judge, tmp_path_factory):
    cases = []
    for spec, t, files in accepted_cases():
        if t != T:
            continue
        plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        cases += [(f"{spec} --target {t}", plan, item) for item in _items(files, tmp)]
    assert len(cases) >= 5, [c[0] for c in cases]
    for (what, plan, _), v in zip(cases, judges.ask(mds_judge, MARK, [c[2] for c in cases])):
        _check(v, plan, what)


def _recorded(records) -> list[dict]:
    """The judge's items for the pretrain_gpt.py calls among a script's recorded torchrun programs
    (torchrun's options as it spells them, underscores or dashes)."""
    out = []
    for rec in records:
        argv = rec["argv"]
        if rec["name"] != "torchrun" or "pretrain_gpt.py" not in argv:
            continue
        i = argv.index("pretrain_gpt.py")
        opts = {argv[k].replace("_", "-"): argv[k + 1] for k in range(i - 1) if argv[k].startswith("--")}
        out.append({"argv": argv[i + 1:], "world": int(opts.get("--nnodes", 1)) * int(opts["--nproc-per-node"]),
                    "cwd": rec["cwd"]})
    return out


@pytest.mark.deepspeed
def test_the_corpus_recipe_and_parcs_launch_of_it_are_judged_alike(mds_judge, tmp_path):
    """The published Llama-2 script (tests/wild/deepspeed-megatron-llama2) and parc's launch of its
    plan make the same run: the same degrees, batch, model and DeepSpeed config."""
    from parc import targets
    from parc.api import check_file
    from support import wild_shell

    e = next(x for x in wild.corpus() if x.name == "deepspeed-megatron-llama2")
    r = check_file(str(e.par), [T], root=wild.ROOT)
    assert not r.errors
    files = targets.get(T).build(r.plan)
    plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
    mine = _items(files, tmp_path / "parc")
    box = tmp_path / "original"
    wild._sandbox_files(e, box)
    theirs = _recorded(wild_shell.run(wild.original_text(e.folder / e.original["file"]), box))
    assert len(mine) == len(theirs) == 1
    a, b = judges.ask(mds_judge, MARK, mine + theirs)
    _check(a, plan, "parc's launch of the recipe")
    assert b["ok"], b
    same = ("tp", "pp", "dp", "micro", "global", "zero_stage", "layers", "hidden", "ffn_hidden", "heads", "kv_heads",
            "seq_len", "max_positions", "swiglu", "normalization", "rope", "rope_theta", "bias", "untied",
            "ds_train_batch_size", "ds_micro", "ds_gas", "ds_zero", "ds_bf16", "bf16", "no_pipeline_parallel")
    assert {k: a[k] for k in same} == {k: b[k] for k in same}


# The other direction: what parc refuses for the fork's reasons, the fork refuses too. The target
# builds its files for the refused plan anyway.
L8 = "from = llama3_8b; seq_len = 1024"
REFUSED = [
    # 4 KV heads over tp = 8: Megatron-LM would replicate them, the fork's ParallelAttention divides
    ("P698", dict(model=L8 + "; kv_heads = 4", mesh="tp = 8", schedule="micro_batch = 1; global_batch = 8",
                  train="zero = 0", target={T: ""}), "model build"),
    # DeepSpeed's pipeline engine under the fork's GPTModelPipe
    ("P615", dict(model=L8, mesh="pp = 2; dp = 4", schedule="micro_batch = 1; global_batch = 32", train="zero = 2",
                  target={T: ""}), "DeepSpeedConfig"),
]


@pytest.mark.deepspeed
def test_megatron_deepspeed_refuses_what_parc_refuses(mds_judge, check_spec, tmp_path):
    from parc import targets
    from support.specs import spec

    items = []
    for code, kw, _ in REFUSED:
        r = check_spec(spec(**kw), (T,))
        assert code in {d.code for d in r.errors}, (code, [f"{d.code} {d.message}" for d in r.diagnostics])
        items += _items(targets.get(T).build(r.plan), tmp_path / code)
    assert len(items) == len(REFUSED)
    for (code, _, stage), v in zip(REFUSED, judges.ask(mds_judge, MARK, items)):
        assert not v["ok"] and v["stage"] == stage, (code, v)


def test_the_option_table_is_the_forks_parser(tmp_path):
    """tests/wild/engines/megatron_deepspeed.json is what the fork's own parser lists (needs a
    checkout of the fork: PARC_MEGATRON_DEEPSPEED_SRC, and the DeepSpeed judge's environment)."""
    import os
    import subprocess

    src = os.environ.get("PARC_MEGATRON_DEEPSPEED_SRC")
    py = judges.python("deepspeed", "PARC_DEEPSPEED_PYTHON")
    if not src:
        pytest.skip("no checkout of deepspeedai/Megatron-DeepSpeed (PARC_MEGATRON_DEEPSPEED_SRC): the fork is on "
                    "no package registry")
    out = subprocess.run([py, "wild_megatron_deepspeed_options.py", src], capture_output=True, text=True,
                         timeout=600, check=True, cwd=ROOT / "tests" / "judges",
                         env={**os.environ, "DS_ACCELERATOR": "cpu"}).stdout
    committed = json.loads((ROOT / "tests" / "wild" / "engines" / "megatron_deepspeed.json").read_text())
    assert json.loads(out) == committed


@pytest.mark.deepspeed
def test_the_fork_takes_the_models_norm_epsilon(mds_judge, check_spec, tmp_path):
    """`norm_eps` reaches the fork's --layernorm-epsilon (its default 1e-5 where the model says none)."""
    from parc import targets
    from support.specs import spec

    r = check_spec(spec(model="from = llama3_8b\nnorm_eps = 0.000001\nseq_len = 2048", train="zero = 3", target={T: ""}),
                   (T,))
    assert r.ok, [d.message for d in r.errors]
    files = targets.get(T).build(r.plan)
    [v] = judges.ask(mds_judge, MARK, _items(files, tmp_path))
    _check(v, json.loads(next(f.text for f in files if f.path == "plan.json")), "norm_eps")
    assert v["norm_eps"] == 1e-6
