"""Every P0 code: a spec that triggers it, with the code, line and column asserted."""
from __future__ import annotations

import pytest

from parc.api import check_file

BASE = '''
model "m" { from = llama3_8b }
cluster "c" {
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}
mesh { dp = 8 }
'''

# (code, spec text, line, column): line and column of the first diagnostic with that code
CASES = [
    ("P001", 'model "m" { from = llama3_8b }\nmesh { dp = = 8 }\n', 2, 13),
    ("P001", 'model "m" {\n  from = llama3_8b seq_len = 4\n}\n', 2, 20),
    ("P001", 'model "m" { from = "llama3_8b }\n', 1, 20),
    ("P002", 'model "m" {\n  from = llama3_8b\n\nmesh { dp = 8 }\n', 1, 11),
    ("P003", BASE.replace("dp = 8", "dp = 8 / 3"), 9, 13),
    ("P004", BASE.replace("nvlink(450GB/s)", "nvlink(450GB)"), 7, 26),
    ("P004", BASE.replace("nodes         = 1", "nodes         = 1GB"), 4, 19),
    ("P005", BASE.replace("gpu           = h100_sxm", "gpu {\n    memory = 80\n    flops = 989TFLOPS\n  }"), 7, 14),
    ("P006", BASE + "sched { pipeline = gpipe }\n", 10, 1),
    ("P007", BASE.replace("mesh { dp = 8 }", "mesh {\n  dp = 8\n  tensor_parallel = 1\n}"), 11, 3),
    ("P008", BASE.replace("nodes         = 1", "nodes = 1\n  nodes = 2"), 5, 3),
    ("P009", BASE + "mesh { dp = 8 }\n", 10, 1),
    ("P010", BASE.replace("llama3_8b", "llama3_8bb"), 2, 20),
    ("P010", BASE.replace("h100_sxm", "h100"), 6, 19),
    ("P011", BASE.replace("dp = 8", "dp = cluster.gpus_per_nod"), 9, 13),
    ("P011", BASE.replace("dp = 8", "dp = clustr.nodes"), 9, 13),
    ("P012", BASE.replace("mesh { dp = 8 }", "mesh {\n  dp = mesh.tp\n  tp = mesh.dp\n}"), 10, 8),
    ("P013", 'use "missing.par"\n' + BASE, 1, 5),
    ("P015", 'use "../../outside.par"\n' + BASE, 1, 5),
    ("P016", BASE.replace("dp = 8", 'dp = "eight"'), 9, 13),
    ("P016", BASE + "train { recompute = partial }\n", 10, 21),
    ("P017", BASE + "serve { gpu_memory_utilization = 1.5 }\n", 10, 34),
    ("P017", BASE + "train { zero = 4 }\n", 10, 16),
    ("P017", BASE.replace("dp = 8", "dp = -8"), 9, 13),
    ("P018", 'model "m" { layers = 4 }\n' + BASE.split("\n", 2)[2], 1, 1),
    ("P018", BASE.replace("  gpus_per_node = 8\n", ""), 3, 1),
    ("P019", "tp = 4\n" + BASE, 1, 1),
    ("P019", BASE.replace("mesh { dp = 8 }", "mesh {\n  dp = 8\n  tp on intra_node\n}"), 11, 3),
    ("P020", BASE + 'target vllmm { model = "x" }\n', 10, 8),
    ("P021", BASE + 'target { model = "x" }\n', 10, 1),
    ("P021", BASE.replace("mesh {", 'mesh "m" {'), 9, 6),
    ("P022", BASE + "train { zero = 1 }\nserve { max_model_len = 1024 }\n", 11, 1),
    ("P023", BASE.replace("dp = 8", "dp = auto; tp = auto"), 9, 19),
]


@pytest.mark.parametrize("code,text,line,col", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_p0_code_line_column(tmp_path, code, text, line, col):
    spec = tmp_path / "sub" / "spec.par"
    spec.parent.mkdir()
    spec.write_text(text)
    r = check_file(spec, root=tmp_path / "sub")
    hits = [d for d in r.diagnostics if d.code == code]
    assert hits, f"no {code}; got {[(d.code, d.message) for d in r.diagnostics]}"
    d = hits[0]
    assert (d.span.line, d.span.column) == (line, col), d.message
    assert d.severity == "error"
    # P0 problems stop the later families: nothing but P0 is reported
    assert {x.code[:2] for x in r.diagnostics} == {"P0"}


def test_import_cycle(tmp_path):
    (tmp_path / "a.par").write_text('use "b.par"\n' + BASE)
    (tmp_path / "b.par").write_text('use "a.par"\n')
    r = check_file(tmp_path / "a.par", root=tmp_path)
    cyc = [d for d in r.diagnostics if d.code == "P014"]
    assert len(cyc) == 1
    assert cyc[0].span.file.endswith("b.par") and (cyc[0].span.line, cyc[0].span.column) == (1, 5)
    assert "a.par -> " in cyc[0].message and cyc[0].message.count("a.par") == 2


def test_did_you_mean_and_aliases(check_spec):
    r = check_spec(BASE.replace("mesh { dp = 8 }", "mesh {\n  dp = 8\n  tensor_model_parallel_size = 1\n}")
                   + "schedule { micro_bach = 1 }\n")
    helps = {d.code + ":" + d.message: d.help for d in r.diagnostics}
    assert any("did you mean `tp`?" == h for h in helps.values())
    assert any("did you mean `micro_batch`?" == h for h in helps.values())


def test_all_independent_errors_reported_once(check_spec):
    text = BASE.replace("nvlink(450GB/s)", "nvlink(450GB)").replace("dp = 8", "dp = 8 / 3") + \
        "train { zero = 7\n  recompute = partial }\n"
    r = check_spec(text)
    codes = sorted(d.code for d in r.diagnostics)
    assert codes == ["P003", "P004", "P016", "P017"]


def test_failed_value_does_not_cascade(check_spec):
    # tp fails, so dp = auto (which needs tp) reports nothing more
    r = check_spec(BASE.replace("dp = 8", "tp = 8 / 3\n  dp = auto"))
    assert [d.code for d in r.diagnostics] == ["P003"]
    # a reference to a failed field stays silent
    r = check_spec(BASE.replace("dp = 8", "tp = 1GB\n  dp = mesh.tp"))
    assert [d.code for d in r.diagnostics] == ["P004"]


def test_failed_import_hides_missing_blocks(tmp_path):
    (tmp_path / "s.par").write_text('use "nope.par"\nmodel "m" { from = llama3_8b }\nmesh { dp = 8 }\n')
    r = check_file(tmp_path / "s.par", root=tmp_path)
    assert [d.code for d in r.diagnostics] == ["P013"]


def test_units_convert_to_base_units(check_spec):
    r = check_spec(BASE.replace("gpu           = h100_sxm",
                                "gpu {\n    memory = 141GiB\n    flops = 1.5PFLOPS\n    hbm_bandwidth = 4.8TB/s\n  }")
                   .replace("nvlink(450GB/s)", "nvlink(3600Gb/s)"))
    assert r.ok, r.diagnostics
    g = r.plan.cluster.gpu
    assert g.memory == 141 * 2**30
    assert g.flops == 1.5e15
    assert g.hbm_bandwidth == 4.8e12
    assert r.plan.cluster.intra_node.bandwidth == 450e9


def test_arithmetic_and_references_are_exact(check_spec):
    r = check_spec(BASE.replace("dp = 8", "dp = cluster.gpus_per_node / (1 + 1)\n  tp = 2 * cluster.nodes")
                   + "model_extra = 1\n".replace("model_extra = 1\n", ""))
    assert r.plan.mesh.dp == 4 and r.plan.mesh.tp == 2
    r = check_spec(BASE.replace('{ from = llama3_8b }', '{\n  from = llama3_8b\n  seq_len = 8k\n  params = 8B\n}'))
    assert r.plan.model.seq_len == 8000 and r.plan.model.params == 8 * 10**9


def test_auto_resolves_and_presets_override(check_spec):
    r = check_spec(BASE.replace("mesh { dp = 8 }", "mesh {\n  dp = auto\n  tp = 2\n}")
                   .replace('{ from = llama3_8b }', '{\n  from = llama3_8b\n  layers = 16\n}'))
    assert r.ok, r.diagnostics
    p = r.plan
    assert (p.mesh.dp, p.mesh.tp, p.mesh.auto) == (4, 2, "dp")
    assert p.model.layers == 16 and p.model.hidden == 4096 and p.model.head_dim == 128
    assert p.span("model.layers").line == 3
    assert p.span("model.hidden").line == 2  # the preset line


def test_no_traceback_on_odd_bytes(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "bad.par"
    f.write_bytes(b"\xff\xfe model { \x00 }\n\t\t{{{{ \"unterminated\n")
    out = subprocess.run([sys.executable, "-m", "parc", "check", str(f)], capture_output=True, text=True)
    assert "Traceback" not in out.stderr + out.stdout
    assert out.returncode == 1
    assert "P001" in out.stdout


def test_independent_syntax_errors_reported_together(tmp_path):
    text = ('model "m" {\n  from = llama3_8b seq_len = 4\n}\n'
            'cluster "c" {\n  gpus_per_node = 8 8\n  gpu = h100_sxm\n}\n'
            'mesh { dp = = 8 }\n'
            'train { zero = 1 }\n')
    f = tmp_path / "s.par"
    f.write_text(text)
    r = check_file(f, root=tmp_path)
    assert [(d.code, d.span.line, d.span.column) for d in r.diagnostics] == [
        ("P001", 2, 20), ("P001", 5, 21), ("P001", 8, 13)]


def test_unclosed_block_is_one_error(tmp_path):
    f = tmp_path / "s.par"
    f.write_text('model "m" {\n  from = llama3_8b\nmesh { dp = 8 }\ntrain { zero = = 1 }\n')
    r = check_file(f, root=tmp_path)
    # the braces do not balance, so nothing after the first error can be trusted
    assert [(d.code, d.span.line, d.span.column) for d in r.diagnostics] == [("P001", 4, 16)]
