#| source: https://github.com/sgl-project/sglang/blob/17d660222cc2abd8f96ddb204d739ac468322985/benchmark/deepseek_v3/README.md
#| repository: sgl-project/sglang, path: benchmark/deepseek_v3/README.md, commit: 17d660222cc2abd8f96ddb204d739ac468322985
#| part: the second code block of "Example: Serving with two H200*8 nodes and docker"
#| sha256: 9dd3b9b316463f135b5a2babb62f0b953ac96a983e1db16d8ea64e23ff3ac6d2
#| below this header: the text as published, unedited
# node 2
docker run --gpus all \
    --shm-size 32g \
    --network=host \
    -v ~/.cache/huggingface:/root/.cache/huggingface \
    --name sglang_multinode2 \
    -it \
    --rm \
    --env "HF_TOKEN=$HF_TOKEN" \
    --ipc=host \
    lmsysorg/sglang:latest \
    python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dist-init-addr 192.168.114.10:20000 --nnodes 2 --node-rank 1 --trust-remote-code --host 0.0.0.0 --port 40000
