"""TensorRT-LLM: ``serve.sh`` (``trtllm-serve MODEL --backend pytorch ...``, its OpenAI-compatible
server) and ``extra_llm_api_options.yaml`` beside it, on one node.

trtllm-serve takes the engine's degrees and limits as options (flags.toml: ``--tp_size``,
``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``,
``--kv_cache_free_gpu_memory_fraction``) and everything else as LLM API keys in the YAML that
``--extra_llm_api_options`` names (tensorrt_llm/llmapi/llm_args.py): the capacity scheduler
(``scheduler_config.capacity_scheduler_policy``), the KV cache's dtype (``kv_cache_config.dtype``),
attention data parallelism (``enable_attention_dp``) and the model's dtype. What the spec leaves
out is left to TensorRT-LLM (its defaults: trtllm/defaults.toml), and the YAML is written only
when it holds something.

TensorRT-LLM's Mapping is one engine of ``tp_size · pp_size`` GPUs (tensorrt_llm/mapping.py):
parc's mesh maps onto it as ``tp_size = tp`` (``tp · dp`` under ``dp_attention``, whose ranks run
the attention data-parallel and the experts over all of them), ``pp_size = pp`` and ``ep_size =
ep``, the experts' tensor parallelism being what remains (``moe_tp_size = tp_size / ep``).
trtllm-serve has no data-parallel replicas of its own, and parc writes no multi-node launch
(TensorRT-LLM starts one under ``mpirun`` or ``trtllm-llmapi-launch``): P731 and P732 refuse the
plans this launch cannot carry, P733 the serve settings it cannot say.
"""
from __future__ import annotations

from parc.model.targets import flag, pinned
from parc.targets.base import Cat, File, Var, device_env, mesh_text, need, nccl_env, plan_json, settings, spec_name
from parc.words import count

TARGET = "trtllm"
YAML = "extra_llm_api_options.yaml"
# parc's kv_cache_dtype -> KvCacheConfig.dtype (llm_args.py: "auto" keeps the model's); the 16-bit
# ones are the model's own (auto), E5M2 has no FP8 KV cache in TensorRT-LLM (P733)
KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
POLICIES = {"guaranteed_no_evict": "GUARANTEED_NO_EVICT", "max_utilization": "MAX_UTILIZATION"}


def options(plan):
    """``F(what)``: the option the release the plan launches spells ``what`` with (flags.toml)."""
    version = pinned(plan, TARGET)
    return lambda what: flag(TARGET, what, version)


def attention_dp(plan) -> bool:
    """Whether the mesh's dp ranks are TensorRT-LLM's attention data parallelism (enable_attention_dp)."""
    return bool(plan.serve is not None and plan.serve.dp_attention and plan.mesh.dp > 1)


def tp_size(plan) -> int:
    """TensorRT-LLM's tp_size: the mesh's tp, times dp under attention data parallelism."""
    return plan.mesh.tp * (plan.mesh.dp if attention_dp(plan) else 1)


def llm_api(plan) -> dict:
    """The LLM API keys of the YAML (what has no option of its own), only those the spec states."""
    from parc.rules.util import given

    out: dict = {}
    m, sv = plan.model, plan.serve
    if given(plan, "model.dtype") and m.dtype in DTYPES:
        out["dtype"] = DTYPES[m.dtype]
    if attention_dp(plan):
        out["enable_attention_dp"] = True
    policy = settings(plan, TARGET).get("capacity_scheduler_policy")
    if policy:
        out["scheduler_config"] = {"capacity_scheduler_policy": POLICIES[policy]}
    if sv.kv_cache_dtype in KV_DTYPES:
        out["kv_cache_config"] = {"dtype": KV_DTYPES[sv.kv_cache_dtype]}
    return out


def serve_lines(plan) -> list[list]:
    """Every option of ``trtllm-serve`` after the model, the spec's extra_args last."""
    s, me, sv = settings(plan, TARGET), plan.mesh, plan.serve
    F = options(plan)
    out: list[list] = [[F("backend"), "pytorch"], [F("host"), "0.0.0.0"], [F("port"), s.get("port", 8000)],
                       [F("tensor_parallel_size"), tp_size(plan)], [F("pipeline_parallel_size"), me.pp]]
    a = out.append
    if me.ep > 1:
        a([F("moe_expert_parallel_size"), me.ep])
    for what, key in (("max_batch_size", "max_num_seqs"), ("max_num_tokens", "max_num_batched_tokens"),
                      ("max_seq_len", "max_model_len")):
        if getattr(sv, key) is not None:
            a([F(what), getattr(sv, key)])
    if sv.gpu_memory_utilization is not None:
        a([F("kv_cache_free_gpu_memory_fraction"), repr(float(sv.gpu_memory_utilization))])
    if llm_api(plan):
        a([F("extra_llm_api_options"), Cat((Var("here"), f"/{YAML}"))])
    return out + [[x] for x in s.get("extra_args") or []]


def yaml_text(plan) -> str:
    """extra_llm_api_options.yaml: :func:`llm_api` as block YAML (render.yaml_lines)."""
    from parc.targets.render import c, yaml_lines

    head = f"LLM API options of trtllm-serve (--extra_llm_api_options), compiled by parc from {spec_name(plan)}."
    return "\n".join([f"# {c(head)}"] + yaml_lines(llm_api(plan))) + "\n"


def inexpressible(plan) -> list[tuple[str, str, str]]:
    """(path, what, help) of each model field trtllm-serve cannot be told (P620): it builds the
    model from the checkpoint's config.json and has no option that overrides a key of it."""
    from parc.resolve.catalog import preset_changes

    m = plan.model
    return [(f"model.{name}", f"`{name} = {value}` (the preset {m.preset} has {was}): TensorRT-LLM builds the "
             "model from the checkpoint's config.json and trtllm-serve has no option that overrides it",
             f"remove `{name}` to serve the checkpoint as published, or give `model` a checkpoint whose config.json "
             "says it")
            for name, (was, value) in preset_changes(m).items()]


def _script(plan) -> str:
    from parc.targets.render import render

    cl = plan.cluster
    header = [f"trtllm-serve, compiled by parc from {spec_name(plan)}.",
              f"Mesh: {mesh_text(plan)}; 1 node x {count(cl.gpus_per_node, 'GPU')}: TensorRT-LLM tp_size "
              f"{tp_size(plan)}, pp_size {plan.mesh.pp}" + (f", ep_size {plan.mesh.ep}" if plan.mesh.ep > 1 else "")
              + (", attention data parallel" if attention_dp(plan) else "") + "."]
    env = device_env(plan, TARGET) + nccl_env(plan)
    return render("trtllm/serve.sh.j2", header=header, need_here=bool(llm_api(plan)), env=env,
                  model=need(plan, TARGET, "model"), serve_lines=serve_lines(plan))


def build(plan) -> list[File]:
    """serve.sh, extra_llm_api_options.yaml where the spec states an LLM API key, and plan.json."""
    files = [File("serve.sh", _script(plan), True)]
    if llm_api(plan):
        files.append(File(YAML, yaml_text(plan)))
    return files + [File("plan.json", plan_json(plan))]
