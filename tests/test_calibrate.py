"""parc calibrate: the log readers, the fit (on logs generated from known factors), the command.

The recovery tests write Megatron-LM and torchtitan logs whose step times parc itself predicts
under a known profile, then calibrate from parc's defaults: whatever the fit reports as fitted
must come back to the known value, and a run held out of the fit must be predicted better."""
from __future__ import annotations

import importlib
import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from parc.calibrate import fit, predict, profile_fields
from parc.calibrate.logs import GiB, MiB, LogError, Run, read_log
from parc.calibrate.runs import measured_step_time, plan_of_run
from parc.model.plan import Profile
from parc.resolve import load

fit_module = importlib.import_module("parc.calibrate.fit")   # the module, which `fit` shadows
ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"
BASE = LOGS / "base.par"

# The cluster's "true" factors the synthetic logs are generated from: every float field of the
# profile away from its default, so whichever of them the step-time model reads is exercised.
TRUTH = Profile(name="truth", **{name: round(lo + 0.55 * (hi - lo), 4) if name != "gemm_efficiency" else 0.45
                                 for name, lo, hi in profile_fields(Profile())})

# (tp, pp, recompute) of the runs: four to fit, the last one held out
MESHES = [(2, 2, "selective"), (4, 1, "selective"), (8, 2, "none"), (1, 4, "full"), (4, 2, "selective")]


def _parc(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "parc", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def base():
    return load(BASE).plan


def _settings(tp, pp, recompute):
    return {"mesh.tp": tp, "mesh.pp": pp, "mesh.cp": 1, "mesh.dp": 16 // (tp * pp), "train.recompute": recompute,
            "schedule.global_batch": 256, "schedule.micro_batch": 1}


MEGATRON_ARGS = {"mesh.tp": "tensor_model_parallel_size", "mesh.pp": "pipeline_model_parallel_size",
                 "mesh.cp": "context_parallel_size", "mesh.dp": "data_parallel_size",
                 "train.recompute": "recompute_granularity", "schedule.global_batch": "global_batch_size",
                 "schedule.micro_batch": "micro_batch_size"}


def megatron_log(settings: dict, step: float, memory: float) -> str:
    """A Megatron-LM log as training.py prints it: the arguments, a slow first iteration, then
    iterations around ``step`` seconds whose median is ``step`` (printed to 0.1 ms)."""
    lines = ["------------------------ arguments ------------------------"]
    args = {MEGATRON_ARGS[k]: v for k, v in settings.items()} | {"world_size": 16, "sequence_parallel": True}
    for name in sorted(args):
        lines.append(f"  {name} {'.' * (48 - len(name))} {args[name]}")
    lines.append("-------------------- end of arguments ---------------------")
    for i, f in enumerate([3.0, 1.0, 1.01, 1.0, 0.99, 1.0], 1):
        lines.append(f" [2026-01-05 10:00:{i:02d}] iteration {i:8d}/{100:8d} | consumed samples: {256 * i:12d} | "
                     f"elapsed time per iteration (ms): {step * f * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): "
                     f"400.0 | learning rate: 1.000000E-05 | global batch size:   256 | lm loss: 1.000000E+01 |")
        if i == 1:
            lines.append(f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 100.0 | max allocated: "
                         f"{memory / MiB:.1f} | reserved: 1.0 | max reserved: 1.0")
    return "\n".join(lines) + "\n"


def torchtitan_log(tp, pp, tps: float, memory: float) -> str:
    """A torchtitan log: the mesh it builds and coloured step lines around ``tps`` tokens/s/GPU."""
    dims = [(n, d) for n, d in (("pp", pp), ("dp_shard", 16 // (tp * pp)), ("tp", tp)) if d > 1]
    lines = [f"[rank0]:[titan] - root - INFO - Building {len(dims)}-D device mesh with "
             f"{[n for n, _ in dims]}, {[d for _, d in dims]}"]
    for i, f in enumerate([0.05, 1.0, 1.01, 1.0, 0.99, 1.0], 1):
        lines.append(f"[rank0]:[titan] - root - INFO - \x1b[31mstep: {i:2}  \x1b[32mloss: 10.0000  \x1b[33mmemory: "
                     f"{memory / GiB:5.2f}GiB(50.00%)  \x1b[34mtps: {round(tps * f):,}  \x1b[36mtflops: 400.00  "
                     f"\x1b[35mmfu: 40.00%\x1b[39m")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def synthetic(base, tmp_path_factory):
    """Logs of the five runs, generated from TRUTH: Megatron format for even runs, torchtitan for
    odd ones (torchtitan's FSDP mesh sets zero = 3, which the truth plan gets too)."""
    folder = tmp_path_factory.mktemp("logs")
    out = []
    for i, (tp, pp, rec) in enumerate(MESHES):
        s = _settings(tp, pp, rec)
        if i % 2:
            s = {f"mesh.{a}": v for a, v in (("pp", pp), ("dp", 16 // (tp * pp)), ("cp", 1), ("tp", tp))}
            s["train.zero"] = 3 if 16 // (tp * pp) > 1 else 0
        plan = plan_of_run(str(BASE), base, Run("truth", "-", s, world_size=16))
        step, mem = predict(plan, TRUTH)
        path = folder / f"run{i}-tp{tp}-pp{pp}.log"
        tokens = plan.schedule.global_batch * plan.model.seq_len
        path.write_text(torchtitan_log(tp, pp, tokens / (step * 16), mem) if i % 2 else megatron_log(s, step, mem))
        out.append((path, plan, step))
    return out


# --- the readers -------------------------------------------------------------------------------

def test_megatron_log_settings_warmup_and_memory():
    (run,) = read_log(str(LOGS / "megatron-tp2-pp2.log"))
    assert run.settings["mesh.tp"] == 2 and run.settings["mesh.pp"] == 2 and run.settings["mesh.dp"] == 4
    assert run.settings["train.recompute"] == "selective" and run.settings["train.sequence_parallel"] is True
    assert run.settings["train.zero"] == 1                       # use_distributed_optimizer True
    assert "schedule.virtual_stages" in run.settings and run.world_size == 16
    # iterations 1-3 are warm-up; 4, 5, 6 took 7000, 7200, 6900 ms: the median is 7000 ms
    assert run.measured["step_time"] == pytest.approx(7.0) and run.steps == 3
    # the largest `max allocated` over the ranks: rank 2's 51200 MB of 2^20 bytes
    assert run.measured["memory"] == 51200 * 2 ** 20
    assert run.measured["tflops_per_gpu"] == pytest.approx(476.0)   # median of 476.0, 462.8, 482.9


def test_megatron_fp8_and_interleaving(tmp_path):
    path = tmp_path / "fp8.log"
    path.write_text("------------------------ arguments ------------------------\n"
                    "  fp8 ............................................. hybrid\n"
                    "  virtual_pipeline_model_parallel_size ............ 2\n"
                    "  recompute_granularity ........................... None\n"
                    "-------------------- end of arguments ---------------------\n"
                    " iteration        1/      10 | elapsed time per iteration (ms): 1500.0 |\n")
    (run,) = read_log(str(path))
    assert run.settings == {"train.precision": "fp8", "schedule.virtual_stages": 2,
                            "schedule.pipeline": "interleaved_1f1b", "train.recompute": "none"}
    assert run.measured["step_time"] == 1.5 and run.steps == 1   # only a warm-up step: it is used


def test_torchtitan_log_with_colour_codes_and_mesh():
    (run,) = read_log(str(LOGS / "torchtitan-pp2-fsdp4-tp2.log"))
    # ['pp', 'dp_shard', 'tp'], [2, 4, 2]: dp 4 sharded with FSDP (zero 3), 16 GPUs
    assert run.settings == {"mesh.pp": 2, "mesh.dp": 4, "mesh.cp": 1, "mesh.tp": 2, "train.zero": 3,
                            "schedule.global_batch": 256, "model.seq_len": 4096}   # from `Training starts`
    assert run.world_size == 16
    # steps 4-6 give 9,000, 9,200, 8,950 tokens/s/GPU: median 9,000; mfu 47.17% -> 0.4717
    assert run.measured["tokens_per_second_per_gpu"] == 9000 and run.measured["mfu"] == pytest.approx(0.4717)
    assert run.measured["memory"] == pytest.approx(48.60 * 2 ** 30)     # the largest peak: 48.60GiB
    assert run.source.endswith(":10")


def test_csv_runs_units_and_settings(base):
    runs = read_log(str(LOGS / "runs.csv"))
    assert [r.label for r in runs] == ["tp2-pp2", "tp4-pp1", "tp8-pp2"]
    assert runs[0].measured == {"step_time": 7.1, "memory": 40.5 * 2 ** 30}
    assert runs[1].settings == {"mesh.tp": 4, "mesh.pp": 1, "schedule.global_batch": 256, "train.recompute": "full"}
    plan = plan_of_run(str(BASE), base, runs[2])
    # tp 8, pp 2 on the spec's 16 GPUs leaves dp = 16 / 16 = 1; 512 sequences -> 512 microbatches of 1
    assert (plan.mesh.tp, plan.mesh.pp, plan.mesh.dp) == (8, 2, 1)
    assert plan.schedule.global_batch == 512 and plan.schedule.microbatches == 512
    assert plan.train.recompute == "none"


def test_a_run_on_more_gpus_gets_more_nodes(base):
    # 32 GPUs with tp 2, pp 2: 4 nodes of 8, and dp = 32 / (2 · 2) = 8
    plan = plan_of_run(str(BASE), base, Run("big", "-", {"mesh.tp": 2, "mesh.pp": 2}, world_size=32))
    assert plan.cluster.nodes == 4 and plan.mesh.dp == 8 and plan.world_size == 32
    # 4 GPUs: one node of 4
    plan = plan_of_run(str(BASE), base, Run("small", "-", {"mesh.tp": 4, "mesh.pp": 1}, world_size=4))
    assert (plan.cluster.nodes, plan.cluster.gpus_per_node, plan.mesh.dp) == (1, 4, 1)


def test_throughputs_become_step_times(base):
    # 256 sequences of 4096 tokens = 1,048,576 tokens per step on 16 GPUs
    assert measured_step_time(base, {"tokens_per_second": 1048576 / 8}) == pytest.approx(8.0)
    assert measured_step_time(base, {"tokens_per_second_per_gpu": 1048576 / 16 / 8}) == pytest.approx(8.0)
    assert measured_step_time(base, {"step_time": 7.5, "mfu": 0.1}) == 7.5


@pytest.mark.parametrize("name, text, line, words", [
    ("m.log", " iteration        4/     100 | consumed samples: 1 | lm loss: 1.0 |\n", 1, "elapsed time per iteration"),
    ("m.log", "------------------------ arguments ------------------------\n  tensor_model_parallel_size .. x\n",
     2, "whole number"),
    ("m.log", "------------------------ arguments ------------------------\n", None, "no iteration line"),
    ("t.log", "junk\nstep:  2  loss:  7.1  memory: 3.00GiB(4.00%)  tflops: 1.0  mfu: 1.00%\n", 2, "tps"),
    ("t.log", "Building 1-D device mesh with ['xy'], [4]\nstep: 1 loss: 1.0 tps: 10\n", 1, "unknown mesh axis"),
    ("r.csv", "label,mesh.tpp,step_time\na,2,1.0\n", 1, "unknown column `mesh.tpp`"),
    ("r.csv", "label,mesh.tp,step_time\na,2,fast\n", 2, "should be a number"),
    ("r.csv", "label,mesh.tp,step_time\na,2\n", 2, "2 cells"),
    ("r.csv", "label,mesh.tp,memory_gb\na,2,40\n", 2, "no step time"),
    ("r.csv", 'label,train.recompute,step_time\na,"full\n}\nmodel {",1.0\n', 2, "takes a number"),
    ("r.csv", "", 1, "empty CSV"),
    # a number too large for a float, and what float() takes that no log prints
    ("r.csv", "label,step_time\na,1e40021000\n", 2, "should be a number"),
    ("r.csv", "label,step_time\na,nan\n", 2, "should be a number"),
    ("r.csv", "label,step_time\na,inf\n", 2, "should be a number"),
    ("r.csv", "label,step_time\na,1_0\n", 2, "should be a number"),
    ("r.csv", "label,world_size,step_time\na,8.5,1.0\n", 2, "whole number"),
    # a label is one line of printable text: it becomes a comment of the profile block
    ("r.csv", 'label,step_time\n"a\nb",1.0\n', 2, "`label`"),
    ("r.csv", 'label,step_time\n"a\x07b",1.0\n', 2, "`label`"),
    ("t.log", "step: 5  loss: 1.0  tps: 1e99999\n", 1, "should be a number"),
    ("m.log", " iteration 5/ 10 | elapsed time per iteration (ms): 1.2.3 |\n", 1, "should be a number"),
    ("x.log", "\n\nhello world\n", 3, "not a log parc reads"),
])
def test_unreadable_logs_name_the_file_and_line(tmp_path, name, text, line, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LogError) as e:
        read_log(str(path))
    assert e.value.file == str(path) and e.value.line == line and words in e.value.message


# --- the fit -----------------------------------------------------------------------------------

def test_the_fit_recovers_the_factors_the_runs_identify(synthetic):
    held = synthetic[-1]
    runs = [(plan, {"step_time": step}) for _, plan, step in synthetic[:-1]]
    prof, rep = fit(runs, start=Profile())
    assert "gemm_efficiency" in rep.fitted
    # printed step times are rounded to 0.1 ms: gemm_efficiency comes back to 1% (gemm_half_size,
    # which the four shapes pin down only weakly, is pulled toward its start and takes a little of
    # it), and any other field the fit reports as fitted to 1% (the pull toward the start moves a
    # fitted field back by at most 1% of the distance the runs moved it)
    assert prof.gemm_efficiency == pytest.approx(TRUTH.gemm_efficiency, rel=1e-2)
    for name in rep.fitted:
        assert getattr(prof, name) == pytest.approx(getattr(TRUTH, name), rel=1e-2), name
    for name in rep.unidentified:
        assert getattr(prof, name) == getattr(Profile(), name)
    assert rep.summary()["step_time"]["worst_after"] < 5e-3   # the weak gemm_half_size's pull: 0.2%
    before = predict(held[1], Profile())[0] / held[2] - 1
    after = predict(held[1], prof)[0] / held[2] - 1
    # 0.45 against the default 0.6 makes compute a third slower: far off before, within 0.5% after
    assert abs(before) > 0.15 and abs(after) < 5e-3


def test_calibrate_from_generated_logs_predicts_the_held_out_run(synthetic, tmp_path):
    out = tmp_path / "measured.par"
    r = _parc("calibrate", BASE, *[p for p, _, _ in synthetic[:-1]], "-o", out, "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["profile"]["gemm_efficiency"] == pytest.approx(0.45, rel=1e-2)
    assert data["summary"]["step_time"]["median_before"] > 0.15 > 5e-3 > data["summary"]["step_time"]["median_after"]
    assert [row["settings"].get("mesh.tp") for row in data["runs"]] == [tp for tp, _, _ in MESHES[:-1]]
    # the held-out run, through a spec that uses the written profile
    _, held_plan, held_step = synthetic[-1]
    spec = tmp_path / "held.par"
    shutil.copy(BASE, tmp_path / "base.par")
    spec.write_text(f'use "base.par"\nuse "measured.par"\n\nmesh {{\n  tp = 4\n  pp = 2\n  dp = auto\n}}\n')
    r = _parc("explain", spec, "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["efficiency"] == pytest.approx(data["profile"]["gemm_efficiency"], rel=1e-3)
    # the held-out run (tp 4, pp 2, dp 2, selective recompute: the spec's other settings) as
    # explain predicts it with the written profile, against the step time its log was made from
    assert (held_plan.mesh.tp, held_plan.mesh.pp, held_plan.train.recompute) == (4, 2, "selective")
    assert got["step_time"] == pytest.approx(held_step, rel=5e-3)
    assert abs(predict(held_plan, Profile())[0] / held_step - 1) > 0.15


def _toy(monkeypatch):
    """A step-time model where each field has a known effect: 10 s of GEMMs over gemm_efficiency,
    2 s of intra-node traffic over its efficiency (runs differ in how much), and
    hbm_efficiency and inter_node_efficiency that only ever appear as their product."""
    def toy(plan, prof):
        a, b = plan
        step = 10 / prof.gemm_efficiency + a / prof.intra_node_efficiency \
            + b / (prof.hbm_efficiency * prof.inter_node_efficiency)
        return step, 1.0
    monkeypatch.setattr(fit_module, "predict", toy)
    monkeypatch.setattr(fit_module, "measured_step_time", lambda plan, m: m["step_time"])


def test_the_fit_is_generic_over_the_fields(monkeypatch):
    _toy(monkeypatch)
    truth = Profile(gemm_efficiency=0.5, intra_node_efficiency=0.8, hbm_efficiency=0.5, inter_node_efficiency=0.8)
    plans = [(1.0, 1.0), (4.0, 1.0), (2.0, 3.0), (8.0, 0.5)]
    runs = [(p, {"step_time": 10 / 0.5 + p[0] / 0.8 + p[1] / 0.4}) for p in plans]
    start = Profile()
    prof, rep = fit([(p, m, f"r{i}") for i, (p, m) in enumerate(runs)], start=start)
    assert prof.gemm_efficiency == pytest.approx(0.5, rel=1e-3)
    assert prof.intra_node_efficiency == pytest.approx(0.8, rel=1e-3)
    # only the product 0.4 is determined: the two share the change and are reported together
    assert prof.hbm_efficiency * prof.inter_node_efficiency == pytest.approx(0.4, rel=1e-3)
    assert rep.confounded == [["hbm_efficiency", "inter_node_efficiency"]]
    assert set(rep.fitted) == {"gemm_efficiency", "intra_node_efficiency"}
    assert rep.unidentified == ["gemm_half_size", "fp8_gemm_speedup", "overlap"] and prof.overlap == 1.0   # the toy reads neither
    assert fit([(p, m) for p, m in runs], start=start)[0] == prof   # deterministic


def test_a_field_that_barely_moves_predictions_is_weak(monkeypatch):
    """overlap adds at most 0.1 ms to a 20 s step: the runs cannot tell its value from noise, so
    it is reported weak and stays within a hair of where it started, while the measured 10%
    slowdown goes to gemm_efficiency: 1.1 * (10 / 0.6 + 2) = 20.533 s = 10 / g + 2 -> g = 0.5396."""
    monkeypatch.setattr(fit_module, "predict", lambda plan, p: (10 / p.gemm_efficiency + 2 + 1e-4 * (1 - p.overlap), 1.0))
    monkeypatch.setattr(fit_module, "measured_step_time", lambda plan, m: m["step_time"])
    prof, rep = fit([(None, {"step_time": 1.1 * (10 / 0.6 + 2)})], start=Profile())
    assert rep.fitted == ["gemm_efficiency"] and rep.weak == ["overlap"]
    assert prof.gemm_efficiency == pytest.approx(0.5396, rel=1e-3)
    assert prof.overlap == pytest.approx(1.0, abs=1e-3)


def test_the_fit_stays_in_each_fields_range(monkeypatch):
    _toy(monkeypatch)
    # measured faster than peak allows: gemm_efficiency stops at its ceiling of 1.0
    prof, rep = fit([((0.0, 0.0), {"step_time": 5.0})], start=Profile())
    assert prof.gemm_efficiency == 1.0 and "gemm_efficiency" in rep.at_bound


# --- the command -------------------------------------------------------------------------------

def test_written_profile_is_formatted_and_checks(tmp_path):
    out = tmp_path / "p.par"
    r = _parc("calibrate", BASE, LOGS / "runs.csv", "-o", out, "--name", "lab")
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout and "gemm_efficiency" in r.stdout
    text = out.read_text()
    assert text.startswith("# Fitted by `parc calibrate` to 3 measured runs of ")
    assert "tests/data/logs/runs.csv:2" in text and "# step time error: median" in text
    assert 'profile "lab" {' in text and "gemm_efficiency" in text
    assert _parc("fmt", "--check", out).returncode == 0
    shutil.copy(BASE, tmp_path / "base.par")
    (tmp_path / "spec.par").write_text('use "base.par"\nuse "p.par"\n')
    assert _parc("check", tmp_path / "spec.par").returncode == 0


def test_without_output_the_block_goes_to_stdout():
    r = _parc("calibrate", BASE, LOGS / "megatron-tp2-pp2.log")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# Fitted by") and "step time per run" in r.stderr


def test_json_shape():
    r = _parc("calibrate", BASE, LOGS / "megatron-tp2-pp2.log", LOGS / "torchtitan-pp2-fsdp4-tp2.log",
              "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"spec", "profile", "start", "fitted", "confounded", "weak", "unidentified", "at_bound",
                      "iterations", "runs", "summary", "written_fields", "output", "profile_text"}
    assert set(d["profile"]) == {"name", *[n for n, _, _ in profile_fields(Profile())]}
    row = d["runs"][1]
    assert set(row) == {"label", "source", "steps", "settings", "measured", "before", "after", "error"}
    assert row["settings"]["world_size"] == 16 and row["steps"] == 3
    # 1,048,576 tokens per step at a median 9,000 tokens/s on each of 16 GPUs: 7.2818 s
    assert row["measured"]["step_time"] == pytest.approx(1048576 / (9000 * 16))
    assert set(row["error"]) == {"step_time_before", "step_time_after", "memory_before", "memory_after"}
    assert set(d["summary"]) == {"step_time", "memory"} and d["output"] is None


@pytest.mark.parametrize("args, code, words", [
    (["calibrate", BASE, LOGS / "missing.log"], 2, "cannot read"),
    (["calibrate", BASE], 2, "LOG"),
    (["calibrate", LOGS / "missing.par", LOGS / "runs.csv"], 2, "missing.par"),
    (["calibrate", BASE, LOGS / "base.par"], 1, "base.par:"),
])
def test_exit_codes(args, code, words):
    r = _parc(*args)
    assert r.returncode == code and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_json_names_the_line_a_log_fails_on(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("label,step_time\na,slow\n")
    r = _parc("calibrate", BASE, bad, "--format", "json")
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"spec": "tests/data/logs/base.par", "file": str(bad), "line": 2,
                                    "error": f"{bad}:2: `step_time` should be a number, not `slow`"}


def test_runs_that_do_not_make_a_plan_are_named(tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("label,mesh.tp,step_time\nodd,3,1.0\n")
    r = _parc("calibrate", BASE, csv)
    assert r.returncode == 1 and "odd:" in r.stderr and "Traceback" not in r.stderr
    csv.write_text("label,mesh.tp,mesh.pp,mesh.dp,world_size,step_time\nhalf,2,2,2,16,1.0\n")
    r = _parc("calibrate", BASE, csv)
    assert r.returncode == 1 and "half:" in r.stderr and "does not span the cluster's 16 GPUs" in r.stderr
    spec = tmp_path / "bad.par"
    spec.write_text('model { from = llama3_8b\n  layers = -1 }\n')
    r = _parc("calibrate", spec, LOGS / "runs.csv")
    assert r.returncode == 1 and "has errors" in r.stderr


def test_accuracy_calibration_rows(base, synthetic):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from accuracy_calibration import calibration_rows
    finally:
        sys.path.pop(0)
    cases = [(plan, step, f"case {i}") for i, (_, plan, step) in enumerate(synthetic)]
    rows = calibration_rows(cases)
    assert [r["label"] for r in rows] == [f"case {i}" for i in range(5)]
    assert [r["fitted_on"] for r in rows] == [True, True, False, False, False]
    for r in rows[2:]:
        assert abs(r["error_after"]) < abs(r["error_before"])
    assert math.isclose(rows[0]["measured"], synthetic[0][2])


def test_plan_searches_with_the_profile_a_cluster_file_uses(tmp_path):
    """`parc plan --cluster FILE` predicts with the profile FILE uses: a measured GEMM efficiency
    of 0.3 (half the default 0.6) makes the best plan's step time longer."""
    cluster = BASE.read_text().split("model ")[0]
    (tmp_path / "measured.par").write_text('profile "lab" {\n  gemm_efficiency = 0.3\n}\n')
    (tmp_path / "plain.par").write_text(cluster)
    (tmp_path / "measured-cluster.par").write_text('use "measured.par"\n' + cluster)
    times = {}
    for name in ("plain", "measured-cluster"):
        r = _parc("plan", "--model", "llama3_8b", "--cluster", tmp_path / f"{name}.par", "--top", "1",
                  "--format", "json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        times[name] = json.loads(r.stdout)["plans"][0]["step_time"]
    assert times["measured-cluster"] > 1.5 * times["plain"]


def test_a_label_with_a_line_break_or_a_number_too_large_is_refused_not_a_crash(tmp_path):
    csv = tmp_path / "runs.csv"
    for body, words in (('label,step_time\n"a\nb",1.5\n', "`label` holds a line break"),
                        ("label,step_time\nx,1e40021000\n", "`step_time` should be a number, not `1e40021000`")):
        csv.write_text(body)
        r = _parc("calibrate", BASE, csv)
        assert r.returncode == 1 and words in r.stderr, r.stderr
        assert "internal error" not in r.stderr


def test_a_log_named_with_a_line_break_is_labelled_on_one_line(tmp_path):
    log = tmp_path / "run\n1.log"
    log.write_text("step: 5  loss: 1.0  tps: 1,000\n")
    assert read_log(str(log))[0].label == "run\\n1.log"
