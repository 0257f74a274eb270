"""The real-config corpus (``tests/wild/``): each published launch, the ``.par`` that states the
same plan, and the comparison of what parc emits for it with the original.

``tests/wild/corpus.toml`` lists the entries. Each original file in ``tests/wild/<entry>/`` starts
with a header of ``#|`` lines (its source: repository, path and commit, or a docs URL and the date
it was read, and the SHA-256 of the text below the header); below the header is the file exactly
as published. ``original_text`` strips the header and checks the hash.

The comparison reads both sides into launches (``wild_launch``, ``wild_yaml``) and lists every
setting whose value differs as ``role/format.setting``, with the original's and parc's values
rendered as text (``-`` where a side does not set it and the engine's parser has no default).
``corpus.toml`` lists each difference an entry is expected to show, with the reason parc differs
(``reason``) or the missing work that causes it (``gap``)."""
from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from support import wild_argv, wild_launch, wild_norm, wild_yaml
from support.wild_launch import Launch

ROOT = Path(__file__).resolve().parent.parent.parent
WILD = ROOT / "tests" / "wild"
CORPUS = WILD / "corpus.toml"
HEADER = "#| "
ABSENT = "-"


@dataclass
class Entry:
    name: str
    target: str
    title: str
    source: str
    errors: list
    original: dict
    differs: list = field(default_factory=list)
    errors_gap: str = ""

    @property
    def folder(self) -> Path:
        return WILD / self.name

    @property
    def par(self) -> Path:
        return self.folder / "plan.par"


def corpus() -> list[Entry]:
    data = tomllib.loads(CORPUS.read_text(encoding="utf-8"))
    return [Entry(name=e["name"], target=e["target"], title=e["title"], source=e["source"],
                  errors=list(e.get("errors", [])), original=e["original"], differs=list(e.get("differs", [])),
                  errors_gap=e.get("errors_gap", "")) for e in data["entry"]]


def split_header(text: str) -> tuple[list[str], str]:
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith(HEADER.rstrip()):
        n += 1
    return [ln.rstrip("\n")[len(HEADER):] for ln in lines[:n]], "".join(lines[n:])


def original_text(path: Path) -> str:
    """An original file as published: its text below the ``#|`` header, whose ``sha256:`` line
    must match it."""
    head, body = split_header(path.read_text(encoding="utf-8"))
    sums = [h.split(":", 1)[1].strip() for h in head if h.startswith("sha256:")]
    assert sums, f"{path}: no '#| sha256:' line in its source header"
    got = hashlib.sha256(body.encode("utf-8")).hexdigest()
    assert got == sums[0], f"{path}: the text differs from the one published (sha256 {got}, header {sums[0]})"
    return body


def render(v) -> str:
    if v is None:
        return ABSENT
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (list, tuple)):
        return " ".join(render(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
        try:
            return render(json.loads(v))
        except ValueError:
            return v
    return str(v)


# -- the original's launches ------------------------------------------------------------------
def _sandbox_files(entry: Entry, box: Path) -> None:
    o = entry.original
    box.mkdir(parents=True, exist_ok=True)
    for name in o.get("files", []):           # stand-ins for files the script checks for
        (box / name).parent.mkdir(parents=True, exist_ok=True)
        (box / name).write_text("")
    for name in o.get("dirs", []):
        (box / name).mkdir(parents=True, exist_ok=True)
    for src, dst in o.get("place", {}).items():
        (box / dst).parent.mkdir(parents=True, exist_ok=True)
        (box / dst).write_text(original_text(entry.folder / src))
        if dst.endswith(".sh"):
            (box / dst).chmod(0o755)


def original_launches(entry: Entry, sandbox: Path) -> list[Launch]:
    o = entry.original
    kind = o["kind"]
    box = sandbox / "original"
    _sandbox_files(entry, box)
    if kind == "table":
        return [_table(original_text(entry.folder / o["file"]), o["row"])]
    texts = [original_text(entry.folder / f) for f in (o["file"] if isinstance(o["file"], list) else [o["file"]])]
    out = []
    for i, text in enumerate(texts):
        b = box / f"part{i}" if len(texts) > 1 else box
        if b != box:
            _sandbox_files(entry, b)
        if kind in wild_yaml.FORMATS:
            out += wild_yaml.FORMATS[kind](text, b)
            continue
        if kind == "words":
            out += wild_launch.from_records(wild_launch.command_words(text, b))
            continue
        script = wild_launch.docs_text(text) if kind == "docs" else text
        if kind == "slurm":
            out.append(Launch("slurm", "scheduler", wild_launch.sbatch_settings(text)))
        env = {**o.get("env", {}), "WILD_HOSTS": " ".join(f"node{n}" for n in range(o.get("nodes", 1)))}
        if o.get("rank_var"):
            out += wild_launch.run_node_scripts(script, b, o.get("nodes", 1), env, o["rank_var"])
        else:
            out += wild_launch.shell_launches(script, b, o.get("args", []), env)
    if "select" in o:       # the launches of the original's commands that state this plan
        engines = [la for la in out if la.role != "scheduler"]
        keep = [engines[i] for i in o["select"]]
        out = [la for la in out if la.role == "scheduler" or any(la is k for k in keep)]
    roles = o.get("roles")
    engines = [la for la in out if la.role != "scheduler"]
    if roles:
        assert len(roles) == len(engines), (entry.name, len(engines), [la.engine for la in engines])
        for la, r in zip(engines, roles):
            la.role = r
    _number_nodes(out)
    return out


def _number_nodes(launches: list[Launch]) -> None:
    """Launches of one role in the order they start are nodes 0, 1, ... unless a run per node
    already numbered them."""
    seen: dict = {}
    for la in launches:
        if la.node == 0:
            la.node = seen.get(la.role, 0)
        seen[la.role] = la.node + 1


def _table(text: str, row: str) -> Launch:
    """A torchtitan benchmark table (benchmarks/*.md): its caption's model, GPUs, batch sizes,
    activation checkpointing and techniques, and the chosen row's degrees and sequence length,
    as torchtitan's config sections name them. Only what the table states is compared."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("|") and ln.split("|")[1].strip() == row)
    cap = next(lines[i] for i in range(at, -1, -1) if lines[i].startswith("**Table"))
    head = next(lines[i] for i in range(at, -1, -1) if lines[i].startswith("|") and lines[i + 1].startswith("| -"))
    names = [c.strip() for c in head.strip("|").split("|")]
    cells = [c.strip() for c in lines[at].strip("|").split("|")]
    col = dict(zip(names, cells))
    s: dict = {}

    def deg(pattern, key, where):
        m = re.search(pattern, where)
        if m:
            s[key] = int(m.group(1))
    for where in (cap, cells[0]):
        deg(r"FSDP (\d+)", "parallelism.data_parallel_shard_degree", where)
        deg(r"TP (\d+)", "parallelism.tensor_parallel_degree", where)
        deg(r"PP ?(\d+)", "parallelism.pipeline_parallel_degree", where)
        deg(r"CP (\d+)", "parallelism.context_parallel_degree", where)
    deg(r"Local batch size (\d+)", "training.local_batch_size", cap)
    deg(r"global batch size (\d+)", "training.global_batch_size", cap)
    if col.get("Sequence Length", "").isdigit():
        s["training.seq_len"] = int(col["Sequence Length"])
    if re.search(r"Full activation checkpointing", cap):
        s["activation_checkpoint.mode"] = "full"
    elif re.search(r"Selective activation checkpointing", cap):
        s["activation_checkpoint.mode"] = "selective"
    if "Float8" in cap or "Float8" in cells[0]:
        s["model.converters"] = ["float8"]
    if "torch.compile" in cap or "torch.compile" in cells[0]:
        s["compile.enable"] = True
    if "AsyncTP" in cap or "AsyncTP" in cells[0]:
        s["parallelism.enable_async_tensor_parallel"] = True
    sched = {"1F1B": "1F1B", "Interleaved 1F1B": "Interleaved1F1B"}
    if cells[0] in sched:
        s["parallelism.pipeline_parallel_schedule"] = sched[cells[0]]
    elif "1F1B" in cap and "parallelism.pipeline_parallel_degree" in s:
        s["parallelism.pipeline_parallel_schedule"] = "1F1B"
    return Launch("torchtitan", "train", {f"torchtitan.{k}": v for k, v in s.items()}, partial=True)


# -- what parc emits --------------------------------------------------------------------------
def emitted_launches(target: str, files, sandbox: Path) -> list[Launch]:
    from support import wild_emitted

    return wild_emitted.launches(target, files, sandbox)


# -- the comparison ---------------------------------------------------------------------------
def _value(la: Launch, key: str):
    """A launch's value of a setting; one it leaves out is its engine's default (when the launch
    runs that program at all)."""
    if key in la.settings:
        return la.settings[key]
    fmt, _, name = key.partition(".")
    if not any(k.startswith(fmt + ".") for k in la.settings):
        return None
    if fmt in ("vllm", "sglang", "megatron", "megatron_deepspeed", "trtllm"):
        return wild_argv.options(fmt)[1].get(name, {}).get("default")
    return wild_norm.DEFAULTS.get(fmt, {}).get(name)


def compare(original: list[Launch], emitted: list[Launch]) -> list[dict]:
    """Every difference between two sets of launches: ``{"key", "original", "emitted"}``, each
    once, in a stable order."""
    roles = sorted({la.role for la in original + emitted})
    out = []
    for role in roles:
        a = sorted((la for la in original if la.role == role), key=lambda la: la.node)
        b = sorted((la for la in emitted if la.role == role), key=lambda la: la.node)
        if len(a) != len(b) and min(len(a), len(b)) > 1 or not a or not b:
            out.append({"key": f"{role}/launches", "original": str(len(a)), "emitted": str(len(b))})
        # a script one side runs once for every node is compared with each node of the other
        pairs = zip(a, b) if len(a) == len(b) or min(len(a), len(b)) != 1 else (
            [(a[0], y) for y in b] if len(a) == 1 else [(x, b[0]) for x in a])
        for x, y in pairs:
            if x.engine != y.engine:
                out.append({"key": f"{role}/engine", "original": x.engine, "emitted": y.engine})
                continue
            x, y = wild_norm.normalized(x), wild_norm.normalized(y)
            for k in sorted(set(x.settings) if x.partial else set(x.settings) | set(y.settings)):
                vx, vy = render(_value(x, k)), render(_value(y, k))
                if vx != vy:
                    out.append({"key": f"{role}/{k}", "original": vx, "emitted": vy})
    seen, unique = set(), []
    for d in out:
        t = (d["key"], d["original"], d["emitted"])
        if t not in seen:
            seen.add(t)
            unique.append(d)
    return unique
