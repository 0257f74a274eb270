#| source: https://github.com/vllm-project/recipes/blob/8959cf64189c71d36e11c6a30335f923f261b1f7/OpenAI/GPT-OSS.md
#| repository: vllm-project/recipes, path: OpenAI/GPT-OSS.md, commit: 8959cf64189c71d36e11c6a30335f923f261b1f7
#| part: the code block of the A100 section (serve commands for gpt-oss-20b and gpt-oss-120b)
#| sha256: 59f063f2309cf1ef561fa648ee3fea92e28e9444c058bec31eee7454dcc8bfb1
#| below this header: the text as published, unedited
# openai/gpt-oss-20b should run on a single A100
vllm serve openai/gpt-oss-20b

# gpt-oss-120b will fit on a single A100 (80GB), but scaling it to higher TP sizes can help with throughput
vllm serve openai/gpt-oss-120b
vllm serve openai/gpt-oss-120b --tensor-parallel-size 2
vllm serve openai/gpt-oss-120b --tensor-parallel-size 4
