"""The renderers: one number formatter, one terminal helper, one atomic write, one progress
line, and every output format in parc/report reading the same numbers."""
from __future__ import annotations

import ast
import io
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT
from parc.cli.main import main

PARC = ROOT / "parc"
TRAIN = ROOT / "examples" / "llama3-70b-train.par"
SERVE = ROOT / "examples" / "llama3-70b-serve.par"


# --------------------------------------------------------------------------- one formatter

def test_units_prose_style():
    from parc import units

    assert units.nbytes(85.52e9) == "85.5 GB"
    assert units.nbytes(141e9) == "141 GB"
    assert units.nbytes(512) == "512 B"
    assert units.rate(450e9) == "450 GB/s"
    assert units.seconds(0) == "0"
    assert units.seconds(4.5e-3) == "4.5 ms"
    assert units.seconds(12.3e-6) == "12.3 µs"
    assert units.seconds(900) == "15 min"
    assert units.number(8.03e9) == "8.03B"
    assert units.number(512) == "512"
    assert units.flops(4.039e18) == "4.04 EFLOP"
    assert units.percent(0.00292) == "0.292%"
    assert units.percent(17.13) == "1,713%" and units.percent(2.5) == "250%"  # never an exponent


def test_units_rule_table_and_comparison_styles():
    from parc import units

    assert [units.gb(x) for x in (141e9, 80e9, 0.5e9)] == ["141 GB", "80.0 GB", "0.50 GB"]
    assert units.gb_value(60.05e9) == "60.0"
    assert [units.seconds_short(x) for x in (0, 120, 1.234, 0.0456, 12e-6)] == ["0", "120s", "1.23s", "45.6ms", "12us"]
    assert units.number_short(1.234e6) == "1.23M"
    assert units.si(60.12e9, "B") == "60.1 GB" and units.si_count(2.27e9) == "2.27B"
    assert units.seconds_fixed(0) == "0 s" and units.percent_fixed(0.4321) == "43.21%"


def test_rules_speak_gb_through_the_one_formatter():
    from parc import units
    from parc.rules import util

    assert util.gb is units.gb


# --------------------------------------------------------------- the formats agree

def _explain_text(capsys, spec) -> str:
    assert main(["explain", str(spec)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("spec", [TRAIN, SERVE])
def test_the_html_page_prints_the_numbers_explain_prints(capsys, tmp_path, spec):
    # the page formatted its own numbers ("60.05 GB", "0.29%") where the text said "60.1 GB", "0.292%"
    from parc import units
    from parc.api import load_plan
    from parc.cost.estimate import estimate

    text = _explain_text(capsys, spec)
    page_path = tmp_path / "p.html"
    assert main(["explain", str(spec), "--html", str(page_path)]) == 0
    capsys.readouterr()
    page = page_path.read_text()
    est = estimate(load_plan(str(spec)))
    shown = [units.nbytes(est.stages[est.most_loaded_stage].memory.total), units.number(est.params_total)]
    if spec is TRAIN:
        shown += [units.percent(est.bubble_fraction), units.percent(est.mfu), units.seconds(est.step_time)]
    for s in shown:
        assert s in text, s
        assert s in page, s


def test_presets_count_parameters_as_explain_does(capsys, write_spec):
    # presets printed "8.0B" for the model explain calls "8.03B parameters"
    spec = write_spec('model "m" { from = llama3_8b }\ncluster "c" {\n  gpus_per_node = 8\n  gpu = h100_sxm\n}\n'
                      "mesh { tp = 8 }\n")
    text = _explain_text(capsys, spec)
    said = re.search(r"\(([0-9.]+[kMBT]?) parameters\)", text).group(1)
    assert main(["presets", "--kind", "models"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("llama3_8b "))
    assert row.split()[1] == said == "8.03B"


# --------------------------------------------------------------------------- terminal

def test_colour_only_when_asked(capsys, monkeypatch):
    from parc.report.term import GREEN, paint, use_color

    assert paint("ok", GREEN) == "\x1b[1;32mok\x1b[0m" and paint("ok", GREEN, False) == "ok" and paint("", GREEN) == ""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert use_color(io.StringIO())
    assert main(["lint", str(TRAIN)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("\x1b[1;32mok:")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(_Tty())


# ----------------------------------------------------------------------- atomic write

def test_write_atomic_modes_and_failure(tmp_path, monkeypatch):
    from parc.files import write_atomic

    mask = os.umask(0o022)
    try:
        new = tmp_path / "new.par"
        write_atomic(new, "a\n")
        assert new.read_text() == "a\n" and (new.stat().st_mode & 0o777) == 0o644
        old = tmp_path / "old.sh"
        old.write_text("old\n")
        old.chmod(0o750)
        write_atomic(old, "new\n")
        assert old.read_text() == "new\n" and (old.stat().st_mode & 0o777) == 0o750
        write_atomic(old, "x\n", mode=0o600)
        assert (old.stat().st_mode & 0o777) == 0o600
    finally:
        os.umask(mask)

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(old, "lost\n")
    assert old.read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.par", "old.sh"]   # no temporary left


def _record_syncs(monkeypatch) -> list[tuple]:
    """Record os.fsync (of a file: its inode and size then; of a folder: its inode) and
    os.replace, in the order they are called; both still do their work."""
    import stat

    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync dir", st.st_ino) if stat.S_ISDIR(st.st_mode) else ("fsync file", st.st_ino, st.st_size))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.mark.parametrize("data", ["a\nb\n", b"\x89PNG\r\n\x00"])
def test_write_atomic_syncs_the_file_before_the_rename_and_the_folder_after(data, tmp_path, monkeypatch):
    """A crash right after the rename must not leave an empty file under the final name: the
    temporary file's bytes reach the disk before it is renamed, and the folder's entry after."""
    from parc.files import write_atomic

    out = tmp_path / "out.par"
    out.write_text("old\n")
    events = _record_syncs(monkeypatch)
    write_atomic(out, data)
    ino = out.stat().st_ino
    assert events == [("fsync file", ino, len(data)), ("replace", ino), ("fsync dir", tmp_path.stat().st_ino)]
    assert out.read_bytes() == (data if isinstance(data, bytes) else data.encode())


def test_write_atomic_writes_where_a_folder_cannot_be_synced(tmp_path, monkeypatch):
    """Where a folder cannot be opened (Windows) or fsync of one is not supported, the file is
    still synced and written; only the folder's sync is skipped."""
    import errno
    import stat

    from parc.files import write_atomic

    real_open, real_fsync = os.open, os.fsync

    def no_dirs(path, *a, **k):
        if os.path.isdir(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, *a, **k)

    def no_dir_sync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_fsync(fd)

    for name, fake in (("open", no_dirs), ("fsync", no_dir_sync)):
        with monkeypatch.context() as m:
            m.setattr(os, name, fake)
            write_atomic(tmp_path / f"{name}.par", f"{name}\n")
        assert (tmp_path / f"{name}.par").read_text() == f"{name}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fsync.par", "open.par"]


def test_plan_output_keeps_the_mode_of_the_file_it_replaces(tmp_path, capsys):
    out = tmp_path / "best.par"
    out.write_text("# old\n")
    out.chmod(0o640)
    assert main(["plan", str(TRAIN), "--top", "1", "-o", str(out)]) == 0
    capsys.readouterr()
    assert out.read_text().startswith("# parc plan:") and (out.stat().st_mode & 0o777) == 0o640


# --------------------------------------------------------------------------- progress

class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_one_progress_line_for_search_and_steps():
    from parc.progress import Progress
    from parc.runtime.run import Progress as RunProgress

    assert RunProgress is Progress
    tty = _Tty()
    bar = Progress(2, "parc run", stream=tty)
    bar.phase("checking")
    bar(1)
    bar.fraction(0.5, "costing")
    bar.close()
    text = tty.getvalue()
    assert "parc run: checking…" in text and "step 1/2" in text and "50%" in text
    assert text.endswith("\r" + " " * 72 + "\r")


# --------------------------------------------------------------------------- layering

def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_renderers_and_foundations_import_only_what_is_below_them():
    for name in ("units.py", "files.py", "progress.py"):
        assert not [m for m in _imports(PARC / name) if m.startswith("parc")], name
    for path in (PARC / "report").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(("parc.planner", "parc.lint", "parc.runtime", "parc.cli"))]
        assert not bad, (path, bad)
    for path in (PARC / "planner").rglob("*.py"):
        assert not [m for m in _imports(path) if m.startswith("parc.cli")], path


def test_no_escape_codes_atomic_writes_or_number_formats_outside_their_homes():
    homes = {PARC / "report" / "term.py", PARC / "files.py", PARC / "progress.py", PARC / "units.py"}
    for path in PARC.rglob("*.py"):
        if path in homes:
            continue
        text = path.read_text()
        assert "\\x1b[" not in text, path
        assert "os.replace(" not in text and "mkstemp(" not in text, path
    for name in ("check", "compile", "explain", "fmt", "lint", "plan", "presets", "run", "common"):
        text = (PARC / "cli" / f"{name}.py").read_text()
        assert not re.search(r":\.\dg\}|:\.\df\}|1e9|1e6", text), name


def test_the_memory_drawing_states_what_explain_states(capsys):
    # the drawing printed "60.1 GB (70% of capacity)" beside explain's "60.1 GB of 85.5 GB (70.2%)"
    from parc.api import load_plan
    from parc.report import svg

    text = _explain_text(capsys, TRAIN)
    total = re.search(r"total +(\S+ \S+) +of (\S+ \S+) \(([0-9.]+%)\)", text)
    drawing = svg.memory(load_plan(str(TRAIN)))
    assert f"{total.group(1)} ({total.group(3)} of capacity)" in drawing
    assert f"capacity {total.group(2)}" in drawing
