"""What each node of an emitted launch runs: the files of any target are written out and started
the way their tool starts them (a script with its node rank; sbatch under stub scontrol and srun;
a SkyPilot task's setup then run; a pod's command with the variables its controller sets, as the
kubelet substitutes them), with every engine launcher replaced by a recorder. The answer is each
recorded call: the launcher, its argv, the environment it saw, and how many identical copies of it
the launch starts (a LeaderWorkerSet's replicas; an instance script that stands for every instance
of its pool).

tests/test_launch_carries_plan.py reads the plan's degrees and batch back out of these calls; the
Slurm tests run job.sbatch with the same stubs."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from support.kubelet import expand

LAUNCHERS = ("torchrun", "vllm", "ray", "deepspeed", "python3", "trtllm-serve")
MAX_NODES = 16   # larger launches run on their first two nodes and their last

RECORDER = r'''#!/usr/bin/env bash
# record the call: the launcher, its argv (NUL-separated) and its environment
f="$(mktemp "$ARGV_DIR/calls/{name}.XXXXXX")"
printf '%s\0' "$@" > "$f"
env -0 > "$f.env"
'''

SCONTROL = r'''#!/usr/bin/env bash
# `scontrol show hostnames LIST`: the hosts, one a line, written the way scontrol's stdio does,
# 4 KiB at a time: a reader that stops after the first line ends it with SIGPIPE (exit 141).
if [[ "$1 $2" == "show hostnames" ]]; then
  [[ "$3" == "$STUB_NODELIST" ]] || { echo "scontrol: unexpected node list $3" >&2; exit 1; }
  head -c 4096 "$STUB_HOSTS"
  size=$(wc -c < "$STUB_HOSTS")
  if (( size > 4096 )); then sleep 0.3; tail -c +4097 "$STUB_HOSTS"; fi
  exit
fi
if [[ "$1 $2" == "show job" ]]; then echo "   Command=$STUB_COMMAND"; exit; fi
echo "scontrol stub: $*" >&2; exit 1
'''

SRUN = r'''#!/usr/bin/env bash
# Records its argv and environment, then runs the task for each node in STUB_RUN_NODES the way
# srun would: SLURM_NODEID set, launchers replaced by recorders writing under ARGV_DIR/task<k>.
printf '%s\0' "$@" > "$ARGV_DIR/srun"
env -0 > "$ARGV_DIR/srun.env"
while [[ "$1" == --* ]]; do shift; done
for k in $STUB_RUN_NODES; do
  mkdir -p "$ARGV_DIR/task$k/calls"
  ARGV_DIR="$ARGV_DIR/task$k" SLURM_NODEID="$k" SLURM_PROCID="$k" "$@" || exit
done
'''

HOSTNAME = '#!/usr/bin/env bash\necho "${STUB_HOSTNAME:-gpu000}"\n'

# what a scheduler's environment must not leak into a recorded launch
CLEAN = ("PET_", "SLURM_", "NODE_RANK", "MASTER_", "NCCL_", "GLOO_", "SRUN", "TORCHRUN", "VLLM", "RAY", "DEEPSPEED",
         "PYTHON", "PARC_", "HOSTFILE", "SKYPILOT_", "LWS_", "CUDA_VISIBLE")


def engine_run(plan: dict, target: str) -> str:
    """The engine ``target`` runs for ``plan`` (plan.json's data): itself, or the one a wrapper
    picks (parc.model.targets.engine_of)."""
    from parc.model.plan import plan_from_dict
    from parc.model.targets import engine_of, wrappers

    return engine_of(plan_from_dict(plan), target) if target in wrappers() else target


TORCHRUN_VALUED = {"--nnodes", "--nproc-per-node", "--node-rank", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id",
                   "--rdzv-conf", "--master-addr", "--master-port", "--max-restarts"}
DEEPSPEED_VALUED = {"--hostfile", "--node_rank", "--master_addr", "--master_port", "--num_nodes", "--num_gpus",
                    "--launcher", "--include", "--exclude"}


def options(args: list[str]) -> dict:
    """``--name value`` and ``--flag`` words as a dict (a flag's value True)."""
    out: dict = {}
    for i, w in enumerate(args):
        if w.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[w] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def split(argv: list[str], launcher: str) -> tuple[dict, list[str]]:
    """A launcher's own options (up to its program) and the program with its arguments."""
    valued = TORCHRUN_VALUED if launcher == "torchrun" else DEEPSPEED_VALUED
    opts, i = {}, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in valued:
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            opts[argv[i]] = True
            i += 1
    return opts, argv[i:]


def own_program(plan: dict, engine: str, tmp: Path) -> list[str]:
    """The program (and its arguments) the engine target's own launch hands its launcher on node 0:
    what ``parc compile --target ENGINE`` runs, to compare a wrapper's with."""
    from parc.model.plan import plan_from_dict
    from parc.targets import get

    calls = launched(engine, get(engine).build(plan_from_dict(plan)), tmp)
    launcher = "deepspeed" if engine == "deepspeed" else "torchrun"
    return split(next(c["argv"] for c in calls if c["launcher"] == launcher), launcher)[1]


def fake_tools(folder: Path, names=LAUNCHERS) -> Path:
    """A folder of recorders, one per launcher name, and stub scontrol/srun/hostname."""
    b = folder / "bin"
    b.mkdir(parents=True, exist_ok=True)
    for name, body in [(n, RECORDER.replace("{name}", n)) for n in names] + [
            ("scontrol", SCONTROL), ("srun", SRUN), ("hostname", HOSTNAME)]:
        (b / name).write_text(body)
        (b / name).chmod(0o755)
    return b


def base_env(tools: Path, argv: Path, extra: dict | None = None) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
    e.update(PATH=f"{tools}:{e['PATH']}", ARGV_DIR=str(argv), VLLM_PROXY="toy_proxy_server.py")
    e.update(extra or {})
    return e


def read_calls(folder: Path) -> list[dict]:
    """The calls the recorders wrote under ``folder/calls``, in no particular order."""
    out = []
    calls = folder / "calls"
    for f in sorted(calls.iterdir()) if calls.is_dir() else []:
        if f.suffix == ".env":
            continue
        argv = [a.decode() for a in f.read_bytes().split(b"\0")[:-1]]
        env = dict(x.split("=", 1) for x in
                   (a.decode() for a in (f.parent / (f.name + ".env")).read_bytes().split(b"\0")[:-1]) if "=" in x)
        out.append({"launcher": f.name.split(".")[0], "argv": argv, "env": env, "copies": 1})
    return out


def run(cmd: list[str], env: dict, cwd: Path, what: str):
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{what}: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}"
    return r


def nodes_to_run(n: int) -> list[int]:
    return list(range(n)) if n <= MAX_NODES else [0, 1, n - 1]


def _node_count(text: str) -> int | None:
    """The node count a node script checks its rank against (``(( node_rank >= N ))``)."""
    found = re.search(r"\(\( node_rank >= (\d+) \)\)", text)
    return int(found.group(1)) if found else None


# --- the launch of each target ------------------------------------------------------------------
def launched(target: str, files, tmp: Path) -> list[dict]:
    """Every call the launch of ``files`` (emitted for ``target``) makes on its nodes."""
    from backends_support import write_out

    d = write_out(files, tmp / "out")
    plan = json.loads((d / "plan.json").read_text())
    tools = fake_tools(tmp)
    runner = {"slurm": _slurm, "skypilot": _skypilot, "kubernetes": _kubernetes, "trainjob": _pods,
              "lws": _pods, "deepspeed": _deepspeed, "dynamo": _dynamo, "kserve": _kserve,
              "megatron_deepspeed": _megatron_deepspeed}.get(target, _scripts)
    return runner(d, plan, tools, tmp, target)


def _record_dir(tmp: Path, name: str) -> Path:
    p = tmp / "argv" / name
    (p / "calls").mkdir(parents=True, exist_ok=True)
    return p


def _scripts(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """An engine target's own files: each node script (a pool's too) on every node it names."""
    out = []
    fronts = {"proxy.sh", "router.sh", "node.sh"}
    scripts = [p for p in sorted(d.glob("*.sh")) if p.name not in fronts]
    for script in scripts:
        text = script.read_text()
        pool = next((p for p in plan.get("pools", []) if script.name.startswith(p["name"])), None)
        # a vLLM pool script (<pool>-serve.sh, <pool>-launch.sh) is any one instance of its pool;
        # SGLang's (<pool>.sh) starts every server of the pool, one node rank a node
        copies = pool["instances"] if pool and "-" in script.name else 1
        n = _node_count(text)
        for k in nodes_to_run(n) if n else [None]:
            rec = _record_dir(tmp, f"{script.stem}-{k}")
            env = base_env(tools, rec, {"MASTER_ADDR": "10.0.0.1", "PARC_SLOT": "0"})
            run(["bash", str(script)] + ([str(k)] if k is not None else []), env, tmp, target)
            for c in read_calls(rec):
                c.update(copies=copies, node=k)
                out.append(c)
    return out


def _deepspeed(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """The deepspeed target's launch runs on node 0 only (its launcher reaches the others)."""
    rec = _record_dir(tmp, "deepspeed")
    # where the spec names the hosts the rendezvous is the first of them, else MASTER_ADDR's
    extra = {"MASTER_ADDR": "" if (d / "hostfile").exists() else "10.0.0.1"}
    if plan["cluster"]["nodes"] > 1 and not (d / "hostfile").exists():
        (tmp / "nodes").write_text("".join(f"node-{k} slots={plan['cluster']['gpus_per_node']}\n"
                                           for k in range(plan["cluster"]["nodes"])))
        extra["HOSTFILE"] = str(tmp / "nodes")
    run(["bash", str(d / "launch.sh")], base_env(tools, rec, extra), tmp, target)
    return read_calls(rec)


def _megatron_deepspeed(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """Megatron-DeepSpeed's launch: the deepspeed launcher's on node 0 only, torchrun's on every node."""
    runs_deepspeed = "${DEEPSPEED:-deepspeed}" in (d / "launch.sh").read_text()
    return (_deepspeed if runs_deepspeed else _scripts)(d, plan, tools, tmp, target)


def run_sbatch(folder: Path, tmp: Path, hosts: list[str], *, run_nodes=(), env: dict | None = None) -> dict:
    """Run ``job.sbatch`` as sbatch would on the first host, with stub tools on PATH: srun's argv
    and environment, the job's exit status and stderr, and each node's task's calls."""
    tools = fake_tools(tmp)
    (tmp / "hosts").write_text("".join(h + "\n" for h in hosts))
    argv = tmp / "argv"
    argv.mkdir(exist_ok=True)
    nodelist = f"gpu[000-{len(hosts) - 1:03d}]"
    e = base_env(tools, argv, dict(STUB_HOSTS=str(tmp / "hosts"), STUB_NODELIST=nodelist,
                                   STUB_COMMAND=str(folder / "job.sbatch"), STUB_RUN_NODES=" ".join(map(str, run_nodes)),
                                   SLURM_JOB_ID="4242", SLURM_JOB_NODELIST=nodelist, SLURM_NNODES=str(len(hosts)),
                                   SLURM_CPUS_ON_NODE="128", SLURMD_NODENAME=hosts[0]))
    e.update(env or {})
    spool = tmp / "spool"   # sbatch runs a copy of the script from its spool folder
    spool.mkdir(exist_ok=True)
    (spool / "slurm_script").write_bytes((folder / "job.sbatch").read_bytes())
    p = subprocess.run(["bash", str(spool / "slurm_script")], env=e, cwd=tmp, capture_output=True, text=True,
                       timeout=120)
    got: dict = {"rc": p.returncode, "stderr": p.stderr, "tasks": {}}
    for f in argv.iterdir():
        if f.is_file():
            items = [a.decode() for a in f.read_bytes().split(b"\0")[:-1]]
            got[f.name] = dict(x.split("=", 1) for x in items if "=" in x) if f.name.endswith(".env") else items
        elif f.name.startswith("task"):
            got["tasks"][int(f.name[4:])] = read_calls(f)
    return got


def _slurm(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    n = int(re.search(r"#SBATCH --nodes=(\d+)", (d / "job.sbatch").read_text()).group(1))
    got = run_sbatch(d, tmp / "sbatch", [f"gpu{i:03d}" for i in range(n)], run_nodes=nodes_to_run(n))
    assert got["rc"] == 0, got["stderr"]
    return [dict(c, node=k) for k, calls in got["tasks"].items() for c in calls]


def _skypilot(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    import yaml

    task = yaml.safe_load((d / "task.yaml").read_text())
    n, gpus = task["num_nodes"], task["resources"]["accelerators"].split(":")[1]
    ips = "\n".join(f"10.0.1.{i}" for i in range(n))
    out = []
    for k in nodes_to_run(n):
        home = tmp / f"home{k}"
        home.mkdir()
        rec = _record_dir(tmp, f"sky-{k}")
        env = base_env(tools, rec, {"HOME": str(home), "SKYPILOT_NODE_RANK": str(k), "SKYPILOT_NODE_IPS": ips,
                                    "SKYPILOT_NUM_NODES": str(n), "SKYPILOT_NUM_GPUS_PER_NODE": gpus})
        for part in ("setup", "run"):
            run(["bash", "-c", task[part]], env, tmp, f"{target} {part}")
        out += [dict(c, node=k) for c in read_calls(rec)]
    return out


def _configmap(docs: list, folder: Path) -> Path:
    """The ConfigMap's files written out, as a pod sees them mounted at /etc/parc."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        if doc and doc.get("kind") == "ConfigMap":
            for key, body in (doc.get("data") or {}).items():
                (folder / key).write_text(body)
    return folder


def _pod(command: list[str], env_list: list[dict], variables: dict, mounted: Path, tools: Path, rec: Path,
         tmp: Path, what: str) -> list[dict]:
    """Run a container's command as the kubelet would: its env (then the controller's variables)
    substituted into the words, /etc/parc the mounted ConfigMap."""
    env = dict(variables)
    for e in env_list:
        env.setdefault(e["name"], expand(e.get("value", ""), env))
    env = {k: v.replace("/etc/parc", str(mounted)) for k, v in env.items()}
    argv = [expand(w, env).replace("/etc/parc", str(mounted)) for w in command]
    run(argv, base_env(tools, rec, env), tmp, what)
    return read_calls(rec)


def _kubernetes(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """A PyTorchJob: pod k's command with the training operator's RANK and MASTER_ADDR."""
    import yaml

    docs = list(yaml.safe_load_all((d / "job.yaml").read_text()))
    mounted = _configmap(docs, tmp / "etc-parc")
    job = next(x for x in docs if x and x.get("kind") == "PyTorchJob")
    roles = job["spec"]["pytorchReplicaSpecs"]
    n = sum(r["replicas"] for r in roles.values())
    out = []
    for k in nodes_to_run(n):
        c = roles["Master" if k == 0 else "Worker"]["template"]["spec"]["containers"][0]
        variables = {"RANK": str(k), "MASTER_ADDR": f"{job['metadata']['name']}-master-0", "MASTER_PORT": "23456",
                     "WORLD_SIZE": str(n)}
        rec = _record_dir(tmp, f"pod-{k}")
        out += [dict(x, node=k) for x in _pod(c["command"], c.get("env") or [], variables, mounted, tools, rec, tmp,
                                              target)]
    return out


def _pods(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """A TrainJob's pods (the trainer's command and args with the torch plugin's PET_ variables)
    or a LeaderWorkerSet's groups (each role's command with LWS_WORKER_INDEX and
    LWS_LEADER_ADDRESS; a call stands for every group: copies = the set's replicas)."""
    import yaml

    docs = list(yaml.safe_load_all(next(d.glob("*.yaml")).read_text()))
    mounted = _configmap(docs, tmp / "etc-parc")
    out = []
    # a DisaggregatedSet's roles: each the LeaderWorkerSet <name>-<slice>-<revision>-<role> its
    # controller makes (the revision a hash it computes: any name stands for it here)
    docs += [{"kind": "LeaderWorkerSet", "metadata": {"name": f"{ds['metadata']['name']}-0-rev-{role['name']}"},
              "spec": role["spec"]} for ds in docs if ds and ds.get("kind") == "DisaggregatedSet"
             for role in ds["spec"]["roles"]]
    for doc in docs:
        if not doc:
            continue
        if doc.get("kind") == "TrainJob":
            t, name = doc["spec"]["trainer"], doc["metadata"]["name"]
            for k in nodes_to_run(t["numNodes"]):
                variables = {"PET_NODE_RANK": str(k), "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
                             "PET_MASTER_PORT": "29500", "PET_NNODES": str(t["numNodes"])}
                rec = _record_dir(tmp, f"pod-{k}")
                out += [dict(x, node=k) for x in _pod(t["command"] + (t.get("args") or []), t.get("env") or [],
                                                      variables, mounted, tools, rec, tmp, target)]
        elif doc.get("kind") == "LeaderWorkerSet":
            lwt, name = doc["spec"]["leaderWorkerTemplate"], doc["metadata"]["name"]
            for key, index in (("leaderTemplate", 0), ("workerTemplate", 1 if "leaderTemplate" in lwt else 0)):
                if key not in lwt:
                    continue
                c = lwt[key]["spec"]["containers"][0]
                variables = {"LWS_WORKER_INDEX": str(index), "LWS_LEADER_ADDRESS": f"{name}-0.{name}",
                             "LWS_GROUP_SIZE": str(lwt["size"])}
                rec = _record_dir(tmp, f"{name}-{key}")
                out += [dict(x, node=index, copies=doc["spec"]["replicas"], set=name)
                        for x in _pod(c["command"], c.get("env") or [], variables, mounted, tools, rec, tmp, target)]
    return out


def _dynamo(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """A DynamoGraphDeployment's workers, each pod's container as the operator changes it
    (tests/support/orchestrators.py, with LeaderWorkerSet's variables), each call of Dynamo's
    worker module read as the engine's own: dynamo.vllm's as `vllm serve MODEL` with its options
    (its --disaggregation-mode the pool), dynamo.sglang's as SGLang's launch_server (a call stands
    for every replica: copies)."""
    import yaml

    from support.orchestrators import dynamo_components, operator_container

    docs = [x for x in yaml.safe_load_all(next(d.glob("*.yaml")).read_text()) if x]
    mounted = _configmap(docs, tmp / "etc-parc")
    dgd = next(x for x in docs if x.get("kind") == "DynamoGraphDeployment")
    out = []
    for key, svc, _, c, _, kind in dynamo_components(dgd):
        if kind not in ("worker", "prefill", "decode"):
            continue
        nodes, name = (svc.get("multinode") or {}).get("nodeCount", 1), f"{dgd['metadata']['name']}-{key.lower()}"
        for k in nodes_to_run(nodes):
            command, args = operator_container(dgd["spec"]["backendFramework"], c, nodes, k,
                                               quoted=dgd["apiVersion"] == "nvidia.com/v1beta1")
            variables = {"LWS_WORKER_INDEX": str(k), "LWS_LEADER_ADDRESS": f"{name}-0.{name}", "LWS_GROUP_SIZE": str(nodes)}
            for x in _pod(command + args, svc.get("envs") or c.get("env") or [], variables, mounted, tools,
                          _record_dir(tmp, f"{key}-{k}"), tmp, target):
                out.append(dict(_as_engine(x), node=k, copies=svc.get("replicas", 1)))
    return out


def _as_engine(call: dict) -> dict:
    """A call of Dynamo's worker module as the engine call it stands for."""
    a = call["argv"]
    if call["launcher"] == "python3" and a[:2] == ["-m", "dynamo.vllm"]:
        rest, pool = a[2:], None
        if "--disaggregation-mode" in rest:
            i = rest.index("--disaggregation-mode")
            rest, pool = rest[:i] + rest[i + 2:], rest[i + 1]
        i = rest.index("--model")
        return dict(call, launcher="vllm", argv=["serve", rest[i + 1], *rest[:i], *rest[i + 2:]], pool=pool)
    if call["launcher"] == "python3" and a[:2] == ["-m", "dynamo.sglang"]:
        return dict(call, argv=["-m", "sglang.launch_server", *a[2:]])
    return call


def _kserve(d: Path, plan: dict, tools: Path, tmp: Path, target: str) -> list[dict]:
    """An LLMInferenceService's pods: the `vllm serve` each is started with by the preset KServe
    picks for its workload (tests/support/orchestrators.py); a call stands for every replica."""
    import yaml

    from support.orchestrators import preset, size, vllm_argv

    svc = next(x for x in yaml.safe_load_all(next(d.glob("*.yaml")).read_text()) if x and x.get("kind") ==
               "LLMInferenceService")
    spec, out = svc["spec"], []
    pd = "prefill" in spec
    for w, role in [(spec, "decode")] + ([(spec["prefill"], "prefill")] if pd else []):
        chosen = preset(w, pd, role if pd else None)
        for k in range(size(w.get("parallelism")) if w.get("worker") is not None else 1):
            argv, env = vllm_argv(spec["model"]["name"], "default", w, chosen, k, 8000)
            out.append({"launcher": "vllm", "argv": ["serve", *argv], "env": env, "node": k,
                        "copies": w.get("replicas", 1), "pool": role if pd else None})
    return out
