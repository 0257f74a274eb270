"""`parc run` from the command line: a torchrun launch of the compiled script, reports, errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from support.specs import spec_text
from support.timing import scaled  # noqa: E402

import parc.cli.torchrun_entry as entry

pytest.importorskip("torch")

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def parc(*args, env=None, timeout=180):
    timeout = scaled(timeout)
    return subprocess.run([sys.executable, "-m", "parc", *args], capture_output=True, text=True,
                          env=env or ENV, timeout=timeout)


def test_torchrun_launch_of_the_compiled_script(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    report = tmp_path / "report.json"
    spec = tmp_path / "tr.par"
    spec.write_text(spec_text(2, "tp = 2", sp=True) + f"""
target torchrun {{
  entrypoint = {json.dumps(entry.__file__)}
  args       = ["--rehearse", "--steps", "2", "--verify", "--report", {json.dumps(str(report))}]
}}
""")
    out = tmp_path / "launch"
    r = parc("compile", str(spec), "--target", "torchrun", "-o", str(out))
    assert r.returncode == 0, r.stderr
    run = subprocess.run(["bash", str(out / "launch.sh"), "0"], capture_output=True, text=True,
                         env={**ENV, "TORCHRUN": torchrun}, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    rep = json.loads(report.read_text())
    assert rep["world_size"] == 2 and rep["mesh"]["tp"] == 2 and rep["rehearsal"] is True
    assert rep["verify"]["ran"] and rep["verify"]["passed"]
    assert [r["param_bytes"] for r in rep["ranks"]] == [r["predicted_param_bytes"] for r in rep["ranks"]]
    assert "rehearsal of 2 ranks" in run.stdout          # rank 0 alone prints the summary
    assert run.stdout.count("rehearsal of") == 1


def test_rehearsal_report_and_failing_rank(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(4, "pp = 2\n  dp = 2", zero=3, schedule="pipeline = 1f1b"))
    report = tmp_path / "r.json"
    r = parc("run", str(spec), "--rehearse", "--steps", "2", "--optimizer", "sgd", "--verify",
             "--report", str(report))
    assert r.returncode == 0, r.stderr
    rep = json.loads(report.read_text())
    assert rep["verify"]["passed"] and len(rep["steps"]) == 2
    assert set(rep["actions"]) == {"0", "1"}
    assert set(rep["timing"]) >= {"imports", "reference", "steps", "total"}
    assert "verify: passed" in r.stdout
    assert r.stderr == ""                                   # not a terminal: no progress bar

    bad = parc("run", str(spec), "--rehearse", "--steps", "2", "--format", "json",
               env={**ENV, "PARC_INJECT_FAULT": "3:2"})
    assert bad.returncode == 1
    assert "parc: run failed: rank 3 failed: injected fault on rank 3 at step 2" in bad.stderr
    assert "Traceback" not in bad.stderr
    out = json.loads(bad.stdout)                            # JSON on stdout, also when a rank fails
    assert out["ok"] is False and out["rank"] == 3 and "injected fault" in out["error"]


def test_refusals_say_why_without_a_traceback(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    r = parc("run", str(spec))
    assert r.returncode == 1
    assert "needs 2 processes" in r.stderr and "--rehearse" in r.stderr
    assert "Traceback" not in r.stderr

    broken = tmp_path / "b.par"
    broken.write_text(spec_text(2, "tp = 3"))
    r = parc("run", str(broken), "--rehearse")
    assert r.returncode == 1 and "P1" in r.stderr and "Traceback" not in r.stderr

    r = parc("run", str(tmp_path / "missing.par"))
    assert r.returncode == 2 and "cannot read" in r.stderr

    junk = tmp_path / "plan.json"
    junk.write_text('{"model": 1}')
    r = parc("run", str(junk))
    assert r.returncode == 2 and "not a plan" in r.stderr and "Traceback" not in r.stderr


def test_progress_bar_only_on_a_terminal():
    import io

    from parc.runtime.run import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(4, "parc run", stream=stream)
        for k in range(1, 5):
            bar(k)
        bar.close()
    assert "step 1/4" in tty.getvalue() and "step 4/4" in tty.getvalue()
    assert "[" + "#" * 24 + "]" in tty.getvalue()
    assert pipe.getvalue() == ""


def test_verify_defaults_to_sgd_and_passes_on_an_uneven_adam_spec(tmp_path):
    # the example trains with Adam (the default optimizer); --verify runs SGD unless told otherwise
    report = tmp_path / "r.json"
    spec = os.path.join(os.path.dirname(__file__), "..", "examples", "custom-uneven-pipeline.par")
    out = parc("run", spec, "--rehearse", "--verify", "--steps", "2",
               "--report", str(report))
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(report.read_text())
    assert rep["verify"]["passed"] is True
    assert rep["verify"]["max_param_diff"] <= 1e-6
    assert [r["param_bytes"] for r in rep["ranks"]] == [r["predicted_param_bytes"] for r in rep["ranks"]]


def test_json_format_prints_json_on_every_outcome(tmp_path):
    broken = tmp_path / "b.par"
    broken.write_text(spec_text(2, "tp = 3"))
    r = parc("run", str(broken), "--rehearse", "--format", "json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["ok"] is False and out["exit_code"] == 1
    assert any(d["code"].startswith("P1") for d in out["diagnostics"])

    r = parc("run", str(tmp_path / "missing.par"), "--format", "json")
    out = json.loads(r.stdout)
    assert r.returncode == 2 and out["ok"] is False and "cannot read" in out["error"]

    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    r = parc("run", str(spec), "--format", "json")          # needs --rehearse or torchrun
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["ok"] is False and "needs 2 processes" in out["error"]


def test_verify_with_no_steps_is_refused(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    r = parc("run", str(spec), "--rehearse", "--steps", "0", "--verify")
    assert r.returncode == 2
    assert "--verify needs at least one step" in r.stderr
    assert "verify: passed" not in r.stdout


def test_progress_shows_phases_from_the_first_second(tmp_path):
    import pty
    import select
    import time

    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "parc", "run", str(spec), "--rehearse", "--steps", "1"],
                         stdout=subprocess.DEVNULL, stderr=slave, env=ENV)
    os.close(slave)
    seen, first = b"", None
    t0 = time.time()
    try:
        while p.poll() is None or select.select([master], [], [], 0)[0]:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if chunk and first is None:
                    first = time.time() - t0
                seen += chunk
            if time.time() - t0 > scaled(180):
                break
    finally:
        p.kill()
        p.wait()
        os.close(master)
    text = seen.decode(errors="replace")
    phases = ["checking", "importing torch", "spawning 2 ranks", "building on 2 ranks", "step 1/1"]
    at = [text.find(w) for w in phases]
    assert all(i >= 0 for i in at), (phases, text)
    assert at == sorted(at), text                  # in that order: the phases come before the steps


def test_a_disaggregated_plan_rehearses_one_instance_of_each_pool(tmp_path):
    # 2 prefill instances of tp 2 and one decode instance of dp 2 · tp 2 with the experts over
    # all 4 (data-parallel attention): each pool's instance plan against one process
    text = spec_text(8, "tp = 2", serve="kv_transfer = nixl\n  dp_attention = true\n"
                     "  prefill {\n    instances = 2\n  }\n  decode {\n    dp = 2\n    ep = 4\n  }",
                     model="experts = 4\n  top_k = 2\n  moe_ffn_hidden = 1024")
    text = text.replace("schedule {\n  micro_batch  = 1\n  global_batch = 64\n  \n}\n", "")
    spec = tmp_path / "pd.par"
    spec.write_text(text)
    report = tmp_path / "pd.json"
    r = parc("run", str(spec), "--rehearse", "--verify", "--steps", "1", "-q", "--report", str(report), timeout=240)
    assert r.returncode == 0, r.stderr
    pools = json.loads(report.read_text())["pools"]
    assert [(p["pool"], p["instances"], p["world_size"]) for p in pools] == [("prefill", 2, 2), ("decode", 1, 4)]
    assert all(p["verify"]["ran"] and p["verify"]["passed"] for p in pools)
    dec = pools[1]
    assert dec["mesh"]["dp"] == 2 and dec["mesh"]["ep"] == 4
    assert any("data-parallel attention" in n for n in dec["notes"])
