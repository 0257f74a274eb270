"""How close parc comes to what published runs measured: writes docs/accuracy.md.

For every case of ``bench/accuracy_cases.toml`` (a published run: its source, the configuration
the source states, the measured value and what had to be assumed) parc checks a spec of that run
(``examples/published/<name>.par`` where the case names one that exists, else one generated from
the case) and compares its prediction with the measurement; it also predicts each run's peak
memory against the GPU's capacity. The closed-form rows (parameters, FLOPs, activation bytes,
ZeRO, KV cache, bubble) are the tests of tests/test_accuracy_closed_form.py; their outcome is
tabulated here. The same input gives the same bytes.

Every row has a role (``bench/accuracy_cases.toml``): ``fit`` rows may set a default constant
(``bench/accuracy_fit.py`` fits them on those rows alone), ``held_out`` rows may not, and the
document leads with the held-out error, training and serving each.

Targets: held-out rows median |error| at most 15% and none beyond 35%; fit rows median at most
10% and none beyond 25% (training and serving each); closed-form rows within 0.5%; every
published run fits in memory.

Run:   python bench/accuracy.py            (writes docs/accuracy.md, prints a summary)
       python bench/accuracy.py --check    (exits 1 when docs/accuracy.md is stale)
"""
from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = ROOT / "bench" / "accuracy_cases.toml"
DOC = ROOT / "docs" / "accuracy.md"
CLOSED_FORM_TESTS = "tests/test_accuracy_closed_form.py"

# (median, worst) |error| targets per role
CLOSED_FORM_TOL = 0.005
KINDS = ("training", "serving")
METRICS = {   # metric -> (how the table prints it, unit)
    "step_time": ("{:.2f}", "s/step"),
    "tflops_96": ("{:.0f}", "TFLOP/s/GPU"),
    "mfu": ("{:.1%}", "MFU"),
    "tokens_per_gpu_s": ("{:,.0f}", "tokens/s/GPU"),
    "prefill_tokens_per_node_s": ("{:,.0f}", "input tokens/s/node"),
    "output_tokens_per_node_s": ("{:,.0f}", "output tokens/s/node"),
    "decode_tokens_per_node_s": ("{:,.0f}", "output tokens/s/node of a decode pool"),
}
from bench.accuracy_serving import METRICS as SERVING_METRICS, TARGETS, kind, summary_lines  # noqa: E402

METRICS.update(SERVING_METRICS)
TIMES = ("step_time", "ttft", "itl")    # the metrics that are times (a positive error: parc is slower)


# --- specs ---------------------------------------------------------------------------------------

def _value(v) -> str:
    """A TOML value as the .par language writes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _block(head: str, fields: dict, indent: str = "  ") -> str:
    lines = [f"{indent}{k} = {_value(v)}" for k, v in fields.items()]
    return head + " {\n" + "\n".join(lines) + "\n" + indent[:-2] + "}"


def model_fields(model: dict) -> dict:
    """The `model` block of a case: a GPT as Megatron-LM builds it (``gpt = true``: GELU MLP of
    4h, LayerNorm, learned positions, biases, tied embeddings unless ``tied = false``; vocabulary
    51,200 and sequence 2048 unless given) or the fields as given."""
    model = {k: v for k, v in model.items() if k != "approximated"}
    if not model.pop("gpt", False):
        return model
    h = model["hidden"]
    return {"layers": model["layers"], "hidden": h, "ffn_hidden": 4 * h, "heads": model["heads"],
            "kv_heads": model["heads"], "vocab": model.get("vocab", 51200), "seq_len": model.get("seq_len", 2048),
            "mlp": "gelu", "norm": "layernorm", "position": "learned", "bias": True,
            "tied_embeddings": model.get("tied", True)}


def spec_text(case: dict, data: dict) -> str:
    """The .par text of a case's configuration."""
    model = case["model"] if isinstance(case["model"], dict) else data["models"][case["model"]]
    cl = data["clusters"][case["cluster"]]
    mesh = case["mesh"]
    world = math.prod(mesh.get(ax, 1) for ax in ("pp", "dp", "cp", "tp"))
    gpn = min(8, world)
    gpu = cl["gpu"]
    cluster = {"nodes": world // gpn, "gpus_per_node": gpn}
    parts = [_block('model "m"', model_fields(model))]
    gpu_line = _block("  gpu", gpu, "    ") if isinstance(gpu, dict) else f"  gpu = {gpu}"
    cluster_body = "\n".join([*(f"  {k} = {v}" for k, v in cluster.items()), gpu_line,
                              f"  intra_node = {cl['intra_node']}", f"  inter_node = {cl['inter_node']}"])
    parts.append('cluster "c" {\n' + cluster_body + "\n}")
    parts.append(_block("mesh", {ax: mesh[ax] for ax in ("pp", "dp", "cp", "tp", "ep") if ax in mesh}))
    if "layers" in case:
        parts.append(_block("placement", {"layers": case["layers"]}))
    if "serve" in case:     # a serving row: the serve block with its workload (and the engine's backends)
        parts.append(_block("serve", case["serve"]))
        from bench.accuracy_serving import target_blocks

        return "\n\n".join(parts + target_blocks(case)) + "\n"
    parts.append(_block("schedule", {"pipeline": "1f1b", **case["schedule"]}))
    parts.append(_block("train", case.get("train", {})))
    return "\n\n".join(parts) + "\n"


# --- one case ------------------------------------------------------------------------------------

def case_spec(case: dict, data: dict, tmp: Path) -> tuple[Path, str]:
    """(the spec file of a case, what the table shows for it): ``examples/published/<name>.par``
    where the case names one that exists, else one generated from the case into ``tmp``."""
    spec = case.get("spec")
    if spec and (ROOT / spec).exists():
        return ROOT / spec, spec
    path = tmp / f"{case['id']}.par"
    path.write_text(spec_text(case, data), encoding="utf-8")
    return path, "generated"


def metric_value(metric: str, plan, e) -> float:
    """The value of ``metric`` (the keys of :data:`METRICS`) in parc's estimate ``e`` of ``plan``."""
    from parc.cost.flops import recompute_flops

    if metric in SERVING_METRICS or metric.endswith("_per_node_s"):
        from bench.accuracy_serving import value

        return value(metric, plan, e)
    n = plan.world_size
    if metric == "step_time":
        return e.step_time
    if metric == "mfu":
        return e.mfu
    if metric == "tokens_per_gpu_s":
        return e.tokens_per_second / n if n else 0.0
    # tflops_96: Narayanan et al. eq. 3's count, which includes the recompute forward
    flops = e.model_flops_per_step + recompute_flops(plan.model, e.tokens_per_step, "full")
    return flops / (e.step_time * n) / 1e12 if e.step_time else 0.0


def run_case(case: dict, data: dict, tmp: Path) -> dict:
    """parc's prediction for one case: the metric, its error against the measurement, the
    predicted peak memory of the most loaded GPU and the errors parc reports for the spec."""
    from parc.api import check_file
    from parc.cost.estimate import estimate

    path, used = case_spec(case, data, tmp)
    out = {"case": case, "spec": used, "value": None, "error": None, "peak": None, "capacity": None,
           "errors": [], "plan": None}
    r = check_file(path)
    out["errors"] = sorted({d.code for d in r.errors})
    if r.plan is None:
        out["refused"] = "; ".join(f"{d.code} {d.message}" for d in r.errors)[:300]
        return out
    plan, e = r.plan, estimate(r.plan, cache=False)
    out["plan"], out["peak"], out["capacity"] = plan, e.memory.total, e.memory.capacity
    out["value"] = metric_value(case["metric"], plan, e)
    out["step_time"] = e.step_time
    out["error"] = out["value"] / case["measured"] - 1 if case["measured"] else None
    return out


def why_not(res: dict) -> str:
    """Why a case misses a target, from what parc and the case know."""
    case, reasons = res["case"], []
    if res.get("refused"):
        return "parc refuses the spec: " + res["refused"]
    if res["error"] is not None and abs(res["error"]) > TARGETS[case.get("role", "held_out")][1]:
        side = "fast" if (res["error"] > 0) != (case["metric"] in TIMES) else "slow"
        reasons.append(f"parc predicts the run {abs(res['error']):.0%} too {side}")
    if res["peak"] is not None and res["peak"] > res["capacity"]:
        reasons.append(f"predicted peak {res['peak'] / 2**30:.1f} GiB exceeds {res['capacity'] / 2**30:.1f} GiB")
    if reasons and isinstance(case["model"], str) and res["spec"] == "generated":
        reasons.append("the generated spec approximates the model (see the model's note)")
    if reasons and case.get("note"):
        reasons.append(case["note"])
    return "; ".join(reasons)


# --- closed-form rows (the tests) and calibration ------------------------------------------------

def closed_form_rows() -> list[tuple[str, str]]:
    """(test, outcome) for every closed-form test, in file order."""
    with tempfile.TemporaryDirectory() as d:
        xml = Path(d) / "cf.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                        CLOSED_FORM_TESTS], cwd=ROOT, capture_output=True, text=True)
        if not xml.exists():
            return [("tests/test_accuracy_closed_form.py", "did not run")]
        rows = []
        for tc in ET.parse(xml).getroot().iter("testcase"):
            failed = tc.find("failure") is not None or tc.find("error") is not None
            rows.append((tc.get("name", ""), "outside 0.5%" if failed else "within 0.5%"))
        return rows


def calibration_section(results: list[dict]) -> list[str]:
    """Held-out error before and after fitting on two rows, where bench/accuracy_calibration.py
    provides ``calibration_rows``; a line saying it is not available otherwise."""
    if not (ROOT / "bench" / "accuracy_calibration.py").exists():
        return ["Calibration is not available: `bench/accuracy_calibration.py` does not exist."]
    from bench.accuracy_calibration import calibration_rows, calibration_section as render  # noqa: PLC0415

    triples = [(r["plan"], r["case"]["measured"], r["case"]["id"]) for r in results
               if r["case"].get("calibration") and r["plan"] is not None]
    rows = calibration_rows(triples)
    return render(rows, "Korthikanti et al. 2022, Table 5, selective recompute",
                  "the first two rows fit the profile").splitlines() if rows else ["(no rows)"]


# --- the document --------------------------------------------------------------------------------

def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:+.1%}" if abs(v) < 10 else f"{v:.4g}"
    return str(v).replace("|", "\\|")


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _fits(r: dict) -> str:
    """Predicted peak of the most loaded GPU against its capacity, and whether it fits."""
    if r["peak"] is None:
        return "—"
    share = r["peak"] / r["capacity"]
    return f"{r['peak'] / 2**30:.1f} GiB, {share:.0%} of {r['capacity'] / 2**30:.0f}: " + ("fits" if share <= 1 else "**does not fit**")


def _config(case: dict) -> str:
    mesh = " ".join(f"{k}{v}" for k, v in case["mesh"].items() if v != 1 or k == "tp")
    if "serve" in case:
        sv = case["serve"]
        return ", ".join([mesh] + [f"{k} {_value(v)}" for k, v in sv.items() if k != "max_model_len"])
    sch = case["schedule"]
    bits = [mesh, f"mb {sch['micro_batch']}", f"gb {sch['global_batch']}"]
    if sch.get("pipeline") and sch["pipeline"] != "1f1b":
        bits.append(sch["pipeline"] + (f" v{sch['virtual_stages']}" if "virtual_stages" in sch else ""))
    tr = case.get("train", {})
    bits += [f"recompute {tr['recompute']}"] if tr.get("recompute") else []
    bits += ["sp"] if tr.get("sequence_parallel") else []
    bits += [f"zero {tr['zero']}"] if tr.get("zero") else []
    bits += [tr["precision"]] if tr.get("precision") else []
    return ", ".join(bits)


def errors_of(results: list[dict], role: str, kind_: str) -> list[float]:
    return [abs(r["error"]) for r in results
            if r["error"] is not None and r["case"].get("role") == role and kind(r["case"]) == kind_]


def summary(results: list[dict], closed: list[tuple[str, str]]) -> dict:
    """Median and worst |error| per (role, kind), and the other targets' counts."""
    ran = [r for r in results if r["peak"] is not None]
    out = {"cases": len(results), "closed_ok": sum(o == "within 0.5%" for _, o in closed), "closed": len(closed),
           "fit_in_memory": sum(r["peak"] <= r["capacity"] for r in ran), "ran": len(ran),
           "misses": [r for r in results if why_not(r)], "groups": {}}
    for role in TARGETS:
        for k in KINDS:
            e = errors_of(results, role, k)
            out["groups"][(role, k)] = ((statistics.median(e), max(e), len(e)) if e else None)
    return out


def targets_met(s: dict) -> bool:
    ok = s["closed_ok"] == s["closed"] and s["fit_in_memory"] == s["ran"]
    for (role, _), got in s["groups"].items():
        if got is not None:
            ok &= got[0] <= TARGETS[role][0] and got[1] <= TARGETS[role][1]
    return ok


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


# What each default of the training model rests on (docs/accuracy.md, "Where parc's defaults come from").
DEFAULTS_TEXT = [
    "- **Peaks, memory and bandwidth**: each GPU's datasheet (`parc/model/data/gpus.toml`); a power limit "
    "below the TDP lowers the peaks toward the same die's low-power datasheet point (H100: the NVL's "
    "835 TFLOPS at 400 W).",
    "- **The largest GEMMs' share of peak** (`profile.gemm_efficiency`, by default the GPU's "
    "`matmul_efficiency`): the maximum achievable matmul FLOP/s a matmul benchmark measured on that GPU "
    "(stas00/ml-engineering, compute/accelerator/README.md, `mamf-finder.py`): A100 SXM 86.9%, H100 SXM "
    "80.3% (FP8 70.9%), B200 77.6%, MI300X 51.4%.",
    "- **Attention kernels**: the FlashAttention-2 and -3 papers' own benchmarks (`parc/model/data/kernels.toml`): "
    "FlashAttention-2 at 70% (forward) and 60% (backward) of an A100's peak and 35% (forward) and 32.5% "
    "(backward, FlashAttention-3's Figure 6) of an H100's; "
    "FlashAttention-3 (and cuDNN's fused attention, Transformer Engine's kernel on Hopper) at about 62% "
    "forward and 52% backward; a flash kernel skips the causal mask's hidden blocks.",
    "- **FP8 recipes**: each recipe's casts in bytes per element (tensorwise and delayed scaling, rowwise, "
    "rowwise with a BF16 weight gradient, block-wise, MXFP8) and DeepGEMM's published rate for block-wise "
    "GEMMs (1550 of 1979 TFLOP/s on H800); otherwise FP8 GEMMs, training's and serving's, run at the GPU's "
    "FP8 matmul benchmark; "
    "`tests/test_step_time.py` checks the tensorwise cost against torchao's published 1.39x speedup of a "
    "4096 × 8192 × 16384 linear on H100.",
    "- **Memory-bound kernels** (elementwise, FP8 casts, the loss, the optimizer step, DeepSpeed's gradient "
    "accumulation): bytes counted kernel by kernel from the frameworks' code (`parc/cost/kernels.py`), at "
    "`hbm_efficiency` (0.6) of the datasheet's bandwidth. 0.6 is parc's assumption, fitted to no row.",
    "- **Frameworks** (`parc/model/data/frameworks.toml`): which kernels each runs (fused or eager "
    "elementwise, attention kernel by architecture), what its selective recompute repeats, how its ZeRO-3 "
    "gathers and reduces (per microbatch; DeepSpeed's as flat rings, the one structural choice taken from "
    "a table row: Narayanan et al. 2021 Table 2, whose 768-GPU row is a fit row for it), and the ring its "
    "context parallelism runs: torchtitan's on torch's experimental ring, K and V repeated to the query "
    "heads, their gradients passed in float32 and each ring step's output merged in eager float32 ops, "
    "counted in bytes from torch's source (`kernels.toml` [context_parallel]).",
    "- **Links**: the datasheet's bandwidth at `intra_node_efficiency` and `inter_node_efficiency` 1.0, and "
    "NCCL's per-hop latencies (`parc/model/data/links.toml`); not fitted.",
]


def fitted_lines() -> list[str]:
    """The constants `bench/accuracy_fit.py` fits on the fit rows, with parc's shipped values."""
    from bench.accuracy_fit import CONSTANTS

    return (["Fitted on the fit rows alone (`python bench/accuracy_fit.py`, golden-section search of the "
             "sum of log(parc / measured)², `--check` confirms the shipped values):", ""]
            + [f"- `{k.name}` = {k.shipped():g}" for k in CONSTANTS])


def targets_section(results: list[dict], s: dict) -> list[str]:
    """The error of the held-out rows first, then the fit rows, training and serving each
    (``bench/accuracy_serving.summary_lines``), then the other targets."""
    out = summary_lines(results, _table)
    out += ["Other targets:", ""]
    out += _table(["target", "result", ""], [
        ["closed-form quantities within 0.5%", f"{s['closed_ok']} of {s['closed']}", _met(s["closed_ok"] == s["closed"])],
        ["every published run fits in parc's memory estimate", f"{s['fit_in_memory']} of {s['ran']}",
         _met(s["fit_in_memory"] == s["ran"])],
    ])
    return out


def render(data: dict, results: list[dict], closed: list[tuple[str, str]], calib: list[str],
           planner: list[str] = ()) -> str:
    """docs/accuracy.md. Long because it is one document laid out top to bottom: header, held-out
    and fit errors, where the defaults come from, measured rows by group, the published plans
    against the planner, memory, closed-form rows, calibration, assumptions."""
    s = summary(results, closed)
    out = ["<!-- GENERATED by bench/accuracy.py from bench/accuracy_cases.toml; do not edit. "
           "Regenerate: python bench/accuracy.py (check: python bench/accuracy.py --check) -->", "",
           "# Accuracy: parc against published runs", "",
           "Every number below is parc's prediction for a run someone published, next to what that run "
           "measured. Errors are parc / measured − 1 on the metric the source printed (for a time a "
           "positive error means parc predicts slower; for a rate, faster). Only the constants "
           "`bench/accuracy_fit.py` fits are fitted to published runs, on the fit rows alone (below).", ""]
    out += targets_section(results, s)
    out += ["", "## Where parc's defaults come from", ""] + DEFAULTS_TEXT + [""]
    out += fitted_lines()
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(r["case"]["group"], []).append(r)
    out += ["", "Error by source:", ""]
    out += _table(["source", "role", "rows", "median abs. error", "worst abs. error"],
                  [[g, ", ".join(sorted({r["case"].get("role", "?") for r in rows})), str(len(e)),
                    f"{statistics.median(e):.1%}", f"{max(e):.1%}"]
                   for g, rows in groups.items() if (e := [abs(r["error"]) for r in rows if r["error"] is not None])])
    out += ["", "## Measured rows", ""]
    for group, rows in groups.items():
        out += [f"### {group}", ""]
        table = []
        for r in rows:
            c = r["case"]
            fmt, unit = METRICS[c["metric"]]
            table.append([c["id"], c.get("role", "?").replace("_", " "), _config(c),
                          f"{fmt.format(c['measured'])} {unit}" + (" (derived)" if c.get("derived") else ""),
                          fmt.format(r["value"]) if r["value"] is not None else "—",
                          _cell(r["error"]) if r["error"] is not None else "—",
                          _fits(r),
                          why_not(r) or "", r["spec"]])
        out += _table(["case", "role", "configuration", "measured", "parc", "error", "predicted peak memory", "why not",
                       "spec"], table)
        out += ["", "Sources and assumptions:", ""]
        out += [f"- `{r['case']['id']}`: {r['case']['source']}." + (f" Assumed: {r['case']['assumed']}." if r["case"].get("assumed") else "")
                for r in rows]
        out.append("")
    out += ["## Serving rows", "",
            "The serving rows compare `parc explain`'s numbers at the stated workload (TTFT, inter-token latency "
            "and throughput of the scheduler model, `parc/cost/scheduler.py`) with published serving measurements "
            "that state the hardware, the model, the parallel layout and the workload: NVIDIA NIM's concurrency "
            "sweep of Llama 3.3 70B on 2 H100, TensorRT-LLM's offline throughput table, and the SGLang team's "
            "DeepSeek-V3 deployment on 96 H100. Each row names the engine its run used (`target trtllm` for NIM and "
            "TensorRT-LLM, whose capacity scheduler and KV rule parc models: `parc/cost/engine.py`, "
            "`parc/cost/startup.py`) and states what that run set; the engine's defaults give the rest. No serving constant is fitted: every step reads "
            "the profile's defaults, DeepEP's own measured rates and the attention kernels' published ones "
            "(`parc/cost/serve_kernels.toml`: prompts at FlashAttention-3's forward rate on Hopper, decode at "
            "FlashMLA's 3000 GB/s and 580 TFLOP/s on H800), and pays for the memory-bound kernels (norms, residual "
            "adds, RoPE, the activation, an FP8 model's input casts) counted kernel by kernel as training's are.", ""]
    if planner:
        out += ["## Published plans against the planner", "",
                "For the largest published run of each group, `parc plan` searched the same model on the "
                "same cluster for the same global batch, with the run's precision, framework, FP8 recipe and "
                "pipeline schedule kept and everything else (mesh, virtual stages, micro batch, ZeRO stage, "
                "recompute, sequence parallelism) searched; the published plan's step against the best "
                "one's, and its place in the ranking (plans within the memory headroom P405 asks for "
                "first). Where parc's best is more than 5% faster, the last column gives parc's evidence: "
                "the cost the published plan loses on, what parc's best does differently, and how far "
                "parc's own prediction of the published run is from its measurement "
                "(`bench/accuracy_planner.py`).", ""] + list(planner) + [""]
    from bench.accuracy_serving import kv_memory_lines

    out += kv_memory_lines(ROOT, _table)
    out += ["## Clusters and models", ""]
    out += [f"- cluster `{k}`: {v['source']}." for k, v in data["clusters"].items()]
    out += [f"- model `{k}`: {v['approximated']} (where no spec file exists)." for k, v in data["models"].items() if v.get("approximated")]
    out += ["", "## Closed-form rows", "",
            "parc's own functions against the papers' formulas and printed values "
            f"(`{CLOSED_FORM_TESTS}`, each within 0.5%): Narayanan et al. 2021 eq. 2 and Table 1 parameter counts; "
            "Korthikanti et al. 2022 eq. 7/8 FLOPs, Table 2 activation bytes and eq. 5 on the first stage; "
            "Narayanan eq. 3; ZeRO (Rajbhandari et al. 2020) Figure 1; the vLLM paper's KV bytes per token, "
            "under decode context parallelism, and MLA's latent KV (DeepSeek-V2 §2.1: DeepSeek-V3's 70,272 B); "
            "the pipeline bubble (p−1)/m and (1/v)(p−1)/m (parc reports idle over the whole step, b; the "
            "papers' idle over ideal time is b/(1−b)).", ""]
    out += _table(["test", "outcome"], [[f"`{n}`", o] for n, o in closed])
    out += ["", "## Calibration", "",
            "Korthikanti et al. 2022 Table 5's selective rows: the cluster's profile is fitted on two rows "
            "and the others are predicted with it (`bench/accuracy_calibration.py`); the error of each "
            "held-out row before and after the fit.", ""] + calib + [""]
    return "\n".join(out)


def build(planner: bool = True) -> tuple[str, dict]:
    data = tomllib.loads(CASES.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as d:
        results = [run_case(c, data, Path(d)) for c in data["case"]]
    closed = closed_form_rows()
    section = []
    if planner:
        from bench.accuracy_planner import planner_section

        section = planner_section(results)
    text = render(data, results, closed, calibration_section(results), section)
    return text, summary(results, closed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/accuracy.md is not what the cases give")
    ap.add_argument("--out", default=str(DOC), help="where to write (default docs/accuracy.md)")
    args = ap.parse_args(argv)
    text, s = build()
    for (role, k), got in s["groups"].items():
        if got is not None:
            print(f"{k}, {role.replace('_', ' ')}: median |error| {got[0]:.1%}, worst {got[1]:.1%} over {got[2]} rows")
    print(f"closed-form: {s['closed_ok']} of {s['closed']} within 0.5%; fits in memory: {s['fit_in_memory']} of {s['ran']}")
    print("targets " + ("met" if targets_met(s) else "not met"))
    for r in s["misses"]:
        print(f"  {r['case']['id']}: {why_not(r)}")
    if args.check:
        current = Path(args.out).read_text(encoding="utf-8") if Path(args.out).exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python bench/accuracy.py", file=sys.stderr)
            return 1
        return 0
    from parc.files import write_atomic

    write_atomic(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
