"""What the tests that ask SGLang itself share (tests/test_sglang_judge.py, and
tests/test_lws_judge.py for the pods of a LeaderWorkerSet that runs SGLang): the judge's process,
and the local model folder SGLang reads instead of the Hub."""
from __future__ import annotations

import json
from pathlib import Path

from support import judges

MARK = "@@sglang-judge "


def start(tmp_path_factory):
    """One sglang_judge.py process (tests/judges/sglang_judge.py) for a test module."""
    return judges.start("sglang", "PARC_SGLANG_PYTHON", tmp_path_factory.mktemp("judge") / "stderr", 1500)


def ask(proc, items: list) -> list[dict]:
    """SGLang's verdicts on ``{"server": argv}`` and ``{"router": argv}`` items."""
    return judges.ask(proc, MARK, items)


def model_folder(model, path: Path) -> str:
    """A local model folder SGLang's ModelConfig reads without the Hub: the spec's model (as
    plan.json has it) as a Llama-style (Mixtral-style with experts) config.json, no weights."""
    cfg = {"architectures": ["MixtralForCausalLM" if model["experts"] else "LlamaForCausalLM"],
           "model_type": "mixtral" if model["experts"] else "llama", "hidden_size": model["hidden"],
           "intermediate_size": model["moe_ffn_hidden"] or model["ffn_hidden"],
           "num_attention_heads": model["heads"], "num_key_value_heads": model["kv_heads"],
           "num_hidden_layers": model["layers"], "vocab_size": model["vocab"],
           "max_position_embeddings": model["max_positions"] or model["seq_len"], "torch_dtype": "bfloat16",
           "rms_norm_eps": 1e-5, "rope_theta": float(model["rope_theta"]), "tie_word_embeddings": False}
    if model["experts"]:
        cfg.update(num_local_experts=model["experts"], num_experts_per_tok=model["top_k"])
    if model.get("rope_scaling", "none") != "none":   # as a Hugging Face config.json writes it
        cfg["rope_scaling"] = {"rope_type": model["rope_scaling"], "factor": model["rope_factor"],
                               **({"original_max_position_embeddings": model["rope_original_positions"]}
                                  if model.get("rope_original_positions") else {}),
                               **({"low_freq_factor": 1.0, "high_freq_factor": 4.0}
                                  if model["rope_scaling"] == "llama3" else {})}
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def with_model(argv: list[str], folder: str) -> list[str]:
    """``argv`` with the model folder as its ``--model-path``."""
    i = argv.index("--model-path")
    return argv[:i + 1] + [folder] + argv[i + 2:]
