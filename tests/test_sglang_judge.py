"""SGLang itself judges parc's serving commands: every `python -m sglang.launch_server` command
parc emits for the examples and test specs (the sglang target's, and each node's of the wrappers
that run SGLang) goes through SGLang's own parser
(ServerArgs.add_cli_args, ServerArgs.from_cli_args) and its checks (resolve_once,
check_server_args) on a local model folder made from the spec's model (no weights), and every
router.sh through sglang_router's own parser; the degrees SGLang resolves must be the plan's.
The other way round, what parc refuses for SGLang, SGLang refuses too, where the audit in
parc/targets/sglang/rules.toml says it does. All in an isolated virtual environment that
tests/judges/sglang_env.sh creates (never parc's own). The tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it). PARC_SGLANG_PYTHON names
an existing environment's python instead."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends_support import accepted_cases, run_emitted, write_out
from support import judges
from support import sglang as sglang_judge
from support.launched import engine_run, launched

ADDR = "10.0.0.1"


@pytest.fixture(scope="module")
def sglang(tmp_path_factory):
    """A judge: one sglang_judge.py process for the module, fed one batch of commands a call."""
    proc = sglang_judge.start(tmp_path_factory)
    yield proc
    judges.stop(proc)


_judge = sglang_judge.ask
_model_folder = sglang_judge.model_folder
_with_model = sglang_judge.with_model


def _fake_python(tmp: Path) -> str:
    b = tmp / "fakebin"
    b.mkdir(parents=True, exist_ok=True)
    p = b / "python3"
    p.write_text('#!/usr/bin/env bash\nprintf \'%s\\0\' "$@" > "$ARGV_DIR/python3"\n')
    p.chmod(0o755)
    return str(p)


def _sides(plan) -> list[tuple[str | None, str, dict, int]]:
    """What each launch script of the plan starts: (disaggregation side or None, script, the mesh
    of its servers, nodes it runs on). A disaggregated plan has prefill.sh and decode.sh, one per
    pool, on the pool's instances' whole nodes; another plan one script over the cluster."""
    settings = plan["targets"].get("sglang", {}).get("settings", {})
    gpn = plan["cluster"]["gpus_per_node"]
    if plan["pools"]:
        return [(p["name"], f"{p['name']}.sh", p["mesh"],
                 p["instances"] * -(-_gpus(p["mesh"]) // gpn)) for p in plan["pools"]]
    one = plan["cluster"]["nodes"] == 1
    return [(settings.get("disaggregation"), "serve.sh" if one else "launch.sh", plan["mesh"],
             plan["cluster"]["nodes"])]


def _gpus(m: dict) -> int:
    return m["dp"] * m["tp"] * m["pp"] * m["cp"]


def _commands(tmp_path_factory):
    """(spec, plan, [(side, mesh, argv after `python -m sglang.launch_server`) for each node],
    router argv or None) for every sglang launch parc emits for the examples and test specs."""
    out = []
    for spec, t, files in accepted_cases():
        if t != "sglang":
            continue
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        d = write_out(files, tmp / "out")
        plan = json.loads((d / "plan.json").read_text())
        env = {"PYTHON": _fake_python(tmp), "MASTER_ADDR": ADDR}
        nodes = []
        for side, script, mesh, n in _sides(plan):
            for k in range(n):
                got = run_emitted(d / script, tmp, *([] if script == "serve.sh" else [str(k)]), env=env)
                assert got["python3"][:2] == ["-m", "sglang.launch_server"]
                nodes.append((side, mesh, got["python3"][2:]))
        rt = None
        if "router.sh" in [f.path for f in files]:
            hosts = [f"10.0.0.{i + 1}" for i in range(_servers(files))]
            rt = run_emitted(d / "router.sh", tmp, *hosts, env=env)["python3"][2:]
        out.append((spec, plan, nodes, rt))
    return out


def _servers(files) -> int:
    text = next(f.text for f in files if f.path == "router.sh")
    return int(text.split("if (( $# != ", 1)[1].split(" ", 1)[0])


def _first_nodes(nodes, side) -> int:
    """The servers among a side's node commands: the nodes of node rank 0 (or of a one-node server)."""
    return sum(1 for s, _, argv in nodes if s == side and dict(zip(argv, argv[1:])).get("--node-rank", "0") == "0")


def _check_degrees(spec, plan, side, m, v):
    """SGLang's resolved sizes against the plan's (a pool's own mesh for a disaggregated plan)."""
    settings = plan["targets"].get("sglang", {}).get("settings", {})
    attn = bool(plan["serve"]["dp_attention"] or settings.get("dp_attention")) and m["dp"] > 1
    # a server's tp_size is dp · tp with attention DP; the experts span ep ranks (an all-to-all
    # backend makes it the whole tp_size, which parc's P694 holds equal to the spec's ep)
    assert v["tp"] == (m["dp"] * m["tp"] if attn else m["tp"]) and v["pp"] == m["pp"], spec
    assert v["attn_dp"] == (m["dp"] if attn else 1), spec
    assert v["ep"] == (m["ep"] if plan["model"]["experts"] else 1), spec
    assert v["dcp"] == m["dcp"], spec
    assert v["disaggregation_mode"] == (side or "null"), spec
    if side:
        kv = plan["serve"]["kv_transfer"]
        assert v["transfer_backend"] == (kv if kv else settings.get("transfer_backend", "mooncake")), spec
    assert v["context_length"] == plan["serve"]["max_model_len"], spec
    assert v["max_running_requests"] == plan["serve"]["max_num_seqs"], spec
    assert v["host"] == "0.0.0.0", spec


@pytest.mark.sglang
def test_sglang_accepts_what_parc_emits(sglang, tmp_path_factory):
    cmds = _commands(tmp_path_factory)
    assert len(cmds) >= 10 and any(rt for *_, rt in cmds)
    assert any(plan["pools"] for _, plan, _, _ in cmds) and any(plan["mesh"]["dcp"] > 1 for _, plan, _, _ in cmds)
    items, where = [], []
    for spec, plan, nodes, rt in cmds:
        folder = _model_folder(plan["model"], tmp_path_factory.mktemp("m") / "m")
        for side, mesh, argv in nodes:
            items.append({"server": _with_model(argv, folder)})
            where.append((spec, plan, side, mesh, argv))
        if rt:
            items.append({"router": rt})
            where.append((spec, plan, "router", nodes, rt))
    replicas: dict = {}
    for (spec, plan, side, mesh, argv), v in zip(where, _judge(sglang, items)):
        assert v["ok"], f"{spec} {side}: SGLang refuses {argv}: {v.get('error')}"
        if side != "router":
            _check_degrees(spec, plan, side, mesh, v)
            if v["node_rank"] == 0:   # a server's first node: its data-parallel replicas or attention groups
                replicas[spec, side] = replicas.get((spec, side), 0) + max(v["dp"], v["attn_dp"])
        elif plan["pools"]:   # the PD router: each prefill server with its bootstrap port, then each decode server
            assert v["pd"] and not v["worker_urls"], spec
            assert len(v["prefill_urls"]) == _first_nodes(mesh, "prefill") > 0, spec
            assert len(v["decode_urls"]) == _first_nodes(mesh, "decode") > 0, spec
            assert all(u.endswith(":30000") and port == 8998 for u, port in v["prefill_urls"]), spec
        else:   # one worker URL per server
            assert not v["pd"] and len(v["worker_urls"]) > 1, spec
            assert all(u.endswith(":30000") for u in v["worker_urls"]), spec
    # dp: the replicas (or attention groups) of every server of a side are the plan's dp, times a
    # pool's instances
    for spec, plan, nodes, rt in cmds:
        for side, _, mesh, _ in _sides(plan):
            pool = next((p for p in plan["pools"] if p["name"] == side), {"instances": 1})
            assert replicas[spec, side] == mesh["dp"] * pool["instances"], (spec, side, replicas[spec, side])
    # the world: each server's dp · tp · pp over its nodes, summed over every node, is the plan's
    for spec, plan, nodes, rt in cmds:
        per_node = [_judged_world(a) for _, _, a in nodes]
        assert sum(per_node) == plan["world_size"], (spec, per_node)


def _wrapped(tmp_path_factory):
    """(spec, target, plan, [(side, mesh, argv after `python -m sglang.launch_server`)], [router
    argv]) for every wrapper that runs SGLang (a Slurm job, a SkyPilot task, a PyTorchJob; the
    LeaderWorkerSet is tests/test_lws_judge.py's), every node started as its tool starts it."""
    out = []
    for spec, t, files in accepted_cases():
        plan = json.loads(next(f.text for f in files if f.path == "plan.json"))
        if t not in ("slurm", "skypilot", "kubernetes") or engine_run(plan, t) != "sglang":
            continue
        pools = {p["name"]: p["mesh"] for p in plan["pools"]}
        servers, routers = [], []
        for c in launched(t, files, tmp_path_factory.mktemp(Path(spec).stem)):
            if c["argv"][:2] == ["-m", "sglang.launch_server"]:
                argv = c["argv"][2:]
                side = dict(zip(argv, argv[1:])).get("--disaggregation-mode")
                servers.append((side, pools.get(side, plan["mesh"]), argv))
            elif c["argv"][:2] == ["-m", "sglang_router.launch_router"]:
                routers.append(c["argv"][2:])
        out.append((spec, t, plan, servers, routers))
    return out


@pytest.mark.sglang
def test_sglang_accepts_what_the_wrappers_run(sglang, tmp_path_factory):
    """The server every node of a Slurm job, a SkyPilot task or a PyTorchJob starts is the sglang
    target's, judged by SGLang: its sizes are the plan's, its servers' first nodes hold every
    data-parallel replica, and the router in front of them parses."""
    cases = _wrapped(tmp_path_factory)
    assert {"slurm", "skypilot", "kubernetes"} <= {t for _, t, *_ in cases}
    assert any(plan["pools"] for _, _, plan, _, _ in cases) and any(r for *_, r in cases)
    items, where = [], []
    for spec, t, plan, servers, routers in cases:
        folder = _model_folder(plan["model"], tmp_path_factory.mktemp("m") / "m")
        items += [{"server": _with_model(argv, folder)} for _, _, argv in servers] + [{"router": r} for r in routers]
        where += [(f"{spec} --target {t}", plan, side, mesh) for side, mesh, _ in servers]
        where += [(f"{spec} --target {t}", plan, "router", None) for _ in routers]
    replicas: dict = {}
    for (name, plan, side, mesh), v in zip(where, _judge(sglang, items)):
        assert v["ok"], f"{name} {side}: SGLang refuses it: {v.get('error')}"
        if side == "router":
            continue
        _check_degrees(name, plan, side, mesh, v)
        if v["node_rank"] == 0:
            replicas[name, side] = replicas.get((name, side), 0) + max(v["dp"], v["attn_dp"])
    for spec, t, plan, servers, _ in cases:
        for side in {s for s, _, _ in servers}:
            pool = next((p for p in plan["pools"] if p["name"] == side), {"instances": 1, "mesh": plan["mesh"]})
            assert replicas[f"{spec} --target {t}", side] == pool["mesh"]["dp"] * pool["instances"], (spec, t, side)


def _judged_world(argv: list[str]) -> float:
    """The GPUs one node's command brings: its server's dp_size · tp_size · pp_size (attention DP
    runs inside tp_size) over the server's nodes."""
    o = dict(zip(argv, argv[1:]))
    size = int(o.get("--tp-size", 1)) * int(o.get("--pp-size", 1)) * int(o.get("--dp-size", 1))
    return size / int(o.get("--nnodes", 1))


@pytest.mark.sglang
def test_sglang_refuses_what_it_should(sglang, tmp_path):
    """The judge itself refuses wrong commands, so an accepting verdict means something."""
    folder = _model_folder({"experts": 0, "hidden": 4096, "moe_ffn_hidden": 0, "ffn_hidden": 14336, "heads": 32,
                            "kv_heads": 8, "layers": 32, "vocab": 128256, "max_positions": 8192, "seq_len": 8192,
                            "rope_theta": 500000}, tmp_path / "m")
    bad = [{"server": ["--model-path", folder, "--tp-size", "two"]},
           {"server": ["--model-path", folder, "--tp-size", "4", "--dp-size", "2", "--nnodes", "2"]},
           {"server": ["--model-path", folder, "--tp-size", "4", "--attn-dp-size", "2", "--dp-size", "2"]},
           # attention DP wider than the server (sglang#5873's dp > tp): parc's --tp-size dp·tp never is
           {"server": ["--model-path", folder, "--tp-size", "4", "--attn-dp-size", "8"]},
           {"router": ["--worker-urls", "http://a:1", "--policy", "no-such-policy"]}]
    assert [v["ok"] for v in _judge(sglang, bad)] == [False, False, False, False, False]


# ----------------------------------------------------------------------------------------------
# The other direction: what parc refuses for SGLang, SGLang refuses too, or (as the audit in
# parc/targets/sglang/rules.toml says) runs otherwise than the spec says.

L8 = "from = llama3_8b"
MIXTRAL = "from = mixtral_8x7b"


def _argv(plan, folder: str) -> list[str]:
    """The command parc would emit for node 0 of the plan (server_lines), with the model folder."""
    from parc.targets.base import Cat, Var
    from parc.targets.sglang import server_lines

    def word(x):
        if isinstance(x, Cat):
            return "".join(word(p) for p in x.parts)
        return ADDR if isinstance(x, Var) else str(x)

    return ["--model-path", folder] + [word(x) for line in server_lines(plan, 0) for x in line]


@pytest.mark.sglang
def test_sglang_refuses_what_parc_refuses(sglang, check_spec, tmp_path):
    """P683: the command parc would emit is refused by SGLang's own check. P696: the one
    multi-node server SGLang would need for replicas smaller than a node (--dp-size with
    --nnodes) is refused. P695: SGLang's parser has no fp16 KV cache. P694: SGLang accepts and
    serves ep = tp_size, not the spec's ep (the audit says "runs")."""
    from parc.rules import audit
    from support.specs import spec

    s = 'model = "m"'
    cases = {
        "P683": spec(L8, mesh="tp = 8", serve="max_model_len = 16384", target={"sglang": s}),
        "P696": spec(L8, nodes=2, gpn=6, mesh="dp = 3; tp = 4", serve="max_model_len = 4096", target={"sglang": s}),
        "P695": spec(L8, mesh="tp = 8", serve="max_model_len = 4096; kv_cache_dtype = fp16", target={"sglang": s}),
        "P694": spec(MIXTRAL, mesh="tp = 8; ep = 4; etp = 2", serve="max_model_len = 4096",
                     target={"sglang": s + "; moe_a2a_backend = deepep"}),
    }
    items = []
    for code, text in cases.items():
        r = check_spec(text, ("sglang",))
        assert code in {d.code for d in r.errors}, (code, [f"{d.code} {d.message}" for d in r.diagnostics])
        folder = _model_folder(r.plan.to_dict()["model"], tmp_path / code)
        argv = _argv(r.plan, folder)
        if code == "P696":    # one server for all replicas: what a launcher without parc's layout would run
            argv += ["--dp-size", "3", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"{ADDR}:5000"]
        if code == "P695":
            argv[argv.index("--kv-cache-dtype") + 1] = "float16"
        items.append({"server": argv})
    for (code, _), v in zip(cases.items(), _judge(sglang, items)):
        fails = audit(code, "sglang")["fails"]
        if fails == "argument check":
            assert not v["ok"], f"{code}: parc refuses, SGLang accepts: {v}"
        else:
            assert fails == "runs" and v["ok"] and v["ep"] == 8, f"{code}: {v}"
    assert "multi-node data-parallel replicas" in _judge(sglang, items[1:2])[0]["error"]


@pytest.mark.sglang
def test_sglang_accepts_what_parc_accepts(sglang, check_spec, tmp_path):
    """Plans parc accepts for SGLang that only SGLang's own checks can confirm: attention data
    parallelism over two nodes with an all-to-all backend, the deprecated spelling a block pinned
    to 0.5.21 emits (0.5.23 still reads it, as attention DP), pipeline with attention DP, and a
    disaggregated prefill side."""
    from support.specs import spec

    specs = [
        spec(MIXTRAL + "; experts = 16", nodes=2, mesh="dp = 8; tp = 2; ep = 16",
             serve="max_model_len = 4096; dp_attention = true", placement="tp on intra_node; dp on inter_node",
             target={"sglang": 'model = "m"; moe_a2a_backend = deepep'}),
        spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve="max_model_len = 4096; dp_attention = true",
             target={"sglang": 'model = "m"; version = "0.5.21"'}),
        spec(L8, mesh="dp = 2; tp = 2; pp = 2", serve="max_model_len = 4096",
             target={"sglang": 'model = "m"; dp_attention = true'}),   # the older spelling, still read
        spec(L8, mesh="tp = 8", serve="max_model_len = 8192",
             target={"sglang": 'model = "m"; disaggregation = prefill; transfer_backend = mooncake'}),
    ]
    items, plans = [], []
    for i, text in enumerate(specs):
        r = check_spec(text, ("sglang",))
        assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
        items.append({"server": _argv(r.plan, _model_folder(r.plan.to_dict()["model"], tmp_path / str(i)))})
        plans.append(r.plan)
    v = _judge(sglang, items)
    assert all(x["ok"] for x in v), v
    assert (v[0]["tp"], v[0]["attn_dp"], v[0]["ep"], v[0]["nnodes"], v[0]["moe_a2a_backend"]) == (16, 8, 16, 2, "deepep")
    assert "--enable-dp-attention" in items[1]["server"] and (v[1]["tp"], v[1]["attn_dp"], v[1]["dp"]) == (8, 4, 1)
    assert (v[2]["tp"], v[2]["pp"], v[2]["attn_dp"]) == (4, 2, 2)
    assert (v[3]["disaggregation_mode"], v[3]["transfer_backend"]) == ("prefill", "mooncake")


# ----------------------------------------------------------------------------------------------
# The rules of the serving keys of 2026 (parc/targets/sglang/serving_rules.py): for each, a spec
# that trips it and one that passes, and SGLang's own verdict on the command parc emits for each.

def _rule_cases():
    """code: (spec that trips it, spec that passes, the argv change that says the tripping plan to
    SGLang where parc's own command cannot)."""
    from support.specs import spec

    s = 'model = "m"'
    moe = MIXTRAL + "; experts = 16"
    prefill = s + "; disaggregation = prefill"
    return {
        # dcp = 3 does not divide tp = 8 / tp = 8 with dcp 2 on a model of 2 KV heads
        "P624": (spec(L8 + "; kv_heads = 2", mesh="tp = 8; dcp = 3", serve="max_model_len = 4096", target={"sglang": s}),
                 spec(L8 + "; kv_heads = 2", mesh="tp = 8; dcp = 2", serve="max_model_len = 4096", target={"sglang": s}),
                 None),
        # 8 KV heads · dcp 2 > tp 8 / 2 KV heads · dcp 4 = tp 8
        "P625": (spec(L8, mesh="tp = 8; dcp = 2", serve="max_model_len = 4096", target={"sglang": s}),
                 spec(L8 + "; kv_heads = 2", mesh="tp = 8; dcp = 4", serve="max_model_len = 4096", target={"sglang": s}),
                 None),
        # EPLB with ep 1 / with ep 8 = tp
        "P627": (spec(MIXTRAL, mesh="tp = 8", serve="max_model_len = 4096; eplb = true", target={"sglang": s}),
                 spec(MIXTRAL, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb = true; eplb_interval = 500; "
                                                        "eplb_window = 200", target={"sglang": s}),
                 None),
        # 16 + 4 = 20 slots over ep 8 / 16 + 8 = 24 slots, 3 a rank
        "P628": (spec(moe, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb = true; redundant_experts = 4",
                      target={"sglang": s}),
                 spec(moe, mesh="tp = 8; ep = 8", serve="max_model_len = 4096; eplb = true; redundant_experts = 8",
                      target={"sglang": s}),
                 None),
        # lmcache is a vLLM connector / nixl is SGLang's too
        "P639": (spec(L8, mesh="tp = 8", serve="max_model_len = 4096; kv_transfer = lmcache", target={"sglang": prefill}),
                 spec(L8, mesh="tp = 8", serve="max_model_len = 4096; kv_transfer = nixl", target={"sglang": prefill}),
                 ("--disaggregation-transfer-backend", "lmcache")),
    }


@pytest.mark.sglang
def test_sglang_judges_the_serving_rules(sglang, check_spec, tmp_path):
    """Each rule's tripping spec is an error in parc, its passing spec is clean, and SGLang's own
    verdict on the commands is what the audit (parc/targets/sglang/rules.toml) says: refused at the
    argument check (P627, P639), or accepted, to fail later (P624 when the DCP groups form, P628
    when the expert slots are laid out) or to serve wrong results (P625: SGLang's own ModelConfig
    gives the ranks of a DCP group other KV heads than tp alone would)."""
    from parc.rules import audit

    items, where = [], []
    for code, (bad, good, tweak) in _rule_cases().items():
        for kind, text in (("trips", bad), ("passes", good)):
            r = check_spec(text, ("sglang",))
            codes = {d.code for d in r.errors}
            assert (code in codes) == (kind == "trips"), (code, kind, [f"{d.code} {d.message}" for d in r.diagnostics])
            assert kind == "trips" or not codes, (code, codes)
            argv = _argv(r.plan, _model_folder(r.plan.to_dict()["model"], tmp_path / f"{code}-{kind}"))
            if kind == "trips" and tweak:
                argv[argv.index(tweak[0]) + 1] = tweak[1]
            items.append({"server": argv})
            where.append((code, kind, r.plan))
    verdicts = _judge(sglang, items)
    got = {(code, kind): v for (code, kind, _), v in zip(where, verdicts)}
    for (code, kind, plan), v in zip(where, verdicts):
        if kind == "passes":
            assert v["ok"], f"{code}: parc accepts, SGLang refuses: {v}"
            assert (v["dcp"], v["tp"]) == (plan.mesh.dcp, plan.mesh.tp), (code, v)
            continue
        fails = audit(code, "sglang")["fails"]
        assert v["ok"] == (fails != "argument check"), f"{code} ({fails}): {v}"
    # P625: tp 8, 8 KV heads: one a rank; with dcp 2 SGLang's ModelConfig gives each rank 2, so
    # the two ranks of a DCP group hold different heads. Passing: 2 heads at tp 8 (replicated,
    # 1 a rank) and 1 a rank with dcp 4 (8 // 4 = 2 groups of the 2 heads).
    assert got["P625", "trips"]["kv_heads"] == [1, 2] and got["P625", "passes"]["kv_heads"] == [1, 1]
    assert got["P624", "trips"]["dcp"] == 3     # accepted: 8 ranks in groups of 3 leave one short
    # EPLB: the ep SGLang needs; the interval, and the window as the recorder's buffer
    assert "AssertionError" in got["P627", "trips"]["error"]
    ok = got["P627", "passes"]
    assert (ok["enable_eplb"], ok["ep"], ok["eplb_interval"], ok["recorder_buffer"]) == (True, 8, 500, 200)
    assert (got["P628", "trips"]["redundant_experts"], got["P628", "passes"]["redundant_experts"]) == (4, 8)
    assert got["P639", "trips"]["stage"] == "parser"
    assert (got["P639", "passes"]["disaggregation_mode"], got["P639", "passes"]["transfer_backend"]) == ("prefill", "nixl")


@pytest.mark.sglang
def test_sglang_reads_deepep_mode_only_with_deepep(sglang, check_spec, tmp_path):
    """P626 warns that deepep_mode does nothing without a DeepEP backend: SGLang accepts the
    option and serves without an all-to-all backend; with deepep it keeps the mode."""
    from support.specs import spec

    texts = [spec(MIXTRAL, mesh="tp = 8; ep = 8", serve="max_model_len = 4096",
                  target={"sglang": 'model = "m"; deepep_mode = normal'}),
             spec(MIXTRAL, mesh="tp = 8; ep = 8", serve="max_model_len = 4096",
                  target={"sglang": 'model = "m"; deepep_mode = normal; moe_a2a_backend = deepep'})]
    items = []
    for i, text in enumerate(texts):
        r = check_spec(text, ("sglang",))
        assert ("P626" in {d.code for d in r.diagnostics}) == (i == 0) and not r.errors
        items.append({"server": _argv(r.plan, _model_folder(r.plan.to_dict()["model"], tmp_path / str(i)))})
    bare, deepep = _judge(sglang, items)
    assert bare["ok"] and bare["moe_a2a_backend"] == "none"
    assert deepep["ok"] and (deepep["moe_a2a_backend"], deepep["deepep_mode"]) == ("deepep", "normal")


@pytest.mark.slow
def test_sglang_splits_layers_as_parc_says(sglang):
    # SGLang's own get_pp_indices against parc.model.params.engine_split, over every layer count
    # up to 128 and pipeline size up to 16
    from parc.model.params import engine_split
    from parc.model.targets import layer_split

    cases = [(layers, pp) for layers in range(1, 129) for pp in range(2, 17)]
    got = _judge(sglang, [{"split": [layers, pp]} for layers, pp in cases])
    for (layers, pp), split in zip(cases, got):
        assert engine_split(layer_split("sglang"), layers, pp) == split, (layers, pp)


@pytest.mark.sglang
def test_sglang_runs_pools_sharing_a_node(sglang, check_spec, tmp_path):
    """A prefill and a decode server of one GPU each on one 2-GPU node (SGLang's one-node
    disaggregation example): SGLang accepts both commands, each with its own --base-gpu-id and
    port, and the PD router pairs them on those ports."""
    from support.specs import spec

    text = spec("from = llama3_8b", gpn=2, mesh="tp = 1",
                serve="max_model_len = 8192; kv_transfer = mooncake; prefill {; }; decode {; }",
                target={"sglang": 'model = "m"'})
    r = check_spec(text, ("sglang",))
    assert not r.errors and r.plan.pools, [(d.code, d.message) for d in r.errors]
    from parc.targets import sglang as target

    d = write_out(target.build(r.plan), tmp_path / "out")
    env = {"PYTHON": _fake_python(tmp_path), "MASTER_ADDR": ADDR}
    argvs = [run_emitted(d / f"{side}.sh", tmp_path, env=env)["python3"][2:] for side in ("prefill", "decode")]
    rt = run_emitted(d / "router.sh", tmp_path, ADDR, ADDR, env=env)["python3"][2:]
    folder = _model_folder(r.plan.to_dict()["model"], tmp_path / "m")
    pre, dec, router = _judge(sglang, [{"server": _with_model(a, folder)} for a in argvs] + [{"router": rt}])
    assert pre["ok"] and dec["ok"], (pre, dec)
    assert [dict(zip(a, a[1:]))["--base-gpu-id"] for a in argvs] == ["0", "1"]
    assert router["ok"] and router["prefill_urls"] == [[f"http://{ADDR}:30000", 8998]], router
    assert router["decode_urls"] == [f"http://{ADDR}:30001"], router


@pytest.mark.sglang
def test_sglang_derives_the_context_parc_derives(sglang, check_spec, tmp_path):
    """Each RoPE scaling, with and without its original positions, at the model's positions and at
    positions × factor: SGLang refuses the context length exactly where parc's P683 does
    (get_context_length; parc.model.rope.context_limit)."""
    from support.specs import spec
    from parc.targets import sglang as target

    items, codes = [], []
    for k, kind in enumerate(("linear", "dynamic", "yarn", "llama3")):
        for original in (None, 4096):
            for length in (16384, 65536):
                model = (f"from = llama3_8b; max_positions = 16384; rope_scaling = {kind}; rope_factor = 4"
                         + (f"; rope_original_positions = {original}" if original else ""))
                r = check_spec(spec(model, mesh="tp = 8", serve=f"max_model_len = {length}",
                                    target={"sglang": 'model = "m"'}), ("sglang",))
                codes.append((kind, original, length, "P683" in {d.code for d in r.errors}))
                tmp = tmp_path / f"{k}-{original}-{length}"
                d = write_out(target.build(r.plan), tmp / "out")
                argv = run_emitted(d / "serve.sh", tmp, env={"PYTHON": _fake_python(tmp)})["python3"][2:]
                items.append({"server": _with_model(argv, _model_folder(r.plan.to_dict()["model"], tmp / "m"))})
    for (kind, original, length, refused), v in zip(codes, _judge(sglang, items)):
        sglang_refuses = not v["ok"] and "context_length" in (v.get("error") or "")
        assert refused == sglang_refuses, (kind, original, length, v.get("error"))
    assert any(c[3] for c in codes) and not all(c[3] for c in codes)


# ----------------------------------------------------------------------------------------------
# How the checkpoint is stored, read by SGLang's own ModelConfig from the config.json's
# quantization_config (as the published checkpoints write it): parc's P619 refuses what SGLang
# refuses, the command parc emits loads with the method parc expects, and a field that differs
# from the checkpoint reaches SGLang through --json-model-override-args. mxfp4 is left out: SGLang
# registers its loader at import only on a CUDA, CPU, gfx95 or XPU platform
# (srt/layers/quantization/__init__.py), and the judge's torch sees none of them.

@pytest.mark.sglang
def test_sglang_judges_the_checkpoint_quantization(sglang, check_spec, tmp_path):
    from parc.model.checkpoints import engine_method
    from support.checkpoints import quantization_cases

    cases = quantization_cases(check_spec, "sglang", ("fp8_block", "modelopt_fp8", "nvfp4"),
                               lambda plan, name: _model_folder(plan.to_dict()["model"], tmp_path / name))
    verdicts = _judge(sglang, [{"server": _argv(c[3], c[4])} for c in cases])
    for (fmt, extra, refused, plan, folder), v in zip(cases, verdicts):
        if refused:
            assert not v["ok"] and "does not match" in v["error"], (fmt, extra, v)
        else:
            assert v["ok"] and v["quantization"] == engine_method(fmt, "sglang"), (fmt, extra, v)


@pytest.mark.sglang
def test_sglang_reads_the_overridden_field(sglang, check_spec, tmp_path):
    from support.specs import spec

    r = check_spec(spec(f"{L8}; layers = 16", mesh="tp = 8", serve="max_model_len = 4096",
                        target={"sglang": 'model = "m"'}), ("sglang",))
    folder = _model_folder({**r.plan.to_dict()["model"], "layers": 32}, tmp_path / "m")
    [v] = _judge(sglang, [{"server": _argv(r.plan, folder)}])
    assert v["ok"] and v["layers"] == 16, v


def test_the_release_options_reader_agrees_with_sglangs_parser():
    """tests/judges/sglang_release_options.py reads the options of the older releases from their
    wheels without importing them (flags.toml's since/until for 0.5.11 to 0.5.17): on the judge's
    release it must say, for every spelling of flags.toml, what SGLang's own parser says."""
    import subprocess
    import sys

    py = judges.python("sglang", "PARC_SGLANG_PYTHON")
    code = ("import argparse, sglang, os\nfrom sglang.srt.server_args import ServerArgs\n"
            "p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
            "print(os.path.dirname(os.path.dirname(sglang.__file__)))\n"
            "print(' '.join(o for a in p._actions for o in a.option_strings))")
    out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=600, check=True).stdout.splitlines()
    site, parsed = out[-2], set(out[-1].split())
    sys.path.insert(0, str(Path(__file__).resolve().parent / "judges"))
    try:
        import sglang_release_options as reader
    finally:
        sys.path.pop(0)
    read = reader.options(site)
    names = reader.spellings()
    assert len(names) > 40
    assert {n for n in names if n in read} == {n for n in names if n in parsed}
