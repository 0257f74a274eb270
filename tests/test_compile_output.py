"""What `parc compile` writes: the same bytes however the spec's path is spelled and wherever
it runs from (nodes that compile separately must meet), and `-o DIR` swapping whole sets."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backends_support import ROOT

SPEC = ROOT / "tests" / "data" / "specs" / "slurm-kubernetes.par"


@pytest.fixture
def project(tmp_path):
    """A checkout (a folder with .git) holding the spec at specs/run.par."""
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "specs" / "sub").mkdir(parents=True)
    shutil.copy(SPEC, proj / "specs" / "run.par")
    return proj


def _compile(spec, target, cwd, monkeypatch, root=None):
    from parc.cli.compile import compile_spec

    monkeypatch.chdir(cwd)
    r, _, files = compile_spec(str(spec), target, root=root)
    assert files is not None, [d.message for d in r.errors]
    return {f.path: f.text for f in files}


@pytest.mark.parametrize("target", ["torchrun", "kubernetes", "slurm", "json"])
def test_same_bytes_for_every_spelling_and_cwd(project, target, monkeypatch):
    spellings = [(project, "specs/run.par"), (project, "./specs/run.par"), (project, "specs//sub/../run.par"),
                 (project, project / "specs" / "run.par"), (project / "specs", "run.par"),
                 (project / "specs" / "sub", "../run.par"), (project.parent, "proj/specs/run.par")]
    outs = [_compile(spec, target, cwd, monkeypatch) for cwd, spec in spellings]
    for out in outs[1:]:
        assert out == outs[0]
    plan = outs[0]["plan.json"]
    assert '"file": "specs/run.par"' in plan   # relative to the checkout, '/'-separated


def _rdzv_ids(files) -> set[str]:
    return {m for text in files.values() for m in re.findall(r"--rdzv-id\"?\s+(?:- )?\"?([A-Za-z0-9-]+)", text)}


@pytest.mark.parametrize("target", ["torchrun", "kubernetes"])
def test_rendezvous_id_comes_from_the_content(project, target, monkeypatch):
    """The same plan under another name, in another folder, has the same rendezvous id; a
    different plan has another."""
    other = project.parent / "elsewhere"
    other.mkdir()
    shutil.copy(project / "specs" / "run.par", other / "renamed.par")
    a = _rdzv_ids(_compile("specs/run.par", target, project, monkeypatch))
    b = _rdzv_ids(_compile(other / "renamed.par", target, project, monkeypatch))
    assert len(a) == 1 and a == b
    (other / "bigger.par").write_text(SPEC.read_text().replace("global_batch = 64", "global_batch = 128"))
    c = _rdzv_ids(_compile(other / "bigger.par", target, project, monkeypatch))
    assert len(c) == 1 and c != a


# ------------------------------------------------------------------------------------- -o DIR
USER_FILES = {"notes.txt": b"my own notes\n", "tools/run-me.sh": b"echo mine\n", ".env": b"TOKEN=x\n"}


def _four_nodes(text: str) -> str:
    return text.replace("nodes         = 2", "nodes         = 4").replace("dp = 8", "dp = 16")


def _sets(tmp_path, monkeypatch):
    """The files of a 4-node Slurm compile (the old set) and a 2-node torchrun compile (the new
    set, without the old one's job.sbatch)."""
    (tmp_path / "four.par").write_text(_four_nodes(SPEC.read_text()))
    old = _compile(tmp_path / "four.par", "slurm", tmp_path, monkeypatch, root=tmp_path)
    new = _compile(SPEC, "torchrun", tmp_path, monkeypatch, root=SPEC.parent)
    assert "job.sbatch" in old and "job.sbatch" not in new
    return old, new


def _visible(folder: Path) -> dict[str, bytes]:
    """What a user of the folder sees: every file reachable under a name that is not hidden,
    other than the user's own."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")) or rel in USER_FILES:
            continue
        if p.is_file():
            out[rel] = p.read_bytes()
    return out


def _everything(folder: Path) -> list[str]:
    """Every name under the folder, hidden ones too, without following links."""
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, ds, fs in os.walk(folder) for n in ds + fs)


def _add_user_files(folder: Path) -> None:
    for rel, data in USER_FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _user_files_intact(folder: Path) -> bool:
    return all((folder / rel).read_bytes() == data for rel, data in USER_FILES.items())


def test_a_smaller_compile_removes_the_stale_files_and_keeps_the_users(tmp_path):
    """`-o DIR` after a larger compile: job.sbatch goes, the user's own files stay."""
    (tmp_path / "four.par").write_text(_four_nodes(SPEC.read_text()))
    out = tmp_path / "out"

    def cli(spec, target):
        r = subprocess.run([sys.executable, "-m", "parc", "compile", str(spec), "--target", target, "-o",
                            str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr

    cli(tmp_path / "four.par", "slurm")
    assert (out / "job.sbatch").is_file()
    _add_user_files(out)
    cli(SPEC, "torchrun")
    files = _visible(out)
    assert sorted(files) == ["launch.sh", "plan.json"]
    assert b'"nodes": 2' in files["plan.json"] and not os.path.lexists(out / "job.sbatch")
    assert _user_files_intact(out)
    assert not [n for n in _everything(out) if n.endswith(".tmp")]


DRIVER = r"""
import json, os, signal, sys
from parc.targets.base import File
from parc.files import write_files

files = [File(f["path"], f["text"], f["executable"]) for f in json.load(open(sys.argv[2]))]
stop, seen = int(sys.argv[3]), [0]

def wrap(name):
    real = getattr(os, name)
    def call(*a, **k):
        seen[0] += 1
        if seen[0] == stop:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **k)
    setattr(os, name, call)

# every step that changes the folder (and the writes of the files' bytes) is a point to die at
for name in ("open", "write", "fsync", "replace", "rename", "link", "symlink", "unlink", "remove", "rmdir",
             "mkdir", "chmod", "fchmod"):
    wrap(name)
write_files(sys.argv[1], files)
"""


def test_a_kill_at_any_point_leaves_the_old_set_or_the_new_one(tmp_path, monkeypatch):
    """SIGKILL the writer before each of its file-system steps in turn: the folder then shows
    the whole old set or the whole new set, never a mix; the next write leaves nothing
    temporary behind, and the user's own files survive every run."""
    from parc.targets.base import File
    from parc.files import write_files

    old, new = _sets(tmp_path, monkeypatch)
    as_files = {key: [File(p, t, p.endswith(".sh")) for p, t in s.items()] for key, s in (("old", old), ("new", new))}
    want = {key: {p: t.encode() for p, t in s.items()} for key, s in (("old", old), ("new", new))}
    (tmp_path / "new.json").write_text(json.dumps([{"path": f.path, "text": f.text, "executable": f.executable}
                                                   for f in as_files["new"]]))
    clean = tmp_path / "clean"
    write_files(str(clean), as_files["new"])
    _add_user_files(clean)
    clean_names = _everything(clean)

    out = tmp_path / "out"
    seen = {"old": 0, "new": 0}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for stop in range(1, 400):
        shutil.rmtree(out, ignore_errors=True)
        write_files(str(out), as_files["old"])
        _add_user_files(out)
        r = subprocess.run([sys.executable, "-c", DRIVER, str(out), str(tmp_path / "new.json"), str(stop)],
                           env=env, capture_output=True, text=True, timeout=60)
        got = _visible(out)
        state = "old" if got == want["old"] else "new" if got == want["new"] else None
        assert state, f"killed before step {stop}: a mix of old and new files: {sorted(got)}"
        assert _user_files_intact(out)
        if r.returncode == 0:
            assert state == "new"
            break
        assert r.returncode == -signal.SIGKILL, r.stderr
        seen[state] += 1
        write_files(str(out), as_files["new"])   # the next compile finishes the job
        assert _visible(out) == want["new"] and _user_files_intact(out)
        assert _everything(out) == clean_names, f"left behind after a kill before step {stop}"
    else:
        pytest.fail("the writer never finished")
    assert seen["old"] and seen["new"], seen   # the kills fell on both sides of the swap
