#| source: https://github.com/vllm-project/vllm/blob/029e67cd28a384cbe019ce4427b26d93028ae7d3/docs/features/nixl_connector_usage.md
#| repository: vllm-project/vllm, path: docs/features/nixl_connector_usage.md, commit: 029e67cd28a384cbe019ce4427b26d93028ae7d3
#| part: the code block of "Proxy Server" under "Basic Usage (on the same host)"
#| sha256: 13c9c2e1a553ff914f0c4dce62eb004f8112048c3e17f9d474df2368edf972f0
#| below this header: the text as published, unedited
python tests/v1/kv_connector/nixl_integration/toy_proxy_server.py \
  --port 8192 \
  --prefiller-hosts localhost \
  --prefiller-ports 8100 \
  --decoder-hosts localhost \
  --decoder-ports 8200
