"""The LeaderWorkerSets of a prefill/decode-disaggregated plan: one per pool, and the proxy
(vLLM) or router (SGLang) in front of them as a Deployment (see the package's doc)."""
from __future__ import annotations

import dataclasses

from parc.model.pools import pool_plans
from parc.targets.base import Env, mesh_text
from parc.targets.lws import Groups, _env, _set, engine, groups, settings
from parc.words import count


def pool_groups(plan) -> list[tuple[object, Groups]]:
    """Each pool with its groups: with vLLM one group per instance (its nodes the group's pods,
    as the vllm target launches an instance: one engine, its own data parallelism inside); with
    SGLang one per server of the pool (the sglang target's ``pool_layouts``)."""
    out = []
    for pool, pp in pool_plans(plan):
        if engine(plan) == "vllm":
            cl = pp.cluster
            grp = Groups(cl.nodes, pool.instances, cl.gpus_per_node, pp)
        else:
            one = groups(pp)
            grp = dataclasses.replace(one, replicas=one.replicas * pool.instances)
        out.append((pool, grp))
    return out


def leaders(set_name: str, grp: Groups) -> list[str]:
    """The DNS names of the groups' leaders: pod ``<set>-<group>`` in LeaderWorkerSet's headless
    Service ``<set>`` (the address it gives LWS_LEADER_ADDRESS, short of the namespace)."""
    return [f"{set_name}-{g}.{set_name}" for g in range(grp.replicas)]


def pooled(plan, name: str):
    """(the LeaderWorkerSets, the proxy Deployment, the scripts the ConfigMap carries, the header
    line) of a disaggregated plan."""
    from parc.targets import sglang, vllm
    from parc.targets.kubernetes import PLAN_DIR

    sets, hosts = [], {}
    for pool, grp in pool_groups(plan):
        set_name = f"{name}-{pool.name}"
        env = _env(grp.plan)
        if engine(plan) == "vllm":
            env.append(Env("PARC_PORT", str(vllm.POOL_PORTS[pool.name])))
        sets.append(_set(plan, grp, set_name, pool.name, env))
        hosts[pool.name] = leaders(set_name, grp)
    if engine(plan) == "vllm":
        script = next(f for f in vllm.build(plan) if f.path == "proxy.sh")
        proxy = {"command": ["bash", f"{PLAN_DIR}/proxy.sh"], "port": vllm.PROXY_PORT,
                 "env": [Env("PREFILL_HOSTS", " ".join(hosts["prefill"])),
                         Env("DECODE_HOSTS", " ".join(hosts["decode"]))]}
    else:
        script = next(f for f in sglang.build(plan) if f.path == "router.sh")
        proxy = {"command": ["bash", f"{PLAN_DIR}/router.sh", *hosts["prefill"], *hosts["decode"]], "env": [],
                 "port": settings(plan, "sglang").get("router_port", sglang.ROUTER_PORT)}
    proxy["name"] = f"{name}-proxy"
    what = ("Pools: " + "; ".join(f"{s['name']}: {count(s['replicas'], 'group')} of {count(s['size'], 'pod')} x "
                                  f"{count(s['gpus'], 'GPU')} ({mesh_text(g.plan)})"
                                  for s, (_, g) in zip(sets, pool_groups(plan)))
            + f"; the Service {proxy['name']} sends requests to the {script.path[:-3]} in front of them.")
    return sets, proxy, [script], what
