"""Reading specs: missing and unreadable files, standard input, links, devices, FIFOs, the size
limit, hostile `use` paths and import graphs (diamonds, long chains)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

CLUSTER = """cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}
"""
MODEL = 'model "m" { from = llama3_8b }\n'
GOOD = MODEL + "\n" + CLUSTER + "\nmesh { dp = 8 }\n"


def write(base: Path, name: str, text: str | bytes) -> Path:
    p = base / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def parc(*argv, cwd=None, input=None, timeout=120, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "parc", *map(str, argv)], cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=timeout, env=e)


# ------------------------------------------------------------------------------ missing files

def test_a_missing_spec_is_a_p030_diagnostic_in_every_format(tmp_path, capsys):
    nope = str(tmp_path / "nope.par")
    assert main(["check", nope]) == 2
    out = capsys.readouterr().out
    assert "P030" in out and "cannot read" in out and "No such file" in out
    assert "ok:" not in out and "0 files checked" not in out

    assert main(["check", nope, "--format", "json"]) == 2
    rep = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in rep["diagnostics"]] == ["P030"] and rep["summary"]["errors"] == 1
    assert rep["diagnostics"][0]["file"] == nope

    assert main(["lint", nope, "--format", "json"]) == 2
    rep = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in rep["diagnostics"]] == ["P030"]

    assert main(["lint", nope, "--format", "sarif"]) == 2
    sarif = json.loads(capsys.readouterr().out)
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["P030"] and results[0]["level"] == "error"

    assert main(["lint", nope, "--format", "github"]) == 2
    out = capsys.readouterr().out
    assert "::error file=" in out and "title=P030" in out

    assert main(["lint", nope]) == 2
    out = capsys.readouterr().out
    assert "P030" in out and "ok:" not in out


def test_check_takes_folders_and_globs(tmp_path, capsys):
    write(tmp_path, "specs/a.par", GOOD)
    write(tmp_path, "specs/deep/b.par", GOOD.replace("dp = 8", "dp = 8\n  tp = 3"))
    assert main(["check", str(tmp_path / "specs"), "--format", "json", "--root", str(tmp_path)]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["summary"]["files"] == 2
    assert {Path(d["file"]).name for d in rep["diagnostics"] if d["severity"] == "error"} == {"b.par"}
    assert main(["check", str(tmp_path / "specs" / "*.par"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["files"] == 1
    assert main(["check", str(tmp_path / "specs" / "*.xyz")]) == 2
    assert "no files match" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    for cmd in ("check", "lint"):  # checking nothing is not "ok"
        assert main([cmd, str(tmp_path / "empty")]) == 2
        out = capsys.readouterr().out
        assert "no .par files" in out and "ok:" not in out


# ------------------------------------------------------------------------------ standard input

def test_dash_reads_the_spec_from_stdin_with_imports_from_the_cwd(tmp_path):
    write(tmp_path, "clusters/box.par", CLUSTER)
    spec = 'use "clusters/box.par"\n\n' + MODEL + "\nmesh { dp = 8 }\n"
    r = parc("check", "-", cwd=tmp_path, input=spec)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 file checked" in r.stdout

    r = parc("check", "-", "--format", "json", cwd=tmp_path, input=spec.replace("dp = 8", "dp = 8\n  tp = 3"))
    assert r.returncode == 1
    assert {d["file"] for d in json.loads(r.stdout)["diagnostics"]} == {"<stdin>"}

    r = parc("lint", "-", "--format", "json", cwd=tmp_path, input=spec.replace("dp = 8", "dp = 8\n  tp = 3"))
    assert r.returncode == 1 and "<stdin>" in {d["file"] for d in json.loads(r.stdout)["diagnostics"]}

    r = parc("explain", "-", "--format", "json", cwd=tmp_path, input=spec)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["file"] == "<stdin>"

    r = parc("compile", "-", "--target", "torchrun", cwd=tmp_path,
             input=spec + 'target torchrun {\n  entrypoint = "train.py"\n}\n')
    assert r.returncode == 0, r.stderr
    assert "torchrun launch for the one node, compiled by parc from <stdin>" in r.stdout   # launch.sh alone

    old = write(tmp_path, "old.par", spec)
    r = parc("diff", old, "-", "--format", "json", cwd=tmp_path, input=spec.replace("dp = 8", "dp = 4\n  tp = 2"))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["new"]["file"] == "<stdin>" and rep["changes"]

    # --root bounds imports from stdin too
    (tmp_path / "elsewhere").mkdir()
    r = parc("check", "-", "--root", tmp_path / "elsewhere", cwd=tmp_path, input=spec)
    assert r.returncode == 1 and "P015" in r.stdout


def test_stdin_over_the_size_limit_is_refused():
    r = parc("check", "-", input="# " + "x" * (1 << 20) + "\n")
    assert r.returncode == 2 and "P030" in r.stdout and "1 MiB" in r.stdout


# ------------------------------------------------------------------------------ links, devices, FIFOs

@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_lint_does_not_follow_a_link_out_of_the_root_nor_print_the_environment(tmp_path):
    write(tmp_path, "good.par", GOOD)
    (tmp_path / "leak.par").symlink_to("/proc/self/environ")
    (tmp_path / "zero.par").symlink_to("/dev/zero")
    secret = "PARC_TEST_SECRET_" + "7" * 12
    for fmt in ("text", "json", "sarif", "github"):
        r = parc("lint", tmp_path, "--format", fmt, env={"CI_TOKEN": secret}, timeout=60)
        assert secret not in r.stdout + r.stderr
        assert "PATH=" not in r.stdout + r.stderr
        assert r.returncode == 2 and "P030" in r.stdout
    r = parc("lint", tmp_path, "--format", "json", timeout=60)
    rep = json.loads(r.stdout)
    assert sorted(Path(d["file"]).name for d in rep["diagnostics"] if d["code"] == "P030") == ["leak.par", "zero.par"]
    assert rep["summary"]["files"] == 3  # every file named: good.par was linted, the other two not read
    r = parc("check", tmp_path / "leak.par", env={"CI_TOKEN": secret}, timeout=60)
    assert r.returncode == 2 and secret not in r.stdout + r.stderr and "outside the root" in r.stdout


def test_devices_are_never_opened(tmp_path):
    t0 = time.monotonic()
    r = parc("check", "/dev/zero", timeout=60)
    assert r.returncode == 2 and "P030" in r.stdout and "/dev/zero" in r.stdout
    r = parc("lint", "/dev/zero", "--format", "json", timeout=60)
    assert r.returncode == 2 and [d["code"] for d in json.loads(r.stdout)["diagnostics"]] == ["P030"]
    assert time.monotonic() - t0 < 50


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    write(tmp_path, "good.par", GOOD)
    os.mkfifo(tmp_path / "pipe.par")
    r = parc("lint", tmp_path, timeout=60)  # before: blocked forever opening the FIFO
    assert r.returncode == 2 and "FIFO" in r.stdout
    r = parc("check", tmp_path / "pipe.par", timeout=60)
    assert r.returncode == 2 and "P030" in r.stdout
    r = parc("fmt", "--check", tmp_path / "pipe.par", timeout=60)
    assert r.returncode == 2 and "FIFO" in r.stderr


def test_a_spec_or_an_import_over_1_mib_is_refused(tmp_path, capsys):
    big = write(tmp_path, "big.par", GOOD + "#" * (1 << 20) + "\n")
    assert main(["check", str(big)]) == 2
    out = capsys.readouterr().out
    assert "P030" in out and "at most 1 MiB" in out and "1.0 MiB" in out
    write(tmp_path, "huge-cluster.par", CLUSTER + "#" * (1 << 20) + "\n")
    spec = write(tmp_path, "spec.par", 'use "huge-cluster.par"\n' + MODEL + "mesh { dp = 8 }\n")
    assert main(["check", str(spec), "--format", "json", "--root", str(tmp_path)]) == 2
    diags = json.loads(capsys.readouterr().out)["diagnostics"]
    read = [d for d in diags if d["code"] == "P030"]
    assert len(read) == 1 and read[0]["line"] == 1 and read[0]["column"] == 5  # the `use` path
    assert "huge-cluster.par" in read[0]["message"]


# ------------------------------------------------------------------------------ hostile `use` paths

def test_root_slash_reads_nothing_but_par_imports(tmp_path, capsys):
    spec = write(tmp_path, "spec.par", 'use "/etc/passwd"\n' + GOOD)
    assert main(["check", str(spec), "--root", "/"]) == 1
    out = capsys.readouterr().out
    assert "P031" in out and ".par files" in out and "root:" not in out


def test_a_file_that_fails_to_parse_echoes_one_line_at_most(tmp_path, capsys):
    write(tmp_path, "secret.par", "TOKEN_ONE=abc def\nTOKEN_TWO=ghi\nTOKEN_THREE=jkl\n")
    spec = write(tmp_path, "spec.par", 'use "secret.par"\n' + GOOD)
    main(["check", str(spec), "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert "P001" in out and "TOKEN_TWO" not in out and "TOKEN_THREE" not in out


def test_a_nul_byte_and_an_overlong_use_path_are_diagnostics_with_a_span(tmp_path, capsys):
    spec = write(tmp_path, "nul.par", 'use "a\0b.par"\n' + GOOD)
    assert main(["check", str(spec), "--format", "json"]) == 1
    out = capsys.readouterr()
    d = json.loads(out.out)["diagnostics"]
    assert [x["code"] for x in d] == ["P031"] and (d[0]["line"], d[0]["column"]) == (1, 5)
    assert "NUL" in d[0]["message"] and "internal error" not in out.err
    assert main(["lint", str(spec), "--format", "json"]) == 1 and "internal error" not in capsys.readouterr().err

    spec = write(tmp_path, "long.par", 'use "' + "a" * 300 + '.par"\n' + GOOD)
    assert main(["check", str(spec), "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [x["code"] for x in d] == ["P031"] and (d[0]["line"], d[0]["column"]) == (1, 5)
    assert "304 characters" in d[0]["message"] and d[0]["file"].endswith("long.par")


# ------------------------------------------------------------------------------ import graphs

def test_a_file_imported_twice_at_every_level_is_read_once(tmp_path):
    # 20 files, each importing the next one twice: 2**18 loads before, 20 now
    n = 20
    write(tmp_path, "f0.par", 'use "f1.par"\nuse "f1.par"\n' + MODEL + "mesh { dp = 8 }\n")
    for i in range(1, n - 1):
        write(tmp_path, f"f{i}.par", f'use "f{i + 1}.par"\nuse "f{i + 1}.par"\n')
    write(tmp_path, f"f{n - 1}.par", CLUSTER)
    t0 = time.monotonic()
    r = parc("check", tmp_path / "f0.par", "--root", tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - t0 < 45


def test_a_diamond_keeps_the_first_import_and_the_importers_overrides(tmp_path):
    from parc.api import check_file

    write(tmp_path, "base.par", CLUSTER)
    write(tmp_path, "left.par", 'use "base.par"\n')
    write(tmp_path, "right.par", 'use "base.par"\ncluster { nodes = 2 }\n')
    spec = write(tmp_path, "spec.par", 'use "left.par"\nuse "right.par"\n' + MODEL + "mesh { dp = 16 }\n")
    r = check_file(spec, root=tmp_path)
    assert r.ok, r.diagnostics
    assert r.plan.cluster.nodes == 2 and r.plan.cluster.gpus_per_node == 8
    assert sorted(Path(f).name for f in r.plan.files) == ["base.par", "left.par", "right.par", "spec.par"]


def _chain(tmp_path: Path, n: int) -> Path:
    for i in range(1, n):
        write(tmp_path, f"c{i}.par", f'use "c{i + 1}.par"\n' if i < n - 1 else CLUSTER)
    return write(tmp_path, "spec.par", 'use "c1.par"\n' + MODEL + "mesh { dp = 8 }\n")


def test_a_long_import_chain_is_not_an_expression_nested_too_deeply(tmp_path):
    from parc.api import check_file

    spec = _chain(tmp_path, 480)
    r = check_file(spec, root=tmp_path)
    assert r.ok, [d.message for d in r.diagnostics][:3]
    assert r.plan.cluster.gpus_per_node == 8 and len(r.plan.files) == 480


def test_import_depth_has_its_own_limit_and_message(tmp_path):
    from parc.api import check_file
    from parc.resolve.resolver import MAX_IMPORT_DEPTH

    spec = _chain(tmp_path, MAX_IMPORT_DEPTH + 5)
    r = check_file(spec, root=tmp_path)
    codes = [d.code for d in r.errors]
    assert "P032" in codes and "P001" not in codes
    d = next(d for d in r.errors if d.code == "P032")
    assert f"more than {MAX_IMPORT_DEPTH} files deep" in d.message
    assert Path(d.span.file).name == f"c{MAX_IMPORT_DEPTH - 1}.par" and d.span.line == 1


def test_unknown_targets_read_the_targets_folder_once(tmp_path, monkeypatch):
    import pathlib

    from parc.api import check_file

    calls = []
    real = pathlib.Path.glob

    def counting(self, pattern, *a, **k):
        calls.append(pattern)
        return real(self, pattern, *a, **k)

    from parc.model import targets as target_data

    target_data.clear_cache()
    monkeypatch.setattr(pathlib.Path, "glob", counting)
    spec = write(tmp_path, "spec.par", GOOD + "".join(f"target vllmm{i} {{\n}}\n" for i in range(200)))
    r = check_file(spec, root=tmp_path)
    assert sum(c.code == "P020" for c in r.errors) == 200
    assert calls.count("*/target.toml") <= 1


@pytest.mark.skipif(not Path("/usr/bin/git").exists() and not any(
    (Path(d) / "git").exists() for d in os.environ.get("PATH", "").split(os.pathsep)), reason="needs git")
def test_diff_git_reads_old_versions_by_the_same_rules(tmp_path, monkeypatch, capsys):
    """The old version comes from git: a spec that was a link (to the environment, say) or a
    blob over 1 MiB at that revision is refused, not read."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"})

    (tmp_path / "leak.par").symlink_to("/proc/self/environ")
    write(tmp_path, "big.par", GOOD + "#" * (1 << 20) + "\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    (tmp_path / "leak.par").unlink()
    write(tmp_path, "leak.par", GOOD)
    write(tmp_path, "big.par", GOOD)
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "--git", "HEAD", "leak.par"]) == 2
    err = capsys.readouterr().err
    assert "it is a link" in err and "PATH=" not in err
    assert main(["diff", "--git", "HEAD", "big.par"]) == 2
    assert "at most 1 MiB" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/usr/bin/git").exists() and not any(
    (Path(d) / "git").exists() for d in os.environ.get("PATH", "").split(os.pathsep)), reason="needs git")
def test_diff_git_refuses_an_import_that_was_a_link(tmp_path, monkeypatch, capsys):
    """An import of the old version is read from the revision by the loader's own rules: one
    that was a link there is refused as a link (P030, an I/O failure), not reported as a missing file."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"})

    (tmp_path / "box.par").symlink_to("/proc/self/environ")
    write(tmp_path, "spec.par", 'use "box.par"\n' + GOOD)
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    (tmp_path / "box.par").unlink()
    write(tmp_path, "box.par", "")
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "--git", "HEAD", "spec.par"]) == 2  # as an unreadable import on disk
    err = capsys.readouterr().err
    assert "P030" in err and "it is a link" in err and "P013" not in err and "PATH=" not in err
