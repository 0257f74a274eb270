#| source: https://github.com/vllm-project/recipes/blob/8959cf64189c71d36e11c6a30335f923f261b1f7/Llama/Llama3.3-70B.md
#| repository: vllm-project/recipes, path: Llama/Llama3.3-70B.md, commit: 8959cf64189c71d36e11c6a30335f923f261b1f7
#| part: the launch_server.sh code block under "Launch the vLLM Server"
#| sha256: 9bceb59ffbc94a3df330b877c2edc8cbe87a3b8c46dde901525713115f451e3a
#| below this header: the text as published, unedited
# Set up a few environment variables for better performance for Blackwell architecture.
# They will be removed when the performance optimizations have been verified and enabled by default.
COMPUTE_CAPABILITY=$(nvidia-smi -i 0 --query-gpu=compute_cap --format=csv,noheader)
if [ "$COMPUTE_CAPABILITY" = "10.0" ]; then
    # Use FP4 for Blackwell architecture
    # Change this to FP8 to run FP8 on Blackwell architecture
    DTYPE="FP4"
    # Select the config file for Blackwell architecture.
    YAML_CONFIG="Llama3.3_Blackwell.yaml"
else
    # Use FP8 for Hopper architecture
    DTYPE="FP8"
    # Select the config file for Hopper architecture.
    YAML_CONFIG="Llama3.3_Hopper.yaml"
fi

# Launch the vLLM server
vllm serve nvidia/Llama-3.3-70B-Instruct-$DTYPE \
  --config ${YAML_CONFIG} \
  --tensor-parallel-size 1 &
