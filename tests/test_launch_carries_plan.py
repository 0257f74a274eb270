"""No target emits a launch whose engine command lacks the plan: every example and test spec,
compiled for every target that accepts it (as written, and with the target block it lacks
added), is started the way its tool starts it with recording launchers (tests/support/launched.py),
and the plan's degrees and batch are read back from what the engine is given: its argv
(torchtitan's overrides, Megatron-LM's arguments, vllm serve's and SGLang's options), the config
it reads (DeepSpeed's ds_config.json), or for a script of the spec's own under torchrun the
plan.json PARC_PLAN points at. Under a wrapper (slurm, kubernetes, trainjob, skypilot, lws) that is
the engine it runs, so a wrapper that started Megatron-LM without its degrees fails here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends_support import accepted_cases, every_target_cases
from support.launched import engine_run, launched, options, split

def num(opts: dict, key: str, default: int = 1) -> int:
    return int(opts.get(key, default))


# --- training ---------------------------------------------------------------------------------
def train_degrees(call: dict, engine: str) -> dict | None:
    """The degrees and batch one call of ``engine``'s launcher gives it (None: another process)."""
    if call["launcher"] == "torchrun" and engine in ("torchrun", "torchtitan", "megatron"):
        launcher, program = split(call["argv"], "torchrun")
        world = num(launcher, "--nnodes") * num(launcher, "--nproc-per-node")
        if engine == "torchtitan":
            assert launcher.get("-m") and program[0] == "torchtitan.train", call["argv"]
            o = options(program)
            p = "--parallelism."
            dp = num(o, p + "data_parallel_replicate_degree") * num(o, p + "data_parallel_shard_degree")
            return {"engine": "torchtitan", "world": world, "dp": dp, "tp": num(o, p + "tensor_parallel_degree"),
                    "pp": num(o, p + "pipeline_parallel_degree"), "cp": num(o, p + "context_parallel_degree"),
                    "ep": num(o, p + "expert_parallel_degree"), "global": num(o, "--training.global_batch_size", 0),
                    "micro": num(o, p + "pipeline_parallel_microbatch_size", num(o, "--training.local_batch_size"))
                    if num(o, p + "pipeline_parallel_degree") > 1 else num(o, "--training.local_batch_size")}
        o = options(program[1:])
        if engine == "megatron":
            tp, pp, cp = (num(o, "--tensor-model-parallel-size"), num(o, "--pipeline-model-parallel-size"),
                          num(o, "--context-parallel-size"))
            return {"engine": "megatron", "world": world, "tp": tp, "pp": pp, "cp": cp, "dp": world // (tp * pp * cp),
                    "ep": num(o, "--expert-model-parallel-size"), "micro": num(o, "--micro-batch-size", 0),
                    "global": num(o, "--global-batch-size", 0)}
        plan_file = call["env"].get("PARC_PLAN")
        assert plan_file and Path(plan_file).is_file(), f"a script under torchrun without the plan: {call['argv']}"
        plan = json.loads(Path(plan_file).read_text())
        m, sc = plan["mesh"], plan["schedule"]
        return {"engine": "torchrun", "world": world, **{k: m[k] for k in ("dp", "tp", "pp", "cp", "ep")},
                "micro": sc["micro_batch"], "global": sc["global_batch"]}
    if call["launcher"] in ("torchrun", "deepspeed") and engine == "megatron_deepspeed":
        return megatron_deepspeed_degrees(call)
    if call["launcher"] == "deepspeed" and engine == "deepspeed":
        launcher, program = split(call["argv"], "deepspeed")
        o = options(program[1:])
        cfg = json.loads(Path(o["--deepspeed_config"]).read_text())
        world = num(launcher, "--num_nodes") * num(launcher, "--num_gpus")
        tp, pp = cfg.get("tensor_parallel", {}).get("autotp_size", 1), cfg.get("pipeline", {}).get("stages", 1)
        dp = world // (tp * pp)
        micro, gas = cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
        assert cfg.get("train_batch_size", micro * gas * dp) == micro * gas * dp
        return {"engine": "deepspeed", "world": world, "tp": tp, "pp": pp, "cp": 1, "dp": dp, "ep": None,
                "micro": micro, "global": micro * gas * dp}
    return None


def megatron_deepspeed_degrees(call: dict) -> dict:
    """Megatron-DeepSpeed's degrees from its own arguments (dp = world / (tp · pp), as the fork's
    validate_args derives it) and its batch from ds_config.json, which must agree with them."""
    launcher, program = split(call["argv"], call["launcher"])
    o = options(program[1:])
    world = (num(launcher, "--nnodes") * num(launcher, "--nproc-per-node") if call["launcher"] == "torchrun"
             else num(launcher, "--num_nodes") * num(launcher, "--num_gpus"))
    tp, pp = num(o, "--tensor-model-parallel-size"), num(o, "--pipeline-model-parallel-size")
    assert (pp == 1) == ("--no-pipeline-parallel" in o), call["argv"]
    assert "--deepspeed" in o, call["argv"]
    cfg = json.loads(Path(o["--deepspeed_config"]).read_text())
    dp, micro, glob = world // (tp * pp), num(o, "--micro-batch-size", 0), num(o, "--global-batch-size", 0)
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["train_batch_size"]) == (micro, glob), (cfg, call["argv"])
    assert cfg["gradient_accumulation_steps"] * micro * dp == glob, cfg
    assert cfg["zero_optimization"]["stage"] == num(o, "--zero-stage", 0), cfg
    return {"engine": "megatron_deepspeed", "world": world, "tp": tp, "pp": pp, "cp": 1, "dp": dp, "ep": None,
            "micro": micro, "global": glob}


def check_training(plan: dict, engine: str, calls: list[dict], what: str) -> None:
    m, sc, cl = plan["mesh"], plan["schedule"], plan["cluster"]
    seen = [d for d in (train_degrees(c, engine) for c in calls) if d]
    assert seen, f"{what}: no engine was started ({[c['launcher'] for c in calls]})"
    for d in seen:
        assert d["world"] == cl["nodes"] * cl["gpus_per_node"] == plan["world_size"], (what, d)
        for k in ("tp", "pp", "cp", "dp"):
            assert d[k] == m[k], f"{what}: {d['engine']} is given {k} = {d[k]}, the plan has {m[k]}"
        if d["ep"] is not None and plan["model"]["experts"]:
            assert d["ep"] == m["ep"], f"{what}: {d['engine']} is given ep = {d['ep']}, the plan has {m['ep']}"
        assert (d["micro"], d["global"]) == (sc["micro_batch"], sc["global_batch"]), (what, d)


# --- serving ----------------------------------------------------------------------------------
def serve_degrees(call: dict, engine: str) -> dict | None:
    """The sizes one vllm serve or SGLang server is given (None: another process)."""
    argv = call["argv"]
    if call["launcher"] == "vllm" and argv[:1] == ["serve"] and engine == "vllm":
        o = options(argv[2:])
        port = int(o.get("--port", 0) or 0)
        return {"engine": "vllm", "tp": num(o, "--tensor-parallel-size"), "pp": num(o, "--pipeline-parallel-size"),
                "cp": num(o, "--prefill-context-parallel-size"), "dcp": num(o, "--decode-context-parallel-size"),
                "dp": num(o, "--data-parallel-size"), "ep": "--enable-expert-parallel" in o,
                "leader": "--headless" not in o, "pool": call.get("pool") or _vllm_pool(port),
                "copies": call["copies"]}
    if call["launcher"] == "python3" and argv[:2] == ["-m", "sglang.launch_server"] and engine == "sglang":
        o = options(argv[2:])
        attn = num(o, "--attn-dp-size", num(o, "--dp-size") if "--enable-dp-attention" in o else 1)
        dp = 1 if "--enable-dp-attention" in o else num(o, "--dp-size")
        return {"engine": "sglang", "tp": num(o, "--tp-size") // attn, "pp": num(o, "--pp-size"), "cp": 1,
                "dcp": num(o, "--dcp-size"), "dp": dp * attn, "ep": num(o, "--ep-size"),
                "leader": str(o.get("--node-rank", "0")) == "0", "pool": o.get("--disaggregation-mode"),
                "copies": call["copies"]}
    if call["launcher"] == "trtllm-serve" and engine == "trtllm":
        import yaml

        o = options(argv[1:])
        api = yaml.safe_load(Path(o["--extra_llm_api_options"]).read_text()) if "--extra_llm_api_options" in o else {}
        tp = num(o, "--tp_size")
        attn = tp if api.get("enable_attention_dp") else 1   # every rank's attention apart
        return {"engine": "trtllm", "tp": tp // attn, "pp": num(o, "--pp_size"), "cp": 1, "dcp": 1, "dp": attn,
                "ep": num(o, "--ep_size"), "leader": True, "pool": None, "copies": call["copies"]}
    return None


def _vllm_pool(port: int) -> str | None:
    from parc.targets.vllm import POOL_PORTS

    return next((p for p, first in sorted(POOL_PORTS.items(), key=lambda x: -x[1]) if port >= first), None)


def check_serving(plan: dict, engine: str, calls: list[dict], what: str) -> None:
    seen = [d for d in (serve_degrees(c, engine) for c in calls) if d]
    assert seen, f"{what}: no server was started ({[c['launcher'] for c in calls]})"
    groups = {p["name"]: (p["mesh"], p["instances"]) for p in plan.get("pools") or []} or {None: (plan["mesh"], 1)}
    moe = bool(plan["model"]["experts"])
    for pool, (m, instances) in groups.items():
        mine = [d for d in seen if d["pool"] == pool or len(groups) == 1]
        assert mine, f"{what}: nothing serves the {pool} pool"
        for d in mine:
            for k in ("tp", "pp", "cp", "dcp"):
                assert d[k] == m[k], f"{what}: {d['engine']} ({pool or 'plan'}) is given {k} = {d[k]}, the plan has {m[k]}"
            if moe and m["ep"] > 1:
                assert d["ep"] in (True, m["ep"], d["tp"] * d["dp"]), f"{what}: {d['engine']} is given ep {d['ep']}"
        # every data-parallel replica of every instance is served, once
        served = sum(d["dp"] * d["copies"] for d in mine if d["leader"])
        assert served == m["dp"] * instances, f"{what}: {pool or 'the plan'} serves dp {served}, the plan has " \
                                              f"{m['dp']} x {instances} instance(s)"


# targets that start no process of their own: json writes the plan; Ray Serve LLM builds the engine
# from its config's engine_kwargs (tests/test_rayserve_judge.py has Ray build the application and
# vLLM's EngineArgs take the degrees)
NO_PROCESS = ("json", "rayserve")


def cases():
    seen, out = set(), []
    for spec, target, files in accepted_cases() + every_target_cases():
        if target in NO_PROCESS or (spec, target) in seen:
            continue
        seen.add((spec, target))
        out.append((spec, target, files))
    return out


def check(spec: str, target: str, files, tmp: Path) -> None:
    calls = launched(target, files, tmp)
    plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
    engine = engine_run(plan, target)
    what = f"{spec} --target {target} (engine {engine})"
    if plan["mode"] == "train":
        check_training(plan, engine, calls, what)
    else:
        check_serving(plan, engine, calls, what)


def test_every_launch_carries_the_plans_degrees_and_batch(tmp_path):
    found = cases()
    targets = {t for _, t, _ in found}
    assert {"slurm", "kubernetes", "trainjob", "skypilot", "lws", "torchrun", "torchtitan", "megatron", "deepspeed", "megatron_deepspeed",
            "vllm", "sglang"} <= targets, targets
    for i, (spec, target, files) in enumerate(found):
        check(spec, target, files, tmp_path / f"{i}-{target}")


def test_a_launch_without_the_degrees_fails_here(tmp_path, monkeypatch, check_spec):
    """The check above is not vacuous: Megatron-LM started under Slurm without its parallel
    arguments (what `args=()` did), or a script under torchrun without plan.json, is caught."""
    from parc.targets import get, megatron

    text = (Path(__file__).parent.parent / "examples/gpt3-175b-train.par").read_text()
    r = check_spec(text, ("slurm",))
    assert not r.errors
    check("gpt3-175b-train.par", "slurm", get("slurm").build(r.plan), tmp_path / "ok")
    monkeypatch.setattr(megatron, "_parallel_lines", lambda plan: [])
    with pytest.raises(AssertionError, match="tp = 1, the plan has 8"):
        check("gpt3-175b-train.par", "slurm", get("slurm").build(r.plan), tmp_path / "dropped")
    from support.specs import spec

    r = check_spec(spec("from = llama3_8b", nodes=2, gpn=8, mesh="dp = 16", schedule="micro_batch = 1; global_batch = 32",
                        target={"torchrun": 'entrypoint = "t.py"'}), ("torchrun",))
    files = [f if f.path != "launch.sh" else type(f)(f.path, f.text.replace('export PARC_PLAN="$here/plan.json"', ""),
                                                     True) for f in get("torchrun").build(r.plan)]
    with pytest.raises(AssertionError, match="without the plan"):
        check("t.par", "torchrun", files, tmp_path / "no-plan")
