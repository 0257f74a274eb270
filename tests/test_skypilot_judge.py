"""SkyPilot judges parc's tasks: every `task.yaml` parc emits for the examples and test specs
goes through SkyPilot's own task parser (``sky.Task.from_yaml_config``: the task schema with
unknown fields refused, and the Resources it builds); then every node runs the task's setup and
run as SkyPilot starts them, with SkyPilot's variables and every engine's launcher recorded
(torchrun, deepspeed, vllm, ray, SGLang's python3), and the judge reports the nodes, the
accelerators and the argv each node ran, which must be the plan's. All in an isolated virtual environment that tests/judges/skypilot_env.sh creates (never
parc's own). The tests run when PARC_JUDGES asks for them (tests/support/judges.py; .ci/run sets it). PARC_SKYPILOT_PYTHON names an existing
environment's python instead."""
from __future__ import annotations

import json

import pytest

from backends_support import accepted_cases
from support import judges
from support.launched import engine_run
from support.specs import spec

MARK = "@@skypilot-judge "
VLLM = 'model = "m"'


@pytest.fixture(scope="module")
def sky_python(tmp_path_factory):
    """A judge: one skypilot_judge.py process for the module, fed one batch of tasks a call."""
    proc = judges.start("skypilot", "PARC_SKYPILOT_PYTHON", tmp_path_factory.mktemp("judge") / "stderr", timeout=900)
    yield proc
    judges.stop(proc)


def option(argv: list[str], flag: str, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def tasks():
    """(spec, plan as JSON, task.yaml) for every example and test spec parc compiles for skypilot."""
    out = []
    for spec_path, t, files in accepted_cases():
        if t == "skypilot":
            by = {f.path: f.text for f in files}
            out.append((spec_path, json.loads(by["plan.json"]), by["task.yaml"]))
    return out


def check_train(name: str, plan: dict, v: dict) -> None:
    """Every node starts the engine's launcher once: torchrun (a script of the spec's own,
    torchtitan, Megatron-LM) or DeepSpeed's, with the nodes, the GPUs of a node, this node's
    SkyPilot rank and the head's address."""
    cl = plan["cluster"]
    for rank, node in enumerate(v["nodes"]):
        [call] = node["calls"]
        argv = call["argv"]
        if argv[0] == "deepspeed":   # each node its own launcher, no ssh
            assert (option(argv, "--num_nodes"), option(argv, "--num_gpus")) == (str(cl["nodes"]),
                                                                               str(cl["gpus_per_node"])), name
            if cl["nodes"] > 1:
                assert "--no_ssh" in argv and option(argv, "--node_rank") == str(rank), name
                assert option(argv, "--master_addr") == v["head"], name
            continue
        assert argv[0] == "torchrun", name
        assert option(argv, "--nnodes") == str(cl["nodes"]), name
        assert option(argv, "--nproc-per-node") == str(cl["gpus_per_node"]), name
        if cl["nodes"] == 1:
            assert "--standalone" in argv, name
        elif option(argv, "--rdzv-backend") == "static":
            # the static rendezvous: this node's SkyPilot rank, node 0 (SkyPilot's head) hosts it
            assert option(argv, "--node-rank") == str(rank), name
            assert option(argv, "--master-addr") == v["head"], name
        else:
            assert option(argv, "--rdzv-endpoint").startswith(v["head"] + ":"), name


def check_sglang(name: str, plan: dict, v: dict) -> None:
    """Every node starts its SGLang server (tests/test_sglang_judge.py has SGLang judge the
    options): a server over several nodes with this node's rank in it and its first node's
    address; a disaggregated plan's router on node 0, pointed at every server's first node."""
    ip = [v["head"][:-1] + str(i + 1) for i in range(v["num_nodes"])]
    for rank, node in enumerate(v["nodes"]):
        servers = [c["argv"] for c in node["calls"] if c["argv"][:3] == ["python3", "-m", "sglang.launch_server"]]
        assert servers, (name, rank, node["calls"])
        for argv in servers:
            if "--nnodes" in argv:
                k = int(option(argv, "--node-rank"))
                assert option(argv, "--dist-init-addr").rsplit(":", 1)[0] in ip, name
                assert ip.index(option(argv, "--dist-init-addr").rsplit(":", 1)[0]) == rank - k, name
    routers = [c["argv"] for c in v["nodes"][0]["calls"] if c["argv"][:3] == ["python3", "-m", "sglang_router.launch_router"]]
    if plan.get("pools"):
        [router] = routers
        hosts = [u.split("//")[1].rsplit(":", 1)[0] for u in router if u.startswith("http://")]
        assert "--pd-disaggregation" in router and hosts and set(hosts) <= set(ip), name
        assert v["ports"] == [option(router, "--port")], name


def check_serve(name: str, plan: dict, v: dict) -> None:
    m, cl = plan["mesh"], plan["cluster"]
    serves = [c["argv"] for node in v["nodes"] for c in node["calls"] if c["argv"][0] == "vllm"]
    assert serves, name
    for argv in serves:
        assert option(argv, "--tensor-parallel-size") == str(m["tp"]), name
        assert option(argv, "--pipeline-parallel-size") == str(m["pp"]), name
        assert option(argv, "--data-parallel-size", "1") == str(m["dp"]), name
        assert option(argv, "--prefill-context-parallel-size", "1") == str(m["cp"]), name
        if "--master-addr" in argv:
            assert option(argv, "--master-addr") == v["head"], name
        if "--data-parallel-address" in argv:
            assert option(argv, "--data-parallel-address") == v["head"], name
    ranks = [option(a, "--node-rank") for a in serves if "--node-rank" in a]
    if ranks:   # vLLM's multiprocessing launch: every node its SkyPilot rank, node 0 serves the API
        assert ranks == [str(r) for r in range(cl["nodes"])], name
        assert [("--headless" in a) for a in serves] == [False] + [True] * (cl["nodes"] - 1), name
    # the task opens the port the API server listens on (node 0's --port)
    assert v["ports"] == [option(serves[0], "--port")], name


def check_pooled(name: str, plan: dict, v: dict) -> None:
    """A disaggregated plan: every node runs the vllm serve of the instances placed on it with its
    pool's degrees, and node 0 the proxy, pointed at each instance's first node."""
    gpn = plan["cluster"]["gpus_per_node"]
    want = {}
    for pool in plan["pools"]:
        m = pool["mesh"]
        g = m["tp"] * m["pp"] * m["cp"] * m["dp"]
        key = (str(m["tp"]), str(m["pp"]), str(m["dp"]), str(m["cp"]))
        # one vllm serve per node of every instance: ceil(g / gpn) nodes, or one for a part of a node
        want[key] = want.get(key, 0) + pool["instances"] * max(1, -(-g // gpn))
    got, firsts = {}, {"8100": [], "8200": []}
    ip = [v["head"][:-1] + str(i + 1) for i in range(v["num_nodes"])]
    for n, node in enumerate(v["nodes"]):
        for c in node["calls"]:
            a = c["argv"]
            if a[0] != "vllm":
                continue
            key = (option(a, "--tensor-parallel-size"), option(a, "--pipeline-parallel-size"),
                   option(a, "--data-parallel-size", "1"), option(a, "--prefill-context-parallel-size", "1"))
            got[key] = got.get(key, 0) + 1
            if "--data-parallel-address" in a:
                assert option(a, "--data-parallel-address") == c["master_addr"], name
            if option(a, "--port") in firsts:   # an instance's API server: its first node
                firsts[option(a, "--port")].append(ip[n])
    assert got == want, name
    # proxy.sh runs python3 on the toy proxy (VLLM_PROXY): the recorded python3 call, less python3
    [proxy] = [c["argv"][1:] for c in v["nodes"][0]["calls"]
               if c["argv"][0] == "python3" and c["argv"][1].endswith("toy_proxy_server.py")]
    ends = [i for i, w in enumerate(proxy) if w.startswith("--")] + [len(proxy)]
    args = {proxy[i]: proxy[i + 1:j] for i, j in zip(ends, ends[1:])}
    assert args["--prefiller-hosts"] == firsts["8100"] and args["--decoder-hosts"] == firsts["8200"], name
    assert v["ports"] == args["--port"], name


def test_skypilot_accepts_every_task_with_the_plans_degrees(sky_python):
    cases = tasks()
    assert len(cases) >= 10
    # every engine runs under SkyPilot
    assert {engine_run(plan, "skypilot") for _, plan, _ in cases} == {"torchrun", "torchtitan", "megatron", "deepspeed",
                                                                      "vllm", "sglang"}
    verdicts = judges.ask(sky_python, MARK, [text for _, _, text in cases])
    for (name, plan, _), v in zip(cases, verdicts):
        assert "error" not in v, (name, v.get("error"))
        cl = plan["cluster"]
        assert v["num_nodes"] == cl["nodes"], name
        assert list(v["accelerators"].values()) == [cl["gpus_per_node"]], name
        for node in v["nodes"]:
            assert node["setup_rc"] == 0 and node["run_rc"] == 0, (name, node)
        if engine_run(plan, "skypilot") == "sglang":
            check_sglang(name, plan, v)
        elif plan.get("pools"):
            check_pooled(name, plan, v)
        else:
            (check_serve if plan["mode"] == "serve" else check_train)(name, plan, v)


def _task(check_spec, text):
    """(parc's target errors (P6), the task.yaml parc's builder writes for the plan even where a rule refuses it)."""
    from parc.targets import skypilot

    r = check_spec(text, ("skypilot",))
    yaml_text = next(f.text for f in skypilot.build(r.plan) if f.path == "task.yaml")
    return {d.code for d in r.errors if d.code.startswith("P6")}, yaml_text


# (target skypilot's block, the code parc refuses it with (None: accepted), what SkyPilot says)
AGREEMENT = [
    ('accelerator = "H100:8"', "P642", "manufacturer"),
    ('infra = "nocloud"', "P643", "does not match"),
    ('infra = "aws/us-east-1"', None, None),
    ('infra = "k8s/my-context"', None, None),
    ('infra = "*/us-east-1"', None, None),
    ('accelerator = "A100-80GB"\n  use_spot = true\n  disk_size = 512\n  network_tier = standard', None, None),
]


@pytest.mark.parametrize("block,code,message", AGREEMENT, ids=[a[0].split("\n")[0] for a in AGREEMENT])
def test_skypilot_refuses_what_parc_refuses(sky_python, check_spec, block, code, message):
    errors, text = _task(check_spec, spec(target={"torchrun": 'entrypoint = "train.py"', "skypilot": block}))
    [v] = judges.ask(sky_python, MARK, [text])
    if code is None:
        assert not errors and "error" not in v, (errors, v.get("error"))
    else:
        assert code in errors and message in v["error"], (errors, v.get("error"))


def test_a_serving_task_across_nodes(sky_python, check_spec):
    """tp 8 · pp 2 on two nodes of 8: vLLM's multiprocessing launch, node 0 serves, node 1 runs headless."""
    errors, text = _task(check_spec, spec(nodes=2, mesh="pp = 2; tp = 8", serve="max_model_len = 4096",
                                          target={"vllm": VLLM}))
    assert not errors
    [v] = judges.ask(sky_python, MARK, [text])
    argv = [c["argv"] for node in v["nodes"] for c in node["calls"]]
    assert [option(a, "--node-rank") for a in argv] == ["0", "1"]
    assert all(option(a, "--master-addr") == v["head"] for a in argv)
