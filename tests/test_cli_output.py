"""What every command that writes a file does alike (parc/cli/output.py): the file is replaced
atomically and is the same bytes on every run; a path that is a symbolic link, a folder that does
not exist or is read-only, a write that fails half-way each leave what was there as it was and
give one line, `parc: cannot write PATH: WHY`, and exit 2 (an I/O failure, LANGUAGE.md section 3).

The commands with `-o FILE` (or `--html FILE`) write a file; `compile -o DIR` a folder; `fmt` and
`lint --fix` rewrite the spec they read, so their "output" is the spec's own path."""
from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import pytest

from parc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SERVE = ROOT / "examples" / "llama3-70b-serve.par"
TRAIN = ROOT / "examples" / "llama3-70b-train.par"
LOGS = ROOT / "tests" / "data" / "logs"
TOPO = ROOT / "tests" / "data" / "topo" / "dgx_h100.txt"
FIXABLE = ROOT / "tests" / "data" / "fix" / "commented.par"      # lint --fix changes it
UNFORMATTED = 'model "m" {   from = llama3_8b }\n\ncluster "c" {\nnodes=1\ngpus_per_node = 8\n  gpu = h100_sxm }\n'
SERVE_SH = "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --x 1\n"

# name -> (what it writes: file, folder or the spec in place; the output's file name; argv with OUT)
COMMANDS = {
    "import": ("file", "spec.par", ["import", "{in}/serve.sh", "-o", "{out}"]),
    "calibrate": ("file", "profile.par", ["calibrate", LOGS / "base.par", LOGS / "runs.csv", "-o", "{out}"]),
    "compile": ("folder", "launch", ["compile", SERVE, "--target", "vllm", "-o", "{out}"]),
    "draw": ("file", "mesh.svg", ["draw", SERVE, "-q", "-o", "{out}"]),
    "explain": ("file", "plan.html", ["explain", SERVE, "--html", "{out}"]),
    "fmt": ("spec", "spec.par", ["fmt", "-q", "{out}"]),
    "lint --fix": ("spec", "spec.par", ["lint", "--fix", "-q", "{out}"]),
    "plan": ("file", "best.par", ["plan", TRAIN, "--top", "1", "-o", "{out}"]),
    "schema": ("file", "plan.schema.json", ["schema", "-o", "{out}"]),
    "topo": ("file", "cluster.par", ["topo", TOPO, "--gpu", "h100_sxm", "-o", "{out}"]),
}
SPEC_TEXT = {"fmt": UNFORMATTED, "lint --fix": FIXABLE.read_text(encoding="utf-8")}


def _run(name, out: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    """Run command ``name`` writing ``out``; its exit status and stderr."""
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    (inp / "serve.sh").write_text(SERVE_SH)
    argv = [str(a).replace("{out}", str(out)).replace("{in}", str(inp)) for a in COMMANDS[name][2]]
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def _said(err: str, out: Path) -> None:
    """stderr holds exactly the one-line refusal for ``out``."""
    lines = [x for x in err.splitlines() if "cannot write" in x]
    assert len(lines) == 1, err
    assert re.fullmatch(rf"parc: cannot write {re.escape(str(out))}: \S.*", lines[0]), lines[0]


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target (temporary files show)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = p.read_bytes()
    return out


def _spec(name, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / COMMANDS[name][1]
    path.write_text(SPEC_TEXT[name], encoding="utf-8")
    return path


@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_folder_is_refused(name, tmp_path, capsys, monkeypatch):
    kind, file, _ = COMMANDS[name]
    gone = tmp_path / "gone"
    if kind == "spec":      # the spec's folder goes between the read and the write
        out = _spec(name, gone)
        import parc.lint.fix
        import parc.resolve.reader

        mod, fn = (parc.resolve.reader, "read_bytes") if name == "fmt" else (parc.lint.fix, "fix_files")
        real = getattr(mod, fn)

        def then_remove(*a, **k):
            got = real(*a, **k)
            shutil.rmtree(gone)
            return got
        monkeypatch.setattr(mod, fn, then_remove)
    else:
        out = gone / file
    code, err = _run(name, out, tmp_path, capsys)
    assert code == 2, err
    _said(err, out)
    assert not gone.exists()      # parc made no folder


@pytest.mark.parametrize("name", COMMANDS)
def test_a_symbolic_link_is_neither_written_through_nor_replaced(name, tmp_path, capsys):
    kind, file, _ = COMMANDS[name]
    real = tmp_path / "real" / file
    if kind == "spec":
        _spec(name, real.parent)
    elif kind == "folder":
        real.mkdir(parents=True)
        (real / "mine.txt").write_text("mine\n")
    else:
        real.parent.mkdir()
        real.write_text("mine\n")
    out = tmp_path / ("link-" + file)
    out.symlink_to(real)
    before = _tree(tmp_path / "real")
    code, err = _run(name, out, tmp_path, capsys)
    assert code == 2, err
    _said(err, out)
    assert out.is_symlink() and os.readlink(out) == str(real)
    assert _tree(tmp_path / "real") == before


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except PermissionError:
        return False
    (folder / ".probe").unlink()
    return True


@pytest.mark.parametrize("name", COMMANDS)
def test_a_read_only_folder_is_refused(name, tmp_path, capsys):
    kind, file, _ = COMMANDS[name]
    ro = tmp_path / "ro"
    out = _spec(name, ro) if kind == "spec" else ro / file
    ro.mkdir(exist_ok=True)
    before = _tree(ro)
    ro.chmod(0o555)
    try:
        if os.geteuid() == 0 and _writable(ro):   # root with CAP_DAC_OVERRIDE: no folder is read-only
            pytest.skip("running as root, which writes into a read-only folder: there is no refusal to see")
        code, err = _run(name, out, tmp_path, capsys)
        assert code == 2, err
        _said(err, out)
        assert _tree(ro) == before        # nothing written, no temporary file left
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("name", [n for n, (kind, _, _) in COMMANDS.items() if kind != "folder"])
def test_a_failed_write_leaves_the_old_file_whole(name, tmp_path, capsys, monkeypatch):
    """The rename that puts the new file in place fails (a full disk, say): the old file is
    untouched and no temporary file is left. (compile -o's swap of a whole set:
    tests/test_compile_output.py.)"""
    kind, file, _ = COMMANDS[name]
    folder = tmp_path / "out"
    if kind == "spec":
        out = _spec(name, folder)
    else:
        folder.mkdir()
        out = folder / file
        out.write_text("old\n")
    before = _tree(folder)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full)
    code, err = _run(name, out, tmp_path, capsys)
    assert code == 2, err
    _said(err, out)
    assert _tree(folder) == before


@pytest.mark.parametrize("name", COMMANDS)
def test_a_write_is_the_same_bytes_every_run(name, tmp_path, capsys):
    kind, file, _ = COMMANDS[name]
    got = []
    for run in ("one", "two"):
        folder = tmp_path / run
        out = _spec(name, folder) if kind == "spec" else folder / file
        folder.mkdir(exist_ok=True)
        before = _tree(folder)
        code, err = _run(name, out, tmp_path, capsys)
        assert code in ((0, 1) if name == "lint --fix" else (0,)), err   # 1: findings left to report
        assert "cannot write" not in err
        got.append(_tree(folder))
        assert got[-1] != before
    assert got[0] == got[1]
    assert not [k for k in got[0] if ".parc-" in k or k.endswith(".tmp")]


def test_compile_json_says_the_same_line_in_its_error(tmp_path, capsys):
    """`compile --format json` puts the refusal in the object's `error` (stdout stays JSON)."""
    import json

    (tmp_path / "real").mkdir()
    out = tmp_path / "launch"
    out.symlink_to(tmp_path / "real")
    capsys.readouterr()
    code = main(["compile", str(SERVE), "--target", "vllm", "--format", "json", "-o", str(out)])
    got = json.loads(capsys.readouterr().out)
    assert code == 2 and got["ok"] is False and got["files"] == []
    assert re.fullmatch(rf"cannot write {re.escape(str(out))}: \S.*", got["error"]), got["error"]
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("where", ["link", "missing folder"])
def test_run_refuses_its_report_path_before_the_run(where, tmp_path, capsys):
    """`parc run --report FILE` writes as the others do, and a path it would refuse is refused
    before the run starts, not after it."""
    (tmp_path / "real.json").write_text("mine\n")
    out = tmp_path / "gone" / "report.json"
    if where == "link":
        out = tmp_path / "report.json"
        out.symlink_to(tmp_path / "real.json")
    capsys.readouterr()
    code = main(["run", str(tmp_path / "no-such.par"), "--rehearse", "--report", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    _said(err, out)
    assert "no-such.par" not in err        # the spec was not even read
    assert (tmp_path / "real.json").read_text() == "mine\n" and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_plan_refuses_its_output_path_before_the_search(fmt, tmp_path, capsys):
    import json

    out = tmp_path / "gone" / "best.par"
    capsys.readouterr()
    code = main(["plan", str(tmp_path / "no-such.par"), "--format", fmt, "-o", str(out)])
    got = capsys.readouterr()
    assert code == 2
    _said(got.err, out)
    assert "no-such.par" not in got.err                  # the spec was not even read
    if fmt == "json":
        assert json.loads(got.out)["error"] == f"cannot write {out}: the folder {out.parent} does not exist " \
                                               "(parc makes none for it)"


# What a command says when its write succeeded; none of it may appear when the write failed.
SUCCESS = re.compile(r'^(wrote|reformatted|fixed (?!0 findings))|"ok": true', re.M)
JSON_TOO = {"calibrate", "compile", "explain", "plan"}      # also write with --format json


@pytest.mark.parametrize("name, fmt", [(n, "text") for n in COMMANDS] + [(n, "json") for n in sorted(JSON_TOO)])
def test_a_failed_write_claims_no_success(name, fmt, tmp_path, capsys, monkeypatch):
    """The write fails after every check before it passed (the disk fills at the rename): the
    command exits 2 with the one refusal, and neither stdout nor stderr says it wrote, reformatted
    or fixed anything, nor (with --format json) that it went well. Run without -q, so that the
    success line would show."""
    import json

    kind, file, argv = COMMANDS[name]
    folder = tmp_path / "out"
    out = _spec(name, folder) if kind == "spec" else folder / file
    folder.mkdir(exist_ok=True)
    argv = [a for a in argv if a != "-q"] + (["--format", "json"] if fmt == "json" else [])

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "serve.sh").write_text(SERVE_SH)
    capsys.readouterr()
    code = main([str(a).replace("{out}", str(out)).replace("{in}", str(inp)) for a in argv])
    got = capsys.readouterr()
    assert code == 2, got.err
    _said(got.err, out)
    assert not SUCCESS.search(got.out), got.out
    assert not SUCCESS.search(got.err), got.err
    if fmt == "json" and got.out.strip():
        said = json.loads(got.out)
        assert said.get("ok") is not True and f"cannot write {out}" in said.get("error", ""), said
