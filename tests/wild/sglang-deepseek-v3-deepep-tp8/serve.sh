#| source: https://github.com/sgl-project/sglang/blob/03f83cae7dd5fdd20f2f53a244e6320167700804/docs/advanced_features/expert_parallelism.md
#| repository: sgl-project/sglang, path: docs/advanced_features/expert_parallelism.md, commit: 03f83cae7dd5fdd20f2f53a244e6320167700804
#| part: the code block under "Examples" ("Launch with DeepEP and DeepGEMM for DeepSeek-V3")
#| sha256: 77f2c02408f92ff16a9eaa5097c3e93cebd1ecb8b6790c0f364c2338bd4cbc5d
#| below this header: the text as published, unedited
python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --moe-a2a-backend deepep --moe-runner-backend deep_gemm --tp 8 --ep 8
