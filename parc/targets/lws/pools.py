"""The LeaderWorkerSets of a prefill/decode-disaggregated plan: one per pool, and the engine's
front (vLLM's proxy, SGLang's router) in front of them as a Deployment (see the package's doc)."""
from __future__ import annotations

from parc.targets.base import Env, mesh_text
from parc.targets.engines import Run, pod_command
from parc.targets.lws import K8S_VARS, _set
from parc.words import count


def leaders(set_name: str, run: Run) -> list[str]:
    """The DNS names of the groups' leaders: pod ``<set>-<group>`` in LeaderWorkerSet's headless
    Service ``<set>`` (the address it gives LWS_LEADER_ADDRESS, short of the namespace)."""
    return [f"{set_name}-{g}.{set_name}" for g in range(run.replicas)]


def pooled(plan, node, name: str):
    """(the LeaderWorkerSets, the front's Deployment, the scripts the ConfigMap carries, the
    header line) of a disaggregated plan, ``node`` its engine's launch."""
    from parc.targets.kubernetes import PLAN_DIR, literal

    sets, hosts = [], {}
    for run in node.runs:
        set_name = f"{name}-{run.pool}"
        sets.append(_set(plan, run, set_name))
        hosts[run.pool] = leaders(set_name, run)
    front = node.front
    argv, env = front.command(hosts)
    proxy = {"name": f"{name}-proxy", "command": pod_command((argv,), K8S_VARS, PLAN_DIR), "port": front.port,
             "env": [Env(e.name, literal(e.value)) for e in env]}
    what = ("Pools: " + "; ".join(f"{s['name']}: {count(s['replicas'], 'group')} of {count(s['size'], 'pod')} x "
                                  f"{count(s['gpus'], 'GPU')} ({mesh_text(r.plan)})" for s, r in zip(sets, node.runs))
            + f"; the Service {proxy['name']} sends requests to the {front.file[:-3]} in front of them.")
    # every instance is a pod of its own, on its pool's port (not the node scripts' shared-node ports)
    return sets, proxy, [front.apart()], what
