"""The cost model against published worked numbers and its own invariants."""
from __future__ import annotations

from dataclasses import replace

import math

import pytest

from parc.cost import estimate as cm
from parc.model import schedules as S
from parc.model.plan import Model

GB = 1e9


def gpt(layers, hidden, heads, vocab=51200, seq=2048):
    """A GPT-3-style model as Narayanan et al. 2021 and Korthikanti et al. 2022 define it."""
    return Model(name="gpt", layers=layers, hidden=hidden, ffn_hidden=4 * hidden, heads=heads,
                 kv_heads=heads, head_dim=None, vocab=vocab, params=0, seq_len=seq, mlp="gelu",
                 norm="layernorm", position="learned", bias=True, tied_embeddings=True)


def spec(mesh="tp = 1", cluster="nodes = 1\n  gpus_per_node = 1", model='from = llama3_70b',
         rest='serve { max_model_len = 4096 }', gpu="h100_sxm", extra=""):
    return f'''
model "m" {{
  {model}
}}
cluster "c" {{
  {cluster}
  gpu = {gpu}
  {extra}
}}
mesh {{
  {mesh}
}}
{rest}
'''


# --- worked numbers of the seed scenario ---------------------------------------------------------

def test_llama_70b_weights_and_tp4(check_spec):
    r = check_spec(spec(mesh="tp = 4", cluster="nodes = 1\n  gpus_per_node = 4"))
    plan = r.plan
    total = cm.param_count(plan.model)
    assert total * 2 == pytest.approx(140 * GB, rel=0.01)          # fp16 weights: 140 GB
    per_gpu = [cm.param_bytes_on_rank(plan, rank) for rank in range(4)]
    assert per_gpu == [per_gpu[0]] * 4
    assert per_gpu[0] == pytest.approx(35 * GB, rel=0.01)          # TP = 4 leaves 35 GB each
    assert cm.estimate(plan).memory.weights == per_gpu[0]


def test_pipeline_bubble_seed_figures():
    assert S.bubble("1f1b", 4, 1) == 0.75                 # one microbatch wastes 75%
    assert S.bubble("1f1b", 4, 16) == pytest.approx(3 / 19)
    assert S.bubble("gpipe", 4, 16) == pytest.approx(3 / 19)
    assert S.bubble("interleaved_1f1b", 4, 16, 2) == pytest.approx(3 / 35)
    assert S.bubble("zero_bubble", 4, 16) == pytest.approx(3 / 51)
    # DualPipeV's timeline idles pp−1 of each rank's 3·2·m + pp−1 units (two chunks per rank)
    assert S.bubble("dualpipe_v", 4, 16, 2) == pytest.approx(3 / 99)
    assert S.bubble("1f1b", 1, 16) == 0.0
    # Megatron's "bubble over ideal time" (p-1)/m is the same schedule: b/(1-b) = (p-1)/m
    b = S.bubble("1f1b", 8, 64)
    assert b / (1 - b) == pytest.approx(7 / 64)


def test_tp_allreduce_one_token():
    assert cm.allreduce_bytes(8192 * 2, 4) == 24 * 1024              # 24 KB per GPU
    assert cm.allreduce_bytes(8192 * 2, 1) == 0
    # a layer forward+backward is four such all-reduces per token
    assert cm.tp_bytes_per_layer(1, 8192, 4) == 4 * 24 * 1024
    assert cm.tp_bytes_per_layer(1, 8192, 4, recompute="full") == 6 * 24 * 1024


# --- ZeRO (Rajbhandari et al. 2020, Figure 1) -------------------------------------------------------

def test_zero_paper_7_5b_on_64():
    per = cm.state_bytes_per_param("bf16", main_grads="bf16")
    assert (per.weights, per.grads, per.optimizer) == (2, 2, 12)
    got = [sum(cm.zero_state_bytes(7.5e9, z, 64, per)) / GB for z in range(4)]
    assert got[0] == pytest.approx(120)
    assert got[1] == pytest.approx(31.4, abs=0.05)
    assert got[2] == pytest.approx(16.6, abs=0.05)
    assert got[3] == pytest.approx(1.88, abs=0.01)
    # ZeRO-3 for 1T parameters on 1024 GPUs: 15.6 GB
    assert sum(cm.zero_state_bytes(1e12, 3, 1024, per)) / GB == pytest.approx(15.6, abs=0.05)


def test_byte_conventions():
    assert cm.state_bytes_per_param().total == 18                   # Megatron: fp32 main grads
    assert cm.state_bytes_per_param(main_grads="bf16").total == 16  # ZeRO paper
    ds = cm.state_bytes_per_param(optimizer_state="bf16")
    assert (ds.weights, ds.grads, ds.optimizer) == (2, 4, 8)        # DeepSeek-V3: bf16 moments
    assert cm.state_bytes_per_param("fp32").total == 16             # no master copy
    assert cm.state_bytes_per_param(optimizer="sgd").optimizer == 8
    # Megatron's distributed optimizer: 6 + 12/dp
    w, g, o = cm.zero_state_bytes(1.0, 1, 8)
    assert w + g + o == pytest.approx(6 + 12 / 8)


# --- activations (Korthikanti et al. 2022, Table 2) -----------------------------------------------

@pytest.mark.parametrize("s,b,h,a,t", [(2048, 4, 6144, 64, 8), (2048, 1, 12288, 96, 8),
                                       (2048, 1, 20480, 128, 8), (2048, 1, 25600, 160, 8)])
def test_korthikanti_table2(s, b, h, a, t):
    f = cm.activation_bytes_per_layer
    sbh = s * b * h
    assert f(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert f(s, b, h, a, t=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert f(s, b, h, a, t=t, sp=True) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert f(s, b, h, a, t=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert f(s, b, h, a, t=t, sp=True, recompute="selective") == pytest.approx(34 * sbh / t)
    assert f(s, b, h, a, recompute="full") == 2 * sbh
    assert f(s, b, h, a, t=t, sp=True, recompute="full") == 2 * sbh / t


def test_activation_generalisations():
    f = cm.activation_bytes_per_layer
    s, b, h, a = 4096, 1, 4096, 32
    # Megatron-LM's sbh(18 + 4·ffn/h) for a GELU MLP of another width
    assert f(s, b, h, a, recompute="selective", ffn=3 * h) == pytest.approx(s * b * h * (18 + 12))
    # context parallelism divides the sequence
    assert f(s, b, h, a, recompute="selective", cp=4) == pytest.approx(f(s // 4, b, h, a, recompute="selective"))
    # GQA stores narrower K and V; SwiGLU stores more than GELU per ffn element
    assert f(s, b, h, a, kv_heads=8) < f(s, b, h, a)
    assert f(s, b, h, a, mlp="swiglu") > f(s, b, h, a)


def test_inflight_microbatches():
    assert S.inflight("gpipe", 4, 16) == 16
    assert S.inflight("1f1b", 4, 16) == 4
    assert S.inflight("1f1b", 4, 16, stage=3) == 1
    assert S.inflight("1f1b", 4, 2) == 2
    # Korthikanti: the interleaved schedule multiplies by 1 + (p-1)/(p·v)
    assert S.inflight("interleaved_1f1b", 4, 16, 2) == pytest.approx(4 * (1 + 3 / 8))
    assert S.inflight("dualpipe_v", 4, 16, 2) == 4.5
    assert S.inflight("1f1b", 1, 16) == 1


# --- KV cache (vLLM paper and source) ----------------------------------------------------------------

def test_kv_bytes_per_token():
    assert cm.kv_bytes_per_token(80, 8, 128, 2) == 327_680            # Llama 2/3 70B
    assert cm.kv_bytes_per_token(80, 8, 128, 2) * 4096 == pytest.approx(1.34e9, rel=0.01)
    assert cm.kv_bytes_per_token(126, 8, 128, 2) == 516_096           # Llama 3 405B
    assert cm.kv_bytes_per_token(32, 8, 128, 2) == 131_072            # Llama 3 8B
    assert cm.kv_bytes_per_token(40, 40, 128, 2) == 819_200           # OPT-13B's "800 KB"
    assert cm.kv_bytes_per_token(80, 8, 128, 2, tp=4) == 81_920
    assert cm.kv_bytes_per_token(80, 8, 128, 2, tp=16) == 40_960      # replicated past 8 heads


def test_serving_estimate(check_spec):
    r = check_spec(spec(mesh="tp = 4", cluster="nodes = 1\n  gpus_per_node = 4", gpu="a100_sxm_80gb",
                        rest="serve {\n  max_model_len = 8192\n  gpu_memory_utilization = 0.9\n}"))
    e = cm.estimate(r.plan)
    assert e.kv_bytes_per_token == 81_920
    # vLLM's sizing (gpu_worker.py determine_available_memory): what ceil(gpu_memory_utilization ×
    # memory) leaves after the weights and what the engine keeps inside it (the profiling pass's
    # activations, what the sampler adds, the CUDA graphs); the CUDA context and NCCL buffers come
    # before vLLM's snapshot and use the memory the utilization leaves
    mem = e.memory
    engine = mem.activations + mem.cuda_graphs + mem.sampler
    assert engine > 0 and mem.cuda_context > 0 and mem.nccl_buffers > 0
    expect = int((math.ceil(0.9 * r.plan.cluster.gpu.memory) - mem.weights - engine) // 81_920)
    assert e.kv_capacity_tokens == expect
    assert e.max_concurrent_seqs == expect // 8192
    j = e.to_json()
    assert j["kv_cache"]["capacity_tokens"] == expect
    outside = mem.cuda_context + mem.nccl_buffers
    assert 0.9 * r.plan.cluster.gpu.memory - 81_920 <= j["memory_per_gpu"]["total"] - outside \
        <= 0.9 * r.plan.cluster.gpu.memory + 1
    assert j["step_time"] == 0 and j["microbatches"] == 0 and j["bubble_fraction"] == 0


# --- parameter counts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("billions,heads,hidden,layers", [
    (1.7, 24, 2304, 24), (3.6, 32, 3072, 30), (7.5, 32, 4096, 36), (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48), (76.1, 80, 10240, 60), (145.6, 96, 12288, 80), (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105), (1008.0, 160, 25600, 128)])
def test_narayanan_table1_params(billions, heads, hidden, layers):
    m = gpt(layers, hidden, heads)
    V, s, l, h = 51200, 2048, layers, hidden
    formula = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert cm.param_count(m) == round(formula) + 2 * h            # plus the final LayerNorm
    assert cm.param_count(m) / 1e9 == pytest.approx(billions, abs=0.051)


def test_model_flops_korthikanti_eq7():
    m = gpt(96, 12288, 96)
    B, s, L, h, V = 64, 2048, 96, 12288, 51200
    eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    assert cm.model_flops(m, B * s) == pytest.approx(eq7, rel=0.002)
    eq8 = 72 * B * L * s * h * h * (1 + s / (3 * h) + V / (12 * h * L))
    assert cm.model_flops(m, B * s) + cm.recompute_flops(m, B * s, "selective") == pytest.approx(eq8, rel=0.002)
    # Narayanan eq. 3: full recompute, 96·B·s·l·h²·(1 + s/6h + V/16lh)
    eq3 = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert cm.model_flops(m, B * s) + cm.recompute_flops(m, B * s, "full") == pytest.approx(eq3, rel=0.002)


TRAIN = '''
schedule {
  pipeline = PIPE
  virtual_stages = V
  micro_batch = 1
  global_batch = 64
}
train { zero = Z }
'''


def train_plan(check_spec, mesh, nodes=1, gpus=8, pipe="1f1b", v=1, zero=1, model="from = llama3_8b",
               extra_mesh=""):
    rest = TRAIN.replace("PIPE", pipe).replace("V", str(v)).replace("Z", str(zero))
    r = check_spec(spec(mesh=mesh + extra_mesh, cluster=f"nodes = {nodes}\n  gpus_per_node = {gpus}",
                        model=model, rest=rest, extra="intra_node = nvlink(450GB/s)"))
    wrong = [d.message for d in r.errors if not d.code.startswith("P4")]   # memory may not fit
    assert r.plan is not None and not wrong, wrong
    return r.plan


def test_params_on_rank_sums(check_spec):
    plan = train_plan(check_spec, "pp = 4\n  tp = 2", zero=0)
    total = cm.param_count(plan.model)
    counts = [cm.params_on_rank(plan, r) for r in range(8)]
    # tp ranks of a stage hold the same count; one tp rank of every stage covers the model
    # except what tp replicates (norms) and what it splits (everything else)
    assert counts[0::2] == counts[1::2]
    md = plan.model
    norms = (2 * md.layers + 1) * md.hidden
    assert sum(counts) == total + norms
    # the first stage holds the embedding, the last the head
    parts0 = cm.params_by_part(plan, 0)
    parts3 = cm.params_by_part(plan, 6)
    assert parts0["embedding"] == md.vocab * md.hidden // 2 and parts0["output"] == 0
    assert parts3["output"] == md.vocab * md.hidden // 2 and parts3["embedding"] == 0


def test_params_on_rank_zero3_chunks(check_spec):
    plan0 = train_plan(check_spec, "dp = 8", zero=0)
    plan3 = train_plan(check_spec, "dp = 8", zero=3)
    full = cm.params_on_rank(plan0, 0)
    assert full == cm.param_count(plan0.model)
    shards = [cm.params_on_rank(plan3, r) for r in range(8)]
    assert sum(shards) == full                       # torch.chunk partitions every tensor
    assert shards[0] == max(shards)                  # the first chunk is the largest
    assert cm.estimate(plan3).memory.weights == shards[0] * 2


def test_params_on_rank_zero3_shards_over_dp_and_cp(check_spec):
    # the cp ranks of a model copy shard its ZeRO-3 state with the dp ranks: 8 shards, one per GPU
    plan0 = train_plan(check_spec, "dp = 2\n  cp = 4", zero=0)
    plan3 = train_plan(check_spec, "dp = 2\n  cp = 4", zero=3)
    full = cm.params_on_rank(plan0, 0)
    shards = [cm.params_on_rank(plan3, r) for r in range(8)]
    assert sum(shards) == full
    assert shards[0] == max(shards) < full / 7
    assert cm.shard_groups(2, 4, 1, 1, 1) == (8, 8)


def test_params_on_rank_tied_and_learned(check_spec):
    m = 'layers = 4\n  hidden = 256\n  ffn_hidden = 1024\n  heads = 8\n  vocab = 1000\n  seq_len = 128\n' \
        '  tied_embeddings = true\n  position = learned\n  mlp = gelu\n  norm = layernorm\n  bias = true'
    one = train_plan(check_spec, "dp = 8", zero=0, model=m)
    assert cm.params_on_rank(one, 0) == cm.param_count(one.model)
    two = train_plan(check_spec, "pp = 2\n  dp = 4", zero=0, model=m)
    # with pp > 1 the last stage keeps its own copy of the tied embedding
    assert cm.params_on_rank(two, 0) + cm.params_on_rank(two, 4) == cm.param_count(one.model) + 1000 * 256
    assert cm.params_by_part(two, 0)["embedding"] == (1000 + 128) * 256


def test_params_on_rank_experts(check_spec):
    m = 'from = mixtral_8x7b\n  seq_len = 4096'
    plan = train_plan(check_spec, "dp = 4\n  tp = 2", zero=0, model=m, extra_mesh="\n  ep = 4\n  etp = 2")
    md = plan.model
    parts = cm.params_by_part(plan, 0)
    assert parts["experts"] == md.layers * (md.experts // 4) * 3 * md.hidden * md.moe_ffn_hidden // 2
    assert parts["router"] == md.layers * md.experts * md.hidden
    # zero 3 shards experts over the expert-data-parallel group, here 8/(4·2) = 1: unchanged
    plan3 = train_plan(check_spec, "dp = 4\n  tp = 2", zero=3, model=m, extra_mesh="\n  ep = 4\n  etp = 2")
    assert cm.params_by_part(plan3, 0)["experts"] == parts["experts"]
    assert cm.params_by_part(plan3, 0)["attention"] < parts["attention"]


def test_virtual_and_v_placement(check_spec):
    m = 'from = llama3_8b'
    loop = train_plan(check_spec, "pp = 4\n  dp = 2", pipe="interleaved_1f1b", v=2, model=m)
    lay = cm.stage_layouts(loop)
    assert [x.chunks for x in lay] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert lay[0].embedding and lay[3].head and not lay[0].head
    vee = train_plan(check_spec, "pp = 4\n  dp = 2", pipe="dualpipe_v", v=2, model=m)
    lay = cm.stage_layouts(vee)
    assert [x.chunks for x in lay] == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert lay[0].embedding and lay[0].head


def test_uneven_split_moves_memory(check_spec):
    plan = train_plan(check_spec, "pp = 4\n  dp = 2", zero=1)
    plan = replace(plan, placement=replace(plan.placement, layers=[5, 9, 9, 9], layers_mode="explicit"))
    e = cm.estimate(plan)
    assert [s.layers for s in e.stages] == [5, 9, 9, 9]
    assert e.stages[0].params < e.stages[1].params


def test_train_estimate_json(check_spec):
    plan = train_plan(check_spec, "pp = 2\n  dp = 2\n  tp = 2", nodes=1, gpus=8, zero=1)
    e = cm.estimate(plan)
    j = e.to_json()
    for key in ("world_size", "mesh", "params", "microbatches", "bubble_fraction", "inflight_microbatches",
                "memory_per_gpu", "activation_bytes_per_layer", "kv_cache", "comm_per_step",
                "tokens_per_step", "model_flops_per_step", "step_time", "mfu"):
        assert key in j
    assert j["mesh"] == {"order": ["pp", "dp", "cp", "tp"], "pp": 2, "dp": 2, "cp": 1, "tp": 2, "ep": 1,
                         "etp": 1}
    assert j["world_size"] == 8 and j["microbatches"] == 32
    assert j["bubble_fraction"] == pytest.approx(1 / 33)
    assert j["inflight_microbatches"] in (2, 1)
    mem = j["memory_per_gpu"]
    assert mem["total"] == pytest.approx(sum(mem[k] for k in (
        "weights", "grads", "optimizer", "activations", "kv_cache", "fp8_weights", "cuda_context", "nccl_buffers",
        "fragmentation")), abs=8)
    assert mem["capacity"] == plan.cluster.gpu.memory
    assert j["tokens_per_step"] == 64 * plan.model.seq_len
    assert j["comm_per_step"]["tp"] > 0 and j["comm_per_step"]["cp"] == 0
    assert j["comm_link"]["tp"] == "intra_node"
    assert 0 < j["mfu"] < cm.DEFAULT_EFFICIENCY
    assert j["step_time"] > j["compute_time"] > 0
    assert j["tokens_per_second"] == pytest.approx(j["tokens_per_step"] / j["step_time"])


def test_assumed_ethernet_between_nodes(check_spec):
    plan = train_plan(check_spec, "dp = 16", nodes=2, zero=1)
    e = cm.estimate(plan)
    assert e.assumed_inter_node and e.comm_link["dp"] == "inter_node"
    assert e.link_bandwidth["inter_node"] == 12.5e9
    assert any("100Gb/s" in n for n in e.notes)


def test_more_zero_means_less_memory(check_spec):
    mems = [cm.estimate(train_plan(check_spec, "dp = 8", zero=z)).memory for z in range(4)]
    totals = [m.weights + m.grads + m.optimizer for m in mems]
    assert totals[0] > totals[1] > totals[2] > totals[3]
    assert mems[0].activations == mems[3].activations


def test_recompute_orders_activations(check_spec):
    plan = train_plan(check_spec, "dp = 8", zero=1)
    acts = []
    for rc in ("none", "selective", "full"):
        p2 = replace(plan, train=replace(plan.train, recompute=rc))
        acts.append(cm.estimate(p2).memory.activations)
    assert acts[0] == acts[1] > acts[2]          # flash attention: selective saves nothing more
