"""The quantization_config each checkpoint format's config.json carries, as the published
checkpoints write them (DeepSeek-V3's README_WEIGHTS.md for fp8_block; NVIDIA ModelOpt's
quant_algo; FBGEMM's, llm-compressor's and gpt-oss's quant_method), for the judges that read a
model folder with the engine's own ModelConfig."""
from __future__ import annotations

import json
from pathlib import Path

QUANT_CONFIGS = {
    "fp8_block": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    "modelopt_fp8": {"quant_method": "modelopt", "quant_algo": "FP8"},
    "fbgemm_fp8": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]},
    "compressed_tensors_fp8": {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
                               "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                   "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                                   "dynamic": False}, "input_activations": {"num_bits": 8, "type": "float",
                                                                            "strategy": "token", "dynamic": True,
                                                                            "symmetric": True}}}},
    "mxfp4": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]},
    "nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
}


def add_to_config(folder, **keys) -> str:
    """The model folder with ``keys`` added to its config.json (a quantization_config, a changed
    field); returns the folder."""
    path = Path(folder) / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **keys}))
    return str(folder)


def quantization_cases(check_spec, target: str, formats, make_folder) -> list[tuple]:
    """(format, extra args, refused by parc's P619, plan, model folder) for each format, with and
    without an extra ``--quantization fp8``: Llama 3 8B served by ``target`` from the folder
    ``make_folder(plan, name)`` makes, its config.json carrying the format's quantization_config."""
    from support.specs import spec

    out = []
    for fmt in formats:
        for extra in ("", '; extra_args = ["--quantization", "fp8"]'):
            r = check_spec(spec(f"from = llama3_8b; checkpoint_format = {fmt}", mesh="tp = 8",
                                serve="max_model_len = 4096", target={target: 'model = "m"' + extra}), (target,))
            folder = add_to_config(make_folder(r.plan, f"{fmt}{len(extra)}"), quantization_config=QUANT_CONFIGS[fmt])
            out.append((fmt, extra, "P619" in {d.code for d in r.errors}, r.plan, folder))
    return out
