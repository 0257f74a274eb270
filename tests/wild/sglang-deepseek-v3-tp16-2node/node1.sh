#| source: https://github.com/sgl-project/sglang/blob/17d660222cc2abd8f96ddb204d739ac468322985/benchmark/deepseek_v3/README.md
#| repository: sgl-project/sglang, path: benchmark/deepseek_v3/README.md, commit: 17d660222cc2abd8f96ddb204d739ac468322985
#| part: the first code block of "Example: Serving with two H200*8 nodes and docker"
#| sha256: a85fdca6c4c1ec30d1396e76bcb96e5ce288223a6c9e059016c08db61b744f1f
#| below this header: the text as published, unedited
# node 1
docker run --gpus all \
    --shm-size 32g \
    --network=host \
    -v ~/.cache/huggingface:/root/.cache/huggingface \
    --name sglang_multinode1 \
    -it \
    --rm \
    --env "HF_TOKEN=$HF_TOKEN" \
    --ipc=host \
    lmsysorg/sglang:latest \
    python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dist-init-addr 192.168.114.10:20000 --nnodes 2 --node-rank 0 --trust-remote-code --host 0.0.0.0 --port 40000
