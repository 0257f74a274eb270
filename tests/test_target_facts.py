"""Target facts have one home, each target's target.toml, read by parc.model.targets: the rule
runner, the planner, `parc rules` and the plan's inherited settings all take them from there and
so agree with one another."""
from __future__ import annotations

from parc.cli.main import main
from parc.model import targets as T
from parc.model.plan import GPU, Cluster, Link, Model


def test_declared_facts():
    # the first targets, in the order each list gives them (a new target folder joins the lists)
    first = ["json", "kubernetes", "megatron", "slurm", "torchrun", "vllm"]
    assert T.names() == sorted(T.names()) and [t for t in T.names() if t in first] == first
    assert T.rule_targets() == T.names() + ["torch"]
    assert T.display("megatron") == "Megatron-LM" and T.display("torch") == "parc's torch runtime (torchtitan-style)"
    assert [t for t in T.launch_targets() if t in first] == ["kubernetes", "megatron", "slurm", "torchrun", "vllm"]
    assert set(T.launch_targets()) == {t for t in T.names() if t != "json"}
    audited = ("megatron", "vllm", "torchrun", "deepspeed", "slurm", "kubernetes")
    assert tuple(t for t in T.audit_targets() if t in audited) == audited
    assert T.inherits("slurm") == ("torchrun", ("entrypoint", "args", "max_restarts"))
    assert T.inherits("torchrun") is None
    assert T.rank_order("vllm", "serve") == ("dp", "pp", "cp", "tp") and T.rank_order("vllm", "train") is None
    assert [o for o, _ in T.rank_orders("megatron")] == [("pp", "dp", "cp", "tp"), ("dp", "pp", "cp", "tp")]
    assert T.required("slurm", "train") == [("entrypoint", "the script each node's torchrun starts")]
    assert T.required("slurm", "serve") == []   # it serves with the vllm target's command
    assert T.implied(["torchrun"], "serve") == {"torchrun", "torch"}
    # a wrapper brings the engine its block picks: without one, its default for the mode (torchrun,
    # whose keys slurm carries, brings its own families); with no settings, every engine it can run
    assert T.implied(["slurm"], "train", lambda t: {}) == {"slurm", "torch"}
    assert T.implied(["kubernetes"], "serve", lambda t: {}) == {"kubernetes", "vllm"}
    assert T.implied(["slurm"], "train", lambda t: {}, ["megatron"]) == {"slurm", "megatron"}
    assert T.implied(["slurm"], "train") == {"slurm", "torch", "torchtitan", "megatron", "deepspeed", "megatron_deepspeed"}


def test_every_declared_key_has_a_kind_and_a_doc():
    for t in T.names():
        for key, d in T.keys(t).items():
            assert d.get("kind") and d.get("doc"), (t, key)
            if "required" in d:
                assert "example" in d, (t, key)


def test_rules_for_a_scheduler_list_what_it_runs_in_either_mode(capsys):
    """`parc rules --target slurm` lists the codes that apply when compiling for Slurm: those of
    every engine it can run, the torch runtime's and Megatron-LM's when it trains, vLLM's and
    SGLang's when it serves, as `parc check` runs the one the spec picks (it used to leave vLLM's
    out)."""
    assert main(["rules", "--target", "slurm"]) == 0
    out = capsys.readouterr().out
    codes = {line.split()[0] for line in out.splitlines()[1:]}
    assert {"P660", "P617", "P610", "P608", "P651", "P601", "P691"} <= codes   # its own, torch's, the engines'
    assert "P661" not in codes and "P653" not in codes    # Kubernetes', and torchrun's own rendezvous rule


def _problem(mode, targets):
    from parc.planner import Problem

    model = Model(name="tiny", layers=4, hidden=1024, ffn_hidden=2816, heads=8, kv_heads=2, head_dim=128,
                  vocab=32000, params=0, seq_len=1024)
    gpu = GPU("small", 2 * 10**9, 100e12, 1e12)
    cluster = Cluster("lab", 2, 4, gpu, Link("nvlink", 100e9), Link("infiniband", 25e9))
    return Problem(model=model, cluster=cluster, mode=mode, extra_targets=tuple(targets))


def test_planner_judges_by_the_rules_check_runs():
    """The planner's targets are those `parc check` runs: serving under Slurm brings vLLM's rules
    (and its rank order), not the torch runtime's, which it used to assume."""
    assert _problem("serve", ["slurm"]).rule_targets == {"slurm", "vllm"}
    assert _problem("train", ["slurm"]).rule_targets == {"slurm", "torch"}
    assert _problem("serve", ["torchrun"]).rule_targets == {"torchrun", "torch"}


def test_settings_inherited_as_declared(check_spec):
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "specs" / "slurm-kubernetes.par").read_text()
    plan = check_spec(text).plan
    torchrun = plan.targets["torchrun"].settings
    for t in ("slurm", "kubernetes"):
        got = plan.target_settings(t)
        for key in T.inherits(t)[1]:
            if key in torchrun and key not in plan.targets[t].settings:
                assert got[key] == torchrun[key]
