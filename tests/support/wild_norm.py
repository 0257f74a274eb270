"""What an engine makes of a launch's settings before it runs: its defaults, and the values it
derives (``-1``: "the rest"; ``"auto"``; a switch that implies another), so that two launches
that ask for the same thing in different words compare equal.

Every rule here is the engine's own, with the source it was read from:

* torchrun (torch/distributed/run.py): ``--standalone`` is a c10d rendezvous on the local host
  (``nnodes=1``, ``rdzv_backend=c10d``, ``rdzv_endpoint=localhost:0``);
* torchtitan 0.3.0 (torchtitan/config/configs.py, its defaults; torchtitan/distributed/
  parallel_dims.py and parallelize.py): ``data_parallel_shard_degree = -1`` is the world over the
  other degrees; ``global_batch_size = -1`` is the local batch times data parallelism;
  ``fsdp_reshard_after_forward = "default"`` reshards after forward unless pipeline parallel;
  sequence parallel, async TP and the pipeline schedule act only with tp > 1 or pp > 1,
  ``selective_ac_option`` only with ``activation_checkpoint.mode = "selective"``; the
  ``quantize.*`` sections configure converters and act only when ``model.converters`` lists
  ``float8``; ``parallelism.enable_async_tensor_parallel`` (0.2) is ``compile.
  enable_async_tensor_parallel`` (0.3);
* LeaderWorkerSet: ``startupPolicy`` defaults to ``LeaderCreated``;
* DeepSpeed (deepspeed/runtime/config.py, launcher/runner.py): ``"zero_optimization": true`` is
  stage 1; ``train_batch_size = micro × accumulation × dp``, any two giving the third; the
  launcher's ``--num_nodes``/``--num_gpus`` default to every host and slot of the hostfile."""
from __future__ import annotations

from dataclasses import replace

from support.wild_launch import Launch

DEFAULTS = {
    "torchrun": {"nnodes": 1, "nproc_per_node": 1, "rdzv_backend": "static", "max_restarts": 0, "no_python": False},
    "torchtitan": {"parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
                   "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
                   "parallelism.enable_sequence_parallel": True, "parallelism.pipeline_parallel_degree": 1,
                   "parallelism.pipeline_parallel_schedule": "1F1B",
                   "parallelism.pipeline_parallel_microbatch_size": 1, "parallelism.context_parallel_degree": 1,
                   "parallelism.expert_parallel_degree": 1, "training.global_batch_size": -1,
                   "training.mixed_precision_param": "bfloat16", "training.disable_cuda_graphs": False,
                   "compile.enable": False, "compile.enable_async_tensor_parallel": False},
    "deepspeed": {"num_nodes": -1, "num_gpus": -1, "launcher": "pdsh"},
    # deepspeed/runtime/zero/config.py: contiguous_gradients True, reduce_bucket_size 5e8
    "ds": {"zero_optimization.contiguous_gradients": True, "zero_optimization.reduce_bucket_size": 500000000},
    # LeaderWorkerSet v1 API: startupPolicy defaults to LeaderCreated
    "lws": {"startup_policy": "LeaderCreated"},
}


def _get(s: dict, key: str, fmt: str):
    return s.get(f"{fmt}.{key}", DEFAULTS.get(fmt, {}).get(key))


def _torchrun(s: dict) -> None:
    if s.pop("torchrun.standalone", False):
        s["torchrun.rdzv_backend"] = "c10d"
        s.setdefault("torchrun.nnodes", 1)
    nproc = s.get("torchrun.nproc_per_node")
    if isinstance(nproc, str) and "env.gpus" in s:      # "auto": the GPUs the node shows
        s["torchrun.nproc_per_node"] = s["env.gpus"]


def _world(s: dict) -> int | None:
    if any(k.startswith("torchrun.") for k in s):
        n, p = _get(s, "nnodes", "torchrun"), _get(s, "nproc_per_node", "torchrun")
        if isinstance(n, int) and isinstance(p, int):
            return n * p
    return None


def _torchtitan(s: dict, partial: bool) -> None:
    t = "torchtitan."
    if not any(k.startswith(t) for k in s):
        return
    old = t + "parallelism.enable_async_tensor_parallel"
    if old in s:
        s[t + "compile.enable_async_tensor_parallel"] = s.pop(old)
    if not partial:
        for k, v in DEFAULTS["torchtitan"].items():
            s.setdefault(t + k, v)
    par = lambda k: s.get(t + "parallelism." + k, DEFAULTS["torchtitan"].get("parallelism." + k))
    world = _world(s)
    if par("data_parallel_shard_degree") == -1 and world:
        rest = par("data_parallel_replicate_degree") * par("tensor_parallel_degree") * par(
            "pipeline_parallel_degree") * par("context_parallel_degree")
        s[t + "parallelism.data_parallel_shard_degree"] = world // rest
    if s.get(t + "training.global_batch_size") == -1 and isinstance(par("data_parallel_shard_degree"), int):
        dp = par("data_parallel_replicate_degree") * par("data_parallel_shard_degree")
        if dp > 0 and t + "training.local_batch_size" in s:
            s[t + "training.global_batch_size"] = s[t + "training.local_batch_size"] * dp
    if s.get(t + "parallelism.fsdp_reshard_after_forward") == "default":
        s[t + "parallelism.fsdp_reshard_after_forward"] = "never" if par("pipeline_parallel_degree") > 1 else "always"
    if par("tensor_parallel_degree") == 1:
        s.pop(t + "parallelism.enable_sequence_parallel", None)
        s.pop(t + "compile.enable_async_tensor_parallel", None)
    if par("pipeline_parallel_degree") == 1:
        for k in ("pipeline_parallel_schedule", "pipeline_parallel_microbatch_size"):
            s.pop(t + "parallelism." + k, None)
        s.pop(t + "training.disable_cuda_graphs", None)
    if s.get(t + "activation_checkpoint.mode") != "selective":   # the option of selective mode only
        s.pop(t + "activation_checkpoint.selective_ac_option", None)
    if s.get(t + "parallelism.expert_tensor_parallel_degree") == 1:   # 0.3.0 has no etp
        del s[t + "parallelism.expert_tensor_parallel_degree"]
    if "float8" not in (s.get(t + "model.converters") or []):
        for k in [k for k in s if k.startswith(t + "quantize.")]:
            del s[k]


def _deepspeed(s: dict) -> None:
    z = "ds.zero_optimization"
    if isinstance(s.get(z), bool):
        s[z + ".stage"] = 1 if s.pop(z) else 0
    if "deepspeed.hosts" in s:
        if _get(s, "num_nodes", "deepspeed") == -1:
            s["deepspeed.num_nodes"] = s["deepspeed.hosts"]
        if _get(s, "num_gpus", "deepspeed") == -1 and len(set(s["deepspeed.slots"])) == 1:
            s["deepspeed.num_gpus"] = s["deepspeed.slots"][0]
    elif any(k.startswith("deepspeed.") for k in s) and _get(s, "num_nodes", "deepspeed") == -1:
        s["deepspeed.num_nodes"] = 1               # no hostfile: the local node
    if not any(k.startswith("ds.") for k in s):
        return
    world = None
    if any(k.startswith("deepspeed.") for k in s):
        n, g = _get(s, "num_nodes", "deepspeed"), _get(s, "num_gpus", "deepspeed")
        world = n * g if n > 0 and g > 0 else None
    world = world or _world(s)
    tp = (s.get("ds.tensor_parallel.autotp_size") or s.get("megatron.tensor_model_parallel_size")
          or s.get("megatron_deepspeed.tensor_model_parallel_size") or 1)
    pp = (s.get("ds.pipeline.stages") or s.get("megatron.pipeline_model_parallel_size")
          or s.get("megatron_deepspeed.pipeline_model_parallel_size") or 1)
    if not world:
        return
    dp = world // (tp * pp)
    b, m, g = (s.get(f"ds.{k}") for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps"))
    if b is None and m and g:
        s["ds.train_batch_size"] = m * g * dp
    elif m is None and b and g:
        s["ds.train_micro_batch_size_per_gpu"] = b // (g * dp)
    elif g is None and b and m:
        s["ds.gradient_accumulation_steps"] = b // (m * dp)
    elif g is None and b is None and m:
        s["ds.gradient_accumulation_steps"] = 1
        s["ds.train_batch_size"] = m * dp


def normalized(la: Launch) -> Launch:
    s = dict(la.settings)
    _torchrun(s)
    _torchtitan(s, la.partial)
    _deepspeed(s)
    return replace(la, settings=s)
