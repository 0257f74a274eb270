"""vLLM itself judges parc's serving commands: every `vllm serve` command parc emits for the
examples and test specs (the vllm target's, and each node's of the wrappers that run vLLM) goes through vLLM's own parser (make_arg_parser, EngineArgs) and its
ParallelConfig checks, and the other way round every vLLM refusal of parc's goes through vLLM's
create_engine_config on a local model folder (no weights) and must be refused there too, or
where the audit in data/rules.toml says vLLM fails. All in an isolated virtual environment that
tests/judges/vllm_env.sh creates (never parc's own). The tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it).
PARC_VLLM_PYTHON names an existing environment's python instead."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from backends_support import ROOT, accepted_cases, run_emitted, write_out
from support import judges
from support.launched import engine_run, launched

JUDGES = ROOT / "tests" / "judges"


@pytest.fixture(scope="module")
def vllm_python(tmp_path_factory):
    """A judge: one vllm_judge.py process for the module, fed one batch of commands a call."""
    proc = judges.start("vllm", "PARC_VLLM_PYTHON", tmp_path_factory.mktemp("judge") / "stderr")
    yield proc
    judges.stop(proc)


MARK = "@@vllm-judge "


def _judge(proc, argvs: list) -> list[dict]:
    proc.stdin.write(json.dumps(argvs) + "\n")
    proc.stdin.flush()
    for line in proc.stdout:
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    proc.stderr_file.seek(0)
    raise AssertionError("vllm_judge.py stopped: " + proc.stderr_file.read()[-3000:])


def _commands(tmp_path_factory):
    """(spec, node, plan, argv after `vllm serve`) for every vllm command parc emits; for a
    disaggregated plan, node 0 of an instance of each pool, with ``plan`` the pool's view (its
    mesh, its instance's nodes)."""
    out = []
    for spec, t, files in accepted_cases():
        if t != "vllm":
            continue
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        d = write_out(files, tmp / "out")
        plan = json.loads((d / "plan.json").read_text())
        views = [("", plan, None)]
        if plan["pools"]:
            views = [(p["name"] + "-", {**plan, "mesh": p["mesh"], "cluster": {**plan["cluster"], "nodes": 1}}, "0")
                     for p in plan["pools"]]
        for prefix, view, slot in views:
            one = (d / f"{prefix}serve.sh").exists()
            for k in range(1 if one else view["cluster"]["nodes"]):
                got = run_emitted(d / f"{prefix}{'serve.sh' if one else 'launch.sh'}", tmp,
                                  *([slot] if one and slot else [] if one else [str(k)]),
                                  env={"VLLM_HOST_IP": "10.0.0.9"})
                if "vllm" in got:
                    assert got["vllm"][0] == "serve"
                    out.append((spec, k, view, got["vllm"][1:]))
    return out


def _without_ray(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--distributed-executor-backend", "--data-parallel-backend") and argv[i + 1] == "ray":
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


@pytest.mark.vllm
def test_vllm_accepts_what_parc_emits(vllm_python, tmp_path_factory):
    cmds = _commands(tmp_path_factory)
    assert len({c[0] for c in cmds}) >= 7
    # node 0's command once more with the spec's model as a local folder: create_engine_config
    # (the model's heads, kv heads, positions against the sizes), in the V2 model runner that vLLM
    # picks on a GPU with Triton
    # (Ray is not installed here: its executor options are left out of this pass)
    heads = [(spec, plan, [_model_folder(SimpleNamespace(**plan["model"]), tmp_path_factory.mktemp("m") / "m")]
              + _without_ray(argv[1:])) for spec, k, plan, argv in cmds if k == 0]
    verdicts = _judge(vllm_python, [argv for _, _, _, argv in cmds]
                      + [{"argv": argv, "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}} for _, _, argv in heads])
    for (spec, plan, argv), v in zip(heads, verdicts[len(cmds):]):
        assert v["ok"] and v["engine_config"], f"{spec}: vLLM's create_engine_config refuses {argv}: {v.get('error')}"
        assert v["max_model_len"] == plan["serve"]["max_model_len"], spec
    for (spec, k, plan, argv), v in zip(cmds, verdicts):
        assert v["ok"], f"{spec} node {k}: vLLM refuses {argv}: {v.get('error')}"
        m = plan["mesh"]
        assert (v["tp"], v["pp"], v["dp"], v["pcp"]) == (m["tp"], m["pp"], m["dp"], m["cp"]), spec
        assert v["ep"] == (m["ep"] > 1) and v["model"] == plan["targets"]["vllm"]["settings"]["model"], spec
        assert v["headless"] == (k > 0 and "--headless" in argv)
        if plan["cluster"]["nodes"] > 1 and m["dp"] > 1:
            # every node declares how many DP replicas it holds, and they add up to dp
            assert v["dp_local"] * plan["cluster"]["nodes"] == m["dp"] or v["world"] > plan["cluster"]["gpus_per_node"]


@pytest.mark.vllm
def test_vllm_accepts_what_the_wrappers_run(vllm_python, tmp_path_factory):
    """Each node of a Slurm job, a SkyPilot task or a PyTorchJob that runs vLLM starts `vllm serve`
    with the vllm target's options (the LeaderWorkerSet's pods are tests/test_lws_judge.py's), and
    vLLM's parser gives them the plan's sizes (a pool's, for a disaggregated plan's instances)."""
    from parc.targets.vllm import POOL_PORTS

    cmds = []
    for spec, t, files in accepted_cases():
        plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
        if t not in ("slurm", "skypilot", "kubernetes") or engine_run(plan, t) != "vllm":
            continue
        for c in launched(t, files, tmp_path_factory.mktemp(Path(spec).stem)):
            if c["launcher"] == "vllm" and c["argv"][:1] == ["serve"]:
                port = int(dict(zip(c["argv"], c["argv"][1:])).get("--port", 0))
                # a pool instance's API server serves on its pool's port; its headless nodes on none
                meshes = [p["mesh"] for p in plan["pools"] if POOL_PORTS[p["name"]] <= port < POOL_PORTS[p["name"]] + 100]
                cmds.append((f"{spec} --target {t}", meshes or [p["mesh"] for p in plan["pools"]] or [plan["mesh"]],
                             c["argv"][1:]))
    assert len({c[0].split(" --target ")[1] for c in cmds}) == 3 and len(cmds) >= 20
    for (name, meshes, argv), v in zip(cmds, _judge(vllm_python, [argv for *_, argv in cmds])):
        assert v["ok"], f"{name}: vLLM refuses {argv}: {v.get('error')}"
        assert any((v["tp"], v["pp"], v["dp"], v["pcp"], v["ep"]) == (m["tp"], m["pp"], m["dp"], m["cp"], m["ep"] > 1)
                   for m in meshes), (name, v)


@pytest.mark.vllm
def test_vllm_refuses_what_it_should(vllm_python):
    """The judge itself refuses a wrong command, so an accepting verdict means something."""
    bad = [["x/y", "--tensor-parallel-size", "2", "--data-parallel-size", "2", "--data-parallel-size-local", "4"],
           ["x/y", "--tensor-parallel-size", "two"]]
    assert [v["ok"] for v in _judge(vllm_python, bad)] == [False, False]


# ----------------------------------------------------------------------------------------------
# The other direction: what parc refuses for vLLM, vLLM refuses too (or, as the audit in
# data/rules.toml says, only later than its argument and configuration checks).

def _model_folder(model, path: Path) -> str:
    """A local model folder vLLM's ModelConfig reads without the Hub: the spec's model as a
    Llama-style (Mixtral-style with experts) config.json, no weights."""
    cfg = {"architectures": ["MixtralForCausalLM" if model.experts else "LlamaForCausalLM"],
           "model_type": "mixtral" if model.experts else "llama", "hidden_size": model.hidden,
           "intermediate_size": model.moe_ffn_hidden or model.ffn_hidden, "num_attention_heads": model.heads,
           "num_key_value_heads": model.kv_heads, "num_hidden_layers": model.layers, "vocab_size": model.vocab,
           "max_position_embeddings": model.max_positions or model.seq_len, "torch_dtype": "bfloat16",
           "rms_norm_eps": 1e-5, "rope_theta": float(model.rope_theta), "tie_word_embeddings": False}
    if model.head_dim:
        cfg["head_dim"] = model.head_dim
    if model.experts:
        cfg.update(num_local_experts=model.experts, num_experts_per_tok=model.top_k)
    if model.rope_scaling != "none":   # as a Hugging Face config.json writes it
        cfg["rope_scaling"] = {"rope_type": model.rope_scaling, "factor": model.rope_factor,
                               **({"original_max_position_embeddings": model.rope_original_positions}
                                  if model.rope_original_positions else {}),
                               **({"low_freq_factor": 1.0, "high_freq_factor": 4.0}
                                  if model.rope_scaling == "llama3" else {})}
    if getattr(model, "kv_lora_rank", 0):
        # multi-head latent attention: DeepSeek-V3's config.json keys, which vLLM's ModelConfig
        # reads as MLA (use_mla) by model_type and kv_lora_rank
        cfg.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                   moe_intermediate_size=model.moe_ffn_hidden, intermediate_size=model.ffn_hidden,
                   n_routed_experts=model.experts, n_shared_experts=model.shared_experts,
                   first_k_dense_replace=model.first_k_dense, moe_layer_freq=1, kv_lora_rank=model.kv_lora_rank,
                   q_lora_rank=model.q_lora_rank or None, qk_rope_head_dim=model.qk_rope_head_dim,
                   qk_nope_head_dim=model.qk_nope_head_dim, v_head_dim=model.v_head_dim, n_group=8, topk_group=4,
                   norm_topk_prob=True, scoring_func="sigmoid", topk_method="noaux_tc")
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def _argv(plan, model_dir: str) -> list[str]:
    """The argv parc's vllm target emits for node 0 (serve_lines), with the model folder as model."""
    from parc.targets.base import Var
    from parc.targets.vllm import launch_mode, serve_lines

    node = None if launch_mode(plan) == "single" else 0
    words = [model_dir]
    for line in serve_lines(plan, node):
        words += ["10.0.0.1" if isinstance(x, Var) else str(x) for x in line]
    return words


L8 = "from = llama3_8b"
# (rule, spec arguments for test_rules_mesh.spec); each spec is refused by parc with that rule.
REFUSED = [
    ("P102", dict(model=L8, gpn=3, mesh="tp = 3", serve="max_model_len = 4096")),
    ("P103", dict(model=L8 + "; heads = 48; kv_heads = 8; hidden = 6144; ffn_hidden = 12288", gpn=6, mesh="tp = 6",
                  serve="max_model_len = 4096")),
    ("P106", dict(model=L8 + "; ffn_hidden = 14004", gpn=8, mesh="tp = 8", serve="max_model_len = 4096")),
    ("P658", dict(model=L8, mesh="tp = 8", serve="max_model_len = 16384")),
    ("P614", dict(model=L8 + "; max_positions = 131072", nodes=3, gpn=4, mesh="cp = 12",
                  serve="max_model_len = 131072")),
    ("P651", dict(model=L8 + "; heads = 48; kv_heads = 12; hidden = 6144", nodes=3, gpn=8, mesh="dp = 2; tp = 12",
                  serve="max_model_len = 4096")),
]


@pytest.mark.vllm
def test_vllm_refuses_what_parc_refuses(vllm_python, check_spec, tmp_path):
    """Every vLLM-specific refusal in the table: vLLM's parser, ParallelConfig and
    create_engine_config refuse the command parc would emit exactly where the audit says
    "argument check"; the executor's first step (the GPUs per node) where it says
    "initialisation"; where it says vLLM fails at model build, its configuration accepts."""
    from parc.rules import audit
    from support.specs import spec

    argvs, fails = [], []
    for code, kw in REFUSED:
        r = check_spec(spec(target={"vllm": 'model = "m"'}, **kw), ("vllm",))
        assert code in {d.code for d in r.errors}, (code, [f"{d.code} {d.message}" for d in r.diagnostics])
        if audit(code, "vllm")["fails"] == "initialisation":   # the message says when vLLM fails
            assert "executor refuses to start" in next(d.message for d in r.errors if d.code == code)
        argvs.append(_argv(r.plan, _model_folder(r.plan.model, tmp_path / code)))
        fails.append(audit(code, "vllm")["fails"])
    for (code, _), argv, fail, v in zip(REFUSED, argvs, fails, _judge(vllm_python, argvs)):
        if fail == "argument check":
            assert not v["ok"] and v["stage"] != "executor start", f"{code}: parc refuses, vLLM accepts {argv}: {v}"
        elif fail == "initialisation":
            assert v.get("stage") == "executor start", f"{code}: the audit says {fail}: {v}"
        else:
            assert v["ok"] and v["engine_config"], f"{code}: the audit says {fail}, vLLM refuses at once: {v}"


@pytest.mark.vllm
def test_vllm_accepts_context_parallel_with_data_parallel(vllm_python, check_spec, tmp_path):
    """vLLM 0.33 accepts prefill context parallel with dp > 1 through create_engine_config in
    its V2 model runner (the default on a GPU with Triton), so parc accepts it (P605 is a
    warning: vLLM runs it only for MLA models); the V1 runner refuses cp whatever dp is."""
    from support.specs import spec

    r = check_spec(spec("from = llama3_8b; max_positions = 131072", mesh="dp = 4; cp = 2",
                        serve="max_model_len = 131072", target={"vllm": 'model = "m"'}), ("vllm",))
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    argv = _argv(r.plan, _model_folder(r.plan.model, tmp_path / "m"))
    v2, v1 = _judge(vllm_python, [{"argv": argv, "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}},
                                  {"argv": argv, "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}])
    assert v2["ok"] and v2["engine_config"] and (v2["dp"], v2["pcp"]) == (4, 2), v2
    assert not v1["ok"] and "prefill context parallel" in v1["error"], v1


# ----------------------------------------------------------------------------------------------
# Issue #15's serving rules (tests/test_serve_vllm_rules.py's specs): the command parc would emit
# for the spec that trips each rule and for its neighbour that passes, judged by vLLM itself.
# (rule, whether vLLM reads the model's config to decide it)
JUDGED_15 = [("P121", False), ("P123", False), ("P124", False), ("P125", False), ("P666", False), ("P667", True),
             ("P672", True), ("P673", True)]


def _pool_argvs(plan, model_dir: str) -> list[list[str]]:
    """The argv of node 0 of an instance of each pool of a disaggregated plan (one argv for a plan
    of one mesh)."""
    from parc.model.pools import pool_plans
    from parc.targets.base import Var
    from parc.targets.vllm import POOL_PORTS, launch_mode, serve_lines

    views = [(pp, pool.name) for pool, pp in pool_plans(plan)] or [(plan, None)]
    out = []
    for p, name in views:
        words = [model_dir]
        for line in serve_lines(p, None if launch_mode(p) == "single" else 0, name):
            words += [("10.0.0.1" if x.name == "master_addr" else str(POOL_PORTS[name])) if isinstance(x, Var)
                      else str(x) for x in line]
        out.append(words)
    return out


@pytest.mark.vllm
def test_vllm_agrees_with_the_serving_rules(vllm_python, check_spec, tmp_path):
    """vLLM refuses the tripping spec where the audit says "argument check" (its parser,
    ParallelConfig or create_engine_config) and accepts its neighbour; where the audit says it
    fails later (P125: when the MoE layers are built; P673: at the first KV transfer), its
    configuration accepts both. The degrees vLLM derives are the plan's (each pool's)."""
    from parc.rules import audit
    from support.serving_specs import CASES

    table = {code: (bad, good) for code, bad, good in CASES}
    argvs, meta = [], []
    for code, folder in JUDGED_15:
        for which, text in zip(("bad", "good"), table[code]):
            r = check_spec(text, ("vllm",))
            model = _model_folder(r.plan.model, tmp_path / f"{code}-{which}") if folder else "x/y"
            from parc.model.pools import pool_plans

            for plan, argv in zip([pp for _, pp in pool_plans(r.plan)] or [r.plan], _pool_argvs(r.plan, model)):
                argvs.append({"argv": argv, "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}})
                meta.append((code, which, plan))
    verdicts = _judge(vllm_python, argvs)
    for code in {c for c, _ in JUDGED_15}:
        # a disaggregated plan is refused when one of its pools is
        bad = [(a, v) for (c, w, _), a, v in zip(meta, argvs, verdicts) if c == code and w == "bad"]
        if audit(code, "vllm")["fails"] == "argument check":
            assert any(not v["ok"] for _, v in bad), f"{code}: parc refuses, vLLM accepts {bad}"
    for (code, which, plan), argv, v in zip(meta, argvs, verdicts):
        if which == "bad" and audit(code, "vllm")["fails"] == "argument check":
            continue
        assert v["ok"], f"{code} ({which}): vLLM refuses {argv}: {v.get('error')}"
        m, sv = plan.mesh, plan.serve
        assert (v["tp"], v["pp"], v["dp"], v["pcp"], v["dcp"]) == (m.tp, m.pp, m.dp, m.cp, m.dcp), (code, v)
        assert v["ep"] == (m.ep > 1) and v["eplb"] == sv.eplb and v["redundant"] == sv.redundant_experts, (code, v)


@pytest.mark.vllm
def test_vllm_accepts_the_serving_examples_flags(vllm_python, check_spec):
    """The wide-EP example's EPLB and all-to-all options as vLLM reads them."""
    from parc.api import check_file

    r = check_file(str(ROOT / "examples" / "deepseek-v3-wide-ep.par"), ("vllm",), root=ROOT)
    (v,) = _judge(vllm_python, [_argv(r.plan, "x/y")])
    sv = r.plan.serve
    assert v["ok"] and (v["dp"], v["ep"], v["eplb"]) == (16, True, True), v
    assert (v["redundant"], v["eplb_window"], v["eplb_interval"]) == (sv.redundant_experts, sv.eplb_window,
                                                                     sv.eplb_interval)
    assert v["all2all"] == "deepep_low_latency"


@pytest.mark.slow
def test_vllm_splits_layers_as_parc_says(vllm_python):
    # every layer count and pipeline size up to 128 layers and 16 stages: vLLM's own get_pp_indices
    # against parc.model.params.engine_split, the split parc's memory and explain use for vLLM
    from parc.model.params import engine_split
    from parc.model.targets import layer_split

    cases = [(layers, pp) for layers in range(1, 129) for pp in range(2, 17)]
    got = _judge(vllm_python, [{"split": [layers, pp]} for layers, pp in cases])
    for (layers, pp), split in zip(cases, got):
        assert engine_split(layer_split("vllm"), layers, pp) == split, (layers, pp)


@pytest.mark.vllm
def test_vllm_judges_dcp_against_tp_alone_beside_prefill_cp(vllm_python, check_spec, tmp_path):
    """ParallelConfig lets dcp span tp · pcp, but ModelConfig.verify_with_parallel_config judges a
    grouped-query model's dcp against tp alone: vLLM refuses dcp = 32 with tp 16, pcp 2 and 8 KV
    heads, as parc's P667 does, and takes dcp = pcp = 2 (its V2 model runner runs pcp)."""
    from support.specs import spec

    argvs, codes = [], []
    for dcp in (32, 2):
        r = check_spec(spec("from = llama3_8b; max_positions = 131072", nodes=4, mesh=f"tp = 16; cp = 2; dcp = {dcp}",
                            serve="max_model_len = 131072", target={"vllm": 'model = "m"'}), ("vllm",))
        codes.append({d.code for d in r.errors})
        argvs.append({"argv": _argv(r.plan, _model_folder(r.plan.model, tmp_path / f"dcp{dcp}")),
                      "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}})
    bad, good = _judge(vllm_python, argvs)
    assert "P667" in codes[0] and not bad["ok"] and "exceeds the maximum supported value (2)" in bad["error"], bad
    assert not codes[1] and good["ok"] and good["dcp"] == 2, good


ROPE = [(kind, original) for kind in ("linear", "dynamic", "yarn", "llama3") for original in (None, 4096)]


@pytest.mark.vllm
def test_vllm_derives_the_context_parc_derives(vllm_python, check_spec, tmp_path):
    """Each RoPE scaling, with and without its original positions, at the model's positions and at
    positions × factor: vLLM refuses the max_model_len exactly where parc's P658 does
    (_get_and_verify_max_len; parc.model.rope.context_limit)."""
    from support.specs import spec

    argvs, codes = [], []
    for k, (kind, original) in enumerate(ROPE):
        for length in (16384, 65536):
            model = (f"from = llama3_8b; max_positions = 16384; rope_scaling = {kind}; rope_factor = 4"
                     + (f"; rope_original_positions = {original}" if original else ""))
            r = check_spec(spec(model, mesh="tp = 8", serve=f"max_model_len = {length}",
                                target={"vllm": 'model = "m"'}), ("vllm",))
            codes.append((kind, original, length, "P658" in {d.code for d in r.errors}))
            argvs.append(_argv(r.plan, _model_folder(r.plan.model, tmp_path / f"{k}-{length}")))
    for (kind, original, length, refused), v in zip(codes, _judge(vllm_python, argvs)):
        vllm_refuses = not v["ok"] and "max_model_len" in v.get("error", "")
        assert refused == vllm_refuses, (kind, original, length, v.get("error"))
        assert v["ok"] or vllm_refuses, v
    assert any(c[3] for c in codes) and not all(c[3] for c in codes)


# ----------------------------------------------------------------------------------------------
# How the checkpoint is stored: the quantization_config each format's config.json carries (as the
# published checkpoints write it), read by vLLM's own ModelConfig; parc's P619 refuses exactly what
# vLLM refuses, and the command parc emits loads with the method parc expects.

@pytest.mark.vllm
def test_vllm_judges_the_checkpoint_quantization(vllm_python, check_spec, tmp_path):
    from parc.model.checkpoints import engine_method
    from support.checkpoints import QUANT_CONFIGS, quantization_cases

    cases = quantization_cases(check_spec, "vllm", QUANT_CONFIGS,
                               lambda plan, name: _model_folder(plan.model, tmp_path / name))
    for (fmt, extra, refused, plan, folder), v in zip(cases, _judge(vllm_python, [_argv(c[3], c[4]) for c in cases])):
        assert refused == (not v["ok"]), (fmt, extra, v)
        if refused:
            assert "does not match" in v["error"], v
        else:
            assert v["engine_config"] and v["quantization"] == engine_method(fmt, "vllm"), (fmt, extra, v)


@pytest.mark.vllm
def test_vllm_reads_the_overridden_field(vllm_python, check_spec, tmp_path):
    """A field that differs from the preset's checkpoint reaches vLLM's config through
    --hf-overrides: the model folder says 32 layers, the plan 16, vLLM builds 16."""
    from support.checkpoints import add_to_config
    from support.specs import spec

    r = check_spec(spec("from = llama3_8b; layers = 16", mesh="tp = 8", serve="max_model_len = 4096",
                        target={"vllm": 'model = "m"'}), ("vllm",))
    folder = add_to_config(_model_folder(r.plan.model, tmp_path / "m"), num_hidden_layers=32)
    [v] = _judge(vllm_python, [_argv(r.plan, folder)])
    assert v["ok"] and v["layers"] == 16, v
