"""Megatron-LM's own rules: the plans its arguments cannot express or that it refuses."""
from __future__ import annotations

from parc.cost.memory import fsdp_double_buffered
from parc.model import schedules
from parc.model.targets import rank_orders
from parc.rules import WARNING, rule
from parc.rules.util import dims
from parc.targets.base import settings, target_span
from parc.targets.rules import pipeline_missing
from parc.targets.megatron import TARGET, fsdp


# ------------------------------------------------------------------------------------ P603

@rule("P603", "megatron-trains-only", targets=(TARGET,))
def megatron_training_only(plan, c):
    if plan.mode == "serve":
        c.report(target_span(plan, c, "megatron"),
                 "the megatron target emits pretrain_gpt.py training arguments; it cannot serve this plan "
                 "(the spec has a `serve` block)",
                 help="serve with `target vllm` (or `target torchrun`), or replace `serve` with `train`",
                 related=[(c.at("serve"), "serving declared here")])


# ------------------------------------------------------------------------------------ P607

@rule("P607", "megatron-schedule-unsupported", targets=(TARGET,))
def megatron_schedule(plan, c):
    s = plan.schedule
    if not pipeline_missing(plan, TARGET):      # target.toml [schedules]
        return
    c.report(c.at("schedule.pipeline"),
             f"Megatron-LM runs only 1F1B and interleaved 1F1B pipelines; pipeline = {s.pipeline} cannot be "
             f"expressed with its arguments",
             help="use `pipeline = 1f1b` (or interleaved_1f1b with virtual_stages), or compile for `target "
                  "torchrun`, whose torch.distributed.pipelining runtime has "
                  + (s.pipeline if schedules.in_torch(s.pipeline) else
                     "dualpipe_v (DualPipe cut in half; DualPipe itself runs only with deepseek-ai/DualPipe)"))


# ------------------------------------------------------------------------------------ P608

@rule("P608", "megatron-rank-order", targets=(TARGET,))
def megatron_order(plan, c):
    m = plan.mesh
    used = [ax for ax in m.order if m.size(ax) > 1]
    orders = [order for order, _ in rank_orders(TARGET)]
    for order in orders:
        if used == [ax for ax in order if ax in used]:
            return
    c.report(c.at(f"mesh.{used[-1]}"),
             f"Megatron-LM lays ranks out as tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping): tp "
             f"innermost, then cp; the mesh order {', '.join(used)} cannot be expressed",
             help="list the mesh axes as " + " or ".join(", ".join(ax for ax in o if ax in used)
                                                        for o in orders
                                                        if [ax for ax in o if ax in used] != used)
                  + " (outermost first)")


# ------------------------------------------------------------------------------------ P609

@rule("P609", "megatron-moe-tp-needs-sp", severity=WARNING, targets=(TARGET,))
def megatron_moe_sp(plan, c):
    m = plan.mesh
    if plan.mode != "train" or not plan.model.is_moe or m.tp <= 1 or (plan.train and plan.train.sequence_parallel):
        return
    c.report(c.at("train.sequence_parallel", "train"),
             f"Megatron-LM wants sequence parallelism for a MoE model with tp = {m.tp} (\"When using MoE and tensor "
             f"parallelism, sequence parallelism must be used\"; older releases refuse to start, newer ones warn)",
             help="set `sequence_parallel = true` in train")


# ------------------------------------------------------------------------------------ P612

@rule("P612", "megatron-moe-bias-etp", targets=(TARGET,))
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

@rule("P613", "megatron-expert-dp-with-pp-inside", targets=(TARGET,))
def megatron_expert_dp(plan, c):
    m, md = plan.mesh, plan.model
    if not md.is_moe or m.pp <= 1 or m.dp <= 1 or (m.ep <= 1 and m.etp <= 1):
        return
    order = [ax for ax in m.order if m.size(ax) > 1]
    if order.index("dp") > order.index("pp"):
        return  # pp outermost: Megatron's default order
    region = dims(plan).region
    edp = region // (m.ep * m.etp) if region % (m.ep * m.etp) == 0 else None
    if edp is None or edp == m.dp:
        return
    c.report(c.at("mesh.dp"),
             f"with dp outside pp (Megatron-LM's --use-tp-pp-dp-mapping) the expert layers must have the same "
             f"data-parallel size as the dense ones, but expert dp = dp·cp·tp / (ep·etp) = {region} / "
             f"{m.ep * m.etp} = {edp} and dp = {m.dp} (\"When not using pp-last rank ordering, the data parallel "
             f"size of the attention and moe layers must be the same\")",
             help=f"put pp first in the mesh (outermost), or choose ep · etp = cp · tp = {m.cp * m.tp}")



# --- what the launch cannot give Megatron-LM ----------------------------------------------------
@rule("P656", "megatron-fsdp-with-tp-cp", severity=WARNING, targets=(TARGET,))
def fsdp_with_tp_cp(plan, c):
    """Megatron-LM's validate_args warns (on GPUs before Blackwell) when tensor or context
    parallelism runs with Megatron-FSDP: one wants CUDA_DEVICE_MAX_CONNECTIONS=1, the other
    refuses it. The launch leaves it unset, as FSDP requires."""
    me = plan.mesh
    if not fsdp(plan) or (me.tp == 1 and me.cp == 1):
        return
    what = " and ".join(f"{ax} = {me.size(ax)}" for ax in ("tp", "cp") if me.size(ax) > 1)
    c.report(c.at("train.zero", "train"),
             f"zero = 3 (Megatron-FSDP) with {what}: Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1, which "
             "tensor and context parallelism need to overlap their communication, so the launch leaves it "
             "unset and that overlap is lost on GPUs before Blackwell (Megatron-LM warns the same at start)",
             help="use zero = 1 (the distributed optimizer) with tp or cp, or keep zero = 3 with dp only")


def _hf_id(plan) -> str:
    """The preset's Hugging Face id (from its source note), for the help text."""
    import re

    from parc.resolve.resolver import presets

    src = presets("models").get(plan.model.preset or "", {}).get("source", "")
    ids = re.findall(r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+) config\.json", src)
    return ids[-1] if ids else "org/model"


@rule("P657", "megatron-tokenizer-model", targets=(TARGET,))
def tokenizer_model(plan, c):
    """HuggingFaceTokenizer reads its files from --tokenizer-model; without it Megatron-LM's
    build_tokenizer has nothing to load."""
    s = settings(plan, TARGET)
    extra = [str(x) for x in s.get("extra_args") or []]
    if s.get("tokenizer"):     # extra_args repeating its options: P025
        return
    hf = any(a == "HuggingFaceTokenizer" or a == "--tokenizer-type=HuggingFaceTokenizer" for a in extra)
    if hf and not any(a == "--tokenizer-model" or a.startswith("--tokenizer-model=") for a in extra):
        c.report(c.at("target.megatron.extra_args", "target.megatron"),
                 "extra_args choose Megatron-LM's HuggingFaceTokenizer without --tokenizer-model, so the "
                 "tokenizer has nothing to load and pretrain_gpt.py stops before the first step",
                 help=f'replace the --tokenizer-type pair with `tokenizer = "{_hf_id(plan)}"` in `target megatron` '
                      "(a Hugging Face id or a local folder)")


# --- the overlap switches Megatron-LM refuses -----------------------------------------------
@rule("P654", "megatron-overlap-param-gather", targets=(TARGET,))
def overlap_param_gather(plan, c):
    """validate_args: --overlap-param-gather only with the distributed optimizer (or
    Megatron-FSDP) and only together with --overlap-grad-reduce."""
    tr = plan.train
    if plan.mode != "train" or tr is None or not tr.overlap_param_gather:
        return
    if tr.zero == 0:
        c.report(c.at("train.overlap_param_gather", "train"),
                 "overlap_param_gather = true with zero = 0: without the distributed optimizer every rank holds "
                 "all parameters, so there is no all-gather to overlap, and Megatron-LM refuses "
                 "--overlap-param-gather (\"only supported with distributed optimizer, megatron fsdp, or dist_muon\")",
                 help="set `zero = 1` (the distributed optimizer), or remove `overlap_param_gather`",
                 related=[(c.at("train.zero", "train"), "zero = 0")])
    elif not tr.overlap_grad_reduce:
        c.report(c.at("train.overlap_param_gather", "train"),
                 "overlap_param_gather = true with overlap_grad_reduce = false: Megatron-LM overlaps the parameter "
                 "all-gather only together with the gradient reduce-scatter (\"Must use --overlap-param-gather "
                 "with --overlap-grad-reduce\")",
                 help="set `overlap_grad_reduce = true` (parc's default), or remove `overlap_param_gather`",
                 related=[(c.at("train.overlap_grad_reduce", "train"), "overlap_grad_reduce = false")])


@rule("P655", "megatron-tp-comm-overlap-needs-sp", targets=(TARGET,))
def tp_comm_overlap(plan, c):
    """validate_args: --tp-comm-overlap pipelines the all-gathers and reduce-scatters of sequence
    parallelism with Transformer Engine's GEMMs (parc always emits --transformer-impl
    transformer_engine); without sequence parallelism there are none."""
    tr, me = plan.train, plan.mesh
    if plan.mode != "train" or tr is None or not tr.tp_comm_overlap or me.tp <= 1 or tr.sequence_parallel:
        return
    c.report(c.at("train.tp_comm_overlap", "train"),
             f"tp_comm_overlap = true with tp = {me.tp} but no sequence parallelism: Megatron-LM overlaps only the "
             "all-gathers and reduce-scatters of sequence parallelism with their GEMMs (\"Tensor parallel "
             "communication/GEMM overlap can happen only when sequence parallelism is enabled\")",
             help="set `sequence_parallel = true` in train, or remove `tp_comm_overlap`")


def _ep_overlap_faults(plan) -> list[tuple[str, str, str]]:
    """(path, what, Megatron-LM's words) for each TransformerConfig assertion of
    overlap_moe_expert_parallel_comm that the plan breaks."""
    tr, me, sc = plan.train, plan.mesh, plan.schedule
    out = []
    if me.pp > 1 and sc.virtual_stages <= 1:
        out.append(("schedule.pipeline", f"pp = {me.pp} without virtual stages",
                    "virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1"))
    if tr.recompute == "full":
        out.append(("train.recompute", "recompute = full",
                    "disable full recomputation when enabling overlap_moe_expert_parallel_comm"))
    if tr.precision not in ("bf16", "fp16", "fp8"):
        out.append(("train.precision", f"precision = {tr.precision}",
                    "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model"))
    if fsdp_double_buffered(plan):
        key = "fsdp_double_buffer" if settings(plan, TARGET).get("fsdp_double_buffer") else "nccl_ub"
        out.append((f"target.megatron.{key}", f"Megatron-FSDP's double buffer (`{key} = true`"
                    + (", which turns it on" if key == "nccl_ub" else "") + ")",
                    "1F1B overlap with FSDP does not support double buffer"))
    return out


@rule("P659", "megatron-ep-comm-overlap", targets=(TARGET,))
def ep_comm_overlap(plan, c):
    """TransformerConfig.__post_init__ asserts what overlap_moe_expert_parallel_comm needs; the
    alltoall dispatcher and ep > 1 come with the launch (the flag is emitted only with ep > 1)."""
    tr, me = plan.train, plan.mesh
    if plan.mode != "train" or tr is None or not tr.ep_comm_overlap or not plan.model.is_moe or me.ep <= 1:
        return
    for path, what, words in _ep_overlap_faults(plan):
        c.report(c.at(path, "schedule" if path.startswith("schedule") else "train"),
                 f"ep_comm_overlap = true with {what}: Megatron-LM's --overlap-moe-expert-parallel-comm "
                 f"refuses it (\"{words}\")",
                 help={"schedule.pipeline": "use `pipeline = interleaved_1f1b` with virtual_stages ≥ 2, ",
                       "train.recompute": "use `recompute = selective` or none, ",
                       "train.precision": "use `precision = bf16`, ",
                       "target.megatron.fsdp_double_buffer": "remove `fsdp_double_buffer`, ",
                       "target.megatron.nccl_ub": "remove `nccl_ub`, "}[path] + "or remove `ep_comm_overlap`",
                 related=[(c.at("train.ep_comm_overlap", "train"), "ep_comm_overlap = true")])


# ------------------------------------------------------------------------------------ P621
@rule("P621", "megatron-fp8-param-gather", targets=(TARGET,))
def fp8_param_gather(plan, c):
    """--fp8-param-gather keeps the linear weights in FP8 (TransformerConfig.fp8_param): it needs
    FP8 training and a sharded optimizer to hold the fp32 master weights."""
    tr = plan.train
    if plan.mode != "train" or tr is None or not tr.fp8_param_gather:
        return
    at = c.at("train.fp8_param_gather", "train")
    if tr.precision != "fp8":
        c.report(at, f"fp8_param_gather = true with precision = {tr.precision}: FP8 weights need FP8 training "
                     "(Megatron-LM: \"fp8_param must be used together with fp8 mode\")",
                 help="set `precision = fp8`, or remove `fp8_param_gather`",
                 related=[(c.at("train.precision", "train"), f"precision = {tr.precision}")])
    elif tr.zero == 0:
        c.report(at, "fp8_param_gather = true with zero = 0: without the distributed optimizer nothing holds the "
                     "fp32 master weights, and Megatron-LM refuses it (\"--fp8-param-gather only supported with "
                     "distributed optimizer, torch fsdp2, megatron fsdp, or inference mode\")",
                 help="set `zero = 1` (the distributed optimizer), or remove `fp8_param_gather`",
                 related=[(c.at("train.zero", "train"), "zero = 0")])
