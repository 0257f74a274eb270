"""parc diff: settings and estimates old → new, in text, markdown (golden) and JSON, and --git."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from parc.cli.main import main
from support.snapshot import assert_snapshot

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden" / "diff"
EXAMPLE = ROOT / "examples" / "gpt3-175b-train.par"


def _tp_pp_change(tmp_path, monkeypatch):
    """The GPT-3 175B example before and after `pp = 8 → 16`, `tp = 8 → 4` (dp stays 16)."""
    text = EXAMPLE.read_text()
    assert "pp = 8" in text and "tp = cluster.gpus_per_node" in text
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    (tmp_path / "before" / "gpt3.par").write_text(text)
    (tmp_path / "after" / "gpt3.par").write_text(text.replace("pp = 8", "pp = 16")
                                                 .replace("tp = cluster.gpus_per_node", "tp = 4"))
    monkeypatch.chdir(tmp_path)
    return "before/gpt3.par", "after/gpt3.par"


def test_markdown_snapshot_for_a_change_of_tp_and_pp(tmp_path, monkeypatch, capsys):
    """Regenerate on purpose with PARC_UPDATE_GOLDEN=1 after a deliberate change of the cost
    model or of the layout, and read the diff of the golden file in review."""
    old, new = _tp_pp_change(tmp_path, monkeypatch)
    assert main(["diff", old, new, "--format", "markdown"]) == 0
    got = capsys.readouterr().out
    assert_snapshot(GOLDEN / "gpt3-175b-tp-pp.md", got)


def test_json_has_both_estimates_the_setting_changes_and_the_metrics(tmp_path, monkeypatch, capsys):
    old, new = _tp_pp_change(tmp_path, monkeypatch)
    assert main(["diff", old, new, "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["old"]["file"] == old and rep["new"]["file"] == new
    changes = {c["path"]: (c["old"], c["new"]) for c in rep["changes"]}
    assert changes["mesh.pp"] == (8, 16) and changes["mesh.tp"] == (8, 4)
    assert "mesh.dp" not in changes  # dp = auto stays 1024 / 64 = 16
    rows = {r["key"]: r for r in rep["metrics"]}
    for key in ("world_size", "mesh.tp", "memory_per_gpu.total", "comm_per_step.tp", "bubble_fraction",
                "step_time"):
        r = rows[key]
        old_v = rep["old"]["estimate"]
        for part in key.split("."):
            old_v = old_v[part]
        assert r["old"] == old_v
        assert r["delta"] == pytest.approx(r["new"] - r["old"])
    assert rows["world_size"]["verdict"] == "same"
    # halving tp halves the TP traffic per layer's worth of work, a deeper pipeline has a larger bubble
    assert rows["comm_per_step.tp"]["verdict"] == "better"
    assert rows["bubble_fraction"]["verdict"] == "worse"


def test_text_is_an_aligned_table_without_colour_off_a_terminal(tmp_path, monkeypatch, capsys):
    old, new = _tp_pp_change(tmp_path, monkeypatch)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert main(["diff", old, new]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert "mesh.tp" in out and "8 → 4" in out
    table = out[out.index("  old"):].splitlines()
    rows = [ln for ln in table[1:] if ln.startswith("  ")]
    ends = {len(ln.rstrip()) for ln in rows if ln.split()[-1].endswith(("%)", "pt"))}
    assert len(ends) == 1, table  # the change column is right-aligned


def test_a_version_with_shape_errors_has_no_plan_to_compare(tmp_path, monkeypatch, capsys):
    old, new = _tp_pp_change(tmp_path, monkeypatch)
    Path(new).write_text(Path(new).read_text().replace("tp = 4", "tp = 7"))
    assert main(["diff", old, new]) == 1
    err = capsys.readouterr().err
    assert "after/gpt3.par has errors" in err and "P1" in err


def test_a_memory_error_is_still_compared_and_flagged(tmp_path, monkeypatch, capsys):
    old, new = _tp_pp_change(tmp_path, monkeypatch)
    Path(new).write_text(Path(old).read_text().replace("pp = 8", "pp = 4")
                         .replace("tp = cluster.gpus_per_node", "tp = 4"))
    assert main(["diff", old, new, "--format", "markdown"]) == 1
    out = capsys.readouterr().out
    assert "> [!WARNING]" in out and "P401" in out and "| total |" in out


def test_usage_and_io_errors_exit_2(tmp_path, capsys):
    assert main(["diff", str(EXAMPLE)]) == 2
    assert main(["diff", str(EXAMPLE), str(tmp_path / "missing.par")]) == 2
    err = capsys.readouterr().err
    assert "OLD.par NEW.par" in err and "missing.par" in err and "Traceback" not in err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_reads_the_old_version_and_its_imports_from_the_revision(tmp_path, monkeypatch, capsys):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"})

    (tmp_path / "specs" / "clusters").mkdir(parents=True)
    (tmp_path / "specs" / "clusters" / "pod.par").write_text(
        'cluster "pod" {\n  nodes         = 2\n  gpus_per_node = 8\n  gpu           = h100_sxm\n'
        '  intra_node    = nvlink(450GB/s)\n  inter_node    = infiniband(400Gb/s)\n}\n')
    spec = tmp_path / "specs" / "train.par"
    spec.write_text('use "clusters/pod.par"\n\nmodel "m" { from = llama3_8b }\n\n'
                    'mesh {\n  dp = auto\n  tp = 8\n}\n\nschedule {\n  micro_batch  = 1\n  global_batch = 64\n}\n')
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    # in the working tree: twice the nodes, and tp 8 -> 4
    pod = tmp_path / "specs" / "clusters" / "pod.par"
    pod.write_text(pod.read_text().replace("nodes         = 2", "nodes         = 4"))
    spec.write_text(spec.read_text().replace("tp = 8", "tp = 4"))
    monkeypatch.chdir(tmp_path / "specs")
    assert main(["diff", "--git", "HEAD", "train.par", "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["old"]["file"] == "HEAD:train.par"
    assert rep["old"]["estimate"]["world_size"] == 16 and rep["new"]["estimate"]["world_size"] == 32
    changes = {c["path"]: (c["old"], c["new"]) for c in rep["changes"]}
    assert changes["cluster.nodes"] == (2, 4) and changes["mesh.tp"] == (8, 4) and changes["mesh.dp"] == (2, 8)
    assert main(["diff", "--git", "no-such-rev", "train.par"]) == 2
    assert "no-such-rev" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_resolves_the_old_imports_as_check_does(tmp_path, monkeypatch, capsys):
    """The old version's imports are resolved at the revision by the loader itself: a missing
    import gets check's did-you-mean from the revision's files, and no temporary folder shows."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"})

    (tmp_path / "specs" / "clusters").mkdir(parents=True)
    (tmp_path / "specs" / "clusters" / "pod.par").write_text(
        'cluster "pod" {\n  nodes         = 2\n  gpus_per_node = 8\n  gpu           = h100_sxm\n}\n')
    spec = tmp_path / "specs" / "train.par"
    spec.write_text('use "clusters/pdo.par"\n\nmodel "m" { from = llama3_8b }\n')
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    spec.write_text('use "clusters/pod.par"\n\nmodel "m" { from = llama3_8b }\n')
    monkeypatch.chdir(tmp_path / "specs")
    assert main(["diff", "--git", "HEAD", "train.par"]) == 1
    err = capsys.readouterr().err
    assert "HEAD:train.par:1:5: P013 error: imported file `clusters/pdo.par` not found" in err
    assert "did you mean `pod.par`?" in err and "parc-diff-" not in err
