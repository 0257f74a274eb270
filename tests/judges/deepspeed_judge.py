"""Runs inside the DeepSpeed virtual environment (tests/judges/deepspeed_env.sh), never in parc's own.

Reads JSON lists of launches, one list a line, on stdin: each {"argv": the deepspeed launcher's
arguments (without `deepspeed`), "cwd": the folder the launch ran in}. For each it prints what
DeepSpeed's own code makes of it:

* the launcher's parser (deepspeed/launcher/runner.py parse_args) and its resources: the hostfile
  through fetch_hostfile, then parse_inclusion_exclusion and apply_num_nodes_and_gpus, as main()
  does (no hostfile: one local node of --num_gpus GPUs), giving the world the launcher starts;
* the config the entry point is given (--deepspeed_config) through DeepSpeedConfig, built as
  deepspeed.initialize builds it: with a pipeline, with the data-parallel size of DeepSpeed's own
  PipeModelDataParallelTopology (what PipelineModule.mpu() reports), else with the launcher's world
  as the communication backend's world size. Its batch checks (_configure_train_batch_size) and
  sanity checks (_do_sanity_check) run;
* the pipeline engine's own assertions on that config, word for word from
  deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ (ZeRO below stage 2) and
  deepspeed/runtime/pipe/dualpipev.py (no partitioning), which need a model to run otherwise.

The answer carries the degrees DeepSpeed will use: world, nodes, data parallel (train_batch_size
over micro × accumulation, and the engine's dp world), micro batch, accumulation steps, ZeRO
stage, AutoTP size, pipeline stages, bf16."""
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")   # no GPU here: DeepSpeed's CPU accelerator
os.environ.setdefault("DS_BUILD_OPS", "0")

import deepspeed.comm as dist  # noqa: E402
from deepspeed.launcher import runner  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology  # noqa: E402
from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: E402


class _Grid:
    """What deepspeed.initialize reads from PipelineModule.mpu() when it builds the config."""

    def __init__(self, topo):
        self.topo = topo

    def get_data_parallel_world_size(self):
        return self.topo.get_dim("data")


def _resources(args, cwd):
    path = args.hostfile if os.path.isabs(args.hostfile) else os.path.join(cwd, args.hostfile)
    pool = runner.fetch_hostfile(path)
    if not pool:
        if args.num_nodes > 1:
            raise ValueError("Num nodes is >1 but no extra nodes available via hostfile")
        pool = {"localhost": args.num_gpus}
    active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
    return runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)


def judge(item):
    try:
        args = runner.parse_args(item["argv"])
    except SystemExit:
        return {"ok": False, "stage": "launcher parser", "error": "the deepspeed launcher's parser refused the arguments"}
    try:
        active = _resources(args, item["cwd"])
    except ValueError as x:
        return {"ok": False, "stage": "launcher resources", "error": str(x)}
    world = sum(len(slots) for slots in active.values())
    user = args.user_args
    if "--deepspeed_config" not in user:
        return {"ok": False, "stage": "entry point", "error": "no --deepspeed_config for the entry point"}
    with open(user[user.index("--deepspeed_config") + 1]) as f:
        cfg = json.load(f)
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 0) or 1
    pp = cfg.get("pipeline", {}).get("stages", 1)
    dist.get_rank = lambda group=None: 0
    dist.get_world_size = lambda group=None: world
    mpu = None
    if pp > 1:
        if world % (pp * tp):
            return {"ok": False, "stage": "PipelineModule", "error": f"{world} ranks are not pp·tp = {pp}·{tp} groups"}
        mpu = _Grid(PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=world // (pp * tp)))
    try:
        c = DeepSpeedConfig(dict(cfg), mpu)
        if pp > 1:   # PipelineEngine.__init__ and DualPipeVEngine.__init__, on the config alone
            assert c.zero_optimization_stage < ZeroStageEnum.gradients, \
                "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    except (AssertionError, ValueError) as x:
        return {"ok": False, "stage": "DeepSpeedConfig", "error": str(x)}
    engine_dp = world // (pp * tp)
    return {"ok": True, "world": world, "nodes": len(active), "hosts": list(active),
            "gpus_per_node": sorted({len(s) for s in active.values()}), "user_script": args.user_script,
            "master_addr": args.master_addr, "master_port": args.master_port,
            "config_world": c.world_size, "engine_dp": engine_dp,
            "train_batch_size": c.train_batch_size, "micro": c.train_micro_batch_size_per_gpu,
            "gas": c.gradient_accumulation_steps, "zero": int(c.zero_optimization_stage),
            "zero_enabled": bool(c.zero_enabled), "overlap_comm": bool(c.zero_config.overlap_comm),
            "reduce_bucket_size": c.zero_config.reduce_bucket_size,
            "autotp": c.tensor_parallel_config.autotp_size, "pp": pp, "bf16": bool(c.bfloat16_config.enabled),
            "fp16": bool(c.float16_config.enabled)}


# One JSON list a line, answered by one line that starts with MARK (DeepSpeed logs to stdout too):
# one process judges every batch a test session sends, paying DeepSpeed's import once.
MARK = "@@deepspeed-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(item) for item in json.loads(line)]), flush=True)
