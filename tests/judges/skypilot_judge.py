"""Runs inside the SkyPilot judge's virtual environment (tests/judges/skypilot_env.sh), never in
parc's own.

Reads JSON lists of task texts (a `task.yaml`), one list a line, on stdin, and prints for each
what SkyPilot makes of it:

* ``sky.Task.from_yaml_config`` on the parsed YAML, as ``sky launch task.yaml`` does: the task
  schema (sky/utils/schemas.py get_task_schema, unknown fields refused) and the Resources it
  builds (accelerators parsed, infra, network tier, ports); a refusal is answered with its
  message;
* the task's num_nodes, accelerators (name -> count), ports, and setup and run scripts as the
  Task holds them;
* what every node runs: each node's setup and then its run, under bash in a home of its own,
  with the variables SkyPilot sets (sky/backends/task_codegen.py: SKYPILOT_NODE_RANK,
  SKYPILOT_NODE_IPS with one address a line, the head's first, SKYPILOT_NUM_NODES,
  SKYPILOT_NUM_GPUS_PER_NODE the accelerator count) and the engines' launchers (`torchrun`,
  `deepspeed`, `vllm`, `ray`, and `python3`, which starts SGLang) replaced by recorders of their
  argv (with MASTER_ADDR as each saw it), and so is the toy proxy a disaggregated plan's proxy.sh
  runs (``VLLM_PROXY``, recorded as ``toy_proxy_server.py``).

The test compares the degrees with the plan."""
import atexit
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import yaml

MARK = "@@skypilot-judge "
# the engines' launchers (torchrun, deepspeed, vllm and Ray, SGLang's python3 -m ...), the toy proxy
RECORDERS = ("torchrun", "deepspeed", "vllm", "ray", "python3", "toy_proxy_server.py")
# the recorder runs on this environment's own python: python3 on the node's PATH is one of them
RECORDER = "#!" + sys.executable + """
import json, os, sys
with open(os.environ["PARC_RECORD"], "a") as f:
    f.write(json.dumps({"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:],
                        "master_addr": os.environ.get("MASTER_ADDR")}) + "\\n")
"""


def ips(n):
    return [f"10.0.0.{i + 1}" for i in range(n)]


def run_node(tmp, rank, task, gpus):
    """The node's setup, then its run, as SkyPilot starts them; the recorded calls."""
    home = os.path.join(tmp, f"node{rank}")
    bindir = os.path.join(home, "bin")
    os.makedirs(bindir)
    for name in RECORDERS:
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write(RECORDER)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    record = os.path.join(home, "record.jsonl")
    env = {"PATH": bindir + os.pathsep + os.environ["PATH"], "HOME": home, "PARC_RECORD": record,
           "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NODE_IPS": "\n".join(ips(task.num_nodes)),
           "SKYPILOT_NUM_NODES": str(task.num_nodes), "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus),
           "VLLM_HOST_IP": ips(task.num_nodes)[rank], "VLLM_PROXY": os.path.join(bindir, "toy_proxy_server.py")}
    out = {}
    for step in ("setup", "run"):
        text = getattr(task, step)
        if text is None:
            continue
        r = subprocess.run(["bash", "-c", text], cwd=home, env=env, capture_output=True, text=True, timeout=60)
        out[f"{step}_rc"] = r.returncode
        if r.returncode:
            out[f"{step}_stderr"] = r.stderr[-2000:]
            break
    calls = []
    if os.path.exists(record):
        with open(record) as f:
            calls = [json.loads(line) for line in f]
    out["calls"] = calls
    return out


def judge(text):
    import sky

    try:
        task = sky.Task.from_yaml_config(yaml.safe_load(text))
    except Exception as e:   # noqa: BLE001  (the judge reports any refusal with its message)
        return {"error": f"{type(e).__name__}: {e}"}
    [res] = list(task.resources)
    acc = res.accelerators or {}
    gpus = int(math.ceil(sum(acc.values()))) if acc else 0
    ports = res.ports
    with tempfile.TemporaryDirectory() as tmp:
        nodes = [run_node(tmp, r, task, gpus) for r in range(task.num_nodes)]
    return {"num_nodes": task.num_nodes, "accelerators": acc, "ports": ports, "name": task.name,
            "network_tier": str(res.network_tier.value) if res.network_tier else None,
            "infra": res.infra.to_str() if res.infra is not None else None, "nodes": nodes,
            "head": ips(task.num_nodes)[0]}


def main():
    # SkyPilot keeps its state under ~/.sky from the first import on: give it a home of its own
    os.environ["HOME"] = home = tempfile.mkdtemp(prefix="parc-skypilot-judge-")
    atexit.register(shutil.rmtree, home, True)
    for line in sys.stdin:
        batch = json.loads(line)
        print(MARK + json.dumps([judge(t) for t in batch]), flush=True)


if __name__ == "__main__":
    main()
