"""The one snapshot (golden file) helper of the test suite.

``assert_snapshot(path, text)`` compares ``text`` with the file at ``path`` (relative paths are
under ``tests/golden``). On a mismatch it fails with a unified diff, golden first, so a reviewer
reads what changed. ``PARC_UPDATE_GOLDEN=1`` -- the only switch -- rewrites the file instead;
run the tests once more without it and read ``git diff tests/golden`` before committing.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
ENV = "PARC_UPDATE_GOLDEN"
CONTEXT = 3
MAX_DIFF_LINES = 200


def updating() -> bool:
    """True when this run rewrites golden files (``PARC_UPDATE_GOLDEN=1``)."""
    return os.environ.get(ENV) == "1"


def golden_path(name: str | Path) -> Path:
    p = Path(name)
    return p if p.is_absolute() else GOLDEN / p


def _rel(p: Path) -> str:
    try:
        return p.relative_to(ROOT).as_posix()
    except ValueError:
        return str(p)


def unified_diff(expected: str, actual: str, name: str) -> str:
    """The unified diff from the golden text to the produced text, cut at MAX_DIFF_LINES."""
    lines = list(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                      fromfile=f"{name} (golden)", tofile=f"{name} (produced)", n=CONTEXT))
    lines = [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines]
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines\n"]
    return "".join(lines)


def assert_snapshot(name: str | Path, text: str) -> None:
    """Assert that ``text`` equals the golden file ``name`` byte for byte (or rewrite it when updating)."""
    path = golden_path(name)
    rel = _rel(path)
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != text.encode("utf-8"):
            path.write_bytes(text.encode("utf-8"))
        return
    if not path.exists():
        pytest.fail(f"no golden file {rel}; create it with {ENV}=1 and read it before committing", pytrace=False)
    expected = path.read_bytes().decode("utf-8")
    if expected != text:
        pytest.fail(f"{rel} differs from what was produced ({ENV}=1 rewrites it):\n"
                    + unified_diff(expected, text, rel), pytrace=False)


def assert_no_snapshot(name: str | Path, why: str) -> None:
    """Assert that there is no golden file ``name`` (when updating, delete a stale one)."""
    path = golden_path(name)
    if updating() and path.exists():
        path.unlink()
    assert not path.exists(), f"{_rel(path)} exists but {why}"


def stray_snapshots(folder: str | Path, pattern: str, known) -> list[str]:
    """The golden files under ``folder`` matching ``pattern`` that no case produces."""
    known = {golden_path(k) for k in known}
    return sorted(_rel(p) for p in golden_path(folder).glob(pattern) if p.is_file() and p not in known)
