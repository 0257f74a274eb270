"""The lws target: how a plan is cut into LeaderWorkerSet groups, the commands its pods run, and
its own rules (P675-P678), each firing on one spec and quiet on the same spec made valid.
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


def test_p676_engine_without_a_command(check_spec):
    bad = spec(mesh="tp = 8", serve=SERVE, target={"vllm": VLLM, "lws": "engine = sglang"})
    d = assert_fires(check_spec, bad, "P676", "engine", target="lws")
    assert "sglang" in d.message
    assert_quiet(check_spec, bad.replace("= sglang", "= vllm"), "P676")


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
