"""parc compile: target choice, refusal with diagnostics, atomic -o, stdout headers, the
quoting-only template environment, and no template engine on the check path."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backends_support import ROOT

from parc.cli.main import main


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_single_named_target_needs_no_flag(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = _run(["compile", "examples/llama3-70b-serve.par"], capsys)
    assert code == 0
    # the launch file, as the README says ("prints the vllm serve command"); plan.json is
    # written with -o and printed by --target json
    assert out.startswith("#!/usr/bin/env bash\n") and "exec " in out and "plan.json" not in out and "==>" not in out
    assert "plan.json" in err and "-o DIR" in err


def test_several_named_targets_need_the_flag(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = _run(["compile", "examples/llama3-70b-train.par"], capsys)
    assert code == 2 and "--target" in err and "megatron, torchrun" in err and out == ""


def test_unknown_target(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = _run(["compile", "examples/llama3-70b-train.par", "--target", "megatrom"], capsys)
    assert code == 2 and "did you mean `megatron`" in err


def test_json_target_prints_the_plan(capsys, monkeypatch):
    import json

    from parc.api import load_plan

    monkeypatch.chdir(ROOT)
    code, out, err = _run(["compile", "examples/llama3-8b-fsdp.par", "--target", "json"], capsys)
    assert code == 0
    assert json.loads(out) == load_plan("examples/llama3-8b-fsdp.par").to_dict()


def test_refuses_a_spec_with_errors(capsys, tmp_path, write_spec):
    spec = write_spec("""
        model "m" { from = llama3_8b }
        cluster "c" {
          nodes         = 1
          gpus_per_node = 8
          gpu           = h100_sxm
          intra_node    = nvlink(450GB/s)
        }
        mesh { tp = 3 }
        serve { max_model_len = 4096 }
        target vllm { model = "x/y" }
        """)
    out_dir = tmp_path / "out"
    code, out, err = _run(["compile", str(spec), "-o", str(out_dir), "--root", str(tmp_path)], capsys)
    assert code == 1 and "P102" in err and "not compiled" in err
    assert not out_dir.exists()


def test_target_rules_apply(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = _run(["compile", "examples/llama3-70b-train.par", "--target", "vllm"], capsys)
    assert code == 1 and "P601" in err and out == ""


def test_output_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out_dir = tmp_path / "launch"
    code, out, err = _run(["compile", "examples/llama3-70b-train.par", "-t", "torchrun", "-o", str(out_dir)], capsys)
    assert code == 0 and "wrote 2 files" in out
    names = sorted(p.name for p in out_dir.iterdir())   # .parc holds the set the names link to
    assert names == [".parc", "launch.sh", "plan.json"]   # one script for all 8 nodes
    assert (out_dir / "launch.sh").stat().st_mode & 0o777 == 0o755
    assert (out_dir / "plan.json").stat().st_mode & 0o777 == 0o644
    first = {p.name: p.read_bytes() for p in out_dir.iterdir() if p.is_file()}
    assert main(["compile", "examples/llama3-70b-train.par", "-t", "torchrun", "-o", str(out_dir)]) == 0
    assert {p.name: p.read_bytes() for p in out_dir.iterdir() if p.is_file()} == first


def test_write_is_atomic(tmp_path, monkeypatch):
    """A failure while writing leaves no file, new or half-written, and no temporary file."""
    from parc.targets.base import File
    from parc.files import write_files

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "a.sh").write_text("old\n")
    real = os.fdopen
    calls = []

    def failing(fd, *a, **k):
        calls.append(fd)
        if len(calls) == 2:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real(fd, *a, **k)

    monkeypatch.setattr(os, "fdopen", failing)
    with pytest.raises(OSError):
        write_files(str(out_dir), [File("a.sh", "new\n", True), File("b.json", "{}\n")])
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.sh"]
    assert (out_dir / "a.sh").read_text() == "old\n"


def test_templates_refuse_unquoted_values():
    from parc.targets.render import environment

    env = environment()
    with pytest.raises(TypeError, match="without a quoting filter"):
        env.from_string("run {{ x }}").render(x="$(id)")
    assert env.from_string("run {{ x | q }}").render(x="$(id) it's") == "run '$(id) it'\"'\"'s'"
    assert env.from_string("# {{ x | c }}").render(x="a\nb") == "# a\\nb"
    assert env.from_string("k: {{ x | y }}").render(x='a: "b"\n') == 'k: "a: \\"b\\"\\n"'
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing | q }}").render()


def test_check_does_not_load_the_template_engine():
    code = ("import sys; from parc.cli.main import main; main(['check', 'examples/llama3-70b-train.par']); "
            "assert 'jinja2' not in sys.modules, 'jinja2 imported'; "
            "import parc.targets, parc.targets.megatron; parc.targets.load_rules(); "
            "assert 'jinja2' not in sys.modules, 'jinja2 imported by a backend module'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_new_target_is_a_folder_and_one_line():
    from parc import targets as backends
    from parc.resolve.resolver import known_targets

    assert sorted(backends.names()) == known_targets()
    for name in backends.names():
        assert callable(backends.get(name).build)
