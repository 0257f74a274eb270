"""``parc import``: the published launches of the real-config corpus (``tests/wild/``) read back
into specs that check and compile to the same launch, and the reader's guarantees on scripts
written for the purpose: options parc has no key for carried, two launches read as pools or
nodes, what the file cannot know left a placeholder, hostile text inert."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import wild, wild_import

ENTRIES = wild.corpus()
# the engines parc import reads so far (parc/importer/deploy.py READERS)
READ = ("vllm", "sglang", "megatron", "megatron_deepspeed", "torchtitan", "deepspeed")
# entries of an engine parc import reads whose original it cannot round-trip, and why (none now)
NOT_ROUND_TRIPPED: dict[str, str] = {}
# the kinds of original parc import does not read yet
NOT_READ: dict[str, str] = {}


def _engine(e: wild.Entry) -> str | None:
    """The serving engine an entry's plan runs (its target, or the engine block beside its scheduler's)."""
    text = e.par.read_text(encoding="utf-8")
    if e.target == "trainjob" and not any(f"target {t} " in text for t in READ):
        return "torchrun"       # a TrainJob's own torchrun launch (parc/importer/engines/torchrun.py)
    return next((t for t in READ if e.target == t or f"target {t} " in text), None)


# every entry whose original is a launch (a benchmark table is no launch to import)
IMPORTED = [e for e in ENTRIES if _engine(e) in READ + ("torchrun",) and e.original["kind"] != "table"
            and e.name not in NOT_ROUND_TRIPPED and e.original["kind"] not in NOT_READ]


def test_every_serving_entry_of_the_corpus_is_imported():
    assert len(IMPORTED) >= 15, [e.name for e in IMPORTED]
    assert {e.target for e in IMPORTED} >= {"vllm", "sglang", "megatron", "torchtitan", "deepspeed", "lws", "skypilot", "slurm",
                                            "dynamo", "kserve", "rayserve", "trainjob"}


@pytest.mark.parametrize("name", [e.name for e in IMPORTED])
def test_the_imported_original_checks_and_compiles_to_the_original_launch(name):
    """import → check → compile → compare: every difference from the original's launch is one
    the corpus lists for its hand-written plan.par (with its reason), and an original the corpus
    finds refused is refused once imported too."""
    from parc.language import fmt

    e = next(x for x in ENTRIES if x.name == name)
    imp, r, diffs = wild_import.round_trip(e)
    assert fmt.format_text(imp.text) == imp.text, f"{name}: the imported spec is not in fmt's layout"
    if e.errors:
        assert r.errors, f"{name}: the corpus refuses it ({e.errors}); the imported spec checks clean:\n{imp.text}"
        return
    assert diffs is not None, f"{name}: the imported spec is refused:\n" + "\n".join(
        f"{d.code} {d.message}" for d in r.errors) + "\n" + imp.text
    listed = {(d["key"], d["original"], d["emitted"]) for d in e.differs}
    new = [d for d in diffs if (d["key"], d["original"], d["emitted"]) not in listed]
    assert not new, f"{name}: the launch compiled from the import differs from the original:\n{new}\n{imp.text}"


def _import(tmp_path, text: str, name: str = "serve.sh", *args: str):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "parc", "import", str(p), *args], capture_output=True, text=True,
                          cwd=tmp_path)


def _check(tmp_path, spec: str, target: str):
    p = tmp_path / "imported.par"
    p.write_text(spec, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "parc", "check", str(p), "--target", target], capture_output=True,
                          text=True, cwd=tmp_path)


def test_options_parc_has_no_key_for_are_carried_and_listed(tmp_path):
    r = _import(tmp_path, "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 "
                          "--enable-chunked-prefill --frobnicate 7\n")
    assert r.returncode == 0, r.stderr
    assert "tp = 2" in r.stdout
    assert '"--frobnicate", "7",' in r.stdout and '"--enable-chunked-prefill",' in r.stdout
    assert "carried to extra_args: serve.sh:1 --frobnicate 7" in r.stderr


def test_an_option_the_newest_release_removed_is_named_and_not_carried(tmp_path):
    """vLLM 0.33 has no --swap-space (gone in 0.18): carried into extra_args it would be P665, so
    the import leaves it out and says why on stderr."""
    r = _import(tmp_path, "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --swap-space 32\n")
    assert r.returncode == 0, r.stderr
    assert "--swap-space" not in r.stdout and "tp = 2" in r.stdout
    assert "--swap-space 32" in r.stderr and "has no option `--swap-space`" in r.stderr, r.stderr


def test_an_unknown_option_compiles_back_into_the_launch(tmp_path):
    r = _import(tmp_path, "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --frobnicate 7\n",
                "serve.sh", "--cluster", str(wild.WILD / "vllm-gpt-oss-120b-tp2" / "plan.par"))
    spec = tmp_path / "s.par"
    spec.write_text(r.stdout, encoding="utf-8")
    c = subprocess.run([sys.executable, "-m", "parc", "compile", str(spec), "--target", "vllm", "-o", "out"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    launch = next(p for p in (tmp_path / "out").iterdir() if p.suffix == ".sh").read_text()
    assert re.search(r"--frobnicate[\s\\]*7\b", launch), launch


def test_prefill_and_decode_servers_are_imported_as_pools(tmp_path):
    r = _import(tmp_path, (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode prefill "
        "--port 30000 --tp 2 &\n"
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode decode "
        "--port 30001 --tp 4 --base-gpu-id 2 &\n"))
    assert r.returncode == 0, r.stderr
    assert "prefill {" in r.stdout and "decode {" in r.stdout
    pre = r.stdout.split("prefill {")[1].split("}")[0]
    dec = r.stdout.split("decode {")[1].split("}")[0]
    assert "tp        = 2" in pre or "tp = 2" in pre.replace("  ", " ").replace("  ", " "), pre
    assert "tp" in dec and "4" in dec, dec


def test_a_ray_head_and_its_worker_are_one_deployment_over_two_nodes():
    e = next(x for x in ENTRIES if x.name == "skypilot-vllm-llama4-maverick-2node")
    import tempfile
    from pathlib import Path

    imp = wild_import.import_entry(e, Path(tempfile.mkdtemp()) / "in")
    assert "executor = ray" in imp.text.replace("  ", " ").replace("  ", " ")
    assert "pp = 2" in imp.text and "tp = 8" in imp.text


def test_two_nodes_of_one_server_are_one_deployment():
    e = next(x for x in ENTRIES if x.name == "sglang-deepseek-v3-tp16-2node")
    import tempfile
    from pathlib import Path

    imp = wild_import.import_entry(e, Path(tempfile.mkdtemp()) / "in", cluster=None)
    assert "tp = 16" in imp.text
    assert "nodes         = 2" in imp.text


def test_values_the_file_does_not_give_are_placeholders_that_check_names(tmp_path):
    r = _import(tmp_path, 'vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size "$TP" '
                          "--pipeline-parallel-size $(nproc)\n")
    assert r.returncode == 0, r.stderr
    assert 'tp = unknown("$TP")' in r.stdout and 'pp = unknown("$(nproc)")' in r.stdout
    c = _check(tmp_path, r.stdout, "vllm")
    assert c.returncode == 1
    assert "P040" in c.stdout + c.stderr and "`tp` is a placeholder for `$TP`" in c.stdout + c.stderr
    given = _import(tmp_path, 'vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size "$TP"\n',
                    "serve.sh", "--var", "TP=4")
    assert "tp = 4" in given.stdout and "unknown(\"$TP\")" not in given.stdout


@pytest.mark.parametrize("hostile", [
    'vllm serve "m\nmesh { tp = 99 }" --tensor-parallel-size 2\n',
    "vllm serve m --served-model-name '\" ]\ntarget vllm { port = 1 }' --tensor-parallel-size 2\n",
    "vllm serve m --tensor-parallel-size 2 --chat-template \"$(rm -rf ~)\" --served-model-name=--tensor-parallel-size=64\n",
    "vllm serve m --tensor-parallel-size 2 --api-key $'a\\nb\\x00c\\u2028d'\n",
])
def test_hostile_text_stays_data(tmp_path, hostile):
    """Quotes, newlines and option-shaped values in the script never become spec syntax nor other
    options, and nothing in the script runs."""
    r = _import(tmp_path, hostile)
    assert r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        assert r.stderr.startswith("parc import:"), r.stderr
        return
    from parc.language import fmt

    assert fmt.format_text(r.stdout) == r.stdout             # one well-formed spec in fmt's layout
    mesh = re.search(r"(?ms)^mesh \{.*?^\}", r.stdout).group(0)
    assert "tp = 2" in mesh and "99" not in mesh
    assert not re.search(r"(?m)^\s*(port|tp)\s*=\s*(1|64)\b", r.stdout), r.stdout
    assert not (tmp_path / "~").exists()


def test_the_engine_is_detected_and_from_overrides(tmp_path):
    both = "vllm serve m --tensor-parallel-size 2\npython -m sglang.launch_server --model-path m --tp 4\n"
    r = _import(tmp_path, both)
    assert r.returncode == 2 and "--from" in r.stderr
    v = _import(tmp_path, both, "serve.sh", "--from", "vllm")
    s = _import(tmp_path, both, "serve.sh", "--from", "sglang")
    assert "target vllm" in v.stdout and "tp = 2" in v.stdout
    assert "target sglang" in s.stdout and "tp = 4" in s.stdout


def test_a_file_without_a_launch_fails_cleanly(tmp_path):
    r = _import(tmp_path, "echo hello\n")
    assert r.returncode == 2 and r.stderr.startswith("parc import: no engine launch found")


def test_the_output_is_written_atomically_and_is_the_same_each_run(tmp_path):
    text = "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --x 1\n"
    a = _import(tmp_path, text, "serve.sh", "-o", "a.par")
    b = _import(tmp_path, text, "serve.sh", "-o", "b.par")
    assert a.returncode == b.returncode == 0
    assert (tmp_path / "a.par").read_bytes() == (tmp_path / "b.par").read_bytes()
    assert a.stdout == ""


MEGATRON = """#!/bin/bash
GPUS_PER_NODE=8
NNODES=${NNODES:-2}
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000)
MODEL_ARGS=(--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention
            --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --swiglu --normalization RMSNorm
            --position-embedding-type rope --rotary-base 500000 --disable-bias-linear --untie-embeddings-and-output-weights
            --vocab-size 128256)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} \\
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \\
    --micro-batch-size 1 --global-batch-size 256 --bf16 --use-distributed-optimizer --overlap-grad-reduce \\
    --lr 3e-4 --data-path $DATA --log-interval 10
"""


def test_a_megatron_torchrun_launch_is_read_into_mesh_model_and_train(tmp_path):
    r = _import(tmp_path, MEGATRON, "train.sh")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for want in ("from = llama3_8b", "nodes         = 2", "gpus_per_node = 8", "pp = 2", "dp = 2", "tp = 4",
                 "micro_batch  = 1", "global_batch = 256", "precision           = bf16", "zero                = 1",
                 'entrypoint = "pretrain_gpt.py"'):
        assert want in out, (want, out)
    assert '"--lr", "3e-4",' in out and '"--data-path", unknown("$DATA"),' in out
    assert "carried to extra_args: train.sh:12 --lr 3e-4" in r.stderr
    assert "--node_rank $NODE_RANK" in r.stderr            # wiring parc's launch writes, said so


def test_slurm_with_a_prefill_and_a_decode_srun_is_two_pools(tmp_path):
    text = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gpus-per-node=8\n"
            "M=meta-llama/Llama-3.1-8B-Instruct\n"
            "srun -N1 --nodelist=$P python -m sglang.launch_server --model-path $M --disaggregation-mode prefill --tp 8 &\n"
            "srun -N1 --nodelist=$D python -m sglang.launch_server --model-path $M --disaggregation-mode decode --tp 8 &\n"
            "wait\n")
    r = _import(tmp_path, text, "pd.slurm")
    assert r.returncode == 0, r.stderr
    assert "prefill {" in r.stdout and "decode {" in r.stdout and "tp = 8" in r.stdout
    assert "nodes         = 2" in r.stdout and "gpus_per_node = 8" in r.stdout
    # the job's scheduler runs the engine it found (slurm runs every engine through its engine key)
    assert "target slurm {\n  engine = sglang" in r.stdout and "launches vllm only" not in r.stderr


def test_explain_prints_the_imported_plans_numbers_in_the_same_run(tmp_path):
    r = _import(tmp_path, "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 2 --max-model-len 8192\n",
                "serve.sh", "--cluster", str(wild.WILD / "vllm-gpt-oss-120b-tp2" / "plan.par"), "--explain",
                "-o", "s.par")
    assert r.returncode == 0, r.stderr
    assert "Memory per GPU" in r.stdout and "TTFT" in r.stdout and "TPOT" in r.stdout
    assert (tmp_path / "s.par").read_text().startswith("# Imported by `parc import`")


def test_a_mistake_in_the_original_is_named_at_the_imported_line():
    """GPT-3 175B's published script on its one node of 8 GPUs: the spec is still written, and
    check names P101 at the imported mesh, whose lines carry the original's words."""
    e = next(x for x in ENTRIES if x.name == "megatron-gpt3-175b-one-node")
    imp, r, diffs = wild_import.round_trip(e)
    assert diffs is None
    d = next(d for d in r.errors if d.code == "P101")
    lines = imp.text.splitlines()
    assert lines[d.span.line - 1] == "mesh {", lines[d.span.line - 1]
    block = "\n".join(lines[d.span.line:d.span.line + 4])
    assert "pp = 16  # train_gpt3_175b_distributed.sh" in block and "--pipeline-model-parallel-size 16" in block, block


TITAN = """[model]
name = "llama3"
flavor = "70B"

[training]
local_batch_size = 2
seq_len = 8192
steps = 100

[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 8

[activation_checkpoint]
mode = "full"
"""


def test_a_torchtitan_toml_and_its_command_line_overrides(tmp_path):
    """The TOML's sections are the command line's ``--section.option``; an override after
    ``--job.config_file`` wins; -1 is the rest of the world."""
    (tmp_path / "llama3_70b.toml").write_text(TITAN, encoding="utf-8")
    r = _import(tmp_path, "torchrun --nnodes 4 --nproc_per_node 8 -m torchtitan.train --job.config_file "
                          "./llama3_70b.toml --parallelism.tensor_parallel_degree 4 --training.steps=10\n", "run.sh")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for want in ("from    = llama3_70b", "dp = 8", "tp = 4", "micro_batch = 2", "recompute = full", "zero      = 3"):
        assert want in out or want.replace("    ", " ") in out, (want, out)
    assert '"--training.steps", "100",' in out and '"--training.steps=10",' in out     # both carried, in order
    alone = subprocess.run([sys.executable, "-m", "parc", "import", str(tmp_path / "llama3_70b.toml")],
                           capture_output=True, text=True, cwd=tmp_path)
    assert alone.returncode == 0 and "tp = 8" in alone.stdout and 'unknown("' in alone.stdout   # the world unknown


def test_a_deepspeed_config_launcher_line_and_hostfile_given_as_files(tmp_path):
    (tmp_path / "ds_config.json").write_text('{"train_batch_size": 64, "gradient_accumulation_steps": 2, '
                                            '"bf16": {"enabled": true}, "zero_optimization": {"stage": 2, '
                                            '"overlap_comm": true}, "wall_clock_breakdown": false}', encoding="utf-8")
    (tmp_path / "hostfile").write_text("node-a slots=8\nnode-b slots=8\n", encoding="utf-8")
    (tmp_path / "launch.sh").write_text("deepspeed --hostfile hostfile --master_port 29600 train.py --lr 1e-4 "
                                       "--deepspeed --deepspeed_config ds_config.json\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "parc", "import", "ds_config.json", "launch.sh", "hostfile"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for want in ("nodes         = 2", "gpus_per_node = 8", "dp = 16", "micro_batch  = 2", "global_batch = 64",
                 "microbatches = 2", "zero      = 2", "precision = bf16", 'entrypoint   = "train.py"',
                 'hosts        = ["node-a", "node-b"]', "master_port  = 29600", "overlap_comm = true"):
        assert want in out or " ".join(want.split()) in " ".join(out.split()), (want, out)
    assert '"--lr", "1e-4",' in out
    assert "wall_clock_breakdown" in r.stderr            # a config key parc cannot write is said, not dropped silently


def test_a_plain_torchrun_script_is_refused_with_the_reason(tmp_path):
    r = _import(tmp_path, "torchrun --nproc_per_node 8 train.py --batch 8\n", "run.sh")
    assert r.returncode == 2 and "Python code it runs" in r.stderr


def test_an_option_shaped_value_is_imported_as_written_and_check_refuses_it(tmp_path):
    """``--model=--trust-remote-code``: the import writes the value as the launch gives it (a
    string), and check's option-injection rule refuses it at the imported line."""
    r = _import(tmp_path, "vllm serve --model=--trust-remote-code --tensor-parallel-size 2\n", "serve.sh",
                "--model", "llama3_8b", "--cluster", str(wild.WILD / "vllm-gpt-oss-120b-tp2" / "plan.par"))
    assert r.returncode == 0, r.stderr
    assert 'model = "--trust-remote-code"' in r.stdout
    c = _check(tmp_path, r.stdout, "vllm")
    assert c.returncode == 1 and "P690" in c.stdout + c.stderr


def test_scripts_that_would_not_end_are_read_in_bounded_time(tmp_path):
    import time

    for text in ("f() { f; }\nf\nvllm serve m\n", "while true; do vllm serve m --port $((p++)); done\n",
                 "echo " + "$(" * 3000 + "x" + ")" * 3000 + "\nvllm serve m\n"):
        t = time.perf_counter()
        r = _import(tmp_path, text)
        assert time.perf_counter() - t < 30
        assert r.returncode in (0, 2) and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr


def test_a_file_past_the_size_limit_or_binary_is_refused(tmp_path):
    big = _import(tmp_path, "# pad\n" * 200_000 + "vllm serve m\n")
    assert big.returncode == 2 and "larger than" in big.stderr
    (tmp_path / "bin.sh").write_bytes(b"vllm serve m\0\n")
    b = subprocess.run([sys.executable, "-m", "parc", "import", "bin.sh"], capture_output=True, text=True, cwd=tmp_path)
    assert b.returncode == 2 and "binary" in b.stderr


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm-llama
spec:
  replicas: 1
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.9.0
          command: ["vllm", "serve"]
          args: ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "$(TP)", "--max-model-len", "8192",
                 "--served-model-name", "llama; rm -rf /"]
          env:
            - name: TP
              value: "4"
          resources:
            limits:
              nvidia.com/gpu: "4"
"""


def test_a_kubernetes_deployment_is_read_from_its_container_command(tmp_path):
    """Kubernetes expands ``$(TP)`` from the container's env itself; the words are passed to the
    program unsplit, so a value with ``;`` stays one value."""
    r = _import(tmp_path, DEPLOYMENT, "deploy.yaml")
    assert r.returncode == 0, r.stderr
    assert "tp = 4" in r.stdout and "max_model_len = 8192" in r.stdout and "gpus_per_node = 4" in r.stdout
    assert '"--served-model-name", "llama; rm -rf /",' in r.stdout
    assert "target kubernetes" in r.stdout and 'image  = "vllm/vllm-openai:v0.9.0"' in r.stdout.replace("image =", "image  =")


def test_yaml_aliases_that_expand_exponentially_are_not_expanded(tmp_path):
    """A billion-laughs file: YAML's aliases share one object, and the reader takes only the
    scalars it needs as words, so nothing is ever written out at its expanded size."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    lines += ["run: vllm serve m --tensor-parallel-size 2", "envs:", "  X: *a8", "resources:", "  accelerators: *a8"]
    import time

    t = time.perf_counter()
    r = _import(tmp_path, "\n".join(lines) + "\n", "task.yaml")
    assert time.perf_counter() - t < 30
    assert r.returncode == 0 and "tp = 2" in r.stdout, r.stderr


# Megatron-DeepSpeed (a pretrain script given --deepspeed): the deepspeed launcher's world, NullTokenizer's
# vocabulary, and a tokenizer file's vocabulary left unknown until --model gives it
MDS = """#!/bin/bash
cat <<EOT > ds.json
{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
 "bf16": {"enabled": true}, "flops_profiler": {"enabled": true}}
EOT
deepspeed --num_nodes 1 --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 2 \\
  --pipeline-model-parallel-size 2 --num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 \\
  --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 2 \\
  --global-batch-size 64 --swiglu --normalization rmsnorm --use-rotary-position-embeddings \\
  --disable-bias-linear --untie-embeddings-and-output-weights --bf16 TOKENIZER \\
  --deepspeed --deepspeed_config ds.json --zero-stage 1
"""


def test_a_megatron_deepspeed_launch_under_the_deepspeed_launcher(tmp_path):
    from parc.language import fmt

    r = _import(tmp_path, MDS.replace("TOKENIZER", "--tokenizer-type NullTokenizer --vocab-size 31999"), "train.sh")
    assert r.returncode == 0, r.stderr
    assert "target megatron_deepspeed {" in r.stdout and "runner" not in r.stdout   # the deepspeed launcher: the default
    # dp = 8 / (tp 2 · pp 2); NullTokenizer's vocabulary and its end-of-document token: 31999 + 1
    for key, value in (("dp", 2), ("tp", 2), ("pp", 2), ("global_batch", 64), ("zero", 1), ("from", "llama2_7b")):
        assert re.search(rf"(?m)^  {key}\s+= {value}\b", r.stdout), (key, r.stdout)
    assert "vocab" not in re.search(r"(?ms)^model .*?^}", r.stdout).group(0)     # 32000: the preset's own
    assert "flops_profiler.enabled" in r.stderr and "not carried" in r.stderr   # a config key parc cannot write
    assert fmt.format_text(r.stdout) == r.stdout
    spec = tmp_path / "back.par"       # the GPU type, which no launch states, given as its user would
    spec.write_text(r.stdout.replace('unknown("the GPU type")', "h100_sxm"), encoding="utf-8")
    c = subprocess.run([sys.executable, "-m", "parc", "check", str(spec), "--target", "megatron_deepspeed"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert c.returncode == 0, c.stdout + c.stderr


def test_a_tokenizer_files_vocabulary_is_a_placeholder_until_a_preset_gives_it(tmp_path):
    text = MDS.replace("TOKENIZER", "--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model /data/tok.model")
    r = _import(tmp_path, text.replace("--num-layers 32", "--num-layers 30"), "train.sh")
    assert r.returncode == 0, r.stderr
    assert 'vocab           = unknown("the vocabulary of /data/tok.model")' in r.stdout, r.stdout
    assert re.search(r'tokenizer\s+= "/data/tok.model"', r.stdout), r.stdout
    given = _import(tmp_path, text.replace("--num-layers 32", "--num-layers 30"), "train.sh", "--model", "llama2_7b")
    assert given.returncode == 0, given.stderr
    model = re.search(r"(?ms)^model .*?^}", given.stdout).group(0)
    # the preset's vocabulary; the arguments' own fields stay (30 layers, not the preset's 32)
    assert re.search(r"from\s+= llama2_7b", model) and re.search(r"layers\s+= 30 ", model), model
    assert "unknown" not in model and "vocab" not in model, model
