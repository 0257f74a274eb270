"""What each block may hold: the keys, the kind of value each takes, and its range.

This table drives unknown-key errors (with did-you-mean), unit checks and range checks.
Kinds: ``int`` (a count; ``8k`` and ``70B`` allowed), ``frac`` (a plain decimal), ``bytes``,
``bandwidth``, ``flops``, ``bool``, ``str``, ``enum`` (one of ``choices``), ``preset``,
``link`` (``nvlink(450GB/s)``), ``int_or_auto``, ``split`` (``even``, ``balanced`` or a list
of integers), ``strlist`` (a list of strings), ``enumlist`` (a list of ``choices``), ``any``.
"""
from __future__ import annotations

from dataclasses import dataclass

from parc.model.checkpoints import formats as _checkpoint_formats


@dataclass(frozen=True, slots=True)
class F:
    kind: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""
    hint: str = ""  # the help of an out-of-range error: what the number means


DTYPES = ("bf16", "fp16", "fp32", "fp8")
# RoPE scalings as Hugging Face's rope_type names them (transformers modeling_rope_utils.py);
# DeepSeek's configs write `type = yarn`, which vLLM reads as deepseek_yarn
ROPE_SCALINGS = ("none", "linear", "dynamic", "yarn", "llama3", "longrope")
# the MoE router's score functions (Hugging Face scoring_func; Megatron-LM --moe-router-score-function)
ROUTER_SCORES = ("softmax", "sigmoid")
PIPELINES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "dualpipe_v", "dualpipe")
MESH_AXES = ("pp", "dp", "cp", "tp")          # rank order, outermost first
MOE_AXES = ("ep", "etp")                      # carved out of dp·cp·tp
POOLS = ("prefill", "decode")                 # blocks inside `serve` of a disaggregated plan
CHECKPOINT_FORMATS = _checkpoint_formats()   # data/checkpoints.toml
# what recompute may be: Megatron-LM's layer-level choices, and torchtitan's per-op selective
# checkpointing (SelectiveAC: the outputs of the ops on its save list are kept, the rest recomputed)
RECOMPUTE = ("none", "selective", "selective_op", "full")
# train.fp8_recipe: Megatron-LM's --fp8-recipe (transformer_config.py Fp8Recipe) and torchtitan's
# float8 recipe_name (components/quantization/float8.py) and MXFP8 converter
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8", "rowwise", "rowwise_with_gw_hp")
# Megatron-LM's --recompute-modules (megatron/core/transformer/transformer_config.py)
RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe", "moe_act", "shared_experts", "mla_up_proj")
LINK_KINDS = ("nvlink", "pcie", "infiniband", "ethernet", "xgmi", "roce", "efa")
# the names of parc/model/data/frameworks.toml (kernels.toml's [fp8] has every FP8_RECIPES entry:
# tests/test_accuracy_model.py checks both) and the architectures gpus.toml names
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
GPU_ARCHS = ("ampere", "hopper", "blackwell", "ada", "cdna3", "cdna4")

BLOCKS: dict[str, dict[str, F]] = {
    "model": {
        "from": F("preset", doc="a built-in model preset"),
        "layers": F("int", 1, 10**5), "hidden": F("int", 1, 10**7), "ffn_hidden": F("int", 1, 10**8),
        "heads": F("int", 1, 10**6), "kv_heads": F("int", 1, 10**6), "head_dim": F("int", 1, 10**6),
        "vocab": F("int", 1, 10**9), "params": F("int", 1, 10**16),
        "dtype": F("enum", choices=DTYPES, doc="the dtype the model's GEMMs run in when served (default: "
                   "the checkpoint's; fp8 for an FP8 checkpoint, bf16 for a 4-bit one)"),
        "checkpoint_format": F("enum", choices=CHECKPOINT_FORMATS, doc="how the checkpoint stores its "
                               "weights: bf16, fp16, fp32, fp8_block (DeepSeek's 128x128 block-scaled e4m3), "
                               "modelopt_fp8, fbgemm_fp8, compressed_tensors_fp8, mxfp4, nvfp4 (default: "
                               "the dtype's 16 bits); a served model's weight memory follows it"),
        "seq_len": F("int", 1, 10**9),
        "tied_embeddings": F("bool"),
        "mlp": F("enum", choices=("swiglu", "gelu")),
        "norm": F("enum", choices=("rmsnorm", "layernorm")),
        "position": F("enum", choices=("rope", "learned")),
        "bias": F("bool"),
        "experts": F("int", 0, 10**6), "top_k": F("int", 1, 10**6), "moe_ffn_hidden": F("int", 1, 10**8),
        "shared_experts": F("int", 0, 10**6), "moe_every": F("int", 1, 10**5),
        "first_k_dense": F("int", 0, 10**5, doc="the first k layers keep a dense MLP of ffn_hidden "
                                                "(first_k_dense_replace in a DeepSeek config)"),
        "q_lora_rank": F("int", 1, 10**7, doc="MLA: the query's latent width (q_lora_rank)"),
        "kv_lora_rank": F("int", 1, 10**7, doc="MLA: the latent key/value width; set, the model uses "
                                                "multi-head latent attention (kv_lora_rank)"),
        "qk_rope_head_dim": F("int", 1, 10**6, doc="MLA: the rotary part of each query/key head"),
        "qk_nope_head_dim": F("int", 1, 10**6, doc="MLA: the non-rotary part of each query/key head"),
        "v_head_dim": F("int", 1, 10**6, doc="MLA: the width of each value head"),
        "mtp_layers": F("int", 0, 100, doc="multi-token-prediction modules (num_nextn_predict_layers)"),
        "qkv_bias": F("bool", doc="biases on the query, key and value projections only (Qwen2/2.5, whose "
                                  "config.json does not name them; `bias = true` puts them on every linear layer)"),
        "qk_norm": F("bool", doc="an RMSNorm of head_dim weights over each query and key head (Qwen3 "
                                 "q_norm and k_norm)"),
        "attention_sinks": F("bool", doc="one learned sink logit per attention head and layer (gpt-oss `sinks`)"),
        "attention_window": F("int", 0, 10**9, doc="local attention: a local layer attends to and caches at "
                              "most this many tokens (sliding_window in a gpt-oss config, attention_chunk_size "
                              "in a Llama 4 one; 0: every layer is global)"),
        "local_attention": F("enum", choices=("sliding", "chunked"), doc="with `attention_window`, how a local "
                             "layer attends: to the last attention_window tokens (sliding, gpt-oss's "
                             "sliding_window) or within its own chunk of that many (chunked, Llama 4's "
                             "attention_chunk_size); default sliding"),
        "global_every": F("int", 0, 10**5, doc="with `attention_window`, every n-th layer (layers n-1, 2n-1, "
                          "...) attends to the whole context; 0: none does"),
        "hybrid": F("bool", doc="some layers keep a fixed-size recurrent state instead of a KV cache (Mamba, "
                            "Gated DeltaNet or other linear attention: Qwen3-Next, Jamba, Nemotron-H, Kimi "
                            "Linear); what vLLM calls a hybrid model, whose KV block size follows that state"),
        "rope_theta": F("int", 1, 10**12, doc="the RoPE base frequency (rope_theta in a Hugging Face config)"),
        "max_positions": F("int", 1, 10**9, doc="the longest sequence the model supports "
                                                 "(max_position_embeddings in a Hugging Face config)"),
        "rope_scaling": F("enum", choices=ROPE_SCALINGS, doc="how the model stretches RoPE beyond the positions "
                          "it was trained on (rope_scaling's rope_type, or type, in a Hugging Face config); each "
                          "engine derives the model's context limit from it (parc.model.rope.context_limit)"),
        "rope_factor": F("frac", 1.0, 10**6, doc="the RoPE scaling factor (rope_scaling's factor)"),
        "rope_original_positions": F("int", 1, 10**9, doc="the positions the model was trained on before RoPE "
                                     "scaling (rope_scaling's original_max_position_embeddings)"),
        "rope_mscale": F("frac", 0.0, 100.0, doc="YaRN: the attention temperature's mscale (rope_scaling's "
                         "mscale; DeepSeek's configs give it with rope_mscale_all_dim); unset: the engine's default"),
        "rope_mscale_all_dim": F("frac", 0.0, 100.0, doc="YaRN: rope_scaling's mscale_all_dim, which scales the "
                                 "softmax of DeepSeek's attention too; unset: the engine's default"),
        "norm_eps": F("frac", 0.0, 1.0, doc="the epsilon of every RMSNorm/LayerNorm (rms_norm_eps in a Hugging "
                      "Face config: 1e-6 for DeepSeek-V3); unset: the engine's default (Megatron-LM's 1e-5)"),
        "router_score": F("enum", choices=ROUTER_SCORES, doc="the MoE router's score function: softmax over the "
                          "experts, or a sigmoid per expert (scoring_func; DeepSeek-V3's sigmoid); default softmax"),
        "router_groups": F("int", 1, 10**6, doc="group-limited routing: the routed experts split into this many "
                           "groups (n_group); 1: no groups"),
        "router_group_topk": F("int", 1, 10**6, doc="group-limited routing: the groups each token's experts are "
                               "chosen from (topk_group), the best by their top scores"),
        "router_expert_bias": F("bool", doc="auxiliary-loss-free balancing: a per-expert bias added to the scores "
                                "for choosing experts only (topk_method noaux_tc, e_score_correction_bias); "
                                "needs `router_score = sigmoid`"),
        "router_scale": F("frac", 0.0, 10**6, doc="the routed experts' output scaled by this factor "
                          "(routed_scaling_factor: 2.5 for DeepSeek-V3); unset: 1"),
        "router_pre_softmax": F("bool", doc="softmax over all experts before the top-k, the chosen weights not "
                                "renormalised (norm_topk_prob false with softmax scores); default: top-k first, "
                                "then the softmax over the chosen"),
    },
    "cluster": {
        "nodes": F("int", 1, 2**17), "gpus_per_node": F("int", 1, 2**10),
        "nvlink_domain": F("int", 1, 2**17, doc="GPUs that share one NVLink fabric, a multiple of gpus_per_node "
                           "(a GB200 NVL72 rack: 72 GPUs on 18 nodes of 4); groups inside it use the intra_node "
                           "link. Default: gpus_per_node", hint="a GPU count, like 72"),
        "gpu": F("preset", doc="a GPU preset, or a `gpu \"name\" { from = h100_sxm; memory = 96GB }` block "
                               "(the name, optional, is what explain shows)"),
        "intra_node": F("link"), "inter_node": F("link"),
        "cuda_context": F("bytes", 0, doc="memory the CUDA context, loaded kernels and library workspaces "
                                          "take on every GPU"),
        "nccl_buffers": F("bytes", 0, doc="memory each NCCL communicator a GPU joins takes"),
        "fragmentation": F("frac", 0.0, 1.0, doc="allocator fragmentation, a fraction of the activations",
                           hint="a fraction: 0.05 means 5% of the activations"),
        "socket_ifname": F("str", doc="the network interface(s) NCCL and Gloo use between nodes "
                                      "(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), like \"eth0\" or \"^lo,docker\""),
    },
    "gpu": {
        "from": F("preset"), "memory": F("bytes", 1), "flops": F("flops", 1),
        "hbm_bandwidth": F("bandwidth", 1), "nvlink_bandwidth": F("bandwidth", 0),
        "pcie_bandwidth": F("bandwidth", 0),
        "fp8_flops": F("flops", 0, doc="the dense FP8 peak (0: no FP8 tensor cores)"),
        "nvls": F("bool", doc="NVSwitch with NVLink SHARP: all-reduces inside a node reduce in the switch"),
        "arch": F("enum", choices=GPU_ARCHS, doc="the GPU's architecture: which attention kernel a framework "
                                                 "runs on it (parc/model/data/frameworks.toml)"),
        "matmul_efficiency": F("frac", 0.01, 1.0, doc="the measured maximum achievable matmul FLOP/s over the "
                               "dense BF16 peak (a matmul benchmark's; the default of `profile.gemm_efficiency`)"),
        "fp8_matmul_efficiency": F("frac", 0.01, 1.0, doc="the same for FP8 against the FP8 peak"),
        "power_limit": F("power", 1, doc="the power the cluster caps each board at (nvidia-smi -pl): below the "
                                         "preset's TDP the peaks fall toward the preset's low-power datasheet "
                                         "point (H100: the NVL's 835 TFLOPS at 400 W)"),
    },
    # inside `cluster`: one node's wiring, as `parc topo` writes it (parc.model.topology)
    "topology": {
        "islands": F("any", doc="the GPU sets NVLink (or XGMI) joins, by index on the node: [[0, 1], [2, 3]]; "
                                "a pair in one island is NVLink"),
        "numa": F("any", doc="the NUMA node of each GPU: [0, 0, 1, 1]; a pair on two NUMA nodes crosses the "
                             "SMP interconnect (SYS)"),
        "links": F("strlist", doc="only where islands and numa do not say enough: one row per GPU of the "
                                  "classes nvidia-smi topo -m prints (X, NV#, XGMI, PIX, PXB, PHB, NODE, SYS); "
                                  "without it, a pair in no common island on one NUMA node is PHB"),
        "nics": F("strlist", doc="the network device nearest each GPU (mlx5_0, ...), from the NIC rows of "
                                 "nvidia-smi topo -m"),
    },
    # inside `cluster`: nodes of one kind in a heterogeneous cluster
    "group": {
        "nodes": F("int", 1, 2**17, doc="the nodes of this kind"),
        "gpus_per_node": F("int", 1, 2**10, doc="their GPUs each (every group has the same number)"),
        "gpu": F("preset", doc="their GPU preset"),
        "intra_node": F("link", doc="their link inside a node (default: NVLink where the GPU has it)"),
    },
    "mesh": {
        "pp": F("int_or_auto", 1, 2**21), "dp": F("int_or_auto", 1, 2**21), "cp": F("int_or_auto", 1, 2**21),
        "tp": F("int_or_auto", 1, 2**21), "ep": F("int", 1, 2**21), "etp": F("int", 1, 2**21),
        "dcp": F("int", 1, 2**21, doc="decode context parallel (serving): the KV cache of each sequence is "
                                      "split by token over dcp GPUs of a tensor-parallel group, which "
                                      "otherwise hold copies of the same KV heads; it adds no GPUs "
                                      "(vLLM --decode-context-parallel-size, SGLang --dcp-size)"),
    },
    "placement": {
        "layers": F("split"),
    },
    "schedule": {
        "pipeline": F("enum", choices=PIPELINES), "virtual_stages": F("int", 1, 10**4),
        "micro_batch": F("int", 1, 2**24), "global_batch": F("int", 1, 2**30), "microbatches": F("int", 1, 2**24),
    },
    "train": {
        "optimizer": F("enum", choices=("adam", "adamw", "sgd")),
        "zero": F("int", 0, 3, hint="0: no sharding, 1: optimizer state, 2: + gradients, "
                                        "3: + parameters (FSDP)"), "sequence_parallel": F("bool"),
        "recompute": F("enum", choices=RECOMPUTE, doc="none; selective (Megatron-LM's --recompute-modules, "
                       "core attention by default); selective_op (torchtitan's per-op selective checkpointing: "
                       "the outputs of matmuls, attention and collectives kept, every second matmul and the "
                       "cheap ops recomputed); full (each layer recomputed from its input)"),
        "precision": F("enum", choices=DTYPES),
        "main_grads": F("enum", choices=("fp32", "bf16")),
        "optimizer_state": F("enum", choices=("fp32", "bf16")),
        "recompute_modules": F("enumlist", choices=RECOMPUTE_MODULES,
                               doc="what `recompute = selective` recomputes (Megatron-LM --recompute-modules)"),
        "offload_layers": F("int", 0, 10**5, doc="layers per pipeline stage whose activations go to host "
                                                "memory (Megatron-LM --cpu-offloading-num-layers)"),
        "fp8_recipe": F("enum", choices=FP8_RECIPES, doc="with `precision = fp8`, how FP8 tensors are "
                        "scaled: delayed, tensorwise, blockwise, mxfp8 (Megatron-LM --fp8-recipe), rowwise, "
                        "rowwise_with_gw_hp, mxfp8 (torchtitan's float8 and MXFP8 converters); default: "
                        "the framework's own (Megatron-LM delayed, torchtitan rowwise); the recipe sets the "
                        "casts' memory traffic and the GEMM kernel parc costs (parc/model/data/kernels.toml)"),
        "fp8_param_gather": F("bool", doc="with `precision = fp8`, the linear weights are kept in FP8 (no "
                              "16-bit copy; the fp32 master weights stay with the optimizer) and gathered in "
                              "FP8 (Megatron-LM --fp8-param-gather; needs zero >= 1)"),
        "fp8_weight_cache": F("bool", doc="with `precision = fp8`, an FP8 copy of each linear weight and its "
                              "transpose is kept for the step (Transformer Engine, the default); false where the "
                              "framework quantizes per use (torchtitan's float8, DeepSeek-V3's framework)"),
        "overlap_grad_reduce": F("bool", doc="the data-parallel gradient reduce-scatter runs under the last "
                                 "backward (Megatron-LM --overlap-grad-reduce; PyTorch DDP and FSDP always)"),
        "overlap_param_gather": F("bool", doc="the data-parallel parameter all-gather runs under the next "
                                  "forward (Megatron-LM --overlap-param-gather)"),
        "tp_comm_overlap": F("bool", doc="tensor-parallel collectives are pipelined with their GEMMs "
                             "(Megatron-LM --tp-comm-overlap with Transformer Engine; torchtitan AsyncTP)"),
        "ep_comm_overlap": F("bool", doc="the expert all-to-all runs under another microbatch's compute "
                             "(Megatron-LM --overlap-moe-expert-parallel-comm; DeepSeek-V3's DualPipe)"),
        "flash_attention": F("bool", doc="the attention core is fused (flash attention); false: it writes "
                             "its a·s²·b scores and runs softmax and dropout over them in HBM (Megatron-LM "
                             "before --use-flash-attn)"),
        "framework": F("enum", choices=FRAMEWORKS, doc="the framework that runs the training: its attention "
                       "kernel, fused or eager elementwise kernels, selective recompute and ZeRO-3 collectives "
                       "(parc/model/data/frameworks.toml); default: the spec's training target, else megatron"),
        "compile": F("bool", doc="torch.compile fuses the layers' elementwise kernels (torchtitan "
                     "--compile.enable); Megatron-LM and DeepSpeed fuse them without it"),
    },
    "serve": {
        "max_model_len": F("int", 1, 10**9, doc="the longest request in tokens (vLLM --max-model-len, SGLang "
                                                 "--context-length; default: the engine's, the model's context)"),
        "gpu_memory_utilization": F(
            "frac", 0.0, 1.0, hint="it is a fraction of the GPU's memory: 0.9 means 90%",
            doc="the share of each GPU's memory the engine takes (vLLM --gpu-memory-utilization, SGLang "
                "--mem-fraction-static); default: the engine's (vLLM 0.92, SGLang its derived fraction)"),
        "max_num_seqs": F("int", 1, 10**7, doc="requests the engine runs at once, as it counts them: per "
                                               "data-parallel rank for vLLM (--max-num-seqs), over all "
                                               "attention-DP ranks for SGLang (--max-running-requests); "
                                               "default: the engine's"),
        "max_num_batched_tokens": F("int", 1, 10**8, doc="tokens one step schedules on a data-parallel rank, "
                                                         "prefill chunks and decode tokens together (vLLM "
                                                         "--max-num-batched-tokens, SGLang --chunked-prefill-size; "
                                                         "default: the engine's, by GPU memory)"),
        "kv_cache_dtype": F("enum", choices=("auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")),
        "dp_attention": F("bool", doc="the mesh's dp ranks form one engine: attention runs data-parallel "
                                      "(each rank its own sequences and KV cache) while the expert layers "
                                      "span all dp · tp GPUs as one expert-parallel group (SGLang "
                                      "--enable-dp-attention; vLLM forms it for an MoE model with dp > 1 "
                                      "and --enable-expert-parallel)"),
        "eplb": F("bool", doc="expert-parallel load balancing: experts are re-placed from measured "
                              "routing statistics while serving (vLLM --enable-eplb, SGLang --enable-eplb)"),
        "redundant_experts": F("int", 0, 10**6, doc="extra copies of the busiest experts placed by EPLB; "
                                                    "each expert-parallel GPU holds (experts + redundant) / ep "
                                                    "experts (vLLM eplb_config.num_redundant_experts, SGLang "
                                                    "--ep-num-redundant-experts)"),
        "eplb_window": F("int", 1, 10**9, doc="the forward steps whose routing statistics EPLB balances over "
                                              "(vLLM eplb_config.window_size)"),
        "eplb_interval": F("int", 1, 10**9, doc="forward steps between two re-placements (vLLM "
                                                "eplb_config.step_interval, SGLang "
                                                "--eplb-rebalance-num-iterations)"),
        "kv_transfer": F("enum", choices=("nixl", "mooncake", "lmcache", "p2p_nccl"),
                         doc="with `prefill` and `decode` pools: how the KV cache of a prefilled request "
                             "moves to its decode instance (vLLM --kv-transfer-config's connector, "
                             "SGLang --disaggregation-transfer-backend)"),
        "prompt_tokens": F("int", 1, 10**9, doc="the workload's prompt length in tokens, for explain's "
                                                "latency and throughput estimates (default: 1024, vLLM's "
                                                "benchmark's random dataset)"),
        "output_tokens": F("int", 1, 10**9, doc="the workload's output length in tokens (default: 128, "
                                                "vLLM's benchmark's)"),
        "concurrency": F("int", 1, 10**7, doc="the requests in flight over the whole plan for explain's "
                                              "estimates: a closed loop of that many users, each sending its "
                                              "next request when the last one ends (vllm bench serve "
                                              "--max-concurrency; default: as many as fit, at most max_num_seqs)"),
        "request_rate": F("frac", 0.0, 1e9, doc="requests per second arriving at random over the whole plan "
                                                "(vllm bench serve --request-rate), instead of `concurrency`",
                          hint="requests per second, like 4.5"),
        "two_batch_overlap": F("bool", doc="each step runs as two micro-batches, one's expert all-to-all under "
                                           "the other's compute (SGLang --enable-two-batch-overlap, vLLM "
                                           "--enable-dbo)"),
        "speculative": F("enum", choices=("mtp", "eagle", "eagle3"),
                         doc="speculative decoding: `mtp` drafts with the model's own multi-token-prediction "
                             "layers, `eagle` and `eagle3` with the `draft_model`; the model verifies the drafts "
                             "in one step (vLLM --speculative-config, SGLang --speculative-algorithm)"),
        "speculative_tokens": F("int", 1, 64, doc="draft tokens per step (default 1)"),
        "acceptance_rate": F("frac", 0.0, 1.0, doc="the chance that each draft token is accepted, as measured "
                                                  "on the workload; a step then yields (1 − a^(k+1)) / (1 − a) "
                                                  "tokens for k drafts (Leviathan et al. 2023)",
                             hint="a fraction: 0.8 means 80% of the drafts are kept"),
        "draft_model": F("str", doc="the EAGLE draft model's Hugging Face id or path"),
    },
    "profile": {
        "framework": F("enum", choices=FRAMEWORKS, doc="the framework of the runs the profile was fitted on "
                       "(parc calibrate writes it; P518 warns when a plan of another framework uses it)"),
        "gpu": F("str", doc="the GPU the profile's runs ran on (parc calibrate writes it; P518 warns on another)"),
        "gemm_efficiency": F("frac", 0.01, 1.0, doc="the fraction of peak FLOP/s the largest GEMMs sustain "
                             "(default: the GPU's measured matmul rate, `matmul_efficiency`)",
                             hint="a fraction of the GPU's peak: 0.6 means 60%"),
        "gemm_half_size": F("frac", 0.0, 1024.0, doc="the smallest GEMM side (after sharding) at which a "
                            "GEMM runs at half of gemm_efficiency (0: every GEMM at gemm_efficiency)",
                            hint="a matrix side in elements, like 192"),
        "hbm_efficiency": F("frac", 0.01, 1.0, doc="the fraction of HBM bandwidth memory-bound kernels reach",
                            hint="a fraction of the datasheet's bandwidth: 0.6 means 60%"),
        "intra_node_efficiency": F("frac", 0.01, 1.0, doc="the fraction of the intra-node link's bandwidth a "
                                   "collective reaches", hint="a fraction of the link's bandwidth"),
        "inter_node_efficiency": F("frac", 0.01, 1.0, doc="the fraction of the inter-node link's bandwidth a "
                                   "collective reaches", hint="a fraction of the link's bandwidth"),
        "overlap": F("frac", 0.0, 1.0, doc="the share of the communication the plan overlaps that is hidden",
                     hint="0 hides nothing, 1 hides all of it"),
    },
}

# Blocks that take a label, and whether it is required.
LABELS = {"model": "optional", "cluster": "optional", "target": "required", "gpu": "optional",
          "topology": "none", "group": "required",
          "mesh": "none", "placement": "none", "schedule": "none", "train": "none", "serve": "none",
          "profile": "optional", "prefill": "none", "decode": "none"}
TOP_BLOCKS = ("model", "cluster", "mesh", "placement", "schedule", "train", "serve", "profile", "target")

# Placement styles for module patterns: "layers.*.attention.wq" = colwise(tp)
PLACEMENT_STYLES = {"colwise": "tp", "rowwise": "tp", "sequence": "tp", "experts": "ep",
                    "replicate": None}

# Key names people bring from other tools, and what they are called here.
ALIASES = {
    "tensor_parallel": "tp", "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp",
    "pipeline_parallel": "pp", "pipeline_parallel_size": "pp", "pipeline_model_parallel_size": "pp",
    "data_parallel": "dp", "data_parallel_size": "dp", "context_parallel": "cp",
    "context_parallel_size": "cp", "expert_parallel": "ep", "expert_model_parallel_size": "ep",
    "expert_tensor_parallel_size": "etp", "num_layers": "layers", "hidden_size": "hidden",
    "num_attention_heads": "heads", "num_key_value_heads": "kv_heads", "num_query_groups": "kv_heads",
    "ffn_hidden_size": "ffn_hidden", "intermediate_size": "ffn_hidden", "vocab_size": "vocab",
    "seq_length": "seq_len", "max_seq_len": "seq_len", "rotary_base": "rope_theta",
    "max_position_embeddings": "max_positions", "num_experts": "experts", "rope_type": "rope_scaling",
    "original_max_position_embeddings": "rope_original_positions",
    "mscale": "rope_mscale", "mscale_all_dim": "rope_mscale_all_dim",
    "rms_norm_eps": "norm_eps", "layernorm_epsilon": "norm_eps", "norm_epsilon": "norm_eps",
    "scoring_func": "router_score", "n_group": "router_groups", "topk_group": "router_group_topk",
    "routed_scaling_factor": "router_scale",
    "moe_router_topk": "top_k", "micro_batch_size": "micro_batch", "global_batch_size": "global_batch",
    "num_microbatches": "microbatches", "virtual_pipeline_model_parallel_size": "virtual_stages",
    "zero_stage": "zero", "recompute_granularity": "recompute", "activation_checkpointing": "recompute",
    "num_nodes": "nodes", "nnodes": "nodes", "nproc_per_node": "gpus_per_node",
    "max_seq_len_to_capture": "max_model_len",
    "first_k_dense_replace": "first_k_dense", "num_nextn_predict_layers": "mtp_layers",
    "mtp_num_layers": "mtp_layers", "sliding_window": "attention_window",
    "attention_chunk_size": "attention_window", "cpu_offloading_num_layers": "offload_layers",
}

UNITS = {
    # unit -> (kind, factor as (numerator, denominator))
    "count": {"k": 10**3, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30},
    "bytes": {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40},
    "bandwidth": {"B/s": 1, "KB/s": 10**3, "MB/s": 10**6, "GB/s": 10**9, "TB/s": 10**12,
                  "GiB/s": 2**30, "MiB/s": 2**20, "TiB/s": 2**40,
                  "Kb/s": (10**3, 8), "Mb/s": (10**6, 8), "Gb/s": (10**9, 8), "Tb/s": (10**12, 8),
                  "Gbps": (10**9, 8), "Mbps": (10**6, 8), "GBps": 10**9},
    "flops": {"FLOPS": 1, "KFLOPS": 10**3, "MFLOPS": 10**6, "GFLOPS": 10**9, "TFLOPS": 10**12,
              "PFLOPS": 10**15, "FLOP/s": 1, "GFLOP/s": 10**9, "TFLOP/s": 10**12, "PFLOP/s": 10**15},
    "power": {"W": 1, "kW": 10**3},
}

KIND_WORDS = {
    "int": "a whole number (like 8, 8k or 70B)", "frac": "a decimal number (like 0.9)",
    "bytes": "a size with a byte unit (like 80GB or 141GiB)",
    "bandwidth": "a bandwidth with a unit (like 450GB/s or 400Gb/s)",
    "flops": "a compute rate with a unit (like 989TFLOPS)", "bool": "`true` or `false`",
    "power": "a power with a unit (like 500W)",
    "str": "a string in double quotes", "enum": "one of the names listed",
    "preset": "a preset name", "link": "a link like nvlink(450GB/s)",
    "int_or_auto": "a whole number or `auto`", "split": "`even`, `balanced` or a list of layer counts",
    "strlist": "a list of strings", "enumlist": "a list of the names listed", "any": "a value",
    "version": "a release in double quotes",
}


def unit_kind(unit: str) -> str | None:
    """Which kind of quantity a unit measures, for messages (``450GB`` is bytes)."""
    for kind in ("bandwidth", "flops", "power", "bytes", "count"):
        if unit in UNITS[kind]:
            return kind
    return None

# The pools of a prefill/decode-disaggregated serving plan, blocks inside `serve`: each takes the
# `mesh` keys (a key it leaves out is the `mesh` block's) and its instance count.
for _pool in POOLS:
    BLOCKS[_pool] = {"instances": F("int", 1, 10**5, doc=f"independent {_pool} engine instances, each "
                                                        "of the pool's mesh"),
                     "max_num_seqs": F("int", 1, 10**7, doc=f"the {_pool} instances' own max_num_seqs"),
                     **BLOCKS["mesh"]}
