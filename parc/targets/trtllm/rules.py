"""TensorRT-LLM's own rules: what trtllm-serve cannot run, and what parc's trtllm target does not
write (each message says which)."""
from __future__ import annotations

from parc.model.params import engine_split
from parc.rules import rule
from parc.rules.util import join
from parc.targets.base import target_span
from parc.targets.trtllm import KV_DTYPES, TARGET, attention_dp, tp_size


@rule("P730", "trtllm-serves-only", targets=(TARGET,), reads=())
def trtllm_serving_only(plan, c):
    if plan.mode == "train":
        c.report(target_span(plan, c, TARGET, "train"),
                 "trtllm-serve is an inference server: it cannot run this training plan (the spec has a `train` block)",
                 help="compile training for `target megatron` or `target torchrun`, or replace `train` with `serve` "
                      "to serve the model",
                 related=[(c.at("train"), "training declared here")])


@rule("P731", "trtllm-one-node", targets=(TARGET,), reads=(), whole=True)
def trtllm_one_node(plan, c):
    if plan.mode != "serve" or plan.pools or plan.cluster.nodes <= 1:
        return
    c.report(c.at("cluster.nodes", "cluster"),
             f"parc's trtllm target writes a one-node trtllm-serve launch, and this plan spans {plan.cluster.nodes} "
             "nodes: TensorRT-LLM starts a multi-node engine under mpirun or trtllm-llmapi-launch (one MPI rank per "
             "GPU), which parc does not write (parc is stricter here than TensorRT-LLM)",
             help=f"fit the engine in one node of {plan.cluster.gpus_per_node} GPUs, or compile for `target vllm` or "
                  "`target sglang`, whose multi-node launches parc writes")


def _mesh_problems(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each part of the mesh trtllm-serve cannot be given (module doc)."""
    me, out = plan.mesh, []
    if me.dp > 1 and not attention_dp(plan):
        out.append(("mesh.dp", f"dp = {me.dp} data-parallel replicas: trtllm-serve runs one engine and has no "
                    "replicas of its own", "use dp = 1 and start one server per replica behind a load balancer, or "
                    "`serve { dp_attention = true }` for TensorRT-LLM's attention data parallelism (enable_attention_dp)"))
    if attention_dp(plan) and me.tp > 1:
        out.append(("mesh.tp", f"tp = {me.tp} under dp_attention: TensorRT-LLM's attention data parallelism runs "
                    "every rank's attention apart (tensorrt_llm/_torch/modules/attention.py: with enable_attention_dp "
                    "the attention's tp_size is 1), so the dp ranks are all of its tp_size",
                    f"use dp = {me.dp * me.tp} with tp = 1"))
    if me.cp > 1:
        out.append(("mesh.cp", f"cp = {me.cp}: TensorRT-LLM's context parallelism (--cp_size with a cp_config of "
                    "its own kind, Helix or star attention) is not the ring parc models, and parc does not write it",
                    "use cp = 1"))
    if me.dcp > 1:
        out.append(("mesh.dcp", f"dcp = {me.dcp}: trtllm-serve has no decode context parallelism",
                    "use dcp = 1"))
    split = plan.placement.layers
    if plan.placement.layers_mode != "even" and split and len(split) == me.pp and split != engine_split(
            "first", sum(split), me.pp):
        out.append(("placement.layers", f"layers = {list(split)}: TensorRT-LLM splits the layers itself "
                    "(Mapping.pp_layers: torch.tensor_split, the first stages one layer more) and no option changes it",
                    f"remove `layers` (TensorRT-LLM's own: {engine_split('first', sum(split), me.pp)})"))
    t = tp_size(plan)
    if plan.model.is_moe and (me.ep > 1 or me.etp > 1) and me.ep * me.etp != t:
        out.append(("mesh.ep" if me.ep > 1 else "mesh.etp",
                    f"ep = {me.ep}, etp = {me.etp}: TensorRT-LLM's experts span its tp_size ({t}) as moe_ep_size × "
                    "moe_tp_size, with no copies of an expert (tensorrt_llm/mapping.py: \"tp_size must equal to "
                    f"moe_tp_size * moe_ep_size\"), so ep · etp must be {t}",
                    f"use an ep that divides {t} with etp = {t} / ep"))
    return out


@rule("P732", "trtllm-mesh", targets=(TARGET,), reads=("dp", "cp", "tp", "ep", "etp", "dcp"))
def trtllm_mesh(plan, c):
    if plan.mode != "serve" or plan.pools:
        return
    for path, what, fix in _mesh_problems(plan):
        c.report(c.at(path), f"parc's trtllm target cannot lay this mesh out: {what}", help=fix)


def _serve_problems(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each serve setting the trtllm launch cannot say."""
    from parc.model.checkpoints import load_quantization

    sv, out = plan.serve, []
    if plan.pools:
        out.append(("serve", "prefill and decode pools: parc does not write TensorRT-LLM's disaggregated serving "
                    "(trtllm-serve disaggregated with its context and generation servers)",
                    "serve one mesh, or compile the pools for `target vllm` or `target sglang`"))
    if sv.speculative:
        out.append(("serve.speculative", f"speculative = {sv.speculative}: parc does not write TensorRT-LLM's "
                    "speculative_config", "remove `speculative`, or state it in a YAML of your own through `extra_args`"))
    for key in ("eplb", "two_batch_overlap"):
        if getattr(sv, key):
            out.append((f"serve.{key}", f"{key} = true: parc does not write TensorRT-LLM's "
                        + ("MoE load balancer (moe_config.load_balancer)" if key == "eplb" else "overlap of two "
                           "micro-batches"), f"remove `{key}`"))
    if sv.redundant_experts:
        out.append(("serve.redundant_experts", f"redundant_experts = {sv.redundant_experts}: parc does not write "
                    "TensorRT-LLM's MoE load balancer", "remove `redundant_experts`"))
    if sv.kv_cache_dtype not in ("auto", *KV_DTYPES) and sv.kv_cache_dtype != plan.model.dtype:
        out.append(("serve.kv_cache_dtype", f"kv_cache_dtype = {sv.kv_cache_dtype}: TensorRT-LLM keeps the KV "
                    "cache in the model's dtype or in FP8 E4M3 (kv_cache_config.dtype auto or fp8)",
                    f"use kv_cache_dtype = {join(['auto', 'fp8'], 'or')}"))
    if load_quantization(plan.model):
        out.append(("model.dtype", "an FP8 model from a 16-bit checkpoint: TensorRT-LLM's PyTorch backend loads "
                    "checkpoints quantized ahead (ModelOpt's), it does not quantize one as it loads it",
                    "name the FP8 checkpoint (`checkpoint_format = modelopt_fp8`, a ModelOpt FP8 model such as "
                    "nvidia/Llama-3.3-70B-Instruct-FP8)"))
    return out


@rule("P733", "trtllm-serve-settings", targets=(TARGET,), reads=(), whole=True)
def trtllm_serve_settings(plan, c):
    if plan.mode != "serve" or plan.serve is None:
        return
    for path, what, fix in _serve_problems(plan):
        c.report(c.at(path, "serve"), f"parc's trtllm launch cannot say this: {what}", help=fix)
