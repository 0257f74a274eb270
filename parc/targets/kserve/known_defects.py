"""KServe's known defects (the P7 family): each rule holds for the releases its rules.toml entry
names (`since`, `until`), with the public issue."""
from __future__ import annotations

from parc.rules import rule
from parc.targets.kserve import TARGET, pipeline_over_nodes, serving, workloads


@rule("P710", "kserve-pipeline-preset-missing", targets=(TARGET,))
def kserve_pipeline_preset(plan, c):
    """KServe picks kserve-config-llm-worker-pipeline-parallel (or its prefill/decode form) for a
    workload with a ``worker`` and ``parallelism.pipeline``, and ships none (kserve#5047)."""
    if not serving(plan):
        return
    for w in workloads(plan):
        if w.why is not None and pipeline_over_nodes(w):
            c.report(c.at("mesh.pp", "mesh"),
                     f"each replica is a pipeline of {w.run.size} stages, one per node: KServe asks for it with "
                     "`parallelism.pipeline` and a `worker`, and then looks for the preset "
                     "kserve-config-llm-worker-pipeline-parallel, which KServe does not ship, so the service never "
                     f"reconciles (\"LLMInferenceServiceConfig ... not found\", kserve#5047); {c.fixed_by()[1]}",
                     help="choose tp·pp·cp that fits one node (the replicas then run as dp), or launch the plan "
                          "with `target lws`")
