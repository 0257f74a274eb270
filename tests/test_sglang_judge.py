"""SGLang itself judges parc's serving commands: every `python -m sglang.launch_server` command
parc emits for the examples and test specs goes through SGLang's own parser
(ServerArgs.add_cli_args, ServerArgs.from_cli_args) and its checks (resolve_once,
check_server_args) on a local model folder made from the spec's model (no weights), and every
router.sh through sglang_router's own parser; the degrees SGLang resolves must be the plan's.
The other way round, what parc refuses for SGLang, SGLang refuses too, where the audit in
parc/targets/sglang/rules.toml says it does. All in an isolated virtual environment that
tests/judges/sglang_env.sh creates (never parc's own). Without a reachable package registry the
tests skip with the reason; PARC_JUDGES=required makes that a failure. PARC_SGLANG_PYTHON names
an existing environment's python instead."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends_support import accepted_cases, run_emitted, write_out
from support import judges
from support import sglang as sglang_judge

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


def _commands(tmp_path_factory):
    """(spec, plan, files, [argv after `python -m sglang.launch_server` for each node], router argv
    or None) for every sglang launch parc emits for the examples and test specs."""
    out = []
    for spec, t, files in accepted_cases():
        if t != "sglang":
            continue
        tmp = tmp_path_factory.mktemp(Path(spec).stem)
        d = write_out(files, tmp / "out")
        plan = json.loads((d / "plan.json").read_text())
        names = [f.path for f in files]
        one = "serve.sh" in names
        env = {"PYTHON": _fake_python(tmp), "MASTER_ADDR": ADDR}
        nodes = []
        for k in range(1 if one else plan["cluster"]["nodes"]):
            got = run_emitted(d / ("serve.sh" if one else "launch.sh"), tmp, *([] if one else [str(k)]), env=env)
            assert got["python3"][:2] == ["-m", "sglang.launch_server"]
            nodes.append(got["python3"][2:])
        rt = None
        if "router.sh" in names:
            hosts = [f"10.0.0.{i + 1}" for i in range(_servers(files))]
            rt = run_emitted(d / "router.sh", tmp, *hosts, env=env)["python3"][2:]
        out.append((spec, plan, nodes, rt))
    return out


def _servers(files) -> int:
    text = next(f.text for f in files if f.path == "router.sh")
    return int(text.split("if (( $# != ", 1)[1].split(" ", 1)[0])


@pytest.mark.sglang
def test_sglang_accepts_what_parc_emits(sglang, tmp_path_factory):
    cmds = _commands(tmp_path_factory)
    assert len(cmds) >= 7 and any(rt for *_, rt in cmds)
    items, where = [], []
    for spec, plan, nodes, rt in cmds:
        folder = _model_folder(plan["model"], tmp_path_factory.mktemp("m") / "m")
        for k, argv in enumerate(nodes):
            items.append({"server": _with_model(argv, folder)})
            where.append((spec, plan, k, argv))
        if rt:
            items.append({"router": rt})
            where.append((spec, plan, None, rt))
    for (spec, plan, k, argv), v in zip(where, _judge(sglang, items)):
        assert v["ok"], f"{spec} node {k}: SGLang refuses {argv}: {v.get('error')}"
        m, settings = plan["mesh"], plan["targets"]["sglang"]["settings"] if "sglang" in plan["targets"] else {}
        if k is None:   # the router: one worker URL per server
            servers = len(v["worker_urls"])
            assert servers > 1 and all(u.endswith(":30000") for u in v["worker_urls"]), spec
            continue
        attn = bool(settings.get("dp_attention")) and m["dp"] > 1
        # SGLang's degrees against the plan's: a server's tp_size is dp · tp with attention DP
        assert v["tp"] == (m["dp"] * m["tp"] if attn else m["tp"]) and v["pp"] == m["pp"], spec
        assert v["attn_dp"] == (m["dp"] if attn else 1), spec
        assert v["ep"] == (m["ep"] if plan["model"]["experts"] else 1), spec
        assert v["context_length"] == plan["serve"]["max_model_len"], spec
        assert v["max_running_requests"] == plan["serve"]["max_num_seqs"], spec
        assert v["host"] == "0.0.0.0", spec
    # the world: each server's dp · tp · pp over its nodes, times the servers, is the plan's
    for spec, plan, nodes, rt in cmds:
        m = plan["mesh"]
        per_node = [_judged_world(a) for a in nodes]
        assert sum(per_node) == m["dp"] * m["tp"] * m["pp"] * m["cp"], (spec, per_node)


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
           {"router": ["--worker-urls", "http://a:1", "--policy", "no-such-policy"]}]
    assert [v["ok"] for v in _judge(sglang, bad)] == [False, False, False, False]


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
        spec(MIXTRAL + "; experts = 16", nodes=2, mesh="dp = 8; tp = 2; ep = 16", serve="max_model_len = 4096",
             placement="tp on intra_node; dp on inter_node",
             target={"sglang": 'model = "m"; dp_attention = true; moe_a2a_backend = deepep'}),
        spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve="max_model_len = 4096",
             target={"sglang": 'model = "m"; dp_attention = true; version = "0.5.21"'}),
        spec(L8, mesh="dp = 2; tp = 2; pp = 2", serve="max_model_len = 4096",
             target={"sglang": 'model = "m"; dp_attention = true'}),
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
