"""P6xx: what the chosen target can express.

A target's rules run when the spec names it (`target vllm { ... }`) or `parc check --target T`
asks; "torch" (parc's own runtime, torchtitan-style) comes with torchrun, slurm and kubernetes.
"""
from __future__ import annotations

from parc.rules import WARNING, rule
from parc.rules.util import divisors, join, target_name
from parc.words import count

# Fields each target cannot do without: (key, what it is).
REQUIRED = {
    "vllm": [("model", "the Hugging Face model id or local path that vLLM loads")],
    "torchrun": [("entrypoint", "the script torchrun starts on every GPU")],
    "slurm": [("entrypoint", "the script each node's torchrun starts")],
    "kubernetes": [("entrypoint", "the script torchrun runs in every pod")],
}
EXAMPLES = {"entrypoint": '"train.py"'}


def _hub_id(plan) -> str | None:
    """The Hugging Face id the model's preset was read from (its `source` names the config.json)."""
    import re

    from parc.resolve.resolver import presets

    md = plan.model
    pre = presets("models").get(md.preset or "", {})
    shape = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "experts")
    if any(k in pre and getattr(md, k) != pre[k] for k in shape):
        return None  # a changed shape is another model
    found = re.search(r"([A-Za-z0-9][\w.-]*/[\w.-]+) config\.json", str(pre.get("source", "")))
    return found.group(1) if found else None


def _example(plan, key: str) -> str:
    """A value for ``key`` that fits this spec: the spec's own model for vLLM's `model`."""
    if key == "model":
        hub = _hub_id(plan)
        return f'"{hub}"' if hub else f'"/path/to/{plan.model.name}"'
    return EXAMPLES[key]


def _target_span(plan, c, name, fallback: str | None = None):
    """The target's block; without one (a target asked for with --target), the block the fix
    belongs to (``fallback``), never the top of the file."""
    if f"target.{name}" in plan.spans or fallback is None:
        return c.at(f"target.{name}")
    return c.at(fallback)


# ------------------------------------------------------------------------------------ P601

@rule("P601", "vllm-serves-only", targets=("vllm",))
def vllm_serving_only(plan, c):
    if plan.mode == "train":
        c.report(_target_span(plan, c, "vllm", "train"),
                 "vLLM is an inference engine: it cannot run this training plan (the spec has a `train` block)",
                 help="compile training for `target megatron` or `target torchrun`, or replace `train` with "
                      "`serve` to serve the model",
                 related=[(c.at("train"), "training declared here")])


# ------------------------------------------------------------------------------------ P602

@rule("P602", "target-field-missing", targets=tuple(REQUIRED))
def target_field_missing(plan, c):
    t = c.target
    if t in ("slurm", "kubernetes") and plan.mode == "serve":
        return  # they serve with the vllm target's command: its own P602 asks for `model`
    settings = plan.target_settings(t)
    missing = [(k, what) for k, what in REQUIRED[t] if k not in settings]
    if not missing:
        return
    fields = join([f"`{k}` ({what})" for k, what in missing], "and")
    example = "; ".join(f"{k} = {_example(plan, k)}" for k, _ in missing)
    also = " (or a `target torchrun` block it can take them from)" if t in ("slurm", "kubernetes") else ""
    if not _hub_id(plan) and any(k == "model" for k, _ in missing):
        also += f" with the Hugging Face id or local path of model \"{plan.model.name}\""
    if t in plan.targets:
        c.report(_target_span(plan, c, t), f"target {t} needs {fields}",
                 help=f"add it to the block: `target {t} {{ {example} }}`{also}")
    else:
        # no block to point at: the model vLLM must load, or the workload the script runs
        where = "model" if missing[0][0] == "model" else plan.mode
        c.report(_target_span(plan, c, t, where),
                 f"--target {t} needs {fields}, and the spec has no `target {t}` block",
                 help=f"add `target {t} {{ {example} }}` to the spec{also}")


# ------------------------------------------------------------------------------------ P603

@rule("P603", "megatron-trains-only", targets=("megatron",))
def megatron_training_only(plan, c):
    if plan.mode == "serve":
        c.report(_target_span(plan, c, "megatron"),
                 "the megatron target emits pretrain_gpt.py training arguments; it cannot serve this plan "
                 "(the spec has a `serve` block)",
                 help="serve with `target vllm` (or `target torchrun`), or replace `serve` with `train`",
                 related=[(c.at("serve"), "serving declared here")])


# ------------------------------------------------------------------------------------ P604

@rule("P604", "vllm-virtual-stages", targets=("vllm",))
def vllm_virtual_stages(plan, c):
    if plan.mode != "serve" or plan.schedule.virtual_stages <= 1:
        return
    c.report(c.at("schedule.virtual_stages"),
             f"vLLM has no interleaved pipeline: each of the pp = {count(plan.mesh.pp, 'rank')} holds one contiguous block "
             f"of layers, so virtual_stages = {plan.schedule.virtual_stages} cannot be expressed",
             help="remove `virtual_stages` (serving takes no schedule)")


# ------------------------------------------------------------------------------------ P605

@rule("P605", "vllm-context-parallel-needs-mla", severity=WARNING, targets=("vllm",))
def vllm_pcp_mla(plan, c):
    """vLLM 0.33 accepts prefill context parallel with any dp (ParallelConfig, create_engine_config);
    it runs it only in its V2 model runner and only for multi-head latent attention models
    (vllm/v1/worker/gpu/pcp_manager.py), which the spec's model block cannot say."""
    m = plan.mesh
    if plan.mode != "serve" or m.cp <= 1:
        return
    c.report(c.at("mesh.cp"),
             f"vLLM runs prefill context parallel (cp = {m.cp}) only for models with multi-head latent attention "
             f"(DeepSeek-V2/V3 style) in its V2 model runner: for model `{plan.model.name}` with grouped-query or "
             f"multi-head attention the engine refuses to start (\"MRV2 PCP currently supports MLA models only\"; "
             f"the V1 model runner refuses prefill context parallel at argument check)",
             help="keep cp only if the model uses MLA; otherwise use cp = 1 and give the GPUs to tp or dp")


# ------------------------------------------------------------------------------------ P606

@rule("P606", "vllm-expert-parallel-size", targets=("vllm",))
def vllm_ep(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "serve" or not md.is_moe or (m.ep <= 1 and m.etp <= 1):
        return
    region = m.dp * m.cp * m.tp
    if m.etp > 1:
        c.report(c.at("mesh.etp"),
                 f"vLLM cannot split experts with etp = {m.etp}: with expert parallelism each expert lives whole "
                 f"on one GPU (etp = 1), and without it experts are split over tp",
                 help=f"remove `etp`; use ep = {region} (= dp · cp · tp) for expert parallelism, or no ep")
        return
    if m.ep != region:
        c.report(c.at("mesh.ep"),
                 f"vLLM's expert parallelism always spans all dp · cp · tp = {m.dp} · {m.cp} · {m.tp} = {region} "
                 f"GPUs of a pipeline stage (--enable-expert-parallel has no size); ep = {m.ep} cannot be expressed",
                 help=f"set ep = {region}, or remove `ep` to split experts over tp")


# ------------------------------------------------------------------------------------ P607

@rule("P607", "megatron-schedule-unsupported", targets=("megatron",))
def megatron_schedule(plan, c):
    s = plan.schedule
    if plan.mode != "train" or plan.mesh.pp <= 1 or s.pipeline in ("1f1b", "interleaved_1f1b"):
        return
    c.report(c.at("schedule.pipeline"),
             f"Megatron-LM runs only 1F1B and interleaved 1F1B pipelines; pipeline = {s.pipeline} cannot be "
             f"expressed with its arguments",
             help="use `pipeline = 1f1b` (or interleaved_1f1b with virtual_stages), or compile for `target "
                  "torchrun`, whose torch.distributed.pipelining runtime has " + s.pipeline)


# ------------------------------------------------------------------------------------ P608

MEGATRON_ORDERS = (["pp", "dp", "cp", "tp"], ["dp", "pp", "cp", "tp"])


@rule("P608", "megatron-rank-order", targets=("megatron",))
def megatron_order(plan, c):
    m = plan.mesh
    used = [ax for ax in m.order if m.size(ax) > 1]
    for order in MEGATRON_ORDERS:
        if used == [ax for ax in order if ax in used]:
            return
    c.report(c.at(f"mesh.{used[-1]}"),
             f"Megatron-LM lays ranks out as tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping): tp "
             f"innermost, then cp; the mesh order {', '.join(used)} cannot be expressed",
             help="list the mesh axes as " + " or ".join(", ".join(ax for ax in o if ax in used)
                                                        for o in MEGATRON_ORDERS
                                                        if [ax for ax in o if ax in used] != used)
                  + " (outermost first)")


# ------------------------------------------------------------------------------------ P609

@rule("P609", "megatron-moe-tp-needs-sp", severity=WARNING, targets=("megatron",))
def megatron_moe_sp(plan, c):
    m = plan.mesh
    if plan.mode != "train" or not plan.model.is_moe or m.tp <= 1 or (plan.train and plan.train.sequence_parallel):
        return
    c.report(c.at("train.sequence_parallel", "train"),
             f"Megatron-LM wants sequence parallelism for a MoE model with tp = {m.tp} (\"When using MoE and tensor "
             f"parallelism, sequence parallelism must be used\"; older releases refuse to start, newer ones warn)",
             help="set `sequence_parallel = true` in train")


# ------------------------------------------------------------------------------------ P610

@rule("P610", "torch-tied-embeddings-pipeline", targets=("torch",))
def torch_tied_pp(plan, c):
    if plan.mesh.pp <= 1 or not plan.model.tied_embeddings:
        return
    c.report(c.at("mesh.pp"),
             f"{target_name(c.target)} cannot pipeline a model with tied embeddings: the first stage's embedding and "
             f"the last stage's output layer would share one weight across pp = {count(plan.mesh.pp, 'rank')} (torchtitan: "
             f"\"Weight tying is not supported with Pipeline Parallel\")",
             help="use pp = 1 (with dp, tp or zero = 3 for memory), or untie the embeddings "
                  "(`tied_embeddings = false`), or use the megatron target, which keeps the tied copies in sync",
             related=[(c.at("model.tied_embeddings"), "tied_embeddings = true")])


# ------------------------------------------------------------------------------------ P611

@rule("P611", "torch-etp-one-or-tp", targets=("torch",))
def torch_etp(plan, c):
    m = plan.mesh
    if not plan.model.is_moe or m.etp in (1, m.tp):
        return
    c.report(c.at("mesh.etp"),
             f"{target_name(c.target)} splits experts either over the whole TP group or not at all: etp must be 1 or "
             f"tp = {m.tp}, not {m.etp} (torchtitan: \"Currently we only support ETP=TP or ETP=1\")",
             help=f"set etp = 1 or etp = {m.tp}" if m.tp > 1 else "set etp = 1")


# ------------------------------------------------------------------------------------ P612

@rule("P612", "megatron-moe-bias-etp", targets=("megatron",))
def megatron_moe_bias(plan, c):
    m, md = plan.mesh, plan.model
    if not md.is_moe or not md.bias or m.etp <= 1:
        return
    c.report(c.at("mesh.etp"),
             f"Megatron-LM supports linear biases in MoE experts only with etp = 1, but etp = {m.etp} "
             f"(\"Bias in Moe is only supported when ETP==1\")",
             help="set etp = 1 (and raise ep instead), or `bias = false` in the model",
             related=[(c.at("model.bias"), "bias = true")])


# ------------------------------------------------------------------------------------ P613

@rule("P613", "megatron-expert-dp-with-pp-inside", targets=("megatron",))
def megatron_expert_dp(plan, c):
    m, md = plan.mesh, plan.model
    if not md.is_moe or m.pp <= 1 or m.dp <= 1 or (m.ep <= 1 and m.etp <= 1):
        return
    order = [ax for ax in m.order if m.size(ax) > 1]
    if order.index("dp") > order.index("pp"):
        return  # pp outermost: Megatron's default order
    region = m.dp * m.cp * m.tp
    edp = region // (m.ep * m.etp) if region % (m.ep * m.etp) == 0 else None
    if edp is None or edp == m.dp:
        return
    c.report(c.at("mesh.dp"),
             f"with dp outside pp (Megatron-LM's --use-tp-pp-dp-mapping) the expert layers must have the same "
             f"data-parallel size as the dense ones, but expert dp = dp·cp·tp / (ep·etp) = {region} / "
             f"{m.ep * m.etp} = {edp} and dp = {m.dp} (\"When not using pp-last rank ordering, the data parallel "
             f"size of the attention and moe layers must be the same\")",
             help=f"put pp first in the mesh (outermost), or choose ep · etp = cp · tp = {m.cp * m.tp}")


# ------------------------------------------------------------------------------------ P614

@rule("P614", "vllm-multinode-context-parallel", targets=("vllm",))
def vllm_multinode_pcp(plan, c):
    m, cl = plan.mesh, plan.cluster
    if plan.mode != "serve" or m.cp <= 1 or cl.nodes <= 1:
        return
    w = m.dp * m.pp * m.tp
    if w % cl.nodes == 0:
        return
    ok = [n for n in divisors(w) if n > 1]
    c.report(c.at("mesh.cp"),
             f"vLLM splits its multi-node world over nodes as (dp · pp · tp) / nodes, leaving out cp: "
             f"{m.dp} · {m.pp} · {m.tp} = {w} is not divisible by {count(cl.nodes, 'node')} (vLLM: \"world_size={w} must be "
             f"divisible by nnodes={cl.nodes}\")",
             help=(f"use a node count that divides {w} ({join(ok)}), or keep cp inside one node"
                   if ok else "keep the context-parallel deployment inside one node"),
             related=[(c.at("cluster.nodes"), f"nodes = {cl.nodes}")])


# ------------------------------------------------------------------------------------ P615

@rule("P615", "deepspeed-zero-with-pipeline", targets=("deepspeed",))
def deepspeed_zero_pp(plan, c):
    t, m = plan.train, plan.mesh
    if plan.mode != "train" or t is None or t.zero < 2 or m.pp <= 1:
        return
    c.report(c.at("train.zero"),
             f"DeepSpeed's pipeline engine refuses zero = {t.zero} with pp = {m.pp}: ZeRO-2 and ZeRO-3 partition "
             f"gradients, which the pipeline accumulates over microbatches (\"ZeRO-2 and ZeRO-3 are incompatible "
             f"with pipeline parallelism\")",
             help="use zero = 1 with the pipeline, or pp = 1 with zero = 3",
             related=[(c.at("mesh.pp"), f"pp = {m.pp}")])
