#| source: https://github.com/vllm-project/recipes/blob/8959cf64189c71d36e11c6a30335f923f261b1f7/DeepSeek/DeepSeek-V3.md
#| repository: vllm-project/recipes, path: DeepSeek/DeepSeek-V3.md, commit: 8959cf64189c71d36e11c6a30335f923f261b1f7
#| part: the code block of "Data Parallel + Expert Parallel (DP8+EP) — CUDA" under "8xH200 / 8xMI300X (FP8)"
#| sha256: 4df8789552bbde314fb7222f169349099e597a4448183644ccb9d8f50c62eb30
#| below this header: the text as published, unedited
vllm serve deepseek-ai/DeepSeek-R1-0528 \
  --trust-remote-code \
  --data-parallel-size 8 \
  --enable-expert-parallel
