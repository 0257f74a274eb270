"""compile, then import: for generated valid plans, the launch parc compiles (vLLM, SGLang,
Megatron-LM, torchtitan, DeepSpeed), read back by ``parc import`` (with the spec's cluster, which no launch states), is
the same plan: the same mesh, context and sequence limits, batch, ZeRO stage and precision."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.import_specs import SPEC


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


def _round_trip(text: str, target: str, **options):
    """(the plan, the plan of its launch imported back, the import, the launch script): the spec
    compiled for ``target``, every file written beside the launch, ``launch.sh`` imported with
    the spec's cluster and ``options``."""
    from parc import targets
    from parc.importer import Options, import_files

    tmp = Path(tempfile.mkdtemp(prefix="parc-rt-"))
    spec = tmp / "plan.par"
    spec.write_text(text, encoding="utf-8")
    plan = _plan(spec, target)
    files = targets.get(target).build(plan)
    for f in files:
        (tmp / Path(f.path).name).write_text(f.text, encoding="utf-8")
    script = next(f for f in files if f.path.endswith(".sh"))
    if options.get("model") == "spec":
        options["model"] = str(spec)
    imp = import_files([str(tmp / Path(script.path).name)], Options(cluster=str(spec), **options))
    back = tmp / "back.par"
    back.write_text(imp.text, encoding="utf-8")
    return plan, _plan(back, target), imp, script


def _same(plan, again, imp, keys=("dp", "pp", "tp", "cp")) -> None:
    for k in keys:
        assert getattr(again.mesh, k) == getattr(plan.mesh, k), (k, imp.text)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_compile_then_import_gives_back_the_same_plan(case):
    engine, text, mesh = case
    plan, again, imp, _ = _round_trip(text, engine)
    _same(plan, again, imp)
    assert all(getattr(plan.mesh, k) == v for k, v in mesh.items())
    assert again.serve.max_model_len == plan.serve.max_model_len, imp.text
    assert again.serve.max_num_seqs == plan.serve.max_num_seqs, imp.text
    assert again.model.layers == plan.model.layers and again.model.hidden == plan.model.hidden


TRAIN = """model "llama" {{
  from    = llama3_8b
  seq_len = 2048
}}

cluster "c" {{
  nodes         = 2
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}

mesh {{
  pp = {pp}
  dp = {dp}
  tp = {tp}
}}

schedule {{
  micro_batch  = {micro}
  global_batch = {glob}
}}

train {{
  zero      = {zero}
  precision = {precision}
}}

target megatron {{
  entrypoint = "pretrain_gpt.py"
}}
"""


@st.composite
def training_plans(draw):
    tp, pp = draw(st.sampled_from([(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4) if t * p <= 16]))
    dp = 16 // (tp * pp)
    micro = draw(st.sampled_from([1, 2]))
    glob = micro * dp * draw(st.sampled_from([1, 4, 8]))
    return TRAIN.format(tp=tp, pp=pp, dp=dp, micro=micro, glob=glob, zero=draw(st.sampled_from([1, 2])),
                        precision=draw(st.sampled_from(["bf16", "fp16"])))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_plans())
def test_a_megatron_plan_compiled_then_imported_is_the_same_plan(text):
    """The node script parc writes, read back with node 0's rank and address (``--var``, as a user
    imports a script that takes them)."""
    from parc import targets

    plan, again, imp, script = _round_trip(text, "megatron", variables={"1": "0", "MASTER_ADDR": "10.0.0.1"})
    _same(plan, again, imp)
    assert (again.schedule.micro_batch, again.schedule.global_batch) == (plan.schedule.micro_batch,
                                                                        plan.schedule.global_batch), imp.text
    # zero 1 and 2 are one Megatron-LM launch (--use-distributed-optimizer shards optimizer states
    # and reduce-scatters gradients either way): the launch says 1, the lower it can mean
    launched = 1 if plan.train.zero in (1, 2) else plan.train.zero
    assert (again.train.zero, again.train.precision) == (launched, plan.train.precision), imp.text
    relaunched = next(f for f in targets.get("megatron").build(again) if f.path.endswith(".sh"))
    assert _args(relaunched.text) == _args(script.text)          # the same Megatron-LM arguments
    assert again.model.layers == plan.model.layers and again.model.kv_heads == plan.model.kv_heads
    assert again.model.seq_len == plan.model.seq_len == 2048


def _args(script: str) -> list[str]:
    """The Megatron-LM arguments a node script passes (its ``args=( ... )`` lines)."""
    body = script.split("args=(", 1)[1].split(")", 1)[0]
    return [ln.strip() for ln in body.splitlines() if ln.strip()]


TITAN = """model "llama" {{
  from    = llama3_8b
  seq_len = 4096
}}

cluster "c" {{
  nodes         = 1
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}}

mesh {{
  dp = {dp}
  tp = {tp}
}}

schedule {{
  micro_batch  = 1
  global_batch = {glob}
}}

train {{
  zero      = {zero}
  recompute = {recompute}
}}

target torchtitan {{ }}
"""


@st.composite
def titan_plans(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    dp = 8 // tp
    return TITAN.format(dp=dp, tp=tp, glob=dp * draw(st.sampled_from([1, 2, 4])), zero=draw(st.sampled_from([2, 3])),
                        recompute=draw(st.sampled_from(["none", "full", "selective_op"])))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(titan_plans())
def test_a_torchtitan_plan_compiled_then_imported_is_the_same_plan(text):
    plan, again, imp, _ = _round_trip(text, "torchtitan", variables={"1": "0", "MASTER_ADDR": "10.0.0.1"})
    _same(plan, again, imp)
    assert (again.schedule.micro_batch, again.schedule.global_batch) == (plan.schedule.micro_batch,
                                                                        plan.schedule.global_batch), imp.text
    assert (again.train.zero, again.train.recompute) == (plan.train.zero, plan.train.recompute), imp.text
    assert again.model.layers == plan.model.layers and again.model.seq_len == plan.model.seq_len


@st.composite
def deepspeed_plans(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    dp = 16 // tp
    micro = draw(st.sampled_from([1, 2]))
    text = TRAIN.format(tp=tp, pp=1, dp=dp, micro=micro, glob=micro * dp * draw(st.sampled_from([1, 4])),
                        zero=draw(st.sampled_from([1, 2])), precision=draw(st.sampled_from(["bf16", "fp16"])))
    return text.replace("target megatron", "target deepspeed").replace("pretrain_gpt.py", "train.py")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deepspeed_plans())
def test_a_deepspeed_plan_compiled_then_imported_is_the_same_plan(text):
    """The launch script and ds_config.json parc writes, read back (the config beside the script,
    where the launch finds it through its own folder; the model is the training script's own, which
    no DeepSpeed launch states: --model gives it)."""
    plan, again, imp, _ = _round_trip(text, "deepspeed", model="spec", variables={"MASTER_ADDR": "10.0.0.1"})
    _same(plan, again, imp)
    assert (again.schedule.micro_batch, again.schedule.global_batch) == (plan.schedule.micro_batch,
                                                                        plan.schedule.global_batch), imp.text
    assert (again.train.zero, again.train.precision) == (plan.train.zero, plan.train.precision), imp.text


@st.composite
def megatron_deepspeed_plans(draw):
    tp, pp = draw(st.sampled_from([(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4) if t * p <= 16]))
    dp = 16 // (tp * pp)
    micro = draw(st.sampled_from([1, 2]))
    # DeepSpeed's pipeline engine takes ZeRO 0 or 1 (P615; 0 does not fit the 8B model), else stages 1 to 3
    zero = draw(st.sampled_from([1] if pp > 1 else [1, 2, 3]))
    runner = draw(st.sampled_from(["deepspeed", "torchrun"]))
    text = TRAIN.format(tp=tp, pp=pp, dp=dp, micro=micro, glob=micro * dp * draw(st.sampled_from([1, 4])),
                        zero=zero, precision=draw(st.sampled_from(["bf16", "fp16"])))
    return text.replace('target megatron {\n  entrypoint = "pretrain_gpt.py"\n}',
                        f"target megatron_deepspeed {{\n  runner = {runner}\n}}")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(megatron_deepspeed_plans())
def test_a_megatron_deepspeed_plan_compiled_then_imported_is_the_same_plan(text):
    """The launch parc writes for Megatron-DeepSpeed, under the deepspeed launcher (node 0 only,
    HOSTFILE as its user sets it) or torchrun (node 0's rank and address), read back: the same
    mesh, batch, ZeRO stage, precision and model (NullTokenizer's vocabulary included), and the
    same arguments when compiled again."""
    from parc import targets

    plan, again, imp, script = _round_trip(text, "megatron_deepspeed",
                                           variables={"1": "0", "MASTER_ADDR": "10.0.0.1", "HOSTFILE": "hosts"})
    _same(plan, again, imp)
    assert (again.schedule.micro_batch, again.schedule.global_batch) == (plan.schedule.micro_batch,
                                                                        plan.schedule.global_batch), imp.text
    assert (again.train.zero, again.train.precision) == (plan.train.zero, plan.train.precision), imp.text
    import dataclasses

    assert dataclasses.replace(again.model, name=plan.model.name) == plan.model, imp.text   # its label aside
    assert again.target_settings("megatron_deepspeed").get("runner", "deepspeed") == \
        plan.target_settings("megatron_deepspeed").get("runner", "deepspeed")
    relaunched = next(f for f in targets.get("megatron_deepspeed").build(again) if f.path.endswith(".sh"))
    assert _args(relaunched.text) == _args(script.text)
