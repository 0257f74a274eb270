"""parc lint: discovery, select/ignore, suppression comments, style checks and exit codes."""
from __future__ import annotations

import json
import textwrap

import pytest

from parc.cli.main import main
from parc.lint.engine import Selector, UsageError, discover, lint_paths, suppressions

CLUSTER = """\
cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}
"""

GOOD = """\
model "m" { from = llama3_8b }

cluster "box" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}

mesh { dp = 8 }
"""

# tp = 6 does not divide 32 heads: one P1 error, on the tp line (12)
def bad_tp(comment: str = "") -> str:
    return (GOOD.replace("gpus_per_node = 8", "gpus_per_node = 6")
            .replace("mesh { dp = 8 }", "mesh {\n  dp = 1\n  tp = 6" + comment + "\n}"))


def write(tmp_path, name, text):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def lint_json(capsys, *argv):
    rc = main(["lint", "--format", "json", *map(str, argv)])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def codes(report):
    return [d["code"] for d in report["diagnostics"]]


# ------------------------------------------------------------------------------ discovery

def test_folders_are_searched_recursively_and_hidden_folders_skipped(tmp_path, capsys):
    write(tmp_path, "a.par", GOOD)
    write(tmp_path, "deep/er/b.par", GOOD)
    write(tmp_path, "deep/notes.txt", "not a spec")
    write(tmp_path, ".git/c.par", "this is not parsed {")
    write(tmp_path, "node_modules/d.par", "neither {")
    files, errors = discover([str(tmp_path)])
    assert errors == []
    names = sorted(f.replace(str(tmp_path), "").replace("\\", "/") for f in files)
    assert names == ["/a.par", "/deep/er/b.par"]
    rc, rep = lint_json(capsys, tmp_path)
    assert rc == 0 and rep["summary"]["files"] == 2 and rep["diagnostics"] == []


def test_globs_are_expanded_by_parc_and_a_missing_path_exits_2(tmp_path, capsys):
    write(tmp_path, "specs/one.par", GOOD)
    write(tmp_path, "specs/sub/two.par", GOOD)
    files, errors = discover([str(tmp_path / "specs" / "**" / "*.par")])
    assert len(files) == 2 and errors == []
    rc = main(["lint", str(tmp_path / "nope.par")])
    cap = capsys.readouterr()
    assert rc == 2 and "P030" in cap.out and "nope.par" in cap.out and "Traceback" not in cap.err
    rc = main(["lint", str(tmp_path / "specs" / "*.xyz")])
    assert rc == 2 and "no files match" in capsys.readouterr().out


def test_exclude_skips_matching_paths(tmp_path):
    write(tmp_path, "keep/a.par", GOOD)
    write(tmp_path, "vendor/b.par", bad_tp())
    files, _ = discover([str(tmp_path)], exclude=["vendor"])
    assert [f.endswith("a.par") for f in files] == [True]


def test_a_shared_cluster_file_is_a_fragment_not_a_spec(tmp_path, capsys):
    # a `model = ...` key inside a target block does not make the file a spec
    write(tmp_path, "clusters/box.par", CLUSTER + '\ntarget vllm {\n  model = "meta-llama/Meta-Llama-3-8B"\n}\n')
    write(tmp_path, "spec.par", 'use "clusters/box.par"\n\nmodel "m" { from = llama3_8b }\n\nmesh { tp = 8 }\n\n'
                                'serve { max_model_len = 8192 }\n')
    rc, rep = lint_json(capsys, tmp_path, "--root", tmp_path)
    assert rc == 0, rep
    assert rep["summary"]["files"] == 2


def test_an_error_in_an_imported_file_is_reported_once(tmp_path, capsys):
    write(tmp_path, "clusters/box.par", CLUSTER.replace("nodes ", "nodez "))
    for n in ("a", "b"):
        write(tmp_path, f"{n}.par", 'use "clusters/box.par"\nmodel "m" { from = llama3_8b }\nmesh { dp = 8 }\n')
    rc, rep = lint_json(capsys, tmp_path, "--root", tmp_path)
    assert rc == 1
    p007 = [d for d in rep["diagnostics"] if d["code"] == "P007"]
    assert len(p007) == 1 and p007[0]["file"].endswith("box.par") and p007[0]["line"] == 2


# ------------------------------------------------------------------------------ exit codes

def test_exit_codes(tmp_path, capsys):
    good = write(tmp_path, "good.par", GOOD)
    bad = write(tmp_path, "bad.par", bad_tp())
    warn = write(tmp_path, "warn.par", GOOD.replace("{ from = llama3_8b }",
                                                    "{\n  from = llama3_8b\n  layers = 32\n}"))
    assert main(["lint", str(good)]) == 0
    assert main(["lint", str(bad)]) == 1
    assert main(["lint", str(bad), "--exit-zero"]) == 0
    assert main(["lint", str(warn)]) == 0
    assert main(["lint", str(warn), "--warnings-as-errors"]) == 1
    assert main(["lint", str(good), "--select", "P9x"]) == 2
    assert main(["lint", str(good), str(tmp_path / "missing.par"), "--exit-zero"]) == 2
    capsys.readouterr()


def test_quiet_prints_nothing_for_clean_files_and_text_groups_per_file(tmp_path, capsys):
    good = write(tmp_path, "good.par", GOOD)
    bad = write(tmp_path, "bad.par", bad_tp())
    assert main(["lint", "-q", str(good)]) == 0
    assert capsys.readouterr().out == ""
    main(["lint", str(good), str(bad)])
    out = capsys.readouterr().out
    assert f"── {bad}  (1 error)" in out
    assert "P102" in out and "\x1b[" not in out
    assert out.strip().splitlines()[-1] == "1 error in 2 files"


def test_colour_only_when_forced_and_never_with_no_color(tmp_path, capsys, monkeypatch):
    bad = write(tmp_path, "bad.par", bad_tp())
    monkeypatch.setenv("FORCE_COLOR", "1")
    main(["lint", str(bad)])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    main(["lint", str(bad)])
    assert "\x1b[" not in capsys.readouterr().out


# ------------------------------------------------------------------------------ select / ignore

def test_selector_most_specific_wins():
    s = Selector(["P5"], ["P552"])
    assert s("P551") and not s("P552") and not s("P102")
    s = Selector(["P552"], ["P5"])
    assert s("P552") and not s("P551")
    s = Selector(None, ["P1,P3"])
    assert s("P001") and not s("P102") and not s("P301") and s("P201")
    assert Selector(["ALL"], ["P5"])("P102")
    assert not Selector(["P5"], ["P5"])("P501")
    with pytest.raises(UsageError):
        Selector(["tp"])


def test_select_and_ignore_on_the_command_line(tmp_path, capsys):
    bad = write(tmp_path, "bad.par", bad_tp().replace(
        "{ from = llama3_8b }", "{\n  from = llama3_8b\n  layers = 32\n}"))
    # P102 (tp), P551 (`from = ` is not aligned as fmt aligns it), P552 (layers is the preset's)
    rc, rep = lint_json(capsys, bad)
    assert sorted(codes(rep)) == ["P102", "P551", "P552"] and rc == 1
    rc, rep = lint_json(capsys, bad, "--ignore", "P1")
    assert sorted(codes(rep)) == ["P551", "P552"] and rc == 0
    rc, rep = lint_json(capsys, bad, "--select", "P1,P552")
    assert sorted(codes(rep)) == ["P102", "P552"]
    rc, rep = lint_json(capsys, bad, "--select", "P0")
    assert codes(rep) == [] and rc == 0


def test_style_checks_report_restated_values(tmp_path, capsys):
    spec = write(tmp_path, "s.par", """\
        model "m" {
          from     = llama3_8b
          layers   = 32
          head_dim = 128
        }

        cluster "box" {
          nodes         = 1
          gpus_per_node = 8
          gpu {
            from   = h100_sxm
            memory = 80GB
          }
          intra_node = nvlink(450GB/s)
        }

        mesh {
          pp = 4
          dp = 2
        }

        placement { layers = [8, 8, 8, 8] }

        schedule {
          micro_batch  = 1
          global_batch = 16
          microbatches = 8
        }
        """)
    rc, rep = lint_json(capsys, spec, "--select", "P55")
    got = sorted((d["code"], d["line"]) for d in rep["diagnostics"])
    # layers restates the preset; head_dim = hidden / heads, microbatches = 16 / (1 · 2) are derived;
    # [8, 8, 8, 8] is the even split; memory = 80GB is not H100's 80 GiB, so it is a real override
    assert got == [("P552", 3), ("P553", 4), ("P553", 27), ("P554", 22)], rep
    assert rc == 0
    # parc check does not report style
    rc = main(["check", "--format", "json", str(spec)])
    assert not any(d["code"].startswith("P55") for d in json.loads(capsys.readouterr().out)["diagnostics"])


def test_unformatted_file_is_reported_at_its_first_changed_line(tmp_path, capsys):
    from parc.language.fmt import format_text

    text = GOOD.replace("mesh { dp = 8 }", "mesh {\n      dp = 8\n}")
    assert format_text(text) != text
    spec = write(tmp_path, "s.par", text)
    _, rep = lint_json(capsys, spec, "--select", "P551")
    assert [(d["code"], d["line"]) for d in rep["diagnostics"]] == [("P551", 11)]
    spec.write_text(format_text(text))
    _, rep = lint_json(capsys, spec, "--select", "P551")
    assert rep["diagnostics"] == []


# ------------------------------------------------------------------------------ suppressions

def test_suppression_comments_are_found_with_the_lexers_rules():
    text = 'a = "# parc: ignore[P101]"\nb = 1  # parc: ignore[P102, p301]\n# parc: ignore\n'
    sups = suppressions("f.par", text)
    assert [(s.line, s.codes and [c for c, _ in s.codes]) for s in sups] == [(2, ["P102", "P301"]), (3, None)]
    (c1, sp1), (c2, sp2) = sups[0].codes
    line = text.splitlines()[1]
    assert line[sp1.column - 1:sp1.end_column - 1] == "P102"
    assert line[sp2.column - 1:sp2.end_column - 1] == "p301"


def test_a_suppression_silences_its_line_and_is_counted(tmp_path, capsys):
    bad = write(tmp_path, "bad.par", bad_tp("  # parc: ignore[P102]"))
    rc, rep = lint_json(capsys, bad)
    assert rc == 0 and codes(rep) == [] and rep["summary"]["suppressed"] == 1
    bad = write(tmp_path, "bad.par", bad_tp("  # parc: ignore[P1]"))
    rc, rep = lint_json(capsys, bad)
    assert rc == 0 and codes(rep) == []
    # on another line it does not apply, and stays unjudged while the file has errors
    bad.write_text(bad_tp().replace("dp = 1", "dp = 1  # parc: ignore[P102]"))
    rc, rep = lint_json(capsys, bad)
    assert rc == 1 and codes(rep) == ["P102"]


def test_unused_suppressions_are_reported_per_code(tmp_path, capsys):
    spec = write(tmp_path, "s.par", GOOD.replace("mesh { dp = 8 }",
                                                 "mesh { dp = 8 }  # parc: ignore[P102, P301]"))
    rc, rep = lint_json(capsys, spec)
    assert rc == 0
    unused = [d for d in rep["diagnostics"] if d["code"] == "P550"]
    assert [(d["line"], d["message"].split("`")[1]) for d in unused] == [
        (10, "# parc: ignore[P102]"), (10, "# parc: ignore[P301]")]
    line = GOOD.splitlines()[9] + "  # parc: ignore[P102, P301]"
    assert line[unused[0]["column"] - 1:unused[0]["end_column"] - 1] == "P102"
    # a code turned off in this run is not judged; P550 itself can be ignored
    _, rep = lint_json(capsys, spec, "--ignore", "P1,P3")
    assert codes(rep) == []
    _, rep = lint_json(capsys, spec, "--ignore", "P550")
    assert codes(rep) == []


def test_unknown_codes_and_blanket_comments(tmp_path, capsys):
    spec = write(tmp_path, "s.par", GOOD.replace("mesh { dp = 8 }", "mesh { dp = 8 }  # parc: ignore[P999, X1]")
                 .replace('model "m"', '# parc: ignore\nmodel "m"'))
    rc, rep = lint_json(capsys, spec)
    msgs = sorted(d["message"] for d in rep["diagnostics"])
    assert rc == 0 and all(d["code"] == "P550" for d in rep["diagnostics"])
    assert msgs == ["`# parc: ignore` suppresses nothing on this line",
                    "`P999` is not a parc diagnostic code", "`X1` is not a parc diagnostic code"]


def test_a_blanket_comment_silences_every_code_on_its_line(tmp_path, capsys):
    bad = write(tmp_path, "bad.par", bad_tp("  # parc: ignore"))
    rc, rep = lint_json(capsys, bad)
    assert rc == 0 and codes(rep) == []


def test_library_entry_point(tmp_path):
    write(tmp_path, "a.par", GOOD)
    write(tmp_path, "b.par", bad_tp())
    res = lint_paths([str(tmp_path)], ignore=["P5"])
    assert len(res.files) == 2 and res.errors == 1 and res.io_errors == []
    assert [d.code for d in res.diagnostics] == ["P102"]


def test_findings_in_a_shared_file_are_named_and_suppressed_in_that_file(tmp_path, capsys):
    """The importer names the shared file relative to the working folder, the command line
    absolutely: both are the same file, its comments apply, and its finding is reported once."""
    cluster = CLUSTER.replace("  gpu           = h100_sxm\n",
                              "  gpu {\n    from  = h100_sxm\n    flops = 989TFLOPS{c}\n  }\n")
    box = write(tmp_path, "clusters/box.par", cluster.replace("{c}", ""))
    for n in ("a", "b"):
        write(tmp_path, f"{n}.par", 'use "clusters/box.par"\n\nmodel "m" { from = llama3_8b }\n\nmesh { dp = 8 }\n')
    _, rep = lint_json(capsys, tmp_path.resolve(), "--root", tmp_path, "--select", "P552")
    assert [(d["code"], d["file"], d["line"]) for d in rep["diagnostics"]] == [("P552", str(box.resolve()), 6)]
    box.write_text(cluster.replace("{c}", "  # parc: ignore[P552]"))
    _, rep = lint_json(capsys, tmp_path.resolve(), "--root", tmp_path, "--select", "P552")
    assert rep["diagnostics"] == [] and rep["summary"]["suppressed"] == 1
