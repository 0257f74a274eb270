#| source: https://github.com/vllm-project/vllm/blob/029e67cd28a384cbe019ce4427b26d93028ae7d3/docs/features/nixl_connector_usage.md
#| repository: vllm-project/vllm, path: docs/features/nixl_connector_usage.md, commit: 029e67cd28a384cbe019ce4427b26d93028ae7d3
#| part: the code block of "Consumer (Decoder) Configuration" under "Basic Usage (on the same host)"
#| sha256: 0c8855f0727e268c15c60fbfea2c3954f62f776de74e62fefb595d06d572cbf1
#| below this header: the text as published, unedited
# 2nd GPU as decoder
CUDA_VISIBLE_DEVICES=1 \
UCX_NET_DEVICES=all \
VLLM_NIXL_SIDE_CHANNEL_PORT=5601 \
vllm serve Qwen/Qwen3-0.6B \
  --port 8200 \
  --enforce-eager \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"fail"}'
