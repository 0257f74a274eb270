"""The generated serving spec that ``parc import``'s round trips compile and read back
(tests/test_import_roundtrip.py for the engines, tests/test_import_orchestrators.py for the
serving orchestrators, which add their own block after the engine's)."""
from __future__ import annotations

SPEC = """model "llama" {{
  from = llama3_1_8b
}}

cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = 8
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}

mesh {{
{mesh}}}

serve {{
  max_model_len = {ctx}
  max_num_seqs  = {seqs}
}}

target {engine} {{
  model = "meta-llama/Llama-3.1-8B-Instruct"
}}
"""
