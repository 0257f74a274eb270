"""The training model's terms that the accuracy table rests on, each through the command that shows
it: flash attention in explain's memory, a GPU block without HBM bandwidth."""
from __future__ import annotations

import json

from parc.cli.main import main

GPT_22B = """model "gpt-22b" {{
  layers = 48
  hidden = 6144
  ffn_hidden = 24576
  heads = 64
  kv_heads = 64
  vocab = 51200
  seq_len = 2048
  mlp = gelu
  norm = layernorm
  position = learned
  bias = true
  tied_embeddings = true
}}
cluster "selene" {{
  nodes = 1
  gpus_per_node = 8
  gpu = a100_sxm_80gb
  intra_node = nvlink(300GB/s)
}}
mesh {{ tp = 8 }}
schedule {{
  micro_batch = 1
  global_batch = 1
}}
train {{
  flash_attention = {flash}
}}
"""


def _explain(capsys, tmp_path, name: str, text: str) -> dict:
    path = tmp_path / f"{name}.par"
    path.write_text(text)
    rc = main(["explain", str(path), "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_unfused_attention_stores_its_scores_in_explains_memory(capsys, tmp_path):
    # Korthikanti et al. 2022 Table 2, tensor parallel without recompute: sbh(10 + 24/t + 5as/(ht)).
    # The flash kernel never writes the scores, so the difference is 5·a·s²·b/t per layer:
    # 5 · 64 · 2048² · 1 / 8 = 167,772,160 bytes, × 48 layers on the one stage.
    fused = _explain(capsys, tmp_path, "fused", GPT_22B.format(flash="true"))
    unfused = _explain(capsys, tmp_path, "unfused", GPT_22B.format(flash="false"))
    per_layer = 5 * 64 * 2048 ** 2 * 1 / 8
    assert unfused["activation_bytes_per_layer"] - fused["activation_bytes_per_layer"] == per_layer
    grown = unfused["memory_per_gpu"]["activations"] - fused["memory_per_gpu"]["activations"]
    assert grown == 48 * per_layer


BOX = """model "m" {{ from = llama3_8b }}
cluster "box" {{
  nodes = 1
  gpus_per_node = 8
  gpu {{
    {gpu}
  }}
}}
mesh {{ dp = 8 }}
schedule {{
  micro_batch = 1
  global_batch = 8
}}
train {{
  zero = 3
  recompute = full
}}
"""


def _check(tmp_path, gpu: str):
    from parc.api import check_file

    path = tmp_path / "box.par"
    path.write_text(BOX.format(gpu=gpu))
    return check_file(path, root=tmp_path)


def test_a_gpu_block_without_hbm_bandwidth_is_an_error_not_zero_seconds(tmp_path):
    r = _check(tmp_path, "memory = 80GB\n    flops = 989TFLOPS")
    got = [d for d in r.diagnostics if d.code == "P033"]
    assert len(got) == 1 and got[0].severity == "error" and got[0].span.line == 5
    assert "hbm_bandwidth" in got[0].message and "hbm_bandwidth = " in got[0].help
    assert r.plan is None or not r.ok
    # the help's fix passes, and every memory-bound cost then takes time
    fixed = _check(tmp_path, "memory = 80GB\n    flops = 989TFLOPS\n    hbm_bandwidth = 3.35TB/s")
    assert fixed.ok and fixed.plan.cluster.gpu.hbm_bandwidth == 3.35e12


def test_a_gpu_block_from_a_preset_takes_the_presets_hbm_bandwidth(tmp_path):
    r = _check(tmp_path, "from = h100_sxm\n    memory = 96GB")
    assert r.ok and not [d for d in r.diagnostics if d.code == "P033"]
    assert r.plan.cluster.gpu.hbm_bandwidth == 3350e9
