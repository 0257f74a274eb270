"""Runs inside the vLLM virtual environment (tests/judges/vllm_env.sh), never in parc's own.

Reads JSON lists of `vllm serve` argument lists (without `vllm serve`; or {"argv", "env"}; or
{"split": [layers, pp]}, answered with vLLM's layers per pipeline rank; or {"nixl_handshake":
{...}}, which nixl_handshake answers), one list a line, on stdin and prints, for
each, whether vLLM's own parser (make_arg_parser, EngineArgs.from_cli_args) and its
ParallelConfig checks accept it, with the parallel sizes vLLM derived or vLLM's message.

When the model argument is a local folder with a config.json, the command also goes through
EngineArgs.create_engine_config() as `vllm serve` does at start: ModelConfig reads the folder
(heads, kv heads, max_position_embeddings) and VllmConfig checks it against ParallelConfig. No
weights are read. vLLM's model registry would import the model's class to inspect it, which needs
the GPU stack; a plain decoder's description (what vLLM finds for LlamaForCausalLM) stands in for
that inspection, so only the configuration checks decide."""
import contextlib
import dataclasses
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")   # no GPU here: vLLM's CPU platform

from vllm.config import ParallelConfig  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


def _plain_decoder(self, architectures, model_config):
    from vllm.model_executor.models.registry import _ModelInfo

    arch = architectures[0] if isinstance(architectures, list) else architectures
    kw = {f.name: False for f in dataclasses.fields(_ModelInfo)}
    kw.update(architecture=arch, is_text_generation_model=True, supports_pp=True, attn_type="decoder",
              default_seq_pooling_type="LAST", default_tok_pooling_type="ALL", score_type="bi-encoder",
              supported_video_pruning_methods=())
    return _ModelInfo(**kw), arch


def _engine_config(a):
    from vllm.model_executor.models.registry import _ModelRegistry

    import huggingface_hub.constants

    offline = huggingface_hub.constants.HF_HUB_OFFLINE
    huggingface_hub.constants.HF_HUB_OFFLINE = True   # a local model folder: never ask the Hub
    _ModelRegistry.inspect_model_cls = _plain_decoder
    a.model = a.model_tag           # what `vllm serve` does with its positional model
    try:
        c = AsyncEngineArgs.from_cli_args(a).create_engine_config()
    except Exception as x:
        return {"ok": False, "stage": "create_engine_config", "error": str(x).split(" [type=")[0]}
    finally:
        huggingface_hub.constants.HF_HUB_OFFLINE = offline
    return {"engine_config": True, "max_model_len": c.model_config.max_model_len,
            "quantization": c.model_config.quantization,
            "layers": c.model_config.hf_text_config.num_hidden_layers}


@contextlib.contextmanager
def _cuda_for_eplb():
    """EPLB's first check is the platform (CUDA, ROCm or XPU); the judge runs on vLLM's CPU
    platform, so that one check answers as the GPU the plan is for would, and every check after it
    is vLLM's own."""
    from vllm.config import parallel

    saved = parallel.current_platform.is_cuda_alike
    parallel.current_platform.is_cuda_alike = lambda: True
    try:
        yield
    finally:
        parallel.current_platform.is_cuda_alike = saved


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
              enable_expert_parallel=e.enable_expert_parallel, nnodes=e.nnodes, node_rank=e.node_rank,
              decode_context_parallel_size=e.decode_context_parallel_size, enable_eplb=e.enable_eplb,
              eplb_config=e.eplb_config, all2all_backend=e.all2all_backend)
    if e.data_parallel_backend == "mp":
        kw["data_parallel_backend"] = "mp"
    # Ray itself is not installed here: its executor is judged by the sizes only.
    if e.distributed_executor_backend not in (None, "ray"):
        kw["distributed_executor_backend"] = e.distributed_executor_backend
    try:
        with _cuda_for_eplb():
            pc = ParallelConfig(**{k: v for k, v in kw.items() if v is not None})
    except Exception as x:   # pydantic's ValidationError carries vLLM's message
        return {"ok": False, "stage": "ParallelConfig", "error": str(x)}
    try:
        # what the multiprocessing executor reads first when it starts (multiproc_executor.py):
        # the GPUs of one node, from the replicas' layout over the nodes
        pc.local_world_size
    except ValueError as x:
        return {"ok": False, "stage": "executor start", "error": str(x)}
    out = {"ok": True, "engine_config": False}
    if a.model_tag and os.path.isfile(os.path.join(a.model_tag, "config.json")):
        with _cuda_for_eplb():
            out.update(_engine_config(a))
        if not out["ok"]:
            return out
    return {"model": a.model_tag, "max_model_len": e.max_model_len, "headless": a.headless,
            "tp": pc.tensor_parallel_size, "pp": pc.pipeline_parallel_size, "dp": pc.data_parallel_size,
            "dp_local": pc.data_parallel_size_local, "pcp": pc.prefill_context_parallel_size,
            "world": pc.world_size, "ep": pc.enable_expert_parallel, "nnodes": pc.nnodes,
            "dcp": pc.decode_context_parallel_size, "eplb": pc.enable_eplb,
            "redundant": pc.eplb_config.num_redundant_experts, "eplb_window": pc.eplb_config.window_size,
            "eplb_interval": pc.eplb_config.step_interval, "all2all": pc.all2all_backend,
            "kv_transfer": getattr(e.kv_transfer_config, "kv_connector", None), **out}


def split(layers, pp):
    """The layers of each pipeline rank as vLLM's get_pp_indices gives them (no partition set)."""
    from vllm.distributed.utils import get_pp_indices

    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    return [end - start for start, end in (get_pp_indices(layers, r, pp) for r in range(pp))]


def nixl_handshake(h):
    """What NixlConnector's handshake asserts of a decode worker (local) reading from a prefill
    engine (remote), computed by vLLM's own TransferTopology
    (kv_connector/v1/nixl/base_worker.py _validate_remote_agent_handshake): for a model without
    MLA or Mamba layers, `not (tp_ratio < 0 and is_kv_replicated(remote))`."""
    from vllm.distributed.kv_transfer.kv_connector.utils import EngineTransferInfo, TransferTopology

    topo = TransferTopology(tp_rank=0, tp_size=h["decode_tp"], block_size=16, engine_id="decode",
                            is_mla=h["mla"], is_mamba=False, total_num_kv_heads=1 if h["mla"] else h["kv_heads"],
                            attn_backends=[])
    topo.register_remote_engine("prefill", EngineTransferInfo(remote_tp_size=h["prefill_tp"], remote_block_len=0,
                                                              remote_block_size=16,
                                                              remote_physical_blocks_per_logical=1))
    try:
        ratio = topo.tp_ratio(h["prefill_tp"])
    except AssertionError as x:
        return {"ok": False, "stage": "tp_ratio", "error": str(x)}
    refused = not h["mla"] and ratio < 0 and topo.is_kv_replicated("prefill")
    return {"ok": not refused, "stage": "handshake", "tp_ratio": ratio}


def cudagraph_sizes(c):
    """The sizes vLLM captures for max_num_seqs and max_num_batched_tokens with no compilation
    config given: VllmConfig._set_cudagraph_sizes on a configuration holding only what it reads
    (a decode query of one token, not SM100: the CPU platform answers as an SM80/SM90 GPU would)."""
    from types import SimpleNamespace

    from vllm.config import CompilationConfig, VllmConfig

    cc = CompilationConfig()
    me = SimpleNamespace(model_config=SimpleNamespace(enforce_eager=False), compilation_config=cc,
                         scheduler_config=SimpleNamespace(max_num_seqs=c["max_num_seqs"],
                                                          max_num_batched_tokens=c["max_num_batched_tokens"]),
                         uniform_decode_query_len=1, performance_mode="balanced", speculative_config=None)
    VllmConfig._set_cudagraph_sizes(me)
    return {"sizes": list(cc.cudagraph_capture_sizes), "largest": cc.max_cudagraph_capture_size}


def nixl_pcp(c):
    """NixlConnector.__init__'s check of its kv_role against prefill context parallelism
    (kv_connector/v1/nixl/connector.py), on a configuration holding only what it reads; what comes
    after the check (the scheduler or worker it builds) is not this judge's."""
    from types import SimpleNamespace
    from unittest import mock

    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector

    cfg = SimpleNamespace(kv_transfer_config=SimpleNamespace(engine_id="e", kv_role=c["kv_role"]),
                          parallel_config=SimpleNamespace(prefill_context_parallel_size=c["pcp"],
                                                          decode_context_parallel_size=1))
    with mock.patch.object(KVConnectorBase_V1, "__init__", lambda *a, **k: None):
        try:
            NixlConnector.__init__(object.__new__(NixlConnector), cfg, None, None)
        except NotImplementedError as x:
            return {"ok": False, "error": str(x)}
        except Exception:
            pass
    return {"ok": True}


def judge_item(item):
    """An argument list, or {"argv": [...], "env": {...}}: environment variables for that command;
    or {"split": [layers, pp]}: vLLM's own layer split; or {"nixl_handshake": {...}}:
    NixlConnector's handshake check for two tp sizes; or {"cudagraph_sizes": {...}}: the sizes
    vLLM captures; or {"nixl_pcp": {...}}: NixlConnector's role check under prefill context
    parallelism."""
    if isinstance(item, list):
        return judge(item)
    if "split" in item:
        return split(*item["split"])
    if "nixl_handshake" in item:
        return nixl_handshake(item["nixl_handshake"])
    if "cudagraph_sizes" in item:
        return cudagraph_sizes(item["cudagraph_sizes"])
    if "nixl_pcp" in item:
        return nixl_pcp(item["nixl_pcp"])
    saved = {k: os.environ.get(k) for k in item["env"]}
    os.environ.update(item["env"])
    try:
        return judge(item["argv"])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# One JSON list a line, answered by one line that starts with MARK (vLLM logs to stdout too): one
# process judges every batch a test session sends, paying vLLM's import once.
MARK = "@@vllm-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge_item(item) for item in json.loads(line)]), flush=True)
