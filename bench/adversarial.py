"""An adversarial campaign against parc as pull-request CI and shared machines meet it.

Three parts, each counted:

* hostile strings: every string (and string-list) key of every target, and the model's label,
  set to each of the hostile values below, compiled for that target; each accepted launch plan
  is written out, every file read back with its own parser (bash -n, YAML, JSON) and every
  shell script run with recorders in place of the launchers. An injected command would create
  a marker file: that is an execution;
* the CLI: fuzzed specs (the grammar strategies of the test suite) through `parc check`,
  `parc lint`, `parc explain` and `parc fmt --check` as processes, with a secret in the
  environment;
* planted files: a spec that links to /proc/self/environ, one that links to /dev/zero, a FIFO,
  a spec over the size limit, and a pickle planted where a parser cache used to be read.

A crash is an "internal error" or a traceback; a hang is a process over its time limit; a leak
is the secret anywhere in any output. Prints the counts and exits 1 unless crashes, hangs,
executions and leaks are all zero.

Run: python bench/adversarial.py [--cli 300] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SECRET = "parc-adversarial-secret-7d41c9"

# {m} is replaced by a marker path: a value that runs as a command creates it.
HOSTILE = [
    "$(touch {m})", "`touch {m}`", "; touch {m}", "&& touch {m}", "| touch {m}", "\ntouch {m}\n",
    "'; touch {m}; '", '"; touch {m}; "', "$(touch {m})'", "${{IFS}}touch${{IFS}}{m}", "\\$(touch {m})",
    "a\rb", "a\tb", "a\x0bb", "a\x0cb", "x\x1b[2Jy", "\u202etouch {m}", "\U0001F600 $(touch {m})",
    "\ud7ff", "-", "--", "--help", "--master-addr=attacker.example", "-o /tmp/x", "--standalone",
    "*", "?", "[a-z]*", "~", "~root", "$HOME", "${{PATH}}", "$0", "$@", "!!", "#comment",
    "key: value", "- item", "{{a: 1}}", "[1, 2]", "&anchor", "*alias", "!!python/object/apply:os.system ['touch {m}']",
    "|\n  touch {m}", "> folded", "'single'", '"double"', "null", "~", "yes", "no", "0x1F", "1e3",
    "0777", ".inf", "<<: *a", "%TAG ! tag:x", "@at", "`", "'", '"', "\\", "\\n", "\\\\", "a b  c",
    " leading", "trailing ", "", "x" * 5000, "é" * 300, "a\x00b",
]


def hostile_values(marker_dir: Path) -> list[str]:
    return [h.format(m=marker_dir / f"pwned-{i}") for i, h in enumerate(HOSTILE)]


TRAIN = """
model {label} {{
  layers     = 4
  hidden     = 256
  ffn_hidden = 512
  heads      = 4
  vocab      = 1024
  seq_len    = 128
}}
cluster "c" {{
  nodes         = 2
  gpus_per_node = 2
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
mesh {{
  dp = 2
  tp = 2
}}
schedule {{
  micro_batch  = 1
  global_batch = 8
}}
train {{ zero = 1 }}
{target}
"""

SERVE = """
model {label} {{
  layers     = 4
  hidden     = 256
  ffn_hidden = 512
  heads      = 4
  vocab      = 1024
  seq_len    = 128
}}
cluster "c" {{
  nodes         = 2
  gpus_per_node = 2
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
mesh {{
  pp = 2
  tp = 2
}}
serve {{ max_model_len = 128 }}
{target}
"""

# What each target needs to compile; the key under test overrides it.
BASE = {
    "torchrun": {"entrypoint": "train.py"},
    "megatron": {"entrypoint": "pretrain_gpt.py"},
    "slurm": {"entrypoint": "train.py"},
    "kubernetes": {"entrypoint": "train.py", "image": "registry.example/img:1"},
    "vllm": {"model": "org/model"},
    "json": {},
}
SERVE_TARGETS = {"vllm": ["vllm"], "slurm": ["vllm", "slurm"], "kubernetes": ["vllm", "kubernetes"]}


def par(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(par(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def target_blocks(blocks: dict[str, dict]) -> str:
    out = []
    for t, keys in blocks.items():
        body = "\n".join(f"  {k} = {par(v)}" for k, v in keys.items())
        out.append(f"target {t} {{\n{body}\n}}")
    return "\n".join(out)


def read_back(files, folder: Path, counts: Counter, marker_dir: Path, note) -> None:
    import yaml
    from backends_support import run_emitted, write_out

    out = write_out(files, folder)
    for f in files:
        p = out / f.path
        if f.path.endswith(".json"):
            json.loads(p.read_text())
        elif f.path.endswith((".yaml", ".yml")):
            list(yaml.safe_load_all(p.read_text()))
        elif f.path.endswith((".sh", ".sbatch")):
            r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
            if r.returncode:
                counts["unparsable scripts"] += 1
                note("unparsable", f.path, r.stderr[:200])
                continue
            if f.path.endswith(".sh"):
                for node in ("0", "1"):
                    run_emitted(p, folder, node, env={"SLURM_NODEID": node}, check=False)
                    counts["scripts run"] += 1


def hostile_strings(counts: Counter, tmp: Path, note) -> None:
    from parc.cli.compile import compile_spec
    from parc.resolve.resolver import target_spec

    marker_dir = tmp / "markers"
    marker_dir.mkdir()
    values = hostile_values(marker_dir)
    cases = []
    for t, base in BASE.items():
        keys = (target_spec(t) or {}).get("keys", {})
        for key, d in keys.items():
            if d.get("kind") not in ("str", "strlist"):
                continue
            for mode in ("train", "serve"):
                if mode == "serve" and t not in SERVE_TARGETS:
                    continue
                if mode == "train" and t == "vllm":
                    continue
                cases.append((t, key, d["kind"], mode))
    cases += [(t, "<model label>", "label", "train") for t in ("torchrun", "megatron", "slurm", "kubernetes", "json")]
    cases += [(t, "<model label>", "label", "serve") for t in SERVE_TARGETS]
    for t, key, kind, mode in cases:
        for i, v in enumerate(values):
            counts["hostile inputs"] += 1
            blocks = {}
            for name in (SERVE_TARGETS[t] if mode == "serve" else [t]):
                blocks[name] = dict(BASE.get(name, {}))
            label = par("m")
            if kind == "label":
                label = par(v)
            else:
                blocks[t][key] = [v] if kind == "strlist" else v
            text = (SERVE if mode == "serve" else TRAIN).format(label=label, target=target_blocks(blocks))
            folder = tmp / f"h{counts['hostile inputs']}"
            folder.mkdir()
            spec = folder / "spec.par"
            spec.write_text(text, encoding="utf-8")
            try:
                r, _, files = compile_spec(str(spec), t, root=folder)
            except Exception as e:  # noqa: BLE001 - a crash is what this counts
                counts["crashes"] += 1
                note("crash", f"{t}.{key}", f"{type(e).__name__}: {e}"[:300])
                continue
            if files is None:
                counts["hostile refused"] += 1
                continue
            counts["hostile accepted"] += 1
            try:
                read_back(files, folder / "out", counts, marker_dir, note)
            except Exception as e:  # noqa: BLE001
                counts["read-back failures"] += 1
                note("read-back", f"{t}.{key} value {i}", f"{type(e).__name__}: {e}"[:300])
    executed = list(marker_dir.iterdir())
    counts["executions"] += len(executed)
    for m in executed:
        note("execution", m.name, "")


def run_cli(args: list[str], cwd: Path, env: dict, counts: Counter, note, limit: float = 60.0) -> None:
    counts["cli runs"] += 1
    try:
        p = subprocess.run([sys.executable, "-m", "parc", *args], cwd=cwd, env=env, capture_output=True,
                           timeout=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        counts["hangs"] += 1
        note("hang", " ".join(args), "")
        return
    out = p.stdout + p.stderr
    if SECRET.encode() in out:
        counts["leaks"] += 1
        note("leak", " ".join(args), "")
    if b"internal error" in out or b"Traceback" in out or p.returncode not in (0, 1, 2):
        counts["crashes"] += 1
        note("crash", " ".join(args), out[-300:].decode(errors="replace"))


def cli_fuzz(n: int, seed: int, counts: Counter, tmp: Path, env: dict, note) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from spec_strategies import near_valid, spec

    texts: list[str] = []

    @hseed(seed)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(spec(), near_valid()))
    def draw(text):
        texts.append(text)

    draw()
    commands = (["check"], ["lint"], ["explain"], ["fmt", "--check"])
    for i, text in enumerate(texts[:n]):
        folder = tmp / f"c{i}"
        folder.mkdir()
        (folder / "spec.par").write_text(text, encoding="utf-8", newline="")
        run_cli([*commands[i % len(commands)], "spec.par"], folder, env, counts, note)


def planted(counts: Counter, tmp: Path, env: dict, note) -> None:
    d = tmp / "planted"
    specs = d / "specs"
    specs.mkdir(parents=True)
    (specs / "leak.par").symlink_to("/proc/self/environ")
    (specs / "zero.par").symlink_to("/dev/zero")
    os.mkfifo(specs / "fifo.par")
    (specs / "big.par").write_text("# x\n" * (300_000))
    (specs / "up.par").write_text('use "../../../../../../../proc/self/environ"\n')
    for args in (["lint", "specs"], ["check", "specs"], ["check", "specs/leak.par"], ["check", "specs/zero.par"],
                 ["check", "specs/fifo.par"], ["explain", "specs/leak.par"], ["fmt", "--check", "specs"],
                 ["check", "--root", "/", "specs/up.par"], ["lint", "--format", "json", "specs"],
                 ["lint", "--format", "sarif", "specs"], ["lint", "--format", "github", "specs"]):
        run_cli(args, d, env, counts, note, limit=30.0)
    # a pickle where a per-user parser cache used to be read
    marker = d / "cache-executed"

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    blob = pickle.dumps(Boom())
    cache_env = dict(env)
    for var in ("PARC_CACHE_DIR", "XDG_CACHE_HOME"):
        cache = d / var
        (cache / "parc").mkdir(parents=True)
        for name in ("parser.pickle", "par.lark.pickle", "parser-" + "0" * 16 + ".pickle"):
            (cache / name).write_bytes(blob)
            (cache / "parc" / name).write_bytes(blob)
        cache_env[var] = str(cache)
    (d / "ok.par").write_text('model "m" { from = llama3_8b }\n')
    run_cli(["check", "ok.par"], d, cache_env, counts, note)
    if marker.exists():
        counts["executions"] += 1
        note("execution", "planted parser cache", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", type=int, default=300, help="fuzzed specs through the command line")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    random.seed(args.seed)
    warnings.simplefilter("ignore")
    counts: Counter = Counter()
    found: list[str] = []

    def note(kind, what, detail):
        found.append(f"{kind}: {what} {detail}".strip())

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_", "MASTER_"))}
    env["PARC_CI_TOKEN"] = SECRET
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    os.environ["PARC_CI_TOKEN"] = SECRET
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="parc-adversarial-") as tmp:
        tmp = Path(tmp)
        hostile_strings(counts, tmp, note)
        t1 = time.perf_counter()
        print(f"hostile strings: {counts['hostile inputs']} inputs ({len(HOSTILE)} values), "
              f"{counts['hostile refused']} refused, {counts['hostile accepted']} accepted, "
              f"{counts['scripts run']} scripts run, {t1 - t0:.0f} s", flush=True)
        planted(counts, tmp, env, note)
        cli_fuzz(args.cli, args.seed, counts, tmp, env, note)
        print(f"command line: {counts['cli runs']} runs, {time.perf_counter() - t1:.0f} s", flush=True)
    for line in found[:40]:
        print("  " + line)
    bad = {k: counts[k] for k in ("crashes", "hangs", "executions", "leaks", "read-back failures",
                                  "unparsable scripts")}
    print("inputs {}, {}".format(counts["hostile inputs"] + counts["cli runs"],
                                 ", ".join(f"{k} {v}" for k, v in bad.items())))
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
