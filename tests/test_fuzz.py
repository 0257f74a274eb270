"""A property-based fuzzer of the grammar, bounded to run in seconds.

Generated specs (every escape, every whitespace character, comments and suppressions in every
place, huge numbers, long chains, deep nesting) and near-valid ones (a few characters broken):
nothing raises (no "internal error"), nothing hangs, and `parc fmt` is idempotent, keeps the
meaning (the resolved plan and every diagnostic) and keeps what `parc lint` reports.
A longer run of the same properties: python bench/fuzz_frontend.py --inputs 20000.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from spec_strategies import check_fmt, lint_findings, near_valid, resolved, spec

ROOT = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@contextmanager
def time_limit(cpu_seconds: int, wall_seconds: int = 120):
    """Fail, instead of hanging the suite, when one input takes more than ``cpu_seconds`` of
    processor time (a loaded machine does not count against it) or ``wall_seconds`` in all."""

    def handler(signum, frame):
        raise TimeoutError(f"one input took longer than {cpu_seconds}s of CPU or {wall_seconds}s")

    old_prof = signal.signal(signal.SIGPROF, handler)
    old_alarm = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.alarm(wall_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.alarm(0)
        signal.signal(signal.SIGPROF, old_prof)
        signal.signal(signal.SIGALRM, old_alarm)


@FUZZ
@given(spec())
def test_generated_specs_format_and_keep_meaning(tmp_path_factory, text):
    with time_limit(10):
        check_fmt(text, tmp_path_factory.mktemp("g"))


@settings(FUZZ, max_examples=10)
@given(spec())
def test_generated_specs_keep_lint_findings_through_fmt(tmp_path_factory, text):
    with time_limit(10):
        check_fmt(text, tmp_path_factory.mktemp("l"), lint=True)


@FUZZ
@given(near_valid())
def test_near_valid_specs_never_raise(tmp_path_factory, text):
    with time_limit(10):
        folder = tmp_path_factory.mktemp("n")
        resolved(text, folder)
        check_fmt(text, folder)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.par")), ids=lambda p: p.stem)
def test_examples_keep_lint_findings_through_fmt(tmp_path, path):
    text = path.read_text()
    # the example as written, and squeezed: every block on one line where it fits
    assert check_fmt(text, tmp_path / "as-is", lint=True) == "formatted"
    assert lint_findings(text, tmp_path / "x") == lint_findings(text, tmp_path / "y")
