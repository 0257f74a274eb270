"""Pictures: the rank map, the pipeline schedule and memory as SVG, `parc draw`, and the
`parc explain --html` page; counted through their stable classes and data attributes."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from parc.api import load_plan
from parc.cli.main import main
from parc.model import schedules as S
from parc.cost.estimate import estimate
from parc.model.rankmap import RankMap
from parc.report import svg
from parc.report.html import explain_page

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NS = {"s": "http://www.w3.org/2000/svg"}

PIPELINE_SPEC = """\
model "m" {{ from = llama3_8b }}

cluster "box" {{
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}}

mesh {{
  pp = 4
  dp = 2
}}

schedule {{
  pipeline       = {pipeline}
  virtual_stages = {v}
  micro_batch    = 1
  global_batch   = {gb}
}}

train {{ recompute = full }}
"""

CLUSTER_SPEC = """\
model "m" {{ from = llama3_8b }}

cluster "big" {{
  nodes         = {nodes}
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}

mesh {{
  pp = {pp}
  dp = auto
  tp = {tp}
}}

schedule {{
  micro_batch  = 1
  global_batch = {gb}
}}

train {{
  zero      = 1
  recompute = full
}}
"""


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{{{NS['s']}}}{tag}") if cls in (e.get("class") or "").split()]


def plan_of(write_spec, text, name="spec.par"):
    return load_plan(write_spec(text, name), root=Path(write_spec(text, name)).parent)


# ------------------------------------------------------------------------------ rank map

def test_mesh_draws_every_gpu_with_its_coordinates_and_tp_group():
    plan = load_plan(EXAMPLES / "llama3-70b-train.par")
    root = parse(svg.mesh(plan))
    gpus = by_class(root, "g", "gpu")
    assert len(gpus) == plan.world_size == 64
    assert len(by_class(root, "g", "node")) == plan.cluster.nodes
    rm = RankMap(plan)
    for g in gpus:
        r = int(g.get("data-rank"))
        c = {ax: int(v) for ax, v in rm.coords(r).items()}
        assert {ax: int(g.get(f"data-{ax}")) for ax in ("pp", "dp", "cp", "tp")} == c
        assert int(g.get("data-node")) == r // 8
        label = "".join(g.itertext())
        assert f"r{r}" in label and f"({c['pp']},{c['dp']},{c['cp']},{c['tp']})" in label
    # a TP group's members share a colour and a group id; different groups, different ids
    groups = {}
    for g in gpus:
        fill = g.find("s:rect", NS).get("fill")
        groups.setdefault(g.get("data-tp-group"), set()).add(fill)
    assert len(groups) == plan.world_size // plan.mesh.tp
    assert all(len(f) == 1 for f in groups.values())
    for row in rm.groups("tp"):
        assert len({next(g for g in gpus if int(g.get("data-rank")) == int(r)).get("data-tp-group")
                    for r in row}) == 1


def test_mesh_links_say_which_axes_cross_between_which_nodes():
    plan = load_plan(EXAMPLES / "llama3-70b-train.par")  # pp=4 (stride 16) dp=2 (stride 8) tp=8
    root = parse(svg.mesh(plan))
    links = {(int(g.get("data-from")), int(g.get("data-to"))): g.get("data-axes").split()
             for g in by_class(root, "g", "link")}
    assert links[(0, 1)] == ["dp"] and links[(0, 2)] == ["pp"] and links[(6, 7)] == ["dp"]
    assert (0, 3) not in links  # ranks 0-7 and 24-31 share no group
    assert all("tp" not in axes for axes in links.values())  # tp stays inside a node


def test_a_large_cluster_is_summarised(write_spec):
    plan = plan_of(write_spec, CLUSTER_SPEC.format(nodes=128, pp=8, tp=8, gb=2048))
    root = parse(svg.mesh(plan, max_nodes=6))
    nodes = [int(n.get("data-node")) for n in by_class(root, "g", "node")]
    assert nodes == [0, 1, 2, 3, 4, 127]
    assert len(by_class(root, "g", "gpu")) == 6 * 8
    skipped = by_class(root, "g", "skipped")
    assert [int(s.get("data-nodes")) for s in skipped] == [122]
    # pp groups reach nodes that are not drawn: marked as stubs with the far node
    stubs = by_class(root, "g", "stub")
    assert any(s.get("data-axes") == "pp" and s.get("data-from") == "0" and s.get("data-to") == "16"
               for s in stubs)


# ------------------------------------------------------------------------------ schedule

@pytest.mark.parametrize("pipeline,v", [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2),
                                        ("zero_bubble", 2), ("zero_bubble", 4), ("dualpipe_v", 2)])
def test_schedule_draws_every_action_of_every_rank_and_the_idle_time(write_spec, pipeline, v):
    plan = plan_of(write_spec, PIPELINE_SPEC.format(pipeline=pipeline, v=v, gb=16))
    m = plan.schedule.microbatches
    root = parse(svg.schedule(plan))
    assert int(root.get("data-microbatches")) == m == 8
    order = S.actions(pipeline, 4, m, v)
    slots = S.timeline(pipeline, 4, m, v)
    blocks = by_class(root, "rect", "block")
    assert len(blocks) == sum(len(a) for a in order) == int(root.get("data-blocks"))
    for r in range(4):
        mine = [b for b in blocks if b.get("data-rank") == str(r)]
        drawn = sorted((float(b.get("data-start")), b.get("data-kind"), int(b.get("data-microbatch")),
                        int(b.get("data-stage"))) for b in mine)
        want = sorted((s.start, s.action.kind, s.action.microbatch, s.action.stage) for s in slots[r])
        assert drawn == want
        # blocks and idle rects tile the rank's row with no overlap, from 0 to the makespan
        pieces = sorted([(float(e.get("data-start")), float(e.get("data-end")))
                         for e in mine + [i for i in by_class(root, "rect", "idle") if i.get("data-rank") == str(r)]])
        assert pieces[0][0] == 0 and pieces[-1][1] == S.makespan(slots)
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    idle = sum(float(i.get("data-end")) - float(i.get("data-start")) for i in by_class(root, "rect", "idle"))
    assert idle / (4 * S.makespan(slots)) == pytest.approx(S.bubble_fraction(slots))
    kinds = {b.get("data-kind") for b in blocks}
    assert kinds == ({"F", "B", "W"} if pipeline in ("zero_bubble", "dualpipe_v") else {"F", "B"})


def test_many_microbatches_are_drawn_as_the_pattern(write_spec):
    plan = plan_of(write_spec, PIPELINE_SPEC.format(pipeline="1f1b", v=1, gb=1024))
    assert plan.schedule.microbatches == 512
    root = parse(svg.schedule(plan))
    m = int(root.get("data-microbatches"))
    assert m == 8 and len(by_class(root, "rect", "block")) == 4 * 2 * m
    assert "8 of 512 microbatches" in root.find("s:title", NS).text


def test_no_pipeline_is_said_plainly():
    plan = load_plan(EXAMPLES / "llama3-8b-fsdp.par")
    root = parse(svg.schedule(plan))
    assert root.get("data-pp") == "1" and not by_class(root, "rect", "block")


# ------------------------------------------------------------------------------ memory

def test_memory_has_one_stacked_bar_per_stage_against_capacity():
    plan = load_plan(EXAMPLES / "llama3-70b-train.par")
    est = estimate(plan).to_json()
    root = parse(svg.memory(plan, est))
    bars = by_class(root, "g", "bar")
    assert [int(b.get("data-stage")) for b in bars] == list(range(plan.mesh.pp))
    for b, st in zip(bars, est["stages"]):
        segs = {s.get("data-part"): float(s.get("data-bytes")) for s in by_class(b, "rect", "segment")}
        want = {k: v for k, v in st["memory"].items() if k in svg.MEMORY_PARTS and v}   # every part, overheads too
        assert segs == pytest.approx(want)
        assert sum(segs.values()) == pytest.approx(st["memory"]["total"])
        # stacked: each segment starts where the one below ends
        rects = sorted(by_class(b, "rect", "segment"), key=lambda e: -float(e.get("y")))
        for lo, hi in zip(rects, rects[1:]):
            assert float(hi.get("y")) + float(hi.get("height")) == pytest.approx(float(lo.get("y")), abs=0.11)
    cap = by_class(root, "line", "capacity")
    assert len(cap) == 1 and float(cap[0].get("data-bytes")) == est["memory_per_gpu"]["capacity"]


def test_memory_of_a_serving_plan_shows_the_kv_cache():
    plan = load_plan(EXAMPLES / "llama3-70b-serve.par")
    root = parse(svg.memory(plan))
    parts = {s.get("data-part") for s in by_class(root, "rect", "segment")}
    # the engine's own memory beside weights and KV cache: vLLM subtracts what its budget holds
    # before sizing the cache (the sampler adds nothing to this plan's profiling peak: no segment)
    assert parts == {"weights", "kv_cache", "activations", "cuda_context", "nccl_buffers", "cuda_graphs"}
    assert estimate(plan).memory.sampler == 0


# ------------------------------------------------------------------------------ parc draw

def test_draw_writes_svg_files_and_refuses_png_without_a_converter(tmp_path, capsys, monkeypatch):
    spec = str(EXAMPLES / "llama3-70b-train.par")
    for what in ("mesh", "schedule", "memory"):
        out = tmp_path / f"{what}.svg"
        assert main(["draw", spec, "--what", what, "-o", str(out), "-q"]) == 0
        root = parse(out.read_text())
        assert root.get("data-kind") == what
    import builtins

    real_import = builtins.__import__

    def no_cairo(name, *a, **k):
        if name == "cairosvg":
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_cairo)
    assert main(["draw", spec, "-o", str(tmp_path / "m.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cairosvg" in err and not (tmp_path / "m.png").exists()
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert main(["draw", spec, "-o", str(tmp_path / "m.jpg")]) == 2
    assert main(["draw", spec, "--what", "schedule", "--microbatches", "0"]) == 2
    capsys.readouterr()


def test_draw_to_stdout_and_on_a_spec_with_errors(write_spec, capsys):
    assert main(["draw", str(EXAMPLES / "llama3-70b-train.par"), "--what", "memory"]) == 0
    assert capsys.readouterr().out.startswith("<svg")
    bad = write_spec(PIPELINE_SPEC.format(pipeline="1f1b", v=1, gb=15))
    assert main(["draw", str(bad), "--root", str(bad.parent)]) == 1
    err = capsys.readouterr().err
    assert "P201" in err and "cannot draw" in err


# ------------------------------------------------------------------------------ the HTML page

def test_explain_page_holds_the_three_drawings_and_the_tables():
    plan = load_plan(EXAMPLES / "llama3-70b-train.par")
    est = estimate(plan)
    page = explain_page(plan, est)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"<script|<link |src=\"http|href=\"http", page)  # self-contained
    kinds = re.findall(r'<svg [^>]*class="parc-(\w+)"', page)
    assert kinds == ["mesh", "schedule", "memory"]
    assert page.count('class="gpu"') == 64
    for heading in ("Rank map", "Pipeline schedule", "Memory per GPU", "Communication per GPU", "Step time"):
        assert f">{heading}" in page
    assert "interleaved_1f1b" in page and "infiniband" in page


def test_explain_html_option_writes_the_page(tmp_path, capsys):
    out = tmp_path / "plan.html"
    assert main(["explain", str(EXAMPLES / "llama3-70b-serve.par"), "--html", str(out)]) == 0
    page = out.read_text()
    assert re.findall(r'<svg [^>]*class="parc-(\w+)"', page) == ["mesh", "memory", "timeline"]
    assert ">Serving at the workload" in page and "TTFT" in page
    capsys.readouterr()


# ------------------------------------------------------------------------------ serving plans

SERVE_PP = """\
model "m" { from = llama3_8b }

cluster "box" {
  nodes         = 1
  gpus_per_node = 4
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}

mesh {
  pp = 2
  tp = 2
}

serve {
  max_model_len          = 4096
  gpu_memory_utilization = 0.90
}
"""


def test_schedule_of_a_serving_plan_is_forward_only(write_spec, capsys):
    spec = write_spec(SERVE_PP)
    assert main(["draw", str(spec), "--what", "schedule"]) == 0
    root = parse(capsys.readouterr().out)
    blocks = by_class(root, "rect", "block")
    assert blocks and {b.get("data-kind") for b in blocks} == {"F"}
    m = int(root.get("data-microbatches"))
    assert len(blocks) == 2 * m == int(root.get("data-blocks"))
    # each batch goes through stage 0 then stage 1, one unit each, the next right behind it
    for b in blocks:
        r, j = int(b.get("data-rank")), int(b.get("data-microbatch"))
        assert (float(b.get("data-start")), float(b.get("data-end"))) == (r + j, r + j + 1)
    assert "backward" not in "".join(root.itertext()).replace("no backward", "")
    assert main(["draw", str(spec), "--what", "schedule", "--microbatches", "3"]) == 0
    assert int(parse(capsys.readouterr().out).get("data-microbatches")) == 3


def test_explain_html_of_a_serving_plan_shows_its_communication(tmp_path, capsys):
    import json

    spec = ROOT / "tests" / "data" / "explain" / "llama3-70b-serve.par"
    out = tmp_path / "serve.html"
    assert main(["explain", str(spec), "--html", str(out), "--format", "json"]) == 0
    j = json.loads(capsys.readouterr().out)
    tp_bytes = j["comm_per_token"]["tp"]
    assert tp_bytes > 0
    section = out.read_text().split('id="communication"')[1].split("</section>")[0]
    assert "per decoded token" in section
    row = re.search(r"<tr><td>tp</td><td>[^<]+</td><td class=\"num\">([^<]+)</td>", section)   # axis, collective, bytes
    from parc.units import nbytes

    assert row and row.group(1) == nbytes(tp_bytes)   # as `parc explain` prints it: "3.93 MB"
    assert re.search(r"µs|ms", section)  # the time is there too, not 0 s


# ------------------------------------------------------------------------------ PNG

def _png_pixels(data: bytes):
    """(width, height, rows of RGB(A) tuples) of an 8-bit non-interlaced PNG, decoded here."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and interlace == 0 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def test_draw_png_from_the_png_extra(tmp_path, capsys):
    from parc.cli.draw import png_unavailable

    why = png_unavailable()
    if why:
        pytest.skip(why)
    spec = str(EXAMPLES / "llama3-70b-train.par")
    out = tmp_path / "schedule.png"
    assert main(["draw", spec, "--what", "schedule", "-o", str(out), "-q"]) == 0
    svg_root = parse(svg.schedule(load_plan(EXAMPLES / "llama3-70b-train.par")))
    w, h, rows = _png_pixels(out.read_bytes())
    assert (w, h) == (2 * int(float(svg_root.get("width"))), 2 * int(float(svg_root.get("height"))))
    colours = {px for row in rows[::4] for px in row[::4]}
    # the forward blocks are drawn in their colour, not a blank page
    fwd = tuple(int(KIND_F[i:i + 2], 16) for i in (1, 3, 5))
    assert fwd in colours and len(colours) > 20
    capsys.readouterr()


KIND_F = svg.KIND_COLORS["F"]


def test_draw_help_names_the_png_extra(capsys):
    assert main(["draw", "--help"]) == 0
    assert "parc[png]" in " ".join(capsys.readouterr().out.split())


def test_serving_timeline_is_forward_only_and_as_long_as_the_estimate(write_spec, capsys):
    from parc.cost.estimate import estimate as est_of

    spec = write_spec(SERVE_PP)
    assert main(["draw", str(spec), "--what", "timeline"]) == 0
    root = parse(capsys.readouterr().out)
    blocks = by_class(root, "rect", "block")
    plan = load_plan(spec)
    sv = est_of(plan).serving
    kinds = {b.get("data-kind") for b in blocks}
    assert "P" in kinds and kinds <= {"P", "M", "D"}
    # the prompt's chunk passes stage 0 then stage 1, each block as long as that stage's step
    # carrying it beside the decode requests
    pre = [b for b in blocks if b.get("data-kind") == "P"]
    assert len(pre) == 2 * sv.prefill_steps
    for b in pre:
        r = int(b.get("data-rank"))
        assert float(b.get("data-end")) - float(b.get("data-start")) == pytest.approx(sv.mixed[r].time)
    assert float(pre[1].get("data-start")) == pytest.approx(float(pre[0].get("data-end")))
    # then 6 steps of each of the 2 micro-batches on each stage, decode-only or mixed
    rest = [b for b in blocks if b.get("data-kind") != "P"]
    assert len(rest) == 2 * 2 * 6
    for b in rest:
        r, kind = int(b.get("data-rank")), b.get("data-kind")
        want = (sv.mixed if kind == "M" else sv.decode)[r].time
        assert float(b.get("data-end")) - float(b.get("data-start")) == pytest.approx(want)
    assert float(root.get("data-ttft")) == sv.ttft and float(root.get("data-tpot")) == sv.tpot
