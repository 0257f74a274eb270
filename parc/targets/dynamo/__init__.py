"""NVIDIA Dynamo: ``dgd.yaml``, a ``DynamoGraphDeployment`` that the Dynamo operator turns into
Dynamo's frontend and the engine's workers: nvidia.com/v1beta1 (``spec.components``, each with a
``podTemplate`` whose ``main`` container runs it; the default) or, for an operator that serves no
v1beta1, nvidia.com/v1alpha1 (``spec.services``, ``extraPodSpec.mainContainer``): the key
``api_version``, target.toml's [api].

The graph is the frontend (``python3 -m dynamo.frontend``, which serves the OpenAI API and routes
each request to a worker over Dynamo's runtime) and one worker component per run of the engine's
launch (parc/targets/engines.py): a plan without pools is one component ``<Engine>Worker``; a
prefill/decode-disaggregated plan is ``<Engine>PrefillWorker`` and ``<Engine>DecodeWorker``, each
worker naming its role with the engine's ``--disaggregation-mode``. A component's ``replicas`` are
the run's replicas (the plan's data-parallel replicas, a pool's instances); a run larger than a node
is a ``multinode`` component of ``nodeCount`` pods, each with the node's GPUs (``resources.limits.gpu``
is per pod, v1beta1's ``nvidia.com/gpu`` limit of the main container too: the CRD's "total number of
GPUs is NumberOfNodes * GPU"). In v1beta1 a pool's worker is of its role's component ``type``
(``prefill``, ``decode``), any other ``worker``.

A worker runs Dynamo's component module for the engine (``dynamo.vllm``, ``dynamo.sglang``) with
the options of the engine's own command, exactly as ``parc compile --target ENGINE`` writes them
for that run, less what the module or the operator owns (target.toml's [engines]): the server's
API port (the frontend serves the API) and, for SGLang, the multinode options the operator adds
(``--dist-init-addr``, ``--nnodes``, ``--node-rank``). A multinode vLLM worker runs over Ray, which
the operator starts itself (the leader's command becomes ``ray start --head && ARGS``, the other
pods only join the head), so its command is a shell line, and its pods' annotation asks for that
launch by name (an operator that knows the annotation otherwise starts vLLM's own); a launch the operator cannot start that
way (vLLM's own multi-node launch, ``executor = mp``) is refused (P620, :func:`inexpressible`). ``spec.backendFramework``
names the engine, which is how the operator picks its multinode handling. What the graph cannot
express is a diagnostic, never a silent drop.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from parc.model.targets import display, engine_of, pinned, spec
from parc.targets.base import Cat, Env, File, Var, dns_label, mesh_text, nccl_env, plan_json, settings, spec_name
from parc.targets.engines import Product, Run, launch
from parc.words import count

TARGET = "dynamo"
NAME_MAX = 40            # the operator names each component's objects <name>-<component>
GROUP = "nvidia.com"
FRONTEND = ("python3", "-m", "dynamo.frontend")


def engine(plan) -> str:
    """The engine the workers run (parc.model.targets.engine_of)."""
    return engine_of(plan, TARGET)


def engine_facts(plan) -> dict:
    """How the engine's command becomes a worker's (target.toml's [engines])."""
    return (spec(TARGET) or {}).get("engines", {}).get(engine(plan), {})


def api_version(plan) -> str:
    """The DynamoGraphDeployment API version the graph is written in (target.toml's [api])."""
    return settings(plan, TARGET).get("api_version") or spec(TARGET)["api"]["default"]


def graph_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


@dataclass(frozen=True)
class Worker:
    """One worker component: its name, the run it stands for, the container's command and args,
    and what of the engine's command it cannot carry (``lost``: each word, in the engine's terms)."""

    name: str
    run: Run
    command: tuple[str, ...]
    args: tuple[str, ...]
    lost: tuple[str, ...]


def without(argv: list, options: dict) -> list:
    """``argv`` less each option of ``options`` and the number of values it takes."""
    out, i = [], 0
    while i < len(argv):
        w = argv[i]
        if isinstance(w, str) and w in options:
            i += 1 + int(options[w])
            continue
        out.append(w)
        i += 1
    return out


def _word(w) -> str | None:
    """A word the container can carry as it is (None: one the scheduler was to fill in)."""
    if isinstance(w, (Var, Cat, Product)):
        return None
    return str(w)


def module_argv(plan, run: Run) -> tuple[list[str], list[str]]:
    """(the worker's argv after ``python3``, the words it cannot carry) of ``run``: the engine's
    serving step as the module's (module doc)."""
    facts = engine_facts(plan)
    step = list(run.leader[-1])
    program = list(facts["program"])
    lost = []
    if step[:len(program)] != program:
        return [], [shlex.join(map(str, step))]
    rest = step[len(program):]
    head = ["-m", facts["module"]]
    if facts.get("model"):
        head += [facts["model"], str(rest.pop(0))]
    rest = without(without(rest, facts.get("frontend", {})), facts.get("operator", {}) if run.size > 1 else {})
    flag = facts.get("disaggregation")
    if run.pool and flag not in rest:
        rest += [flag, run.pool]
    words = [_word(w) for w in rest]
    lost += [" ".join([*([str(rest[i - 1])] if i and words[i - 1] else []), _shown(w)])
             for i, (w, s) in enumerate(zip(rest, words)) if s is None]
    return head + [s for s in words if s is not None], lost


def _shown(w) -> str:
    """A word the scheduler fills in, as messages show it: ``<port>``, ``<master_addr>:5000``."""
    if isinstance(w, Var):
        return f"<{w.name}>"
    if isinstance(w, Cat):
        return "".join(_shown(p) for p in w.parts)
    if isinstance(w, Product):
        return f"<{w.var.name} * {w.factor}>"
    return str(w)


def _ray_steps(run: Run) -> bool:
    """Whether a multi-node run is the Ray launch the operator starts: the leader starts the Ray
    head, then serves; the other nodes only join the head."""
    lead = run.leader
    return (len(lead) == 2 and lead[0][:3] == ("ray", "start", "--head")
            and run.worker is not None and len(run.worker) == 1 and run.worker[0][:3] == ("ray", "start", "--address"))


def unsupported(plan, run: Run) -> str | None:
    """Why the operator cannot start ``run`` as the engine's target launches it (None: it can)."""
    if run.size == 1:
        return None if len(run.leader) == 1 else "its command has several steps"
    how = engine_facts(plan).get("multinode")
    if how == "ray" and not _ray_steps(run):
        return "it is vLLM's own multi-node launch, not Ray's"
    if how == "flags" and len(run.leader) != 1:
        return "its command has several steps"
    if how == "flags":
        owned = engine_facts(plan).get("operator", {})
        if without(list(run.leader[-1]), owned) != without(list(run.worker[-1]), owned):
            return "its nodes' commands differ beyond the options the operator writes"
    return None


def worker(plan, run: Run) -> Worker:
    facts = engine_facts(plan)
    role = run.pool.capitalize() if run.pool else ""
    argv, lost = module_argv(plan, run)
    if run.size > 1 and facts.get("multinode") == "ray":
        # the operator joins the args with spaces behind `ray start --head ... &&`: one shell line
        command, args = ("/bin/sh", "-c"), (shlex.join(["python3", *argv]),)
    else:
        command, args = ("python3",), tuple(argv)
    return Worker(f"{facts['service']}{role}Worker", run, command, args, tuple(lost))


def workers(plan) -> list[Worker]:
    """The worker components, one per run of the engine's launch."""
    return [worker(plan, run) for run in launch(plan, TARGET).runs]


def _kube(text: str) -> str:
    """A literal word in a container's command (the kubelet substitutes $(NAME); $$ is a $)."""
    return text.replace("$", "$$")


def _component(plan, w: Worker) -> dict:
    from parc.targets.kubernetes import pod_env, quantity

    s = settings(plan, TARGET)
    run = w.run
    from parc.targets.kubernetes import PLAN_DIR

    skip = set(engine_facts(plan).get("frontend_env", ()))
    env = pod_env([e for e in [Env("PARC_PLAN", f"{PLAN_DIR}/plan.json"), *run.env, *nccl_env(run.plan or plan)]
                   if e.name not in skip])
    ray = run.size > 1 and engine_facts(plan).get("multinode") == "ray"
    return {"name": w.name, "replicas": run.replicas, "nodes": run.size, "gpus": run.gpus,
            "type": run.pool or "worker",
            "annotations": {spec(TARGET)["api"]["ray_annotation"]: "ray"} if ray else {},
            "command": [_kube(x) for x in w.command], "args": [_kube(x) for x in w.args], "env": env,
            "cpu": str(s["cpu"]) if "cpu" in s else None,
            "memory": quantity(s["memory"]) if "memory" in s else None,
            "shm": quantity(s["shm_size"]) if "shm_size" in s else None,
            "what": f"{count(run.replicas, 'replica')} of {count(run.size, 'pod')} x {count(run.gpus, 'GPU')}"
                    f" ({mesh_text(run.plan or plan)})"}


def build(plan) -> list[File]:
    from parc.targets.render import render

    s = settings(plan, TARGET)
    facts = engine_facts(plan)
    name = graph_name(plan)
    ws = workers(plan)
    if any(w.lost or unsupported(plan, w.run) for w in ws):   # P620 refuses the plan: never drop a word
        raise ValueError("the DynamoGraphDeployment cannot carry this plan's launch (P620)")
    comps = [_component(plan, w) for w in ws]
    frontend = list(FRONTEND) + (["--http-port", str(s["port"])] if "port" in s else [])
    header = [f"DynamoGraphDeployment compiled by parc from {spec_name(plan)}: kubectl apply -f dgd.yaml "
              "(the Dynamo operator and its platform must be installed)",
              "Workers: " + "; ".join(f"{c['name']}: {c['what']}" for c in comps)
              + f"; Dynamo's frontend serves the API on port {s.get('port', 8000)}."]
    from parc.targets.kubernetes import PLAN_DIR

    version = api_version(plan)
    # v1beta1's admission refuses a component whose image tag is not the Dynamo runtime's
    # semantic version unless `runtimeVersionOverride` says it (the CRD's field description): an
    # image of the user's runs the release whose module options parc writes (`version`)
    runtime = pinned(plan, TARGET) if "image" in s else None
    text = render(f"dynamo/dgd_{version}.yaml.j2", header=header, name=name, namespace=s.get("namespace"),
                  plan_json=plan_json(plan), plan_dir=PLAN_DIR,
                  api_version=f"{GROUP}/{version}", framework=engine(plan), engine=display(engine(plan)),
                  image=s.get("image", facts["image"]), secret=s.get("secret"), frontend=frontend,
                  components=comps, runtime=runtime)
    return [File("dgd.yaml", text), File("plan.json", plan_json(plan))]


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each part of the plan the graph cannot carry (P620): a multinode
    launch the operator cannot start, a word of the engine's command only a scheduler could fill
    in, one role of a disaggregated deployment alone. Long because: three cases, each message
    in the user's terms."""
    if plan.mode != "serve" or plan.world_size > plan.cluster.world:
        return []
    out = []
    eng = engine(plan)
    flag = engine_facts(plan).get("disaggregation")
    for w in workers(plan):
        why = unsupported(plan, w.run)
        if why is not None:
            vllm = eng == "vllm"
            path = "target.vllm.executor" if "target.vllm.executor" in plan.spans else f"target.{eng}"
            out.append((path, f"the {w.name} worker over {count(w.run.size, 'node')} as {display(eng)} launches it "
                              f"({' then '.join(s[0] for s in w.run.leader)} on the first node): {why}, and the "
                              + ("operator replaces the commands of the pods after the first with `ray start "
                                 "--address=LEADER:6379 --block`" if vllm else "operator starts every pod from one "
                                 "command, adding only " + ", ".join(engine_facts(plan).get("operator", {}))),
                        "set `executor = ray` in `target vllm` (the operator starts the Ray cluster of a multinode "
                        "worker), or choose tp·pp·cp that fits one node" if vllm
                        else "choose degrees whose instances fit one node"))
            continue
        if w.lost:
            out.append(("mesh", f"{', '.join(w.lost)} in the {w.name} worker's command: what a scheduler gives each "
                                "node, and a Dynamo worker's command is the same on every pod",
                        "choose degrees whose instances fit one node, or launch the plan with `target lws`"))
        args = module_argv(plan, w.run)[0]
        role = args[args.index(flag) + 1] if not w.run.pool and flag in args[:-1] else None
        if role in ("prefill", "decode"):
            other = "decode" if role == "prefill" else "prefill"
            out.append((f"target.{eng}.disaggregation", f"a {role} server alone ({flag} {role}): a "
                        "DynamoGraphDeployment is the whole deployment, and its frontend has no "
                        f"{other} worker to pair it with",
                        "declare both pools in the `serve` block (`prefill { }` and `decode { }`), so that the graph "
                        "holds a worker of each role"))
    return out
