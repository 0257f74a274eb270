"""Measured runs read from training logs: Megatron-LM's, torchtitan's, or a plain CSV.

Each log gives one :class:`Run` (a CSV one per row): what was measured (step time or a
throughput, peak memory) and the settings the log prints (mesh, batch, recompute), which
:mod:`parc.calibrate.runs` applies to the spec's plan. A file parc cannot read raises
:class:`LogError` naming the file, the line and what was expected there.

Warm-up: the first logged step of a log, and every step numbered at most :data:`WARMUP_STEPS`,
are left out (they pay for compilation, allocator growth and communicator set-up: torchtitan's
step 1 runs tens of times slower than step 2); the step time is the median of the rest, or of
the last logged step alone when nothing else is left.
"""
from __future__ import annotations

import csv
import io
import math
import re
import statistics
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

WARMUP_STEPS = 3

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MiB, GiB = 2 ** 20, 2 ** 30

# What a run may have measured, as a CSV names it, and its factor to parc's unit (seconds,
# tokens per second, FLOP/s, a fraction, bytes).
MEASURED = {
    "step_time": 1.0, "step_time_ms": 1e-3, "tokens_per_second": 1.0, "tokens_per_second_per_gpu": 1.0,
    "tflops_per_gpu": 1.0, "mfu": 1.0, "memory_gb": 1e9, "memory_gib": GiB, "memory_bytes": 1.0,
}
_MEASURED_AS = {"step_time_ms": "step_time", "memory_gb": "memory", "memory_gib": "memory",
                "memory_bytes": "memory"}

MEGATRON_ITERATION = " iteration 10/ 100 | ... | elapsed time per iteration (ms): 1234.5 | ..."
TORCHTITAN_STEP = "step: 10  loss: 7.1234  memory: 30.12GiB(38.07%)  tps: 1,234  tflops: 123.45  mfu: 12.48%"


class LogError(Exception):
    """A log parc cannot read: ``file:line: message``."""

    def __init__(self, file: str, line: int | None, message: str):
        self.file, self.line, self.message = file, line, message
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")


@dataclass
class Run:
    """One measured run: ``settings`` are spec fields (``"mesh.tp": 8``) to apply to the spec's
    plan; ``measured`` holds ``step_time`` (s), ``tokens_per_second`` (the whole job),
    ``tokens_per_second_per_gpu``, ``tflops_per_gpu`` (TFLOP/s), ``mfu`` (a fraction) and
    ``memory`` (peak bytes on the fullest GPU), whichever the log gave."""
    label: str
    source: str                      # file:line of the measurement
    settings: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    world_size: int | None = None
    steps: int = 0                   # logged steps the median was taken over


@lru_cache(maxsize=1)
def formats() -> dict:
    with open(Path(__file__).with_name("formats.toml"), "rb") as f:
        return tomllib.load(f)


def read_log(path: str, text: str | None = None) -> list[Run]:
    """The runs in one log file (OSError when it cannot be read, LogError when it is not a log)."""
    if text is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    text = ANSI.sub("", text)
    if path.lower().endswith(".csv"):
        return read_csv(path, text)
    if "elapsed time per iteration" in text or re.search(r"-{3,} arguments -{3,}", text):
        return [read_megatron(path, text)]
    if re.search(r"\bstep:\s*\d+", text):
        return [read_torchtitan(path, text)]
    first = next((i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip()), None)
    raise LogError(path, first, "not a log parc reads: expected a Megatron-LM iteration line "
                   f"(`{MEGATRON_ITERATION}`), a torchtitan step line (`{TORCHTITAN_STEP}`), or a "
                   "CSV file (.csv) with a header")


def _file_label(path: str) -> str:
    """A log's run label: its file name, as one printable line (a name may hold a line break)."""
    name = Path(path).name
    return name if name.isprintable() else ascii(name)[1:-1]


def _median_after_warmup(steps: list[tuple[int, int, float]]) -> tuple[float, int, int]:
    """(median value, line of the last step used, steps used) of (step, line, value) triples."""
    kept = [s for s in steps[1:] if s[0] > WARMUP_STEPS] or steps[-1:]
    return statistics.median(v for _, _, v in kept), kept[-1][1], len(kept)


# A number as logs and CSV files print it: digits with an optional fraction and exponent, and
# thousands grouped by commas (torchtitan's `tps: 1,234`). What else float() takes ("nan", "inf",
# "1_000") and what overflows it (1e400) is not a measurement.
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?")


def number(text: str) -> float | None:
    """``text`` read as a finite number, or None when it is not one."""
    t = text.strip()
    if not _NUMBER.fullmatch(t):
        return None
    v = float(t.replace(",", ""))
    return v if math.isfinite(v) else None


def _number(path: str, no: int, what: str, text: str) -> float:
    """:func:`number`, or :class:`LogError` naming the file, the line and the field."""
    v = number(text)
    if v is None:
        raise LogError(path, no, f"`{what}` should be a number, not `{text}`")
    return v


# --- Megatron-LM -------------------------------------------------------------------------------

_MEG_ARG = re.compile(r"^\s*(?:\[[^\]]*\]\s*:?\s*)?(\w+) \.+ (.*?)\s*$")
_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEG_FIELDS = {
    "step_time": re.compile(r"elapsed time per iteration \(ms\):\s*([^\s|]+)"),
    "tflops_per_gpu": re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([^\s|]+)"),
    "tokens_per_second_per_gpu": re.compile(r"throughput \(token/sec/GPU\):\s*([^\s|]+)"),
}
_MEG_MEMORY = re.compile(r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) \| allocated: ([^\s|]+) "
                         r"\| max allocated: ([^\s|]+)")


def _megatron_value(name: str, value: str) -> Any:
    """A printed argument as the spec field takes it; None when the run leaves it unset."""
    if name == "recompute_granularity":
        return "none" if value == "None" else value
    if name == "virtual_pipeline_model_parallel_size":
        return 1 if value == "None" else int(value)
    if name == "use_distributed_optimizer":
        return 1 if value == "True" else 0
    if name == "fp8":   # the FP8 recipe (e4m3, hybrid), or None for BF16 training
        return None if value == "None" else "fp8"
    if value in ("True", "False"):
        return value == "True"
    if value == "None":
        return None
    return int(value)


def _megatron_arguments(path: str, lines: list[str]) -> tuple[dict, int | None]:
    table = formats()["megatron"]["arguments"]
    settings, world, inside = {}, None, False
    for no, ln in enumerate(lines, 1):
        if re.search(r"-{3,} arguments -{3,}", ln):
            inside = True
            continue
        if re.search(r"-{3,} end of arguments -{3,}", ln):
            break
        m = _MEG_ARG.match(ln) if inside else None
        if not m or m.group(1) not in table:
            continue
        try:
            value = _megatron_value(m.group(1), m.group(2))
        except ValueError:
            raise LogError(path, no, f"`{m.group(1)}` should be a whole number, not `{m.group(2)}`") from None
        if value is None:
            continue
        if table[m.group(1)] == "world_size":
            world = value
        else:
            settings[table[m.group(1)]] = value
    if settings.get("schedule.virtual_stages", 1) > 1:
        settings["schedule.pipeline"] = "interleaved_1f1b"
    return settings, world


def read_megatron(path: str, text: str) -> Run:
    """A Megatron-LM training log: the arguments block (megatron/training/arguments.py), the
    iteration lines of training_log (megatron/training/training.py) and the memory reports of
    report_memory (megatron/training/utils.py, in MB of 2^20 bytes: the largest `max allocated`
    over the ranks that print is the run's peak)."""
    lines = text.splitlines()
    settings, world = _megatron_arguments(path, lines)
    series: dict[str, list] = {k: [] for k in _MEG_FIELDS}
    peak = 0.0
    for no, ln in enumerate(lines, 1):
        if (mm := _MEG_MEMORY.search(ln)):
            peak = max(peak, _number(path, no, "max allocated", mm.group(3)) * MiB)
            continue
        it = _MEG_ITER.search(ln)
        if not it:
            continue
        found = {k: rx.search(ln) for k, rx in _MEG_FIELDS.items()}
        if found["step_time"] is None:
            raise LogError(path, no, "an iteration line without `elapsed time per iteration (ms): T |`; "
                           f"expected a line like `{MEGATRON_ITERATION}`")
        for k, m in found.items():
            if m:
                series[k].append((int(it.group(1)), no, _number(path, no, k, m.group(1))))
    if not series["step_time"]:
        raise LogError(path, None, f"no iteration line found; expected a line like `{MEGATRON_ITERATION}`")
    measured, line, used = {}, 0, 0
    for k, s in series.items():
        if s:
            measured[k], ln_, n = _median_after_warmup(s)
            if k == "step_time":
                measured[k] /= 1000.0
                line, used = ln_, n
    if peak:
        measured["memory"] = peak
    return Run(_file_label(path), f"{path}:{line}", settings, measured, world, used)


# --- torchtitan --------------------------------------------------------------------------------

_TT_STEP = re.compile(r"\bstep:\s*(\d+)\b")
_TT_FIELDS = {
    "tokens_per_second_per_gpu": (re.compile(r"\btps:\s*(\S+)"), 1.0),
    "tflops_per_gpu": (re.compile(r"\btflops:\s*(\S+)"), 1.0),
    "mfu": (re.compile(r"\bmfu:\s*(\S+?)%"), 0.01),
    "memory": (re.compile(r"\bmemory:\s*(\S+?)GiB"), GiB),
}
_TT_MESH = re.compile(r"Building \d+-D device mesh with [\[(]([^\])]*)[\])],\s*\[([^\]]*)\]")
_TT_START = re.compile(r"Training starts at step \d+, with local batch size \d+, global batch size (\d+)"
                       r"(?:, (?:gradient accumulation steps \d+, )?sequence length (\d+))?")


def _torchtitan_mesh(path: str, no: int, m: re.Match) -> tuple[dict, int]:
    names = [n.strip().strip("'\"") for n in m.group(1).split(",") if n.strip()]
    try:
        dims = [int(d) for d in m.group(2).split(",") if d.strip()]
    except ValueError:
        raise LogError(path, no, "the mesh's sizes should be whole numbers") from None
    if len(names) != len(dims):
        raise LogError(path, no, f"the mesh names {len(names)} axes but gives {len(dims)} sizes")
    table = formats()["torchtitan"]["mesh"]
    axes = {"pp": 1, "dp": 1, "cp": 1, "tp": 1}
    settings: dict[str, Any] = {}
    for n, d in zip(names, dims):
        if n not in table:
            raise LogError(path, no, f"unknown mesh axis `{n}`; parc reads {', '.join(table)}")
        axes[table[n]] *= d
    settings.update({f"mesh.{a}": v for a, v in axes.items()})
    shard = dict(zip(names, dims)).get("dp_shard", 1)
    settings["train.zero"] = 3 if shard > 1 else 0   # torchtitan shards with FSDP over dp_shard
    world = 1
    for d in dims:
        world *= d
    return settings, world


def read_torchtitan(path: str, text: str) -> Run:
    """A torchtitan log: the step lines of its metrics logger (torchtitan/components/metrics.py:
    `tps` is tokens per second per GPU, `memory` the peak reserved GiB), the device mesh it
    builds at start and the batch and sequence length of its `Training starts at step` line
    (torchtitan/train.py), where printed (without them the spec's settings stand)."""
    series: dict[str, list] = {k: [] for k in _TT_FIELDS}
    settings, world = {}, None
    for no, ln in enumerate(text.splitlines(), 1):
        if (mm := _TT_MESH.search(ln)):
            mesh, world = _torchtitan_mesh(path, no, mm)
            settings.update(mesh)
            continue
        if (mm := _TT_START.search(ln)):
            settings["schedule.global_batch"] = int(mm.group(1))
            if mm.group(2):
                settings["model.seq_len"] = int(mm.group(2))
            continue
        st = _TT_STEP.search(ln)
        if not st or "loss:" not in ln:
            continue
        found = {k: rx.search(ln) for k, (rx, _) in _TT_FIELDS.items()}
        if found["tokens_per_second_per_gpu"] is None:
            raise LogError(path, no, f"a step line without `tps: N`; expected a line like `{TORCHTITAN_STEP}`")
        for k, m in found.items():
            if m:
                series[k].append((int(st.group(1)), no, _number(path, no, k, m.group(1)) * _TT_FIELDS[k][1]))
    if not series["tokens_per_second_per_gpu"]:
        raise LogError(path, None, f"no step line found; expected a line like `{TORCHTITAN_STEP}`")
    measured, line, used = {}, 0, 0
    for k, s in series.items():
        if s and k != "memory":
            measured[k], ln_, n = _median_after_warmup(s)
            if k == "tokens_per_second_per_gpu":
                line, used = ln_, n
    if series["memory"]:
        measured["memory"] = max(v for _, _, v in series["memory"])
    return Run(_file_label(path), f"{path}:{line}", settings, measured, world, used)


# --- CSV ---------------------------------------------------------------------------------------

def _csv_header(path: str, header: list[str]) -> None:
    from parc.model.fields import ALIASES, BLOCKS

    for col in header:
        if col in MEASURED or col in ("label", "world_size"):
            continue
        block, _, key = col.partition(".")
        if block in ("mesh", "schedule", "train", "model", "cluster", "placement") and \
                ALIASES.get(key, key) in BLOCKS[block]:
            continue
        raise LogError(path, 1, f"unknown column `{col}`: a column is a measurement "
                       f"({', '.join(MEASURED)}), `label`, `world_size`, or a spec field such as "
                       "`mesh.tp`, `schedule.global_batch`, `train.recompute`")


def read_csv(path: str, text: str) -> list[Run]:
    """One run per row. Measured columns are named in :data:`MEASURED`; a column named
    ``block.key`` (``mesh.tp``) sets that spec field for the row; ``label`` names the run and
    ``world_size`` checks the mesh. An empty cell leaves the value out."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(c.strip() for c in rows[0]):
        raise LogError(path, 1, "an empty CSV; expected a header such as `label,mesh.tp,mesh.pp,step_time`")
    header = [c.strip() for c in rows[0]]
    _csv_header(path, header)
    runs = []
    for no, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise LogError(path, no, f"{len(row)} cells where the header names {len(header)} columns")
        cells = {h: c.strip() for h, c in zip(header, row) if c.strip()}
        label = cells.get("label")
        if label is not None and not label.isprintable():
            raise LogError(path, no, f"`label` holds a line break or control character ({label!r}); a run's "
                           "label is one line of printable text")
        run = Run(label or f"{Path(path).name} row {no - 1}", f"{path}:{no}", steps=1)
        for col, cell in cells.items():
            if col == "label":
                continue
            if col in MEASURED or col == "world_size":
                value = number(cell.rstrip("%"))
                if value is None:
                    raise LogError(path, no, f"`{col}` should be a number, not `{cell}`")
                if col == "mfu" and (cell.endswith("%") or value > 1):
                    value /= 100   # a percentage
                if col == "world_size":
                    if not value.is_integer():
                        raise LogError(path, no, f"`world_size` should be a whole number of GPUs, not `{cell}`")
                    run.world_size = int(value)
                else:
                    run.measured[_MEASURED_AS.get(col, col)] = value * MEASURED[col]
            elif not _PLAIN.match(cell):
                raise LogError(path, no, f"`{col}` takes a number, a name or a size like 80GB, not `{cell}`")
            else:
                run.settings[col] = _cell_value(cell)
        if not set(run.measured) - {"memory"}:
            raise LogError(path, no, "no step time or throughput in this row; give one of "
                           "step_time, tokens_per_second, tokens_per_second_per_gpu, tflops_per_gpu, mfu")
        runs.append(run)
    if not runs:
        raise LogError(path, 2, "a header but no rows")
    return runs


_PLAIN = re.compile(r"^[A-Za-z0-9_.+\-/()]+$")


def _cell_value(cell: str) -> Any:
    low = cell.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(cell)
    except ValueError:
        return cell
