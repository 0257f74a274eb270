"""The sglang target's commands as the tests run them: compile a spec, run its serve.sh or
launch.sh with a python that records its argv, and read the options back."""
from __future__ import annotations

import stat
from pathlib import Path

from backends_support import run_emitted, write_out


def recording_python(tmp: Path) -> str:
    """A python3 that records its argv, as run_emitted's launchers do."""
    b = tmp / "fakebin"
    b.mkdir(parents=True, exist_ok=True)
    p = b / "python3"
    p.write_text('#!/usr/bin/env bash\nprintf \'%s\\0\' "$@" > "$ARGV_DIR/python3"\n')
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def compile_plan(check_spec, text):
    from parc.targets import sglang

    r = check_spec(text, ("sglang",))
    assert not r.errors, [f"{d.code} {d.message}" for d in r.errors]
    return r.plan, sglang.build(r.plan)


def argv(files, tmp: Path, *args: str, env: dict | None = None) -> list[str]:
    d = write_out(files, tmp / "out")
    script = next(f.path for f in files if f.path in ("serve.sh", "launch.sh"))
    got = run_emitted(d / script, tmp, *args, env={"PYTHON": recording_python(tmp), **(env or {})})
    return got["python3"]


def opts(argv: list[str]) -> dict:
    """--flag value pairs of an argv (a flag without a value maps to True)."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = True
        i += 1
    return out
