"""Run a launch script the way a shell would, with every program that starts work replaced by a
recorder, and read back what each one was asked to run.

The real-config corpus (``tests/wild/``) keeps launch scripts exactly as they were published:
shell variables, arrays, here-documents, ``if`` on the GPU model. Rather than re-implement bash,
the harness runs the script with ``bash`` in a scratch folder, with a ``PATH`` whose first folder
holds recorders named ``torchrun``, ``vllm``, ``python3``, ``srun`` ... Each recorder appends one
JSON line (its name, argv, the environment the script gave it, its working folder) to a log and
exits 0; a wrapper (``srun``, ``docker run``, ``sbatch``) then runs the command it wraps, so the
engine inside is recorded too. No engine, no network and no GPU tool really runs.

The same harness runs what parc emits, so both sides of a comparison are read the same way.
A script's fixed ``/tmp/`` paths (TensorRT-LLM's benchmarking guide writes its LLM API file to
``/tmp/extra-llm-api-config.yml``) are taken to the sandbox's own ``tmp`` folder when it runs,
so that a run writes nothing outside the sandbox; the file on disk keeps the published text."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

# Programs that would start work, reach the network or need a GPU: recorded, never run.
RECORDED = ("torchrun", "vllm", "python", "python3", "deepspeed", "ray", "sudo", "sleep", "nvidia-smi",
            "rocm-smi", "scontrol", "dcgmi", "pip", "pip3", "uv", "ssh", "ds_ssh", "wget", "curl", "git",
            "huggingface-cli", "hf", "apt-get", "mpirun", "kubectl", "sky", "nsys", "sglang", "hostname",
            "trtllm-serve")
# Recorded, then the command they wrap runs (under the same recorders).
WRAPPERS = ("srun", "docker", "sbatch")

_RECORDER = r'''#!{python}
import json, os, subprocess, sys
name = os.path.basename(sys.argv[0])
argv = sys.argv[1:]
base = json.loads(os.environ["WILD_BASE_ENV"])
env = {{k: v for k, v in os.environ.items() if k not in base or base[k] != v}}
env = {{k: v for k, v in env.items() if not k.startswith("WILD_") and k not in ("PWD", "OLDPWD", "SHLVL", "_")}}
stdin = None
if name == "sbatch" and not [a for a in argv if not a.startswith("-")]:
    stdin = sys.stdin.read()
with open(os.environ["WILD_LOG"], "a") as f:
    f.write(json.dumps({{"name": name, "argv": argv, "env": env, "cwd": os.getcwd(), "stdin": stdin}}) + "\n")
if name == "scontrol" and argv[:2] == ["show", "hostnames"]:
    print("\n".join(os.environ.get("WILD_HOSTS", "node0").split()))
elif name == "hostname":
    print(os.environ.get("WILD_HOST_IP", "10.0.0.1"))
elif name in ("nvidia-smi", "rocm-smi"):
    sys.exit(127)          # no GPU here: a script that asks takes its "no answer" branch
elif name in {wrappers!r}:
    sys.path.insert(0, {support!r})
    from wild_shell import inner_command
    for cmd, extra in inner_command(name, argv, stdin, dict(os.environ)):
        rc = subprocess.call(cmd, env={{**os.environ, **extra}})
        if rc:
            sys.exit(rc)
'''

# srun options that take a value as the next word (srun(1)); long options are written NAME=VALUE
_SRUN_VALUE = {"-w", "-N", "-n", "-c", "-p", "-o", "-e", "-J", "-t", "-G", "-A", "--nodes", "--ntasks",
               "--nodelist", "--cpus-per-task", "--partition", "--output", "--error", "--gpus-per-task",
               "--container-image", "--container-mounts", "--container-workdir", "--mpi"}
# docker run options that take a value as the next word (docker run --help)
_DOCKER_VALUE = {"-v", "-p", "-e", "-w", "-u", "--name", "--env", "--shm-size", "--gpus", "--network", "--ipc",
                 "--entrypoint", "--mount", "--runtime", "--device", "--user", "--volume", "--publish",
                 "--workdir", "--cpus", "--memory", "--ulimit", "--cap-add", "--security-opt", "--env-file",
                 "--label", "--hostname", "--add-host"}


def _after_options(argv: list[str], valued: set[str]) -> list[str]:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in valued else 1
    return argv[i:]


def _srun_nodes(argv: list[str], env: dict) -> int:
    for i, a in enumerate(argv):
        if a in ("-N", "--nodes") and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--nodes="):
            return int(a.split("=", 1)[1])
        if not a.startswith("-") and (i == 0 or argv[i - 1] not in _SRUN_VALUE):
            break
    return int(env.get("SLURM_NNODES", "1"))


def inner_command(name: str, argv: list[str], stdin: str | None, env: dict):
    """What a wrapper runs: [(argv, extra environment)], in order."""
    if name == "srun":
        cmd = _after_options(argv, _SRUN_VALUE)
        # srun starts one task a node (the scripts here run one task per node)
        return [(cmd, {"SLURM_NODEID": str(n), "SLURM_PROCID": str(n), "SLURM_LOCALID": "0"})
                for n in range(_srun_nodes(argv, env))] if cmd else []
    if name == "docker":
        if argv[:1] != ["run"]:
            return []
        rest = _after_options(argv[1:], _DOCKER_VALUE)
        return [(rest[1:], {})] if len(rest) > 1 else []
    if name == "sbatch":
        files = [a for a in argv if not a.startswith("-")]
        text = Path(files[0]).read_text() if files else (stdin or "")
        nodes = _sbatch_nodes(text)
        path = Path(env.get("WILD_TMP", ".")) / "sbatch-job.sh"
        path.write_text(text)
        return [(["bash", str(path)], {"SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
                                       "SLURM_JOB_ID": "1", "SLURM_NODEID": "0",
                                       "SLURM_JOB_NODELIST": env.get("WILD_HOSTS", "node0").split()[0]})]
    return []


def _sbatch_nodes(text: str) -> int:
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#SBATCH") and ("--nodes" in s or " -N" in s):
            v = s.split("=", 1)[1] if "=" in s else s.split()[-1]
            return int(v) if v.strip().isdigit() else 1
    return 1


def recorders(folder: Path) -> Path:
    """The folder of recorders (made once per folder)."""
    b = folder / "wild-bin"
    if b.is_dir():
        return b
    b.mkdir(parents=True)
    text = _RECORDER.format(python=sys.executable, wrappers=WRAPPERS, support=str(Path(__file__).parent))
    for name in RECORDED + WRAPPERS:
        p = b / name
        p.write_text(text)
        p.chmod(0o755)
    return b


_TMP = re.compile(r"(?<![\w./$-])/tmp/")   # /tmp/... as a path of its own, not /var/tmp/ nor ./tmp/


def _in_sandbox(script: str, sandbox: Path) -> str:
    """``script`` with its fixed /tmp/ paths taken to ``sandbox``/tmp/, except the paths of the
    test's own temporary folder (where the sandbox and parc's emitted files live), which is
    where the script is meant to read."""
    own = Path(sandbox).resolve().parts
    mine = own[2] + "/" if len(own) > 2 and own[1] == "tmp" else None

    def swap(m: re.Match) -> str:
        return m.group(0) if mine and script.startswith(mine, m.end()) else f"{sandbox}/tmp/"
    return _TMP.sub(swap, script)


def run(script: str, sandbox: Path, args=(), env: dict | None = None, shell: str = "bash",
        allow_none: bool = False) -> list[dict]:
    """Run ``script`` (shell text) in ``sandbox`` with the recorders first on PATH; the records,
    in the order the programs were started (a script that starts none is an error unless
    ``allow_none``: a container that only joins a Ray cluster, say)."""
    sandbox.mkdir(parents=True, exist_ok=True)
    log = sandbox / f"wild-log-{len(list(sandbox.glob('wild-log-*')))}.jsonl"
    bin_ = recorders(sandbox.parent)
    path = f"{bin_}:/usr/local/bin:/usr/bin:/bin"
    base = {"PATH": path, "HOME": str(sandbox), "LANG": "C.UTF-8", "USER": "wild", "HOSTNAME": "node0",
            "TMPDIR": str(sandbox)}
    full = {**base, **(env or {})}
    full.update(WILD_LOG=str(log), WILD_BASE_ENV=json.dumps(base), WILD_TMP=str(sandbox))
    (sandbox / "tmp").mkdir(exist_ok=True)
    f = sandbox / "wild-script.sh"
    f.write_text(_in_sandbox(script, sandbox))
    r = subprocess.run([shell, str(f), *args], cwd=sandbox, env=full, capture_output=True, text=True, timeout=120)
    if not log.exists():
        if allow_none:
            return []
        raise AssertionError(f"the script started no program (exit {r.returncode}): {r.stderr[-2000:]}")
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_argv(argv: list[str], sandbox: Path, env: dict | None = None, allow_none: bool = False) -> list[dict]:
    """Run one command given as a word list (a container's command) under the recorders."""
    return run("exec " + " ".join(shlex.quote(a) for a in argv) + "\n", sandbox, env=env, allow_none=allow_none)
