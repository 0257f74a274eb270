#| source: https://github.com/vllm-project/recipes/blob/8959cf64189c71d36e11c6a30335f923f261b1f7/Qwen/Qwen3.md
#| repository: vllm-project/recipes, path: Qwen/Qwen3.md, commit: 8959cf64189c71d36e11c6a30335f923f261b1f7
#| part: the code block under "BF16" of "Step 2: Start the vLLM server" (AMD MI300X/MI325X/MI355X)
#| sha256: 349ad93293049e20032a7b138f41f1141ee13bb59337a3400ece58af880b5d4c
#| below this header: the text as published, unedited
HIP_VISIBLE_DEVICES="4,5,6,7" \
VLLM_USE_V1=1 \
VLLM_ROCM_USE_AITER=1 \
VLLM_ROCM_USE_AITER_MHA=0 \
VLLM_V1_USE_PREFILL_DECODE_ATTENTION=1 \
VLLM_USE_TRITON_FLASH_ATTN=0 \
SAFETENSORS_FAST_GPU=1  \
vllm serve Qwen/Qwen3-235B-A22B \
--trust-remote-code \
-tp 4 \
--disable-log-requests \
--swap-space 32 \
--distributed-executor-backend mp \
--max-num-batched-tokens 32768 \
--max-model-len 32768 \
--no-enable-prefix-caching \
--gpu-memory-utilization 0.8
