"""Megatron-DeepSpeed's own rules: what the fork refuses that Megatron-LM or DeepSpeed accepts.
DeepSpeed's engine rules (ZeRO-2/3 with a pipeline, context parallelism, the pipeline schedules)
come with the target as the deepspeed family (target.toml)."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.rules import pipeline_missing, schedules_text
from parc.targets.megatron_deepspeed import TARGET


# ------------------------------------------------------------------------------------ P698

@rule("P698", "megatron-deepspeed-kv-heads-split", targets=(TARGET,))
def kv_heads_split(plan, c):
    m, md = plan.mesh, plan.model
    if plan.mode != "train" or md.kv_heads % m.tp == 0 or m.tp % md.kv_heads:
        return       # split evenly, or neither split nor replicated (P103 says so for every engine)
    c.report(c.at("mesh.tp"),
             f"Megatron-DeepSpeed splits the {md.kv_heads} KV heads over tp = {m.tp} and never replicates them "
             f"({md.kv_heads} % {m.tp} = {md.kv_heads % m.tp}); Megatron-LM and vLLM would replicate each KV head "
             f"{m.tp // md.kv_heads} times, the fork stops in ParallelAttention",
             help=f"use a tp that divides kv_heads = {md.kv_heads}, or compile for `target megatron`",
             related=[(c.at("model.kv_heads"), f"kv_heads = {md.kv_heads}")])


# ------------------------------------------------------------------------------------ P699

@rule("P699", "megatron-deepspeed-schedule", targets=(TARGET,))
def schedule(plan, c):
    if not pipeline_missing(plan, TARGET) or pipeline_missing(plan, "deepspeed"):
        return       # a schedule DeepSpeed itself lacks is P688's
    c.report(c.at("schedule.pipeline"),
             f"Megatron-DeepSpeed builds its pipeline as GPTModelPipe, a PipelineModule that DeepSpeed's "
             f"PipelineEngine runs with its 1F1B schedule; pipeline = {plan.schedule.pipeline} needs a "
             f"DualPipeVModule the fork never builds",
             help=f"use `pipeline = 1f1b` (the schedules it runs: {schedules_text(TARGET)}), or compile for "
                  f"`target deepspeed` with a script of your own that builds a DualPipeVModule")
