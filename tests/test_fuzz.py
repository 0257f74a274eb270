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


# Inputs the fuzzer found, kept as they were found and cut down to what still failed: a comment
# after a `;` that ends no statement (an empty statement between separators) was neither a comment
# line of its own nor the trailing comment of a statement, so fmt dropped it.
FOUND = [
    b';;#\x0b\n \t\nmodel "\\t\\u2028" {  }\n \t\ncluster "\\"-\x00-\x00\\\\" {\n \x0c nodes\t\x0c=  1\n'
    b' \x0c nodes \x0c =\t\x0c1\r\n nodes =\x0c1\t\x0c# parc: ignore\n\x0c\n}\t#\n \t\nmesh\x0c{  }\n \t\n'
    b'serve {\n\x0c\n max_model_len\x0c= -((nvlink())) #\n\x0c\n\t#\r\n}\x0c# parc: ignore\n \t\n'
    b'target torchrun  {\n\n}\n \t\n#',
    b';;#\x0b\n \t\nmodel "" {  }\n \t\ncluster "\\"-\x00-\x00\\\\" {\n \x0c nodes\t\x0c=  1\n'
    b' \x0c nodes \x0c =\t\x0c1\r\n nodes =\x0c1\t\x0c# parc: ignore\n\x0c\n}\t#\n \t\nmesh\x0c{  }\n \t\n'
    b'serve {\n\x0c\n max_model_len\x0c= -((nvlink())) # parc: ignore\n\x0c\n\t#\r\n}\x0c# parc: ignore\n'
    b' \t\ntarget torchrun  {\n\n}\n \t\n#',
    b';#\nmodel "a" { }\n',
    b';;#\x0b\nmodel "a" { }\n',
    b'model "a" { }\n;#c\n',
    b'model "a" { }\n \x0c;\r# parc: ignore\n',
    b'serve {\n  ; # c\n  max_model_len = 1\n}\n',
    b'serve {\n  max_model_len = 1\n  ;;  # c\n}\n',
    b'cluster "a" {\r\n nodes = 1\r\n ;# c\r\n}\r\n',
]


@pytest.mark.parametrize("data", FOUND, ids=range(len(FOUND)))
def test_found_inputs_keep_every_comment_through_fmt(tmp_path, data):
    from parc.language.fmt import format_text
    from parc.language.parser import comments_of as comments

    text = data.decode("utf-8")
    with time_limit(10):
        assert check_fmt(text, tmp_path, lint=True) == "formatted"
    assert [c for _, _, c in comments(format_text(text))] == [c for _, _, c in comments(text)]


@pytest.mark.parametrize("data", FOUND + [b'model "a" { }\r\ncluster "b" {\r nodes = 1 }\r\n#\r\n'],
                         ids=range(len(FOUND) + 1))
def test_found_inputs_read_from_disk_as_given(tmp_path, data):
    """The spec read from its file is the text itself: no newline is translated on the way in."""
    from parc.api import check_file

    f = tmp_path / "spec.par"
    f.write_bytes(data)
    text = data.decode("utf-8")
    on_disk, given = check_file(f, root=tmp_path), check_file(f, root=tmp_path, text=text)
    assert list(on_disk.sources.values()) == [text]
    assert (on_disk.plan.to_dict() if on_disk.plan else None) == (given.plan.to_dict() if given.plan else None)
    where = lambda d: (d.code, d.message, d.span.line, d.span.column, d.span.start, d.span.end)  # noqa: E731
    assert [where(d) for d in on_disk.diagnostics] == [where(d) for d in given.diagnostics]
