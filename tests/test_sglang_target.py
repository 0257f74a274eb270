"""The sglang target: the launch_server commands each node runs (recorded by a fake python), the
router in front of several servers, the spelling of release-bound flags, and the rules SGLang's
ServerArgs checks enforce, each as a fire/quiet pair."""
from __future__ import annotations

import pytest

from backends_support import compile_rel, run_emitted, write_out
from support.sglang_cmd import argv as _argv, compile_plan as _compile, opts as _opts, recording_python as _python
from support.specs import assert_fires, assert_quiet, spec

MIXTRAL = "from = mixtral_8x7b"
L8 = "from = llama3_8b"
SERVE = "max_model_len = 4096"


def test_one_node_server(tmp_path):
    """examples/llama3-70b-serve.par: tp = 4 on one box of 4 A100s, the serve block's numbers."""
    _, _, files = compile_rel("examples/llama3-70b-serve.par", "sglang")
    argv = _argv(files, tmp_path)
    assert argv[:3] == ["-m", "sglang.launch_server", "--model-path"]
    o = _opts(argv)
    # the model comes from target vllm's block (inherits); max_model_len 8192, utilisation 0.90, 48 sequences
    assert o["--model-path"] == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert (o["--tp-size"], o["--pp-size"], o["--context-length"]) == ("4", "1", "8192")
    assert (o["--mem-fraction-static"], o["--max-running-requests"]) == ("0.9", "48")
    assert "--dtype" not in o   # a bf16 checkpoint: SGLang's auto runs it in bfloat16
    assert o["--host"] == "0.0.0.0" and o["--port"] == "30000"
    assert "--dp-size" not in o and "--nnodes" not in o and [f.path for f in files] == ["serve.sh", "plan.json"]


def test_dp_attention_spans_the_server(check_spec, tmp_path):
    """dp = 4 attention groups of tp = 2 in one server: tp_size = 4 · 2 = 8, attention dp 4, the
    experts over all 8 GPUs (ep = 8, each expert whole: etp = 1)."""
    plan, files = _compile(check_spec, spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve=SERVE + "; dp_attention = true",
                                            target={"sglang": 'model = "m"'}))
    o = _opts(_argv(files, tmp_path))
    assert (o["--tp-size"], o["--attn-dp-size"], o["--ep-size"]) == ("8", "4", "8")
    assert "--dp-size" not in o and "--enable-dp-attention" not in o


def test_dp_attention_in_the_older_spelling(check_spec, tmp_path):
    """Before SGLang 0.5.22 attention data parallelism was `--dp-size N --enable-dp-attention`
    (flags.toml): a block pinned to 0.5.21 gets it, the default (the newest) `--attn-dp-size`."""
    text = spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve=SERVE + "; dp_attention = true",
                target={"sglang": 'model = "m"; version = "0.5.21"'})
    _, files = _compile(check_spec, text)
    argv = _argv(files, tmp_path / "old")
    i = argv.index("--dp-size")
    assert argv[i:i + 3] == ["--dp-size", "4", "--enable-dp-attention"] and "--attn-dp-size" not in argv
    _, files = _compile(check_spec, text.replace('; version = "0.5.21"', "").replace('  version = "0.5.21"\n', ""))
    argv = _argv(files, tmp_path / "new")
    assert "--enable-dp-attention" not in argv and argv[argv.index("--attn-dp-size") + 1] == "4"


def test_replicas_across_nodes_are_servers_behind_the_router(tmp_path):
    """tests/data/specs/vllm-dp-nodes.par: dp = 4 replicas of tp = 4 on 2 nodes of 8. SGLang
    refuses --dp-size with --nnodes, so each node is a server of 8 / 4 = 2 replicas, and
    router.sh sends requests to both."""
    _, _, files = compile_rel("tests/data/specs/vllm-dp-nodes.par", "sglang")
    assert [f.path for f in files] == ["launch.sh", "router.sh", "plan.json"]
    for node in ("0", "1"):
        o = _opts(_argv(files, tmp_path / node, node))
        assert (o["--tp-size"], o["--dp-size"]) == ("4", "2") and "--nnodes" not in o
    d = write_out(files, tmp_path / "r")
    got = run_emitted(d / "router.sh", tmp_path / "r", "10.0.0.1", "fe80::2", env={"PYTHON": _python(tmp_path / "r")})
    assert got["python3"] == ["-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", "8000",
                              "--worker-urls", "http://10.0.0.1:30000", "http://[fe80::2]:30000"]
    got = run_emitted(d / "router.sh", tmp_path / "r", "[fe80::2]", "h2", env={"PYTHON": _python(tmp_path / "r")})
    assert got["python3"][-2:] == ["http://[fe80::2]:30000", "http://h2:30000"]   # bracketed once
    bad = run_emitted(d / "router.sh", tmp_path / "r", "10.0.0.1", env={"PYTHON": _python(tmp_path / "r")},
                      check=False)
    assert bad["returncode"] == 2 and "2 addresses" in bad["stderr"]


def test_a_replica_over_whole_nodes_is_a_server_of_its_own(check_spec, tmp_path):
    """dp = 2 replicas of tp · pp = 8 · 2 = 16 GPUs on 4 nodes of 8: two servers of 16 / 8 = 2
    nodes; node 3 is node 3 % 2 = 1 of the second server, which meets at MASTER_ADDR."""
    plan, files = _compile(check_spec, spec(L8, nodes=4, mesh="dp = 2; pp = 2; tp = 8", serve=SERVE,
                                            placement="tp on intra_node; pp on inter_node; dp on inter_node",
                                            target={"sglang": 'model = "m"'}))
    assert [f.path for f in files] == ["launch.sh", "router.sh", "plan.json"]
    o = _opts(_argv(files, tmp_path, "3", env={"MASTER_ADDR": "10.0.0.3"}))
    assert (o["--tp-size"], o["--pp-size"], o["--nnodes"], o["--node-rank"]) == ("8", "2", "2", "1")
    assert o["--dist-init-addr"] == "10.0.0.3:5000"


def test_disaggregated_side(tmp_path):
    """tests/data/specs/sglang-disaggregated.par: the decode side over NIXL, no router of its own."""
    _, _, files = compile_rel("tests/data/specs/sglang-disaggregated.par", "sglang")
    assert [f.path for f in files] == ["launch.sh", "plan.json"]
    o = _opts(_argv(files, tmp_path, "1"))
    assert (o["--disaggregation-mode"], o["--disaggregation-transfer-backend"]) == ("decode", "nixl")


# ---------------------------------------------------------------------------------- rules

def test_p670_training_refused(check_spec):
    text = spec(L8, mesh="dp = 8", target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P691", "target sglang", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, spec(L8, mesh="dp = 8", serve=SERVE, target={"sglang": 'model = "m"'}), "P691",
                 ("sglang",))


def test_p671_context_parallel_refused(check_spec):
    text = spec(L8 + "; max_positions = 131072", mesh="dp = 4; cp = 2", serve=SERVE, target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P692", "cp = 2", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("cp = 2", "tp = 2"), "P692", ("sglang",))


def test_p672_expert_grid_is_the_server(check_spec):
    # tp = 8, ep = 4, etp = 1: 4 · 1 = 4 is not the server's tp_size 8; ep = 4 with etp = 2 is
    text = spec(MIXTRAL, mesh="tp = 8; ep = 4", serve=SERVE, target={"sglang": 'model = "m"'})
    d = assert_fires(check_spec, text, "P693", "ep = 4", target="sglang", targets=("sglang",))
    assert "must be 8, not 4 · 1 = 4" in d.message
    assert_quiet(check_spec, text.replace("ep = 4", "ep = 4\n  etp = 2"), "P693", ("sglang",))
    assert_quiet(check_spec, text.replace("ep = 4", "ep = 8"), "P693", ("sglang",))


def test_p673_all_to_all_backend_needs_the_whole_server(check_spec):
    # deepep sets ep = tp_size = 8 whatever --ep-size says
    text = spec(MIXTRAL, mesh="tp = 8; ep = 4; etp = 2", serve=SERVE,
                target={"sglang": 'model = "m"; moe_a2a_backend = deepep'})
    assert_fires(check_spec, text, "P694", "moe_a2a_backend", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("ep = 4\n  etp = 2", "ep = 8"), "P694", ("sglang",))


def test_p674_fp16_kv_cache(check_spec):
    text = spec(L8, mesh="tp = 8", serve=SERVE + "; kv_cache_dtype = fp16", target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P695", "kv_cache_dtype", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("fp16", "bf16"), "P695", ("sglang",))


def test_p675_node_holds_whole_replicas(check_spec):
    # dp = 3 replicas of tp = 4 on 2 nodes of 6: 6 GPUs do not hold a whole number of replicas of 4
    text = spec(L8, nodes=2, gpn=6, mesh="dp = 3; tp = 4", serve=SERVE, target={"sglang": 'model = "m"'})
    d = assert_fires(check_spec, text, "P696", "mesh {", target="sglang", targets=("sglang",))
    assert "6 GPUs per node do not hold a whole number of replicas of tp · pp = 4 GPUs" in d.message
    assert_quiet(check_spec, spec(L8, nodes=2, gpn=8, mesh="dp = 4; tp = 4", serve=SERVE,
                                  target={"sglang": 'model = "m"'}), "P696", ("sglang",))


def test_p675_replica_between_nodes(check_spec):
    # a replica of tp = 12 on nodes of 8 would leave a node shared by two servers
    text = spec(L8 + "; heads = 48; kv_heads = 12; hidden = 6144; ffn_hidden = 12288", nodes=3, gpn=8, mesh="dp = 2; tp = 12",
                serve=SERVE, target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P696", "mesh {", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace('model = "m"', 'model = "m"; dp_attention = true'), "P696", ("sglang",))


def test_p676_dp_attention_without_dp(check_spec):
    text = spec(L8, mesh="tp = 8", serve=SERVE + "; dp_attention = true", target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P697", "dp_attention", severity="warning", target="sglang", targets=("sglang",))
    old = spec(L8, mesh="tp = 8", serve=SERVE, target={"sglang": 'model = "m"; dp_attention = true'})
    assert_fires(check_spec, old, "P697", "dp_attention", severity="warning", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("tp = 8", "dp = 2\n  tp = 4"), "P697", ("sglang",))


def test_p677_context_beyond_positions(check_spec):
    # llama3_8b has 8192 positions
    text = spec(L8, mesh="tp = 8", serve="max_model_len = 16384", target={"sglang": 'model = "m"'})
    assert_fires(check_spec, text, "P683", "max_model_len", target="sglang", targets=("sglang",))
    assert_quiet(check_spec, text.replace("16384", "8192"), "P683", ("sglang",))


@pytest.mark.parametrize("key,value", [("model", '"--trust-remote-code"')])
def test_p690_model_read_as_option(check_spec, key, value):
    text = spec(L8, mesh="tp = 8", serve=SERVE, target={"sglang": f"{key} = {value}"})
    assert "P690" in {d.code for d in check_spec(text, ("sglang",)).errors}
