"""Every emitted script is valid bash and ShellCheck-clean, every emitted file reads back with
its own parser, and hostile values stay inert."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from backends_support import EXAMPLES, TEST_SPECS, embedded_scripts, every_target_cases, run_emitted, write_out


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Every example and test spec compiled for every target (with the target block it lacks
    added), written out once: the shell scripts among the files, and those a Kubernetes manifest
    carries in its ConfigMap."""
    base = tmp_path_factory.mktemp("emitted")
    scripts = []
    for spec, target, files in every_target_cases():
        d = write_out(files, base / spec.replace("/", "_") / target)
        scripts += [d / f.path for f in files if f.path.endswith((".sh", ".sbatch"))]
        for name, text in embedded_scripts(files):
            p = d / "configmap" / name
            p.parent.mkdir(exist_ok=True)
            p.write_text(text, encoding="utf-8")
            scripts.append(p)
    return scripts


def test_every_spec_reaches_every_launcher_it_can():
    """Slurm and Kubernetes launch what torchrun (training) or vLLM (serving) launch: a spec that
    compiles for one of those compiles for both schedulers, with scripts for shellcheck."""
    got: dict = {}
    for spec, target, files in every_target_cases():
        got.setdefault(spec, set()).add(target)
    for spec in EXAMPLES + TEST_SPECS:
        t = got.get(spec, set())
        assert "json" in t, spec
        if t & {"torchrun", "vllm"}:
            # a prefill/decode plan runs on lws, not as a PyTorchJob (P600)
            want = {"slurm", "lws"} if "-pd" in spec else {"slurm", "kubernetes"}
            assert want <= t, (spec, t)
    assert sum("kubernetes" in t for t in got.values()) >= len(EXAMPLES) - 1


def test_bash_n(emitted):
    assert len(emitted) > 20
    assert any(p.parent.name == "configmap" for p in emitted)
    for p in emitted:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, f"{p}: {r.stderr}"


def test_shellcheck(emitted):
    sc = shutil.which("shellcheck")
    if sc is None:
        pytest.skip("shellcheck is not installed (Debian: apt-get install shellcheck)")
    for chunk in range(0, len(emitted), 200):
        r = subprocess.run([sc, "--severity=style", "--shell=bash", *map(str, emitted[chunk:chunk + 200])],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-5000:]


def test_every_emitted_file_reads_back():
    """plan.json with json, manifests with yaml.safe_load_all, scripts as UTF-8 text without NUL."""
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the manifests back")
    kinds = set()
    for spec, target, files in every_target_cases():
        for f in files:
            f.text.encode("utf-8")  # a lone surrogate cannot be written
            assert "\0" not in f.text, (spec, target, f.path)
            if f.path.endswith(".json"):
                assert isinstance(json.loads(f.text), dict)
            elif f.path.endswith(".yaml"):
                docs = list(yaml.safe_load_all(f.text))
                if target == "skypilot":   # a SkyPilot task: one document, no Kubernetes kind
                    [task] = docs
                    assert task["num_nodes"] >= 1 and task["setup"] and task["run"], (spec, target)
                    kinds.add("yaml")
                    continue
                if target == "trtllm":     # the LLM API options trtllm-serve reads: one mapping
                    [opts] = docs
                    assert isinstance(opts, dict) and opts, (spec, target)
                    continue
                if target == "rayserve":   # a Ray Serve config: one document, its applications
                    [serve] = docs
                    assert serve["applications"] and all(a["import_path"] and a["args"] for a in serve["applications"])
                    continue
                assert all(isinstance(d, dict) and d["kind"] and d["metadata"]["name"] for d in docs)
                cm = next(d for d in docs if d["kind"] == "ConfigMap")
                assert json.loads(cm["data"]["plan.json"]) == json.loads(
                    next(g.text for g in files if g.path == "plan.json"))
            elif f.path == "hostfile":   # DeepSpeed's: `HOST slots=N` a line (runner.py _parse_hostfile)
                assert all(re.fullmatch(r"\S+ slots=\d+", ln) for ln in f.text.splitlines()), (spec, f.text)
                continue
            elif f.path == "deepspeed_env":   # DeepSpeed's: `KEY=VALUE` a line (runner.py, split on the first =)
                assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S+", ln) for ln in f.text.splitlines()), (spec, f.text)
                continue
            else:
                assert f.path.endswith((".sh", ".sbatch")), f.path
            kinds.add(f.path.rsplit(".", 1)[1])
    assert kinds == {"json", "yaml", "sh", "sbatch"}


HOSTILE = ["it's", 'say "hi"', "$(touch pwned)", "`touch pwned2`", "a b  c", "line1\nline2", "; rm -rf /tmp/x",
           "$HOME", "\\n", "*", "--flag=$(id)"]


def _par(s: str) -> str:
    """A .par string literal (JSON's escapes are the language's)."""
    return json.dumps(s)


def _hostile_list() -> str:
    return "[" + ", ".join(_par(s) for s in HOSTILE) + "]"


TRAIN = """
model {label} {{
  layers     = 4
  hidden     = 256
  ffn_hidden = 512
  heads      = 4
  vocab      = 1024
  seq_len    = 128
}}
cluster "c" {{
  nodes         = 2
  gpus_per_node = 2
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
mesh {{
  dp = 2
  tp = 2
}}
schedule {{
  micro_batch  = 1
  global_batch = 8
}}
train {{ zero = 1 }}
target torchrun {{
  entrypoint = {entry}
  args       = {args}
}}
target megatron {{
  entrypoint = {entry}
  extra_args = {args}
}}
target slurm {{
  entrypoint = {entry}
  args       = {args}
}}
target kubernetes {{
  entrypoint = {entry}
  args       = {args}
  image      = "registry.example/img:1"
}}
"""

SERVE = """
model {label} {{
  layers     = 4
  hidden     = 256
  ffn_hidden = 512
  heads      = 4
  vocab      = 1024
  seq_len    = 128
}}
cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = 2
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
mesh {{ {mesh} }}
serve {{ max_model_len = 128 }}
target vllm {{
  model      = {model}
  extra_args = {args}
  executor   = {executor}
}}
"""


def _compile(write_spec, tmp_path, text, target):
    from parc.cli.compile import compile_spec

    r, _, files = compile_spec(write_spec(text), target, root=tmp_path)
    assert files is not None, [f"{d.code} {d.message}" for d in r.errors]
    return write_out(files, tmp_path / target)


LABEL = _par("evil'; $(touch pwned) `x`\nrm -rf / #")
ENTRY = _par("my train's $(touch pwned).py")


@pytest.mark.parametrize("target", ["torchrun", "megatron", "slurm"])
def test_hostile_training_values_are_inert(target, tmp_path, write_spec):
    out = _compile(write_spec, tmp_path, TRAIN.format(label=LABEL, entry=ENTRY, args=_hostile_list()), target)
    got = run_emitted(out / "launch.sh", tmp_path, "1", env={"SLURM_NODEID": "1"})
    argv = got["torchrun"]
    assert argv[-len(HOSTILE):] == HOSTILE
    entry = json.loads(ENTRY)
    assert argv.count(entry) == 1 and argv[argv.index(entry) - 1].startswith(("0", "1", "2", "3"))
    assert not list(tmp_path.glob("pwned*"))
    # with plain echo as the launcher the values print back literally
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(TORCHRUN="echo", MASTER_ADDR="10.0.0.1")
    p = subprocess.run(["bash", str(out / "launch.sh"), "0"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith(" ".join(HOSTILE) + "\n") and f" {entry} " in p.stdout
    assert not list(tmp_path.glob("pwned*"))
    if target == "slurm":
        fake = run_emitted(out / "job.sbatch", tmp_path, env={"PARC_LAUNCH_DIR": str(out), "SLURM_JOB_ID": "1",
                                                               "SLURM_JOB_NODELIST": "n[1-2]"}, check=False)
        # scontrol is not here; srun (faked) must not have run with a broken head address
        assert "srun" not in fake or fake["srun"][-1].endswith("launch.sh")


@pytest.mark.parametrize("target", ["vllm", "slurm"])
@pytest.mark.parametrize("nodes,mesh,executor", [(1, "tp = 2", "mp"), (2, "pp = 2; tp = 2", "mp"),
                                                 (2, "pp = 2; tp = 2", "ray")])
def test_hostile_serving_values_are_inert(nodes, mesh, executor, target, tmp_path, write_spec):
    model = "org/model 'x' $(touch pwned) `y`\nz"
    out = _compile(write_spec, tmp_path, SERVE.format(label=LABEL, nodes=nodes, mesh=mesh, model=_par(model),
                                                      args=_hostile_list(), executor=executor), target)
    script = out / ("serve.sh" if nodes == 1 else "launch.sh")
    argv = run_emitted(script, tmp_path, *([] if nodes == 1 else ["0"]))["vllm"]
    assert argv[:2] == ["serve", model]
    assert argv[-len(HOSTILE):] == HOSTILE
    assert not list(tmp_path.glob("pwned*"))


def test_hostile_kubernetes_values_stay_literal(tmp_path, write_spec):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the manifest back")
    out = _compile(write_spec, tmp_path, TRAIN.format(label=LABEL, entry=ENTRY, args=_hostile_list()), "kubernetes")
    docs = list(yaml.safe_load_all((out / "job.yaml").read_text()))
    job = [d for d in docs if d["kind"] == "PyTorchJob"][0]
    cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
    for k, role in enumerate(("Master", "Worker")):
        cmd = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]["command"]
        # Kubernetes substitutes the operator's RANK and nothing else; the values live in the script
        assert cmd == ["bash", "/etc/parc/launch.sh", "$(RANK)"]
        (tmp_path / "etc").mkdir(exist_ok=True)
        (tmp_path / "etc" / "launch.sh").write_text(cm["data"]["launch.sh"])
        argv = run_emitted(tmp_path / "etc" / "launch.sh", tmp_path, str(k))["torchrun"]
        assert argv[-len(HOSTILE) - 1:] == [json.loads(ENTRY)] + HOSTILE
        assert not list(tmp_path.glob("pwned*"))
    assert json.loads(cm["data"]["plan.json"])["model"]["name"] == json.loads(LABEL)
