"""compile, then import: for generated valid serving plans, the launch parc compiles for vLLM or
SGLang, read back by ``parc import`` (with the spec's cluster, which no launch states), is the
same plan: the same mesh, context and sequence limits."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPEC = """model "llama" {{
  from = llama3_1_70b
}}

cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}

mesh {{
{mesh}}}

serve {{
  max_model_len = {ctx}
  max_num_seqs  = {seqs}
}}

target {engine} {{
  model = "meta-llama/Llama-3.1-70B-Instruct"
}}
"""


@st.composite
def plans(draw):
    engine = draw(st.sampled_from(["vllm", "sglang"]))
    # meshes that fill the node's 8 GPUs (dp, pp, tp); SGLang's dp is attention dp, left out here
    shapes = [(1, 1, 8), (1, 2, 4)] + ([(2, 1, 4), (2, 2, 2), (4, 1, 2)] if engine == "vllm" else [])
    dp, pp, tp = draw(st.sampled_from(shapes))
    ctx = draw(st.sampled_from([4096, 8192, 32768]))
    seqs = draw(st.sampled_from([16, 64, 256]))
    mesh = "".join(f"  {k} = {v}\n" for k, v in (("dp", dp), ("pp", pp), ("tp", tp)) if v > 1 or k == "tp")
    return engine, SPEC.format(nodes=1, mesh=mesh, ctx=ctx, seqs=seqs, engine=engine), dict(dp=dp, pp=pp, tp=tp)


def _plan(path: Path, target: str):
    from parc.api import check_file

    r = check_file(str(path), [target])
    assert r.plan is not None and not r.errors, [(d.code, d.message) for d in r.errors]
    return r.plan


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_compile_then_import_gives_back_the_same_plan(case):
    from parc import targets
    from parc.importer import Options, import_files

    engine, text, mesh = case
    tmp = Path(tempfile.mkdtemp(prefix="parc-rt-"))
    spec = tmp / "plan.par"
    spec.write_text(text, encoding="utf-8")
    plan = _plan(spec, engine)
    files = targets.get(engine).build(plan)
    script = next(f for f in files if f.path.endswith(".sh"))
    launch = tmp / Path(script.path).name
    launch.write_text(script.text, encoding="utf-8")
    imp = import_files([str(launch)], Options(cluster=str(spec)))
    back = tmp / "back.par"
    back.write_text(imp.text, encoding="utf-8")
    again = _plan(back, engine)
    for k in ("dp", "pp", "tp"):
        assert getattr(again.mesh, k) == getattr(plan.mesh, k) == mesh[k], (k, imp.text)
    assert again.serve.max_model_len == plan.serve.max_model_len, imp.text
    assert again.serve.max_num_seqs == plan.serve.max_num_seqs, imp.text
    assert again.model.layers == plan.model.layers and again.model.hidden == plan.model.hidden
