"""P1xx mesh divisibility: each rule fires on one spec and not on the same spec made valid.

``spec(...)`` and the fire/quiet helpers live in tests/support/specs.py, shared by every rule test.
"""
from __future__ import annotations

import pytest

from parc.cost import estimate as cm
from support.specs import assert_fires, assert_quiet, spec

SERVE = "max_model_len = 4096"
L70 = "from = llama3_70b"


# ------------------------------------------------------------------------------ P101

def test_p101_mesh_larger_than_cluster(check_spec):
    bad = spec(L70, nodes=2, mesh="pp = 4; tp = 8", serve=SERVE)
    d = assert_fires(check_spec, bad, "P101", "pp = 4")
    assert "needs 32 GPUs" in d.message and "has 16" in d.message
    assert "nodes = 4" in d.help and "pp = 2" in d.help
    assert_quiet(check_spec, spec(L70, nodes=4, mesh="pp = 4; tp = 8", serve=SERVE), "P101")


def test_p101_auto_axis_not_whole(check_spec):
    bad = spec(nodes=1, gpn=12, mesh="dp = auto; tp = 8", serve=SERVE)
    d = assert_fires(check_spec, bad, "P101", "dp = auto")
    assert "no whole value" in d.message and "tp" in d.help
    assert_quiet(check_spec, spec(nodes=1, gpn=12, mesh="dp = auto; tp = 4", serve=SERVE), "P101")


def test_p101_stops_later_families(check_spec):
    r = check_spec(spec(nodes=2, mesh="pp = 4; tp = 8", schedule="micro_batch = 1; global_batch = 3"))
    assert {d.code[:2] for d in r.errors} == {"P1"}


# ------------------------------------------------------------------------------ P102, P103, P106

def test_p102_heads_with_alternatives(check_spec):
    bad = spec(L70, nodes=2, gpn=6, mesh="dp = 2; tp = 6", serve=SERVE)
    d = assert_fires(check_spec, bad, "P102", "tp = 6")
    assert "64 attention heads" in d.message and "nor does it split kv_heads = 8 or ffn_hidden = 28672" in d.message
    # tp = 4 divides the heads but its groups would span the nodes of 6 GPUs (P301): not offered
    assert "tp = 2 (dp = 6)" in d.help and "tp = 2 and pp = 3" in d.help and "tp = 4" not in d.help
    # one mistake, one error: the KV-head and MLP rules stay quiet while heads fail
    r = check_spec(bad)
    assert [x.code for x in r.errors] == ["P102"]
    assert_quiet(check_spec, spec(L70, nodes=2, gpn=6, mesh="dp = 3; tp = 4", serve=SERVE), "P102")


def test_p103_kv_heads_neither_split_nor_replicated(check_spec):
    model = "layers = 32; hidden = 4096; heads = 48; kv_heads = 8; ffn_hidden = 12288; vocab = 32000"
    bad = spec(model.replace("hidden = 4096", "hidden = 6144"), nodes=1, gpn=12, mesh="tp = 12", serve=SERVE)
    d = assert_fires(check_spec, bad, "P103", "tp = 12")
    assert "8 KV heads" in d.message and "replicate" in d.help
    ok = spec(model.replace("hidden = 4096", "hidden = 6144"), nodes=1, gpn=16, mesh="tp = 16", serve=SERVE)
    assert_quiet(check_spec, ok, "P103")


def test_p106_ffn_hidden(check_spec):
    model = "layers = 32; hidden = 4096; heads = 32; ffn_hidden = 11004; vocab = 32000"
    bad = spec(model, mesh="tp = 8", serve=SERVE)
    d = assert_fires(check_spec, bad, "P106", "tp = 8")
    assert "ffn_hidden = 11004" in d.message and "tp = 4" in d.help
    assert_quiet(check_spec, spec(model.replace("11004", "11008"), mesh="tp = 8", serve=SERVE), "P106")


# ------------------------------------------------------------------------------ P104, P105

def test_p104_layers_even_split(check_spec):
    bad = spec(nodes=3, mesh="pp = 3; tp = 8", schedule="micro_batch = 1; global_batch = 48")
    d = assert_fires(check_spec, bad, "P104", "pp = 3")
    assert "32 layers" in d.message and "layers = [" in d.help and "pp = 1 (dp = 3)" in d.help
    assert_quiet(check_spec, bad.replace("schedule {", "placement {\n  layers = balanced\n}\nschedule {"), "P104")


@pytest.mark.parametrize("split,needle", [("[8, 8, 8]", "lists 3 stages"), ("[8, 8, 8, 9]", "adds up to 33"),
                                          ("[16, 0, 8, 8]", "no layers")])
def test_p105_explicit_split(check_spec, split, needle):
    bad = spec(nodes=4, mesh="pp = 4; tp = 8", placement=f"layers = {split}",
               schedule="micro_batch = 1; global_batch = 64")
    d = assert_fires(check_spec, bad, "P105", "layers =")
    assert needle in d.message
    ok = bad.replace(split, "[7, 9, 9, 7]")
    assert_quiet(check_spec, ok, "P105")


# ------------------------------------------------------------------------------ P107, P108, P110

GPT = "layers = 24; hidden = 2048; heads = 16; ffn_hidden = 8192; vocab = 50257; mlp = gelu"


def test_p107_megatron_pads_vocab(check_spec):
    bad = spec(GPT, mesh="dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 64",
               target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    d = assert_fires(check_spec, bad, "P107", "vocab = 50257", severity="warning", target="megatron")
    assert "50432" in d.message  # ceil(50257 / 256) · 256
    assert_quiet(check_spec, bad.replace("50257", "50304"), "P107")
    # generic check without the target says nothing about padding
    assert_quiet(check_spec, bad.replace('target megatron {\n  entrypoint = "pretrain_gpt.py"\n}\n', ""), "P107")


def test_p108_torch_does_not_pad(check_spec):
    bad = spec(GPT, mesh="dp = 4; tp = 2", schedule="micro_batch = 1; global_batch = 64",
               target={"torchrun": 'entrypoint = "train.py"'})
    d = assert_fires(check_spec, bad, "P108", "tp = 2", target="torch")
    assert "50258" in d.help
    assert_quiet(check_spec, bad.replace("50257", "50304"), "P108")


def test_p110_torch_refuses_kv_replication(check_spec):
    bad = spec(nodes=1, gpn=16, mesh="tp = 16", serve=SERVE, target={"torchrun": 'entrypoint = "serve.py"'})
    d = assert_fires(check_spec, bad, "P110", "tp = 16", target="torch")
    assert "replicate" in d.message
    # vLLM replicates: no error for the same mesh
    assert_quiet(check_spec, bad.replace('target torchrun {\n  entrypoint = "serve.py"\n}',
                                         'target vllm {\n  model = "m"\n}'), "P110")
    assert_quiet(check_spec, bad.replace("tp = 16", "tp = 8; dp = 2"), "P110")


def test_p110_torchtitan_refuses_kv_replication(check_spec):
    # torchtitan's model build: tensor_parallel_degree must divide n_kv_heads (decoder.py
    # update_from_config): Llama 3's 8 KV heads with tp = 16
    bad = spec(nodes=2, gpn=8, mesh="tp = 16", schedule="micro_batch = 1; global_batch = 8",
               target={"torchtitan": ""})
    d = assert_fires(check_spec, bad, "P110", "tp = 16", target="torchtitan")
    assert "torchtitan only splits them" in d.message
    assert_quiet(check_spec, bad.replace("tp = 16", "tp = 8\n  dp = 2"), "P110")


def test_p109_torchtitan_leaves_ep_unused_on_a_dense_model(check_spec):
    tt = spec(mesh="dp = 8; ep = 2", schedule="micro_batch = 1; global_batch = 8", target={"torchtitan": ""})
    d = assert_fires(check_spec, tt, "P109", "ep = 2", severity="warning")
    assert "no effect" in d.message
    meg = spec(mesh="dp = 8; ep = 2", schedule="micro_batch = 1; global_batch = 8",
               target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    assert_fires(check_spec, meg, "P109", "ep = 2")


def test_p110_with_check_target_flag(check_spec):
    text = spec(nodes=1, gpn=16, mesh="tp = 16", serve=SERVE)
    assert_quiet(check_spec, text, "P110")
    d = assert_fires(check_spec, text, "P110", "tp = 16", target="torch", targets=("torch",))
    assert "torch" in d.message


# ------------------------------------------------------------------------------ P109, P112, P113

MOE = "from = mixtral_8x7b; seq_len = 4096"


FITS = "zero = 3; sequence_parallel = true; recompute = full"   # Mixtral's training state fits 32 H100s


def test_p109_experts_not_divisible(check_spec):
    bad = spec(MOE, nodes=4, mesh="dp = 16; tp = 2; ep = 16", schedule="micro_batch = 1; global_batch = 256",
               train=FITS)
    d = assert_fires(check_spec, bad, "P109", "ep = 16")
    assert "8 experts" in d.message and "ep = 2, 4 or 8" in d.help
    assert_quiet(check_spec, bad.replace("ep = 16", "ep = 8"), "P109")
    # with ZeRO-1 none of them fits in memory (P401): the degrees are not offered as the fix
    tight = spec(MOE, nodes=4, mesh="dp = 16; tp = 2; ep = 16", schedule="micro_batch = 1; global_batch = 256",
                 train="zero = 1; sequence_parallel = true")
    d = assert_fires(check_spec, tight, "P109", "ep = 16")
    assert d.help == "ep must divide 8 experts", d.help


def test_p109_ep_without_experts(check_spec):
    bad = spec(mesh="dp = 8; ep = 2")
    assert_fires(check_spec, bad, "P109", "ep = 2")
    assert_quiet(check_spec, spec(mesh="dp = 8"), "P109")


# SGLang's DeepSeek-V3 decode layout (its "large-scale EP" blog and docs: 9 decode nodes, dp attention
# over 72 GPUs, --ep-num-redundant-experts 32): 256 + 32 = 288 expert slots, 4 per GPU
DSV3_DECODE = dict(model="from = deepseek_v3", nodes=9, mesh="dp = 72; ep = 72",
                   serve="max_model_len = 4096; dp_attention = true; eplb = true; redundant_experts = 32",
                   target={"sglang": 'model = "deepseek-ai/DeepSeek-V3-0324"'})


def test_p109_counts_redundant_experts(check_spec):
    good = spec(**DSV3_DECODE)
    assert_quiet(check_spec, good, "P109")
    assert_quiet(check_spec, good, "P112")
    # DeepSeek's own 144-GPU decode (ep 144, 32 redundant: 288 / 144 = 2) likewise
    assert_quiet(check_spec, spec(**{**DSV3_DECODE, "nodes": 18, "mesh": "dp = 144; ep = 144"}), "P109")
    # 33 redundant copies leave 289 slots that 72 ranks cannot share: EPLB's rules say so (P125 and
    # SGLang's own P628), not P109 a third time
    bad = good.replace("redundant_experts = 32", "redundant_experts = 33")
    r = check_spec(bad)
    assert {"P125", "P628"} <= {d.code for d in r.errors} and "P109" not in {d.code for d in r.errors}
    # without the redundant copies 256 experts do not divide over 72 ranks
    assert_fires(check_spec, good.replace("redundant_experts = 32", "redundant_experts = 0"), "P109", "ep = 72")


def test_p112_expert_grid(check_spec):
    bad = spec(MOE, nodes=4, mesh="dp = 16; tp = 2; ep = 8; etp = 8", schedule="micro_batch = 1; global_batch = 256",
               train=FITS)
    d = assert_fires(check_spec, bad, "P112", "ep = 8")
    assert "ep · etp = 8 · 8 = 64" in d.message and "dp · cp · tp = 16 · 1 · 2 = 32" in d.message
    assert "ep = 2 or 4 with etp = 8" in d.help and "etp = 1, 2 or 4 with ep = 8" in d.help
    assert_quiet(check_spec, bad.replace("ep = 8", "ep = 4"), "P112")
    # on one node none of them fits in memory (P401): no grid is offered
    small = spec(MOE, nodes=1, mesh="dp = 4; tp = 2; ep = 8; etp = 2", schedule="micro_batch = 1; global_batch = 64",
                 train="zero = 1; sequence_parallel = true")
    d = assert_fires(check_spec, small, "P112", "ep = 8")
    assert d.help == "ep · etp must divide dp · cp · tp = 8", d.help


def test_p113_moe_ffn_etp(check_spec):
    model = MOE + "; moe_ffn_hidden = 14002"
    bad = spec(model, nodes=1, mesh="dp = 8; ep = 2; etp = 4", schedule="micro_batch = 1; global_batch = 64")
    d = assert_fires(check_spec, bad, "P113", "etp = 4")
    assert "14002" in d.message and "etp = 1 or 2" in d.help
    assert_quiet(check_spec, bad.replace("moe_ffn_hidden = 14002", "moe_ffn_hidden = 14336"), "P113")


# ------------------------------------------------------------------------------ P111

def test_p111_hidden_heads(check_spec):
    model = "layers = 8; hidden = 1000; heads = 16; ffn_hidden = 4096; vocab = 32000"
    bad = spec(model, serve=SERVE)
    d = assert_fires(check_spec, bad, "P111", "hidden = 1000")
    assert "head_dim" in d.help
    assert_quiet(check_spec, spec(model + "; head_dim = 64", serve=SERVE), "P111")


# ------------------------------------------------------------------------------ P114, P115

def test_p114_seq_len_cp(check_spec):
    bad = spec("from = llama3_8b; seq_len = 8190", mesh="dp = 4; cp = 2", schedule="micro_batch = 1; global_batch = 64")
    d = assert_fires(check_spec, bad, "P114", "seq_len = 8190")
    assert "2 · cp = 4" in d.message and "8188" in d.help and "8192" in d.help
    assert_quiet(check_spec, bad.replace("8190", "8192"), "P114")


def test_p115_seq_len_tp_with_sp(check_spec):
    bad = spec("from = llama3_8b; seq_len = 4100", mesh="dp = 1; tp = 8",
               schedule="micro_batch = 1; global_batch = 8", train="zero = 1; sequence_parallel = true")
    d = assert_fires(check_spec, bad, "P115", "seq_len = 4100")
    assert "4096" in d.help and "First dimension" in d.message
    assert_quiet(check_spec, bad.replace("4100", "4096"), "P115")
    assert_quiet(check_spec, bad.replace("sequence_parallel = true", "sequence_parallel = false"), "P115")


def test_p115_counts_cp(check_spec):
    bad = spec("from = llama3_8b; seq_len = 8196", mesh="cp = 2; tp = 4",
               schedule="micro_batch = 1; global_batch = 8", train="zero = 1; sequence_parallel = true")
    d = assert_fires(check_spec, bad, "P115", "seq_len = 8196")
    assert "seq_len / cp = 8196 / 2 = 4098" in d.message
    assert_quiet(check_spec, bad.replace("8196", "8192"), "P115")


def test_p116_deepspeed_vocab_alignment(check_spec):
    text = spec(GPT, mesh="dp = 8", schedule="micro_batch = 1; global_batch = 64")
    assert_quiet(check_spec, text, "P116")
    d = assert_fires(check_spec, text, "P116", "vocab = 50257", severity="warning", target="deepspeed",
                     targets=("deepspeed",))
    assert "50264" in d.help
    assert_quiet(check_spec, text.replace("50257", "50304"), "P116", targets=("deepspeed",))


def test_p104_vllm_splits_unevenly_by_itself(check_spec):
    text = spec("from = llama3_405b", nodes=4, mesh="pp = 4; tp = 8", serve=SERVE,
                target={"vllm": 'model = "meta-llama/Llama-3.1-405B-Instruct"'})
    assert_quiet(check_spec, text, "P104")
    # asked for `even`, or without the vllm target, the split must divide
    assert_fires(check_spec, text.replace("serve {", "placement {\n  layers = even\n}\nserve {"), "P104", "layers = even")
    assert_fires(check_spec, spec("from = llama3_405b", nodes=4, mesh="pp = 4; tp = 8", serve=SERVE), "P104", "pp = 4")


def test_p104_each_engine_splits_uneven_layers_its_own_way(check_spec):
    # DeepSeek-V3's 61 layers over pp = 4: vLLM gives the remainder to the stages before the last,
    # SGLang to the last ones (their get_pp_indices); memory and explain read that split
    for engine, want in (("vllm", [15, 15, 16, 15]), ("sglang", [15, 15, 15, 16])):
        text = spec("from = deepseek_v3", nodes=4, gpn=8, mesh="pp = 4; tp = 8", serve=SERVE,
                    target={engine: 'model = "deepseek-ai/DeepSeek-V3"'})
        r = assert_quiet(check_spec, text, "P104")
        assert r.plan.placement.layers == want, engine
        assert [st.layers for st in cm.estimate(r.plan).stages] == want
    # named on the command line instead of in the spec: the same split
    text = spec("from = deepseek_v3", nodes=4, gpn=8, mesh="pp = 4; tp = 8", serve=SERVE)
    r = assert_quiet(check_spec, text, "P104", targets=("sglang",))
    assert r.plan.placement.layers == [15, 15, 15, 16]


def test_p104_torchtitan_splits_uneven_layers_itself(check_spec):
    # torchtitan counts the embedding and the head as a layer each: 32 + 2 over 3 stages is 12, 11,
    # 11, less one at each end (_generate_llm_fqn_per_model_part)
    train = dict(mesh="pp = 3", gpn=3, schedule="micro_batch = 1; global_batch = 6", train="zero = 1")
    text = spec(**train, target={"torchtitan": ""})
    r = assert_quiet(check_spec, text, "P104")
    assert r.plan.placement.layers == [11, 11, 10]
    # Megatron-LM refuses the same count (validate_args), so a spec for both is refused
    both = spec(**train, target={"torchtitan": "", "megatron": 'entrypoint = "pretrain_gpt.py"'})
    d = assert_fires(check_spec, both, "P104", "pp = 3")
    assert "Megatron-LM refuses it, though torchtitan would split it" in d.message
    # torchtitan itself refuses a stage with less than one of the layers + 2: 4 layers on 8 stages
    tiny = spec("from = llama3_8b; layers = 4", mesh="pp = 8", schedule="micro_batch = 1; global_batch = 8",
                target={"torchtitan": ""})
    assert_fires(check_spec, tiny, "P104", "pp = 8")


def test_p127_names_the_empty_stage(check_spec):
    # 2 layers on 4 pipeline stages: vLLM's split [0, 1, 1, 0] leaves two stages empty, which used to
    # read as a KV cache of 0 tokens next to the whole GPU free
    text = spec("from = llama3_8b; layers = 2", nodes=4, gpn=8, mesh="pp = 4; tp = 8", serve=SERVE,
                target={"vllm": 'model = "m"'})
    d = assert_fires(check_spec, text, "P127", "pp = 4")
    assert "stages 0 and 3 of 4" in d.message and "[0, 1, 1, 0]" in d.message and "one KV block" in d.message
    assert "pp = 2 (dp = 2)" in d.help
    r = check_spec(text)
    assert not [x for x in r.diagnostics if x.code == "P403"]
    assert cm.estimate(r.plan).kv_capacity_tokens > 0
    # SGLang's split [0, 0, 1, 1]
    d = assert_fires(check_spec, text.replace("target vllm", "target sglang"), "P127", "pp = 4")
    assert "stages 0 and 1 of 4" in d.message and "[0, 0, 1, 1]" in d.message
    assert_quiet(check_spec, text.replace("pp = 4\n", "pp = 2\n  dp = 2\n"), "P127")
    # where the spec writes dp, the help's sizes come as fixes (lint --fix, editors)
    d = assert_fires(check_spec, text.replace("pp = 4\n", "pp = 4\n  dp = 1\n"), "P127", "pp = 4")
    assert "set `pp = 2` and `dp = 2`" in [f.message for f in d.fixes]


def test_p128_vllm_and_sglang_split_the_padded_vocabulary(check_spec):
    # 48 heads split over tp = 6, but vLLM pads a 32,000-token vocabulary to 32,000 (a multiple of
    # 64) and 32,000 rows do not divide over 6 GPUs (VocabParallelEmbedding's divide)
    model = "from = llama3_8b; vocab = 32000; heads = 48; kv_heads = 48; hidden = 6144; ffn_hidden = 16896"
    text = spec(model, gpn=6, mesh="tp = 6", serve=SERVE, target={"vllm": 'model = "m"'})
    d = assert_fires(check_spec, text, "P128", "tp = 6", target="vllm")
    assert "32000 is not divisible by 6" in d.message and "tp = 2" in d.help
    assert_fires(check_spec, text.replace("target vllm", "target sglang"), "P128", "tp = 6", target="sglang")
    # 32,064 rows (Phi-3's vocabulary, already a multiple of 64) split over 6 GPUs: 5,344 each
    assert_quiet(check_spec, text.replace("vocab = 32000", "vocab = 32064"), "P128")
    # 32,001 pads to 32,064
    assert_quiet(check_spec, text.replace("vocab = 32000", "vocab = 32001"), "P128")


def test_p109_vllm_spreads_experts_unevenly(check_spec):
    # vLLM's determine_expert_map gives the first experts % ep ranks one expert more: a warning
    # stating the imbalance; Megatron-LM and the torch runtime refuse the same split
    serve = spec("from = deepseek_moe_16b", gpn=6, mesh="dp = 3; tp = 2; ep = 6", serve=SERVE,
                 target={"vllm": 'model = "deepseek-ai/deepseek-moe-16b-chat"'})
    d = assert_fires(check_spec, serve, "P109", "ep = 6", severity="warning", target="vllm")
    assert "4 ranks hold 11 experts and 2 hold 10" in d.message
    assert "11 of 64" in d.message and "1.03×" in d.message
    assert not check_spec(serve).errors
    # the torch runtime (torchrun) refuses it, whatever vLLM does
    both = serve.replace("target vllm {", 'target torchrun {\n  entrypoint = "serve.py"\n}\ntarget vllm {')
    d = assert_fires(check_spec, both, "P109", "ep = 6")
    assert "refuses it" in d.message
    train = spec("from = deepseek_moe_16b", gpn=6, mesh="dp = 3; tp = 2; ep = 6",
                 schedule="micro_batch = 1; global_batch = 6",
                 target={"megatron": 'entrypoint = "pretrain_gpt.py"'})
    d = assert_fires(check_spec, train, "P109", "ep = 6")
    assert "Megatron-LM refuses it" in d.message
