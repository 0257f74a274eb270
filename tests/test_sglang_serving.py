"""The sglang target's serving keys of 2026: attention data parallelism from the serve block,
decode context parallelism, EPLB and the DeepEP mode on the command line (flags.toml), a
prefill/decode-disaggregated plan as prefill.sh, decode.sh and a PD router.sh, and the rules of
parc/targets/sglang/serving_rules.py, each as a fire/quiet pair. SGLang's own verdict on the same
plans is tests/test_sglang_judge.py's."""
from __future__ import annotations

from backends_support import compile_rel, run_emitted, write_out
from support.specs import assert_fires, assert_quiet, line_of, spec
from support.sglang_cmd import argv as _argv, compile_plan as _compile, opts as _opts, recording_python as _python

MIXTRAL = "from = mixtral_8x7b"
L8 = "from = llama3_8b"
SERVE = "max_model_len = 4096"
S = 'model = "m"'
T = ("sglang",)


def _run(files, tmp, script, *args, env=None) -> list[str]:
    d = write_out(files, tmp / "out")
    return run_emitted(d / script, tmp, *args, env={"PYTHON": _python(tmp), **(env or {})})["python3"]


def pd(prefill="instances = 2", decode="dp = 2", nodes=4, mesh="tp = 8", serve="kv_transfer = nixl",
       model="from = llama3_70b", target=S) -> str:
    """A disaggregated spec on nodes of 8 H100s, in the form of tests/test_pools.py's."""
    def lines(body):
        return "".join(f"    {s.strip()}\n" for s in body.split(";") if s.strip())

    return (f'model "m" {{\n  {model}\n}}\ncluster "c" {{\n  nodes = {nodes}\n  gpus_per_node = 8\n'
            "  gpu = h100_sxm\n  intra_node = nvlink(450GB/s)\n  inter_node = infiniband(400Gb/s)\n}\n"
            f"mesh {{\n  {mesh}\n}}\nserve {{\n  max_model_len = 8192\n"
            + "".join(f"  {s.strip()}\n" for s in serve.split(";") if s.strip())
            + "  prefill {\n" + lines(prefill) + "  }\n  decode {\n" + lines(decode) + "  }\n}\n"
            + "target sglang {\n" + "".join(f"  {s.strip()}\n" for s in target.split(";") if s.strip()) + "}\n")


# ---------------------------------------------------------------------------- what it emits

def test_serve_dp_attention_and_the_older_key_give_one_command(check_spec, tmp_path):
    """`serve { dp_attention = true }` and the sglang block's older `dp_attention` are one fact:
    the same command (dp 4 groups of tp 2: --tp-size 8 --attn-dp-size 4); the older spelling
    warns (P623) at its own line."""
    new = spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve=SERVE + "; dp_attention = true", target={"sglang": S})
    old = spec(MIXTRAL, mesh="dp = 4; tp = 2; ep = 8", serve=SERVE, target={"sglang": S + "; dp_attention = true"})
    a = _argv(_compile(check_spec, new)[1], tmp_path / "new")
    b = _argv(_compile(check_spec, old)[1], tmp_path / "old")
    assert a == b and (_opts(a)["--tp-size"], _opts(a)["--attn-dp-size"]) == ("8", "4")
    assert_fires(check_spec, old, "P623", "dp_attention", severity="warning", target="sglang", targets=T)
    assert_quiet(check_spec, new, "P623", T)


def test_dcp_example(tmp_path):
    """examples/llama3-70b-dcp.par: tp 16 over two nodes of 8 with dcp 2 (Llama 3 70B has 8 KV
    heads: 8 · 2 = 16 ≤ tp 16, P625 quiet): --tp-size 16 --dcp-size 2, one server over 2 nodes."""
    r, _, files = compile_rel("examples/llama3-70b-dcp.par", "sglang")
    assert not r.errors and [f.path for f in files] == ["launch.sh", "plan.json"]
    o = _opts(_run(files, tmp_path, "launch.sh", "1", env={"MASTER_ADDR": "10.0.0.1"}))
    assert (o["--tp-size"], o["--dcp-size"], o["--nnodes"], o["--node-rank"]) == ("16", "2", "2", "1")
    assert o["--context-length"] == "131072"


def test_wide_ep_example(tmp_path):
    """examples/deepseek-v3-wide-ep.par: dp 16 attention groups of tp 1 over two nodes, the 256
    experts over ep = 16 ranks: --tp-size 16 --attn-dp-size 16 --ep-size 16 on each node, with
    EPLB's 32 redundant experts ((256 + 32) / 16 = 18 a rank, P628 quiet), re-placed every 3000
    passes over a window of 1000; the FP8 checkpoint is served with bfloat16 activations and no
    --quantization (SGLang reads the method from the checkpoint, as its DeepSeek guide says)."""
    r, _, files = compile_rel("examples/deepseek-v3-wide-ep.par", "sglang")
    assert not r.errors
    o = _opts(_run(files, tmp_path, "launch.sh", "0", env={"MASTER_ADDR": "10.0.0.1"}))
    assert (o["--tp-size"], o["--attn-dp-size"], o["--ep-size"], o["--nnodes"]) == ("16", "16", "16", "2")
    assert (o["--enable-eplb"], o["--ep-num-redundant-experts"]) == (True, "32")
    assert (o["--eplb-rebalance-num-iterations"], o["--expert-distribution-recorder-buffer-size"]) == ("3000", "1000")
    # DeepSeek-V3's FP8 checkpoint: SGLang's auto runs its activations in bfloat16, and it reads the
    # quantization from the checkpoint
    assert "--dtype" not in o and "--quantization" not in o


def test_eplb_options(check_spec, tmp_path):
    """EPLB with 8 redundant experts, re-placed every 500 passes over a window of 200 passes;
    a pinned older release spells them alike (flags.toml)."""
    text = spec(MIXTRAL, mesh="tp = 8; ep = 8", target={"sglang": S},
                serve=SERVE + "; eplb = true; redundant_experts = 8; eplb_interval = 500; eplb_window = 200")
    argv = _argv(_compile(check_spec, text)[1], tmp_path / "new")
    o = _opts(argv)
    assert o["--enable-eplb"] is True and o["--ep-num-redundant-experts"] == "8"
    assert (o["--eplb-rebalance-num-iterations"], o["--expert-distribution-recorder-buffer-size"]) == ("500", "200")
    old = _argv(_compile(check_spec, text.replace(S, S + '\n  version = "0.5.21"'))[1], tmp_path / "old")
    assert old == argv


def test_deepep_mode_option(check_spec, tmp_path):
    text = spec(MIXTRAL, mesh="tp = 8; ep = 8", serve=SERVE,
                target={"sglang": S + "; moe_a2a_backend = deepep; deepep_mode = low_latency"})
    o = _opts(_argv(_compile(check_spec, text)[1], tmp_path))
    assert (o["--moe-a2a-backend"], o["--deepep-mode"]) == ("deepep", "low_latency")


def test_deepep_mode_auto_is_a_value(check_spec, tmp_path):
    # `auto` is a keyword (dp = auto), and SGLang's default --deepep-mode: a key that lists it takes
    # it as its own value
    text = spec(MIXTRAL, mesh="tp = 8; ep = 8", serve=SERVE,
                target={"sglang": S + "; moe_a2a_backend = deepep; deepep_mode = auto"})
    assert not check_spec(text, T).errors
    o = _opts(_argv(_compile(check_spec, text)[1], tmp_path))
    assert o["--deepep-mode"] == "auto"
    # a key that does not list it still refuses it, and a mesh axis still computes it
    bad = text.replace("moe_a2a_backend = deepep", "moe_a2a_backend = auto")
    assert [d.code for d in check_spec(bad, T).errors] == ["P016"]
    auto_dp = spec(MIXTRAL, mesh="dp = auto; tp = 4", serve=SERVE, target={"sglang": S})
    assert check_spec(auto_dp, T).plan.mesh.dp == 2


def test_disaggregated_example(tmp_path):
    """examples/deepseek-v3-pd.par on 4 nodes of 8 H200s: 2 prefill instances of tp 8 with the
    experts over its 8 GPUs (one node each: prefill.sh node ranks 0-1, one server a node, dp 1 so
    no attention DP) and one decode instance of dp 2 · tp 8 with attention DP (one server of
    tp_size 16 over 2 nodes, experts over all 16: decode.sh node ranks 0-1). router.sh takes the 2
    prefill servers' first nodes, then the decode server's."""
    r, _, files = compile_rel("examples/deepseek-v3-pd.par", "sglang")
    assert not r.errors and [f.path for f in files] == ["prefill.sh", "decode.sh", "router.sh", "plan.json"]
    o = _opts(_run(files, tmp_path / "p", "prefill.sh", "1"))
    assert (o["--tp-size"], o["--ep-size"]) == ("8", "8") and "--attn-dp-size" not in o and "--nnodes" not in o
    assert (o["--disaggregation-mode"], o["--disaggregation-transfer-backend"]) == ("prefill", "nixl")
    o = _opts(_run(files, tmp_path / "d", "decode.sh", "1", env={"MASTER_ADDR": "10.0.0.3"}))
    assert (o["--tp-size"], o["--attn-dp-size"], o["--ep-size"]) == ("16", "2", "16")
    assert (o["--nnodes"], o["--node-rank"], o["--dist-init-addr"]) == ("2", "1", "10.0.0.3:5000")
    assert o["--disaggregation-mode"] == "decode"
    rt = _run(files, tmp_path / "r", "router.sh", "p0", "p1", "fe80::3")
    assert rt == ["-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", "8000", "--pd-disaggregation",
                  "--prefill", "http://p0:30000", "8998", "--prefill", "http://p1:30000", "8998",
                  "--decode", "http://[fe80::3]:30000"]
    d = write_out(files, tmp_path / "bad")
    bad = run_emitted(d / "router.sh", tmp_path / "bad", "p0", env={"PYTHON": _python(tmp_path / "bad")}, check=False)
    assert bad["returncode"] == 2 and "2 and 1" in bad["stderr"]


def test_pool_of_replica_servers(check_spec, tmp_path):
    """Llama 3 70B: one prefill instance of tp 4 (half a node: serve.sh-like, no node rank) and a
    decode instance of dp 2 · tp 8 over two nodes, which SGLang runs as one server per node
    (no --dp-size across --nnodes): the router pairs 1 prefill server with 2 decode servers."""
    r = check_spec(pd(prefill="tp = 4", decode="dp = 2", nodes=3), T)
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    from parc.targets import sglang

    files = sglang.build(r.plan)
    o = _opts(_run(files, tmp_path / "p", "prefill.sh"))
    assert o["--tp-size"] == "4" and "--nnodes" not in o and o["--disaggregation-mode"] == "prefill"
    for node in ("0", "1"):
        o = _opts(_run(files, tmp_path / node, "decode.sh", node))
        assert (o["--tp-size"], o["--disaggregation-mode"]) == ("8", "decode") and "--nnodes" not in o
    rt = _run(files, tmp_path / "r", "router.sh", "p", "d0", "d1")
    assert rt[-8:] == ["--pd-disaggregation", "--prefill", "http://p:30000", "8998", "--decode", "http://d0:30000",
                       "--decode", "http://d1:30000"]


# ---------------------------------------------------------------------------------- rules

def test_p624_dcp_divides_tp(check_spec):
    text = spec(L8 + "; kv_heads = 2", mesh="tp = 8; dcp = 3", serve=SERVE, target={"sglang": S})
    d = assert_fires(check_spec, text, "P624", "dcp = 3", target="sglang", targets=T)
    assert "use dcp = one of 2, 4 or 8" in d.help
    assert_quiet(check_spec, text.replace("dcp = 3", "dcp = 4"), "P624", T)


def test_p625_dcp_within_tp_over_kv_heads(check_spec):
    # llama3_8b: 8 KV heads; tp 8 holds one a rank, dcp 2 would need 8 · 2 = 16 ranks
    text = spec(L8, mesh="tp = 8; dcp = 2", serve=SERVE, target={"sglang": S})
    d = assert_fires(check_spec, text, "P625", "dcp = 2", target="sglang", targets=T)
    assert "8 · 2 > 8" in d.message and "raise tp to 16" in d.help
    # 2 KV heads at tp 8: dcp up to 8 / 2 = 4
    assert_quiet(check_spec, text.replace(L8, L8 + "; kv_heads = 2").replace("dcp = 2", "dcp = 4"), "P625", T)


def test_p625_mla_is_not_concerned(check_spec):
    # DeepSeek-V2-Lite: MLA (kv_lora_rank) keeps one latent KV head a rank
    text = spec("from = deepseek_v2_lite", mesh="tp = 8; dcp = 8", serve=SERVE, target={"sglang": S})
    assert_quiet(check_spec, text, "P625", T)


def test_p626_deepep_mode_without_deepep(check_spec):
    text = spec(MIXTRAL, mesh="tp = 8; ep = 8", serve=SERVE, target={"sglang": S + "; deepep_mode = normal"})
    assert_fires(check_spec, text, "P626", "deepep_mode", severity="warning", target="sglang", targets=T)
    assert_quiet(check_spec, text.replace("deepep_mode = normal", "deepep_mode = normal\n  moe_a2a_backend = deepep"),
                 "P626", T)


def test_p627_eplb_needs_ep(check_spec):
    text = spec(MIXTRAL, mesh="tp = 8", serve=SERVE + "; eplb = true", target={"sglang": S})
    assert_fires(check_spec, text, "P627", "eplb = true", target="sglang", targets=T)
    assert_quiet(check_spec, text.replace("tp = 8", "tp = 8\n  ep = 8"), "P627", T)
    # an all-to-all backend makes ep the server's tp_size (P694 asks to write it; P627 judges what SGLang runs)
    dense = spec(L8, mesh="tp = 8", serve=SERVE + "; eplb = true", target={"sglang": S})
    assert "has no experts" in assert_fires(check_spec, dense, "P627", "eplb = true", target="sglang", targets=T).message


def test_p628_redundant_experts_split_over_ep(check_spec):
    # 16 experts + 4 redundant = 20 slots over ep 8: not whole; 16 + 8 = 24 = 3 a rank
    text = spec(MIXTRAL + "; experts = 16", mesh="tp = 8; ep = 8", target={"sglang": S},
                serve=SERVE + "; eplb = true; redundant_experts = 4")
    d = assert_fires(check_spec, text, "P628", "redundant_experts", target="sglang", targets=T)
    assert "16 + 4 = 20" in d.message and "redundant_experts = 8 or 0" in d.help
    assert_quiet(check_spec, text.replace("redundant_experts = 4", "redundant_experts = 8"), "P628", T)


def test_p639_kv_transfer_sglang_has(check_spec):
    text = pd(serve="kv_transfer = lmcache")
    assert_fires(check_spec, text, "P639", "kv_transfer", target="sglang", targets=T)
    assert_quiet(check_spec, pd(serve="kv_transfer = mooncake"), "P639", T)
    # without disaggregation the KV transfer is not SGLang's to judge
    assert_quiet(check_spec, spec(L8, mesh="tp = 8", serve=SERVE + "; kv_transfer = lmcache", target={"sglang": S}),
                 "P639", T)


def test_p640_two_kv_transfers(check_spec):
    text = pd(serve="kv_transfer = nixl", target=S + "; transfer_backend = mooncake")
    d = assert_fires(check_spec, text, "P640", "transfer_backend", target="sglang", targets=T)
    assert d.related and d.related[0].span.line == line_of(text, "kv_transfer")
    assert_quiet(check_spec, pd(serve="kv_transfer = nixl", target=S + "; transfer_backend = nixl"), "P640", T)


def test_pool_instances_sharing_a_node_get_their_gpus_and_ports(check_spec, tmp_path):
    # 2 prefill instances of tp 4 share a node of 8 (parc.model.pools.instances: GPUs 0-3 and 4-7):
    # SGLang runs both with --base-gpu-id and ports of their own, as its one-node disaggregation
    # example does (the decode server with --base-gpu-id 1 and port 30001)
    text = pd(prefill="tp = 4; instances = 2", nodes=3)
    _, files = _compile(check_spec, text)
    got = []
    for slot in ("0", "1"):
        o = _opts(_run(files, tmp_path / slot, "prefill.sh", slot))
        got.append((o["--base-gpu-id"], o["--port"], o["--disaggregation-bootstrap-port"]))
    assert got == [("0", "30000", "8998"), ("4", "30004", "9002")], got
    # the decode pool takes whole nodes: SGLang's defaults, no slot
    o = _opts(_run(files, tmp_path / "d", "decode.sh", "0", env={"MASTER_ADDR": "10.0.0.3"}))
    assert "--base-gpu-id" not in o and o["--port"] == "30000"
    router = {f.path: f.text for f in files}["router.sh"]
    assert "ports=(30000 30004 30000 30000)" in router and "bootstraps=(8998 9002)" in router


def test_p645_disaggregation_key_with_pools(check_spec):
    text = pd(target=S + "; disaggregation = prefill")
    assert_fires(check_spec, text, "P645", "disaggregation = prefill", target="sglang", targets=T)
    assert_quiet(check_spec, pd(), "P645", T)
