#| source: https://github.com/sgl-project/sglang/blob/cccb65463e6cd3fcb1af70f8c536e7b61c4eb68c/docs/advanced_features/pd_disaggregation.md
#| repository: sgl-project/sglang, path: docs/advanced_features/pd_disaggregation.md, commit: cccb65463e6cd3fcb1af70f8c536e7b61c4eb68c
#| part: the code block of "Llama Single Node" under "Mooncake"
#| sha256: 0753dace19a61ae8f3cb6039a2d58c907367728d8c2a4ec572979be7a889710e
#| below this header: the text as published, unedited
python -m sglang.launch_server \
  --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill \
  --port 30000 \
  --disaggregation-ib-device mlx5_roce0
python -m sglang.launch_server \
  --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode \
  --port 30001 \
  --base-gpu-id 1 \
  --disaggregation-ib-device mlx5_roce0
python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30001 --host 0.0.0.0 --port 8000
