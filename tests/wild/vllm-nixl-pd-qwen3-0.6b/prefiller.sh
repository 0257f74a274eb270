#| source: https://github.com/vllm-project/vllm/blob/029e67cd28a384cbe019ce4427b26d93028ae7d3/docs/features/nixl_connector_usage.md
#| repository: vllm-project/vllm, path: docs/features/nixl_connector_usage.md, commit: 029e67cd28a384cbe019ce4427b26d93028ae7d3
#| part: the code block of "Producer (Prefiller) Configuration" under "Basic Usage (on the same host)"
#| sha256: d162ba0cd4a93f587056aa28d7f2de64fae6e4395ae64e007c830bf4f0688382
#| below this header: the text as published, unedited
# 1st GPU as prefiller
CUDA_VISIBLE_DEVICES=0 \
UCX_NET_DEVICES=all \
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 \
vllm serve Qwen/Qwen3-0.6B \
  --port 8100 \
  --enforce-eager \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"fail"}'
