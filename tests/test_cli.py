"""The command line says only what is true: unknown targets, JSON on errors, counts and plurals."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from parc.cli.main import main

EXAMPLES = ROOT / "examples"
TRAIN = ROOT / "tests" / "data" / "explain" / "llama3-70b-train.par"
SERVE = ROOT / "tests" / "data" / "explain" / "llama3-70b-serve.par"

# --- an unknown --target is a usage error in every command that takes one --------------------------

TARGET_COMMANDS = [
    ["check", str(SERVE)],
    ["lint", str(SERVE)],
    ["explain", str(SERVE)],
    ["draw", str(SERVE)],
    ["plan", str(SERVE)],
    ["rules"],
    ["compile", str(SERVE)],
]


@pytest.mark.parametrize("argv", TARGET_COMMANDS, ids=lambda a: a[0])
def test_unknown_target_is_a_usage_error(capsys, argv):
    rc = main([*argv, "--target", "vllmm"])
    cap = capsys.readouterr()
    assert rc == 2
    assert "unknown target `vllmm`" in cap.err and "did you mean `vllm`?" in cap.err
    assert cap.out == ""


@pytest.mark.parametrize("argv", TARGET_COMMANDS[:-1], ids=lambda a: a[0])
def test_rule_families_are_targets_too(capsys, argv):
    # `torch` (parc's runtime) has rules of its own, not a backend
    rc = main([*argv, "--target", "torch", *(["--format", "json"] if argv[0] != "draw" else ["-q"])])
    assert rc in (0, 1)  # judged, not refused as usage
    assert "unknown target" not in capsys.readouterr().err


def test_compile_refuses_a_rule_family_that_has_no_backend(capsys):
    assert main(["compile", str(SERVE), "--target", "torch"]) == 2
    err = capsys.readouterr().err
    assert "unknown target `torch`" in err and "vllm" in err


# --- `parc check` says "no problems" only when it printed none; counts are plural where they are ---

ONE_GPU = """
model "tiny" { from = llama3_8b }

cluster "one" {
  nodes         = 1
  gpus_per_node = 1
  gpu           = h100_sxm
}

mesh { tp = 1 }

serve {
  max_model_len          = 4096
  gpu_memory_utilization = 0.90
}
"""


NOTE_ONLY = """
model "qwen2.5-7b" {
  from    = qwen2_5_7b
  seq_len = 32768
}

cluster "l40s-box" {
  nodes         = 1
  gpus_per_node = 4
  gpu           = l40s
  intra_node    = pcie(32GB/s)
}

mesh {
  dp = 2
  tp = 2
}

serve {
  max_model_len          = 16384
  gpu_memory_utilization = 0.90
  max_num_seqs           = 32
}
"""


def test_check_counts_the_notes_it_printed(capsys, write_spec):
    # one GPU holds this model: a note advises dp replicas instead of tp, and nothing else
    assert main(["check", str(write_spec(NOTE_ONLY))]) == 0
    out = capsys.readouterr().out
    assert " note: " in out
    assert "no problems" not in out
    assert out.rstrip().splitlines()[-1] == "ok: 1 file checked, 1 note"


def test_check_clean_spec_says_no_problems(capsys, write_spec):
    assert main(["check", str(write_spec(ONE_GPU))]) == 0
    assert capsys.readouterr().out == "ok: 1 file checked, no problems\n"


def test_quiet_check_hides_notes_and_their_count(capsys, write_spec):
    assert main(["check", "-q", str(write_spec(NOTE_ONLY))]) == 0
    assert capsys.readouterr().out == ""


def test_count_helper():
    from parc.words import count, plural

    assert count(1, "GPU") == "1 GPU" and count(2, "GPU") == "2 GPUs" and count(0, "node") == "0 nodes"
    assert count(1, "microbatch") == "1 microbatch" and count(3, "microbatch") == "3 microbatches"
    assert count(2, "axis") == "2 axes" and plural(1, "error") == "error"
    assert count(1024, "GPU", sep=True) == "1,024 GPUs"


def test_one_gpu_is_singular_everywhere(capsys, write_spec, tmp_path):
    spec = write_spec(ONE_GPU)
    assert main(["explain", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "(1 GPU," in out and "1 GPUs" not in out
    html = tmp_path / "p.html"
    assert main(["explain", str(spec), "--html", str(html)]) == 0
    capsys.readouterr()
    page = html.read_text()
    assert "1 GPU," in page and "1 GPUs" not in page
    assert main(["draw", str(spec), "--what", "mesh"]) == 0
    svg = capsys.readouterr().out
    assert "1 GPU on 1 node" in svg and "1 GPUs" not in svg


def test_lint_counts_the_notes_it_printed(capsys, write_spec):
    assert main(["lint", str(write_spec(NOTE_ONLY))]) == 0
    out = capsys.readouterr().out
    assert " note: " in out and "no problems" not in out
    assert out.rstrip().splitlines()[-1] == "ok: 1 file linted, 1 note"


# --- --format json prints JSON on stdout, also when the spec has errors --------------------------

BAD_TP = ONE_GPU.replace("mesh { tp = 1 }", "mesh { tp = 3 }")


def test_explain_json_with_errors_is_json(capsys, write_spec):
    assert main(["explain", str(write_spec(BAD_TP)), "--format", "json"]) == 1
    cap = capsys.readouterr()
    j = json.loads(cap.out)
    assert j["file"].endswith("spec.par")
    assert j["diagnostics"] and all(d["severity"] for d in j["diagnostics"])
    assert any(d["severity"] == "error" for d in j["diagnostics"])
    assert j["world_size"] == 3  # the plan as written is explained, its errors listed


def test_compile_json_with_errors_is_json(capsys, write_spec):
    assert main(["compile", str(write_spec(BAD_TP)), "--target", "vllm", "--format", "json"]) == 1
    j = json.loads(capsys.readouterr().out)
    assert j["ok"] is False and j["files"] == [] and j["target"] == "vllm"
    assert any(d["severity"] == "error" for d in j["diagnostics"])


def test_compile_json_lists_the_files(capsys, tmp_path):
    assert main(["compile", str(SERVE), "--format", "json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["ok"] is True and j["target"] == "vllm" and j["files"]
    assert main(["compile", str(SERVE)]) == 0
    text = capsys.readouterr().out
    assert "".join(f["text"] for f in j["files"]) in text or len(j["files"]) > 1
    assert {"path", "executable", "text"} <= set(j["files"][0])
    out = tmp_path / "o"
    assert main(["compile", str(SERVE), "--format", "json", "-o", str(out)]) == 0
    j2 = json.loads(capsys.readouterr().out)
    assert j2["output"] == str(out)
    assert [f["path"] for f in j2["files"]] == [f["path"] for f in j["files"]]
    assert all((out / f["path"]).read_text() == f["text"] for f in j["files"])


# --- parc diff --exit-code: 0 no change, 1 changes (as git diff --exit-code), 2 trouble ---------

def test_diff_exit_code(capsys, write_spec):
    a = write_spec(ONE_GPU, "a.par")
    same = write_spec("# only a comment differs\n" + ONE_GPU, "same.par")
    changed = write_spec(ONE_GPU.replace("max_model_len          = 4096", "max_model_len          = 2048"),
                         "changed.par")
    assert main(["diff", str(a), str(same), "--exit-code"]) == 0
    assert main(["diff", str(a), str(changed), "--exit-code"]) == 1
    assert "max_model_len" in capsys.readouterr().out  # the diff is still printed
    assert main(["diff", str(a), str(changed)]) == 0   # without the flag a change is no failure
    assert main(["diff", str(a), str(changed), "--exit-code", "--format", "json"]) == 1
    capsys.readouterr()


def test_diff_exit_code_trouble_is_2(capsys, write_spec):
    a = write_spec(ONE_GPU, "a.par")
    bad = write_spec(BAD_TP, "bad.par")
    assert main(["diff", str(a), str(bad)]) == 1
    assert main(["diff", str(a), str(bad), "--exit-code"]) == 2
    assert main(["diff", str(a), str(a.parent / "missing.par"), "--exit-code"]) == 2
    capsys.readouterr()
