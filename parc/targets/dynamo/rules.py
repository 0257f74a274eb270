"""Dynamo's own rules: the plans a DynamoGraphDeployment cannot serve as the engine's target
launches them, and the names the API server would refuse."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.base import target_span
from parc.targets.dynamo import NAME_MAX, TARGET, engine, unsupported, workers
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
    for w in workers(plan):
        if w.lost and unsupported(plan, w.run) is None:
            c.report(c.at(f"target.{TARGET}", "mesh"),
                     f"the {w.name} worker's command would lose {', '.join(w.lost)}: the engine's command needs "
                     "what the scheduler gives each node, and a Dynamo worker's command is the same on every pod",
                     help="choose degrees whose instances fit one node, or launch the plan with `target lws`")
