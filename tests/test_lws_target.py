"""The lws target: how a plan is cut into LeaderWorkerSet groups, the commands its pods run, and
its own rules (P675-P679), each firing on one spec and quiet on the same spec made valid, and the
switch of rule family and command with `engine` (vllm or sglang).
(tests/test_lws_judge.py has Kubernetes and LWS judge the manifests.)"""
from __future__ import annotations

import pytest
import yaml

from support.specs import assert_fires, assert_quiet, spec

VLLM = 'model = "m"'
SERVE = "max_model_len = 4096"
MOE = "from = mixtral_8x7b"


def manifest(r) -> list[dict]:
    from parc.targets import lws

    return list(yaml.safe_load_all(next(f.text for f in lws.build(r.plan) if f.path == "lws.yaml")))


def containers(doc) -> dict:
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return {k: lwt[k]["spec"]["containers"][0] for k in ("leaderTemplate", "workerTemplate") if k in lwt}


# (spec arguments, executor) -> (size, replicas, GPUs per pod)
GROUPS = [
    # tp 8 · pp 2 = 16 GPUs on nodes of 8: one group of 16 / 8 = 2 whole nodes
    (dict(nodes=2, mesh="pp = 2; tp = 8"), None, (2, 1, 8)),
    # replicas of tp 2 fit in a node of 4: dp = 2 groups of one pod with 2 GPUs
    (dict(gpn=4, mesh="dp = 2; tp = 2"), None, (1, 2, 2)),
    # 4 nodes of 8, dp 2 replicas of tp 8 · pp 2 = 16: 2 groups of 2 nodes
    (dict(nodes=4, mesh="dp = 2; pp = 2; tp = 8"), None, (2, 2, 8)),
    # experts over dp · tp = 16 (ep 16): one vLLM engine, so one group of both nodes
    (dict(model=MOE, nodes=2, mesh="dp = 8; tp = 2; ep = 16"), None, (2, 1, 8)),
    # the same on one node of 8: one group of one pod holding all 8 GPUs
    (dict(model=MOE, mesh="dp = 4; tp = 2; ep = 8"), None, (1, 1, 8)),
    # Ray: the same sizes, the group's leader starts the Ray head
    (dict(nodes=4, mesh="dp = 2; pp = 2; tp = 8"), "ray", (2, 2, 8)),
]


@pytest.mark.parametrize("kw,executor,want", GROUPS)
def test_groups(check_spec, kw, executor, want):
    from parc.targets.lws import groups

    target = VLLM + (f"; executor = {executor}" if executor else "")
    r = check_spec(spec(serve=SERVE, target={"vllm": target}, **kw), ("lws",))
    assert not [d for d in r.errors if d.code.startswith("P6")], [(d.code, d.message) for d in r.errors]
    g = groups(r.plan)
    assert (g.size, g.replicas, g.gpus) == want
    [cm, lws, svc] = manifest(r)
    assert cm["kind"] == "ConfigMap" and "plan.json" in cm["data"]
    assert (lws["spec"]["leaderWorkerTemplate"]["size"], lws["spec"]["replicas"]) == want[:2]
    for c in containers(lws).values():
        assert c["resources"]["limits"]["nvidia.com/gpu"] == want[2]
    assert svc["kind"] == "Service" and svc["spec"]["ports"][0]["targetPort"] == 8000


def test_multi_node_group_takes_its_rank_and_leader_from_lws(check_spec):
    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM}), ("lws",))
    c = containers(manifest(r)[1])
    leader, worker = c["leaderTemplate"]["command"], c["workerTemplate"]["command"]
    assert leader[:3] == ["vllm", "serve", "m"] and worker[:3] == ["vllm", "serve", "m"]
    at = (lambda argv, flag: argv[argv.index(flag) + 1])
    assert (at(leader, "--nnodes"), at(leader, "--node-rank")) == ("2", "0")
    assert (at(worker, "--nnodes"), at(worker, "--node-rank")) == ("2", "$(LWS_WORKER_INDEX)")
    assert at(leader, "--master-addr") == at(worker, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert "--headless" in worker and "--headless" not in leader
    assert c["leaderTemplate"]["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert "readinessProbe" not in c["workerTemplate"]


def test_a_dollar_in_a_value_stays_literal(check_spec):
    """Kubernetes substitutes $(NAME) in a command; parc writes a value's own `$` as `$$`, in a
    plain command and in a `sh -c` script (where the shell's quoting keeps it literal too)."""
    r = check_spec(spec(mesh="tp = 8", serve=SERVE, target={"vllm": 'model = "org/m$(HOME)"'}), ("lws",))
    assert containers(manifest(r)[1])["workerTemplate"]["command"][2] == "org/m$$(HOME)"
    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"vllm": 'model = "org/m$(HOME)"; executor = ray'}), ("lws",))
    script = containers(manifest(r)[1])["leaderTemplate"]["command"][2]
    assert script.startswith("ray start --head --port 6379 && exec vllm serve 'org/m$$(HOME)' ")


def test_output_is_the_same_on_every_run(check_spec):
    from parc.targets import lws

    r = check_spec(spec(nodes=4, mesh="dp = 2; pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM}), ("lws",))
    assert lws.build(r.plan) == lws.build(r.plan)


# ------------------------------------------------------------------------------------ rules

def test_p675_lws_serves_only(check_spec):
    bad = spec(target={"lws": 'name = "x"'})
    assert_fires(check_spec, bad, "P675", "target lws", target="lws")
    assert_quiet(check_spec, spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM, "lws": 'name = "x"'}), "P675")


def test_p676_engine_without_a_command(check_spec, monkeypatch):
    """Every engine the key offers has its image and health path in target.toml, so P676 is
    quiet for both; it fires for a choice whose facts are missing (stood in by an empty table)."""
    from parc.model.targets import engines, spec as target_spec

    assert engines("lws") == ["vllm", "sglang"]
    assert all(target_spec("lws")["engines"][e]["health"] == "/health" for e in engines("lws"))
    text = spec(mesh="tp = 8", serve=SERVE, target={"sglang": 'model = "m"', "lws": "engine = sglang"})
    assert not check_spec(text).errors
    assert_quiet(check_spec, text.replace("= sglang", "= vllm"), "P676")
    monkeypatch.setattr("parc.targets.lws.rules.engine_facts", lambda plan: {})
    d = assert_fires(check_spec, text, "P676", "engine", target="lws")
    assert 'engine = "sglang" has no command' in d.message
    assert d.help == 'use one of `engine = "vllm"` or `engine = "sglang"`'


@pytest.mark.parametrize("key,value", [("name", "7b-serve"), ("name", "a" * 41), ("namespace", "Serving"),
                                       ("rdma_resource", "rdma shared")])
def test_p677_kubernetes_names(check_spec, key, value):
    bad = spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM, "lws": f'{key} = "{value}"'})
    d = assert_fires(check_spec, bad, "P677", key, target="lws")
    assert f"`{key}`" in d.message
    good = {"name": "serve-7b", "namespace": "serving", "rdma_resource": "rdma/rdma_shared_device_a"}[key]
    assert_quiet(check_spec, bad.replace(f'"{value}"', f'"{good}"'), "P677")


def test_p678_ray_groups_need_more_nodes_than_the_cluster_has(check_spec):
    # dp 2 replicas of pp 3 · tp 4 = 12 GPUs: 24 GPUs = 3 nodes of 8, and Ray would place them so;
    # but each replica's group takes ceil(12 / 8) = 2 whole nodes: 2 · 2 = 4 > 3
    bad = spec(nodes=3, mesh="dp = 2; pp = 3; tp = 4", serve=SERVE, target={"vllm": VLLM + "; executor = ray"})
    d = assert_fires(check_spec, bad, "P678", "mesh {", target="lws", targets=("lws",))
    assert "2 groups of 2 whole nodes" in d.message and "4 nodes" in d.message
    # replicas of pp 2 · tp 4 = 8 GPUs: one node each, 3 groups on 3 nodes
    assert_quiet(check_spec, bad.replace("dp = 2", "dp = 3").replace("pp = 3", "pp = 2"), "P678", ("lws",))


def test_parc_rules_lists_lws_and_vllm_rules(capsys):
    from parc.cli.main import main

    assert main(["rules", "--target", "lws"]) == 0
    codes = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert {"P675", "P676", "P677", "P678", "P651", "P606"} <= codes
    assert "P661" not in codes and "P610" not in codes


def test_p679_multi_node_groups_on_infiniband_ask_for_rdma(check_spec):
    bad = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target={"vllm": VLLM, "lws": 'name = "x"'})
    assert_fires(check_spec, bad, "P679", "inter_node", severity="warning", target="lws")
    assert_quiet(check_spec, bad.replace('name = "x"', 'rdma_resource = "rdma/hca"'), "P679")
    # groups of one pod (dp 2 replicas of tp 8, one node each) need no InfiniBand
    assert_quiet(check_spec, bad.replace("pp = 2", "dp = 2"), "P679")


# ------------------------------------------------------------------------------------ SGLang

SGLANG = {"sglang": 'model = "m"', "lws": "engine = sglang"}


def on_vllm(text: str) -> str:
    """The same spec with vLLM as the engine (its model in a `target vllm` block)."""
    return text.replace("target sglang", "target vllm").replace("engine = sglang", "engine = vllm")


def test_the_engine_key_picks_the_rule_family(check_spec):
    """lws brings the rules of the engine its block names: SGLang's under `engine = sglang`,
    vLLM's otherwise, never both."""
    from parc.model.targets import implied

    own = (lambda e: lambda t: {"engine": e} if t == "lws" and e else {})
    assert implied(["lws"], "serve", own("sglang")) == {"lws", "sglang"}
    assert implied(["lws"], "serve", own(None)) == {"lws", "vllm"}
    assert implied(["lws"], "train", own("sglang")) == {"lws"}
    # an fp16 KV cache: SGLang has none (P695, sglang/srt/arg_groups/fields/model.py choices), vLLM does
    fp16 = spec(mesh="tp = 8", serve=SERVE + "; kv_cache_dtype = fp16", target=SGLANG)
    d = assert_fires(check_spec, fp16, "P695", "kv_cache_dtype", target="sglang")
    assert [e.code for e in check_spec(fp16).errors] == ["P695"]
    assert not check_spec(on_vllm(fp16)).errors
    assert "SGLang" in d.message
    # Mixtral's 8 experts over tp 8 as ep 4 x etp 2: vLLM's experts span dp·cp·tp = 8, so it cannot
    # (P606); SGLang runs ep 4 inside its tp_size 8, the MoE tensor-parallel size 8 / 4 = 2
    grid = spec(model=MOE, mesh="tp = 8; ep = 4; etp = 2", serve=SERVE, target=SGLANG)
    assert not check_spec(grid).errors, [(e.code, e.message) for e in check_spec(grid).errors]
    assert [e.code for e in check_spec(on_vllm(grid)).errors] == ["P606"]


def test_parc_rules_lists_both_engines_rules(capsys):
    from parc.cli.main import main

    assert main(["rules", "--target", "lws"]) == 0
    codes = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert {"P691", "P695", "P696", "P651"} <= codes


# (spec arguments, sglang settings) -> (size, replicas, GPUs per pod): one group per SGLang server
SGLANG_GROUPS = [
    # tp 8 · pp 2 on two nodes of 8: one server over both nodes
    (dict(nodes=2, mesh="pp = 2; tp = 8"), "", (2, 1, 8)),
    # dp 2 replicas of tp 8 · pp 2 on 4 nodes: a server per replica, two nodes each
    (dict(nodes=4, mesh="dp = 2; pp = 2; tp = 8"), "", (2, 2, 8)),
    # replicas of tp 4 on 2 nodes of 8: a server per node with --dp-size 2 (SGLang refuses
    # --dp-size with --nnodes), so 2 groups of one pod of 8 GPUs
    (dict(nodes=2, mesh="dp = 4; tp = 4"), "", (1, 2, 8)),
    # one node, dp 2 replicas of tp 2 on 4 GPUs: one server whose DP controller holds both
    (dict(gpn=4, mesh="dp = 2; tp = 2"), "", (1, 1, 4)),
    # attention data parallelism: one server of tp_size dp · tp = 16 over both nodes
    (dict(model=MOE + "; experts = 16", nodes=2, mesh="dp = 8; tp = 2; ep = 16"), "; dp_attention = true",
     (2, 1, 8)),
]


@pytest.mark.parametrize("kw,extra,want", SGLANG_GROUPS)
def test_sglang_groups(check_spec, kw, extra, want):
    from parc.targets.lws import groups

    r = check_spec(spec(serve=SERVE, target={"sglang": 'model = "m"' + extra, "lws": "engine = sglang"}, **kw),
                   ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    g = groups(r.plan)
    assert (g.size, g.replicas, g.gpus) == want
    lws = manifest(r)[1]
    assert (lws["spec"]["leaderWorkerTemplate"]["size"], lws["spec"]["replicas"]) == want[:2]
    for c in containers(lws).values():
        assert c["resources"]["limits"]["nvidia.com/gpu"] == want[2] and c["name"] == "sglang"


def test_sglang_pods_take_their_rank_and_leader_from_lws(check_spec):
    """The sglang target's options on every pod: node rank LWS_WORKER_INDEX, the leader's address
    in --dist-init-addr (SGLang's default port 5000 there), readiness on /health at 30000."""
    from parc.targets import lws as lws_target
    from parc.targets.base import Var
    from parc.targets.engines import pod_command
    from parc.targets.lws import K8S_VARS
    from parc.targets.sglang import server_lines

    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target=SGLANG), ("lws",))
    assert not r.errors, [(d.code, d.message) for d in r.errors]
    lws = manifest(r)[1]
    c = containers(lws)
    leader, worker = c["leaderTemplate"]["command"], c["workerTemplate"]["command"]
    head = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]
    # one place builds SGLang's argv: the sglang target's, with LWS's variables for its own
    assert worker == head + pod_command((tuple(w for ln in server_lines(r.plan, Var("node_rank")) for w in ln),),
                                        K8S_VARS, "/etc/parc")
    at = (lambda argv, flag: argv[argv.index(flag) + 1])
    assert (at(leader, "--nnodes"), at(leader, "--node-rank")) == ("2", "0")
    assert (at(worker, "--nnodes"), at(worker, "--node-rank")) == ("2", "$(LWS_WORKER_INDEX)")
    assert at(leader, "--dist-init-addr") == at(worker, "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):5000"
    assert (at(leader, "--tp-size"), at(leader, "--pp-size")) == ("8", "2")
    assert c["leaderTemplate"]["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert c["leaderTemplate"]["image"] == "lmsysorg/sglang:v0.5.23"
    assert "SGLang's leader waits" in next(f.text for f in lws_target.build(r.plan) if f.path == "lws.yaml")
    # a port in the sglang block moves the probe and the Service with it
    r = check_spec(spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE,
                        target={"sglang": 'model = "m"; port = 31000', "lws": "engine = sglang"}), ("lws",))
    [_, lws, svc] = manifest(r)
    assert containers(lws)["leaderTemplate"]["readinessProbe"]["httpGet"]["port"] == 31000
    assert svc["spec"]["ports"][0]["port"] == 31000


def test_the_planner_judges_with_the_engines_rules(tmp_path):
    """The planner reads the same engine from the spec's blocks: its candidates are judged by
    SGLang's rules under `engine = sglang`, by vLLM's otherwise."""
    from parc.planner.inputs import load_spec

    path = tmp_path / "s.par"
    text = spec(nodes=2, mesh="pp = 2; tp = 8", serve=SERVE, target=SGLANG)
    path.write_text(text)
    assert load_spec(str(path)).rule_targets == {"lws", "sglang"}
    path.write_text(on_vllm(text))
    assert load_spec(str(path)).rule_targets == {"lws", "vllm"}
