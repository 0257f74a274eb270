"""Dynamo's own rules: the plans a DynamoGraphDeployment cannot serve as the engine's target
launches them, and the names the API server would refuse."""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.targets.base import target_span
from parc.targets.dynamo import NAME_MAX, TARGET, engine, engine_facts, module_argv, unsupported, workers
from parc.targets.kubernetes.rules import check_names
from parc.words import count


def _serving(plan) -> bool:
    """A serving plan whose launch the engine can cut into runs (P101 speaks for the others)."""
    return plan.mode == "serve" and plan.world_size <= plan.cluster.world


# ------------------------------------------------------------------------------------ P646

@rule("P646", "dynamo-serves-only", targets=(TARGET,))
def dynamo_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, TARGET, "train"),
                 "a DynamoGraphDeployment serves a model: its workers run a serving engine behind Dynamo's "
                 "frontend, and this spec trains (it has a `train` block)",
                 help="compile training for Kubernetes with `target trainjob` or `target kubernetes`, or replace "
                      "`train` with `serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


# ------------------------------------------------------------------------------------ P647

@rule("P647", "dynamo-name", targets=(TARGET,))
def dynamo_names(plan, c):
    check_names(plan, c, TARGET, NAME_MAX)


# ------------------------------------------------------------------------------------ P710

@rule("P710", "dynamo-multinode-launch", targets=(TARGET,), whole=True)
def dynamo_multinode(plan, c):
    """The operator starts a multinode vLLM worker over Ray (backend_vllm.go): the leader's
    command becomes `ray start --head && ARGS` and every other pod's `ray start --address=LEADER
    --block`, so vLLM's own multi-node launch (executor mp: --nnodes and --node-rank, or headless
    data-parallel workers) has no place in the graph."""
    if not _serving(plan):
        return
    for w in workers(plan):
        why = unsupported(plan, w.run)
        if why is None:
            continue
        whose = f"the {w.run.pool} pool's worker" if w.run.pool else f"the {w.name} worker"
        vllm = engine(plan) == "vllm"
        c.report(c.at("target.vllm.executor", "target.vllm", "mesh") if vllm else c.at("mesh"),
                 f"{whose} spans {count(w.run.size, 'node')} and {why}: the engine's own multi-node launch "
                 f"({' then '.join(s[0] for s in w.run.leader)} on the first node"
                 f"{', ' + w.run.worker[0][0] + ' with its node rank on the others' if w.run.worker else ''}) "
                 "cannot be a Dynamo worker, whose pods all start from one command",
                 help="set `executor = ray` in `target vllm` (Dynamo's operator starts the Ray cluster of a multinode "
                      "worker), or choose tp·pp·cp that fits one node" if vllm
                 else "choose degrees whose instances fit one node")


# ------------------------------------------------------------------------------------ P711

@rule("P711", "dynamo-word-lost", targets=(TARGET,), whole=True)
def dynamo_word_lost(plan, c):
    """A worker's command is the engine's own with the words the scheduler fills in left to the
    operator (module doc); a word of the engine's command that only a scheduler's variable could
    give (a node rank, an address) and that the operator does not provide would be lost."""
    if not _serving(plan):
        return
    lost = [f"{w.name}: {', '.join(w.lost)}" for w in workers(plan) if w.lost and unsupported(plan, w.run) is None]
    if lost:
        c.report(c.at(f"target.{TARGET}", "mesh"),
                 f"the workers' commands would lose what the scheduler gives each node ({'; '.join(lost)}): a "
                 "Dynamo worker's command is the same on every pod, and the operator provides none of these",
                 help="choose degrees whose instances fit one node, or launch the plan with `target lws`")


# ------------------------------------------------------------------------------------ P712

@rule("P712", "dynamo-half-disaggregated", severity=WARNING, targets=(TARGET,), whole=True)
def dynamo_half_disaggregated(plan, c):
    """A plan without pools whose engine command already names a prefill or decode role (SGLang's
    own `disaggregation` key) is one half of a disaggregated deployment: the graph holds only
    that half, and Dynamo's frontend has no worker of the other role to pair it with."""
    if not _serving(plan) or plan.pools:
        return
    flag = engine_facts(plan).get("disaggregation")
    for w in workers(plan):
        args = module_argv(plan, w.run)[0]
        role = args[args.index(flag) + 1] if flag in args[:-1] else None
        if role in ("prefill", "decode"):
            other = "decode" if role == "prefill" else "prefill"
            c.report(c.at(f"target.{engine(plan)}.disaggregation", f"target.{engine(plan)}", "serve"),
                     f"the {w.name} worker runs as a {role} server ({flag} {role}), and the graph has no {other} "
                     f"worker: Dynamo's frontend sends every request to it, and a {role} worker waits for a "
                     f"{other} one that never comes",
                     help="declare both pools in the `serve` block (`prefill { }` and `decode { }`), so that the "
                          "graph holds a worker of each role")
