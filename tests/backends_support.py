"""Helpers the backend tests share: compiling specs in process, the golden form of emitted
files, and running emitted scripts with fake launchers that record their exact argv."""
from __future__ import annotations

import os
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

from parc.model.targets import names as target_names

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*.par"))
TEST_SPECS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "data" / "specs").glob("*.par"))
# every target folder: a new one gets its golden files (and the shared checks) without an edit here
TARGETS = tuple(target_names())
GOLDEN = ROOT / "tests" / "golden" / "compile"
LAUNCHERS = ("torchrun", "vllm", "ray", "srun", "deepspeed")


def compile_rel(spec: str, target: str | None):
    """compile_spec on a path relative to the repository root, run from the root (plan.json
    records the spec's path as given)."""
    from parc.cli.compile import compile_spec

    old = os.getcwd()
    os.chdir(ROOT)
    try:
        return compile_spec(spec, target)
    finally:
        os.chdir(old)


PLAN_MARK = "(plan.json: the resolved plan, as json.txt beside this file has it)"


def golden_text(files, plan_text: str | None = None) -> str:
    """Every emitted file under a ``==> path <==`` line. With ``plan_text`` (the plan's
    ``plan.json``), each copy of it (the file, or a ConfigMap's indented copy) stands as one line
    naming ``json.txt``, the one golden of the resolved plan per spec; a file that holds another
    text where plan.json should be fails here."""
    import textwrap

    out = []
    for f in files:
        text = f.text
        if plan_text is not None:
            if f.path.rsplit("/", 1)[-1] == "plan.json":
                assert text == plan_text, f"{f.path} is not the plan's plan.json"
                text = PLAN_MARK + "\n"
            else:
                for indent in ("        ", "      ", "    ", "  "):
                    text = text.replace(textwrap.indent(plan_text, indent), indent + PLAN_MARK + "\n")
        out.append(f"==> {f.path}{' (executable)' if f.executable else ''} <==\n{text}")
    return "\n".join(out)


def golden_path(spec: str, target: str) -> Path:
    return GOLDEN / Path(spec).stem / f"{target}.txt"


def write_out(files, folder: Path) -> Path:
    from parc.files import write_files

    write_files(str(folder), files)
    return folder


def fake_bin(folder: Path) -> Path:
    """Launchers that record their argv (NUL-separated) in $ARGV_DIR/<name> and exit 0."""
    b = folder / "fakebin"
    b.mkdir(parents=True, exist_ok=True)
    for name in LAUNCHERS:
        p = b / name
        p.write_text('#!/usr/bin/env bash\nprintf \'%s\\0\' "$@" > "$ARGV_DIR/' + name + '"\n'
                     'env -0 > "$ARGV_DIR/' + name + '.env"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return b


def run_emitted(script: Path, tmp: Path, *args: str, env: dict | None = None, check: bool = True):
    """Run an emitted script with every launcher replaced by a recorder. Returns a dict: each
    launcher's name gives its argv, ``<name>.env`` its environment; ``returncode`` and ``stderr``
    the script's."""
    b = fake_bin(tmp)
    out = tmp / "argv"
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    # the emitted scripts keep a caller's own NCCL_*/GLOO_* settings; the test process may hold
    # some (the rehearsal runtime sets GLOO_SOCKET_IFNAME=lo), which would hide the scripts' own
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "SLURM_", "NODE_RANK", "MASTER_", "NCCL_", "GLOO_"))}
    e.update({"ARGV_DIR": str(out), "MASTER_ADDR": "10.0.0.1", "PATH": f"{b}:{e.get('PATH', '')}"})
    e.update({name.upper(): str(b / name) for name in LAUNCHERS})
    e.update(env or {})
    r = subprocess.run(["bash", str(script), *args], env=e, cwd=tmp, capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    got: dict = {"returncode": r.returncode, "stderr": r.stderr}
    for f in out.iterdir():
        items = [a.decode() for a in f.read_bytes().split(b"\0")[:-1]]
        got[f.name] = dict(x.split("=", 1) for x in items if "=" in x) if f.name.endswith(".env") else items
    return got


@lru_cache(maxsize=1)
def accepted_cases():
    """Every (spec, target) pair of the examples and test specs that compiles without errors,
    with its files (computed once per test session)."""
    out = []
    for spec in EXAMPLES + TEST_SPECS:
        for t in TARGETS:
            r, target, files = compile_rel(spec, t)
            if files is not None:
                out.append((spec, t, files))
    return tuple(out)


# Target blocks that let a spec compile for a target it does not name (the fields P602 and
# P650 ask for); a block the spec already has is left as it is.
_BLOCKS = {
    "torchrun": {"train": 'target torchrun { entrypoint = "train.py" }'},
    "megatron": {"train": 'target megatron { entrypoint = "pretrain_gpt.py" }'},
    "slurm": {"train": 'target slurm { entrypoint = "train.py" }', "serve": "target slurm { }"},
    "kubernetes": {"train": 'target kubernetes { entrypoint = "train.py"; image = "nvcr.io/nvidia/pytorch:25.01-py3" }',
                   "serve": 'target kubernetes { image = "vllm/vllm-openai:v0.11.0" }'},
    "vllm": {"serve": 'target vllm { model = "org/model" }'},
    "sglang": {"serve": 'target sglang { model = "org/model" }'},
    "trainjob": {"train": 'target trainjob { entrypoint = "train.py" }'},
    "deepspeed": {"train": 'target deepspeed { entrypoint = "train.py" }'},
}


def _with_target(text: str, target: str) -> str:
    import re

    mode = "serve" if re.search(r"(?m)^serve\s*\{", text) else "train"
    add = []
    if not re.search(rf"(?m)^target\s+{target}\b", text) and mode in _BLOCKS.get(target, {}):
        add.append(_BLOCKS[target][mode])
    if mode == "serve" and target in ("slurm", "kubernetes") and not re.search(r"(?m)^target\s+vllm\b", text):
        add.append(_BLOCKS["vllm"]["serve"])
    return text + "".join("\n" + a + "\n" for a in add)


@lru_cache(maxsize=1)
def every_target_cases():
    """Every example and test spec compiled for every target, with the target block it lacks
    added (in a copy of the folders): (spec, target, files) for each that compiles."""
    import shutil
    import tempfile

    from parc.cli.compile import compile_spec

    base = Path(tempfile.mkdtemp(prefix="parc-every-target-"))
    out = []
    for t in TARGETS:
        root = base / t
        shutil.copytree(ROOT / "examples", root / "examples")
        shutil.copytree(ROOT / "tests" / "data" / "specs", root / "tests" / "data" / "specs")
        for spec in EXAMPLES + TEST_SPECS:
            p = root / spec
            p.write_text(_with_target(p.read_text(encoding="utf-8"), t), encoding="utf-8")
            r, _, files = compile_spec(str(p), t, root=root)
            if files is not None:
                out.append((spec, t, files))
    shutil.rmtree(base, ignore_errors=True)
    return tuple(out)


def embedded_scripts(files) -> list[tuple[str, str]]:
    """The shell scripts a Kubernetes manifest carries in its ConfigMaps, and a SkyPilot task's
    setup and run (bash on every node): (name, text)."""
    import yaml

    out = []
    for f in files:
        if f.path.endswith((".yaml", ".yml")):
            for doc in yaml.safe_load_all(f.text):
                if doc and doc.get("kind") == "ConfigMap":
                    out += [(k, v) for k, v in (doc.get("data") or {}).items() if k.endswith(".sh")]
                elif doc and "kind" not in doc and "run" in doc:
                    out += [(f"{k}.sh", "#!/usr/bin/env bash\n" + doc[k]) for k in ("setup", "run") if doc.get(k)]
    return out
