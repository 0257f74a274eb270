"""What `parc compile` writes: the same bytes however the spec's path is spelled and wherever
it runs from (nodes that compile separately must meet), and `-o DIR` swapping whole sets."""
from __future__ import annotations

import re
import shutil
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
    from parc.commands.compile import compile_spec

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
