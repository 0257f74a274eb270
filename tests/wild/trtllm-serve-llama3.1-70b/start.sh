#| source: https://github.com/NVIDIA/TensorRT-LLM/blob/01c4ece911eb569e72cf4177f83238a0520641c2/docs/source/commands/trtllm-serve/run-benchmark-with-trtllm-serve.md
#| repository: NVIDIA/TensorRT-LLM, path: docs/source/commands/trtllm-serve/run-benchmark-with-trtllm-serve.md, commit: 01c4ece911eb569e72cf4177f83238a0520641c2
#| part: the code block of "Start the trtllm-serve service" (start.sh)
#| sha256: 9dff16fac5e984a935614d5f672f3e8916756816791b57614a3d81d6ad709b0e
#| below this header: the text as published, unedited
#! /bin/bash
model_path=/path/to/llama3.1_70B
extra_llm_api_file=/tmp/extra-llm-api-config.yml

cat << EOF > ${extra_llm_api_file}
enable_attention_dp: false
print_iter_log: true
cuda_graph_config:
  enable_padding: true
  max_batch_size: 1024
kv_cache_config:
  dtype: fp8
EOF

trtllm-serve ${model_path} \
    --max_batch_size 1024 \
    --max_num_tokens 2048 \
    --max_seq_len 1024 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --tp_size 1 \
    --ep_size 1 \
    --trust_remote_code \
    --extra_llm_api_options ${extra_llm_api_file}
