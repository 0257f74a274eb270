"""Runs inside the vLLM virtual environment (tests/judges/vllm_env.sh), never in parc's own.

Reads a JSON list of `vllm serve` argument lists (without `vllm serve`) on stdin and prints, for
each, whether vLLM's own parser (make_arg_parser, EngineArgs.from_cli_args) and its
ParallelConfig checks accept it, with the parallel sizes vLLM derived or vLLM's message."""
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")   # no GPU here: vLLM's CPU platform

from vllm.config import ParallelConfig  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


def judge(argv):
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    try:
        a = parser.parse_args(argv)
    except SystemExit:
        return {"ok": False, "stage": "parser", "error": "vllm serve's parser refused the arguments"}
    e = AsyncEngineArgs.from_cli_args(a)
    kw = dict(tensor_parallel_size=e.tensor_parallel_size, pipeline_parallel_size=e.pipeline_parallel_size,
              data_parallel_size=e.data_parallel_size, data_parallel_size_local=e.data_parallel_size_local,
              prefill_context_parallel_size=e.prefill_context_parallel_size,
              enable_expert_parallel=e.enable_expert_parallel, nnodes=e.nnodes, node_rank=e.node_rank)
    if e.data_parallel_backend == "mp":
        kw["data_parallel_backend"] = "mp"
    # Ray itself is not installed here: its executor is judged by the sizes only.
    if e.distributed_executor_backend not in (None, "ray"):
        kw["distributed_executor_backend"] = e.distributed_executor_backend
    try:
        pc = ParallelConfig(**{k: v for k, v in kw.items() if v is not None})
    except Exception as x:   # pydantic's ValidationError carries vLLM's message
        return {"ok": False, "stage": "ParallelConfig", "error": str(x)}
    return {"ok": True, "model": a.model_tag, "max_model_len": e.max_model_len, "headless": a.headless,
            "tp": pc.tensor_parallel_size, "pp": pc.pipeline_parallel_size, "dp": pc.data_parallel_size,
            "dp_local": pc.data_parallel_size_local, "pcp": pc.prefill_context_parallel_size,
            "world": pc.world_size, "ep": pc.enable_expert_parallel, "nnodes": pc.nnodes}


print(json.dumps([judge(argv) for argv in json.load(sys.stdin)]))
