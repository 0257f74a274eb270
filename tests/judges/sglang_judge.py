"""Runs inside the SGLang virtual environment (tests/judges/sglang_env.sh), never in parc's own.

Reads JSON lists of items, one list a line, on stdin and prints, for each, what SGLang itself
makes of it:

* ``{"server": [...]}``: the arguments of ``python -m sglang.launch_server``, parsed exactly as
  ``prepare_server_args`` does (``ServerArgs.add_cli_args`` on an argparse parser, then
  ``ServerArgs.from_cli_args``), then resolved and checked as the launcher does
  (``resolve_once()``: the resolution pipeline with its ValueErrors and assertions, and
  ``check_server_args()``). The model path must be a local folder with a config.json (the test
  writes one from the spec's model, no weights): SGLang reads it while resolving. The verdict
  gives the sizes SGLang resolved (tp, pp, dp, attention dp, ep, dcp, nodes, disaggregation
  mode, EPLB settings), the KV heads its ModelConfig gives each rank without and with decode
  context parallelism, and the layers and quantization method it reads (with
  --json-model-override-args and the checkpoint's quantization_config), or its message;
* ``{"split": [layers, pp]}``: the layers of each pipeline rank as SGLang's own
  ``get_pp_indices`` splits them;
* ``{"swa_slice": {"pp_size": N}}``: whether the KV sender of a prefill server of N pipeline
  stages slices a sliding-window model's state for a decode server of another tp (swa_slice);
* ``{"graph_sizes": {"max_bs": N, "chunked_prefill": T}}``: the CUDA graph sizes SGLang captures
  (graph_sizes);
* ``{"pd_decode_dcp": {"dcp": N, "mla": bool}}``: whether a decode server with decode context
  parallelism accepts its prefill server (pd_decode_dcp);
* ``{"graph_backends": [...]}``: the CUDA graphs a server of these arguments keeps once resolved
  (graph_backends): its decode and prefill graph backends;
* ``{"router": [...]}``: the arguments of ``python -m sglang_router.launch_router``, through
  its own ``parse_router_args`` and ``RouterArgs._validate_router_args``, with the prefill and
  decode URLs it read in ``--pd-disaggregation`` mode.

Two stand-ins, both outside what the checks read: there is no GPU here, so ``--device cuda``
(what SGLang picks on a GPU host) is added where the command names no device; and the CPU torch
has no torchvision wheel, so a module that answers every attribute stands in for torchvision
(only image preprocessing of vision models uses it)."""
import importlib.machinery
import json
import logging
import os
import sys
import types

logging.disable(logging.WARNING)


class _Anything:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, key):
        return _Anything(f"{self._name}.{key}")

    def __call__(self, *args, **kwargs):
        return _Anything(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())


class _Module(types.ModuleType):
    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Anything(f"{self.__name__}.{key}")


try:
    import torchvision  # noqa: F401
except Exception:
    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                 "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io",
                 "torchvision.ops"):
        mod = _Module(name)
        mod.__path__, mod.__version__ = [], "0.28.0"
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        sys.modules[name] = mod

import argparse  # noqa: E402

from sglang.srt.arg_groups.model_override_base import model_config_of  # noqa: E402
from sglang.srt.arg_groups.overrides import resolving_view  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang_router.launch_router import parse_router_args  # noqa: E402


def _parser():
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    return p


def server(argv):
    if not any(a == "--device" or a.startswith("--device=") for a in argv):
        argv = [*argv, "--device", "cuda"]
    try:
        raw = _parser().parse_args(argv)
    except SystemExit:
        return {"ok": False, "stage": "parser", "error": "launch_server's parser refused the arguments"}
    args = ServerArgs.from_cli_args(raw)
    try:
        args.resolve_once()
        args.check_server_args()
    except (ValueError, AssertionError, RuntimeError, TypeError) as x:
        return {"ok": False, "stage": "ServerArgs", "error": f"{type(x).__name__}: {x}"}
    v = resolving_view(args)
    # the KV heads each rank holds by SGLang's own ModelConfig: without and with decode context
    # parallelism, over the attention TP group (the ranks of a DCP group must hold the same ones)
    attn_tp = v.tp_size // v.attn_dp_size
    mc = model_config_of(args)
    kv = [mc.get_num_kv_heads(attn_tp), mc.get_num_kv_heads(attn_tp, v.dcp_size)]
    return {"ok": True, "kv_heads": kv, "layers": mc.num_hidden_layers, "quantization": mc.quantization,
            "tp": v.tp_size, "pp": v.pp_size, "dp": v.dp_size, "attn_dp": v.attn_dp_size,
            "ep": v.ep_size, "nnodes": v.nnodes, "node_rank": v.node_rank, "dist_init_addr": v.dist_init_addr,
            "context_length": raw.context_length, "mem_fraction_static": v.mem_fraction_static,
            "max_running_requests": v.max_running_requests, "host": v.host, "port": v.port,
            "moe_a2a_backend": v.moe_a2a_backend, "disaggregation_mode": v.disaggregation_mode,
            "transfer_backend": v.disaggregation_transfer_backend, "dtype": v.dtype,
            "kv_cache_dtype": v.kv_cache_dtype, "dcp": v.dcp_size, "deepep_mode": v.deepep_mode,
            "enable_eplb": v.enable_eplb, "redundant_experts": v.ep_num_redundant_experts,
            "eplb_interval": v.eplb_rebalance_num_iterations,
            "recorder_buffer": v.expert_distribution_recorder_buffer_size}


def router(argv):
    try:
        a = parse_router_args(argv)
    except SystemExit:
        return {"ok": False, "stage": "parser", "error": "launch_router's parser refused the arguments"}
    try:
        a._validate_router_args()
    except (ValueError, AssertionError) as x:
        return {"ok": False, "stage": "RouterArgs", "error": str(x)}
    return {"ok": True, "worker_urls": list(a.worker_urls), "host": a.host, "port": a.port,
            "pd": a.pd_disaggregation, "prefill_urls": [list(u) for u in a.prefill_urls],
            "decode_urls": list(a.decode_urls)}


def split(layers, pp):
    """The layers of each pipeline rank as SGLang's get_pp_indices gives them (no partition set)."""
    from sglang.srt.distributed.utils import get_pp_indices

    os.environ.pop("SGLANG_PP_LAYER_PARTITION", None)
    return [end - start for start, end in (get_pp_indices(layers, r, pp) for r in range(pp))]


def swa_slice(item):
    """Whether SGLang's KV sender slices the sliding-window state of a prefill server with
    ``pp_size`` pipeline stages for a decode server of another attention tp: its own
    CommonKVManager._get_mha_head_slice_blocks (disaggregation/common/conn.py, 0.5.22 on) on a
    sender that holds only the attributes it reads first. Past the pipeline check it reads the
    layout and the pointers, which this stand-in does not give: any other error means it went on."""
    from types import SimpleNamespace

    from sglang.srt.disaggregation.common.conn import CommonKVManager

    me = SimpleNamespace(pp_size=item["pp_size"], kv_args=SimpleNamespace(swa_kv_cache_layout="nhd"))
    try:
        CommonKVManager._get_mha_head_slice_blocks(me, [], [], [], [], None, None, 8, 0)
    except RuntimeError as x:
        if "pipeline parallelism" in str(x):
            return {"ok": False, "error": str(x)}
    except Exception:
        pass
    return {"ok": True}


def graph_sizes(item):
    """SGLang's decode batch sizes up to ``max_bs`` and prefill token buckets up to
    ``chunked_prefill`` (arg_groups/cuda_graph_hook.py), without speculative decoding or
    --disable-cuda-graph-padding."""
    from types import SimpleNamespace

    from sglang.srt.arg_groups.cuda_graph_hook import (generate_decode_cuda_graph_batch_sizes,
                                                         generate_prefill_cuda_graph_batch_sizes)

    args = SimpleNamespace(disable_cuda_graph_padding=False, speculative_algorithm=None)
    return {"decode": generate_decode_cuda_graph_batch_sizes(args, item["max_bs"]),
            "prefill": generate_prefill_cuda_graph_batch_sizes(item["chunked_prefill"])}


def pd_decode_dcp(item):
    """A decode server's check of its prefill server's parallel info
    (disaggregation/common/conn.py CommonKVManager.try_ensure_parallel_info) with decode context
    parallelism ``dcp`` and an MLA pool or not, on a manager holding only what it reads and a
    prefill of the same tp; the bootstrap server's answer stands in for the network."""
    from types import SimpleNamespace
    from unittest import mock

    from sglang.srt.disaggregation.common import conn

    me = SimpleNamespace(prefill_info_table={}, kv_args=SimpleNamespace(page_size=1, state_types=()),
                         kv_cache_dtype_str="auto", attn_tp_size=8, attn_cp_size=1, kv_layout=None,
                         dsv41_spec_layout=None, dcp_size=item["dcp"], is_mla_backend=item["mla"],
                         is_hybrid_mla_backend=False, _resolve_rank_mapping=lambda info: None)
    info = dict(attn_tp_size=8, attn_cp_size=1, dp_size=1, pp_size=1, page_size=1, kv_cache_dtype="auto",
                follow_bootstrap_room=True)
    answer = SimpleNamespace(status_code=200, json=lambda: info, text="")
    with mock.patch.object(conn.requests, "get", lambda *a, **k: answer):
        try:
            conn.CommonKVManager.try_ensure_parallel_info(me, "prefill:8998")
        except RuntimeError as x:
            return {"ok": False, "error": str(x)}
    return {"ok": True}


def graph_backends(argv):
    """The decode and prefill CUDA graph backends SGLang resolves for ``argv`` (full, breakable or
    disabled: model_executor/cuda_graph_config.py), the prefill default being CUDA's (breakable,
    default_prefill_backend: this host has no GPU, where SGLang would leave it disabled)."""
    from sglang.srt.model_executor import cuda_graph_config as cgc

    own = cgc.default_prefill_backend
    cgc.default_prefill_backend = lambda: cgc.Backend.BREAKABLE
    try:
        args = ServerArgs.from_cli_args(_parser().parse_args([*argv, "--device", "cuda"]))
        args.resolve_once()
    except (ValueError, AssertionError, RuntimeError, TypeError) as x:
        return {"ok": False, "error": f"{type(x).__name__}: {x}"}
    finally:
        cgc.default_prefill_backend = own
    cfg = resolving_view(args).cuda_graph_config
    return {"ok": True, "decode": str(cfg.decode.backend), "prefill": str(cfg.prefill.backend)}


def judge(item):
    if "graph_backends" in item:
        return graph_backends(item["graph_backends"])
    if "split" in item:
        return split(*item["split"])
    if "swa_slice" in item:
        return swa_slice(item["swa_slice"])
    if "graph_sizes" in item:
        return graph_sizes(item["graph_sizes"])
    if "pd_decode_dcp" in item:
        return pd_decode_dcp(item["pd_decode_dcp"])
    return server(item["server"]) if "server" in item else router(item["router"])


# One JSON list a line, answered by one line that starts with MARK (SGLang may print to stdout):
# one process judges every batch a test session sends, paying SGLang's import once.
MARK = "@@sglang-judge "
for line in sys.stdin:
    if line.strip():
        print(MARK + json.dumps([judge(item) for item in json.loads(line)]), flush=True)
