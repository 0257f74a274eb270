#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with vLLM's own argument parser and config
# checks, for tests/test_vllm_judge.py; prints the environment's python on the last line.
# vLLM pins its own torch and CUDA stack: it is installed with --no-deps, beside the CPU torch
# that parc's tests use and the few modules `vllm serve`'s parser and ParallelConfig import.
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path. Exit status 3 when the registry cannot be reached, 4 when
# the installed parser does not import.
set -euo pipefail

VLLM_VERSION="${PARC_VLLM_VERSION:-0.33.0}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "vllm-$VLLM_VERSION"
"${pip[@]}" --no-deps "vllm==$VLLM_VERSION" "torch==$torch_version" >&2 ||
  judge_fail 3 "could not install vllm==$VLLM_VERSION and torch==$torch_version (is the package registry reachable?)"
# What vllm.entrypoints.common.cli_args and vllm.config import (found by importing them); einops,
# loguru and compressed-tensors are what create_engine_config imports for an fp8 model
# (--quantization fp8) beside a KV connector (found the same way).
{ "${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 packaging huggingface_hub regex \
    pydantic numpy cbor2 psutil pyzmq requests "transformers>=5.16.1,<5.21" aiohttp openai openai-harmony \
    msgspec cloudpickle pillow py-cpuinfo fastapi prometheus_client partial-json-parser \
    opentelemetry-api pybase64 pyyaml cachetools uvloop einops loguru >&2 &&
    "${pip[@]}" --no-deps xgrammar==0.2.8 apache-tvm-ffi llguidance compressed-tensors >&2; } ||
  judge_fail 3 "could not install vLLM's parser modules (is the package registry reachable?)"
VLLM_TARGET_DEVICE=cpu "$venv.tmp/bin/python" -c \
    'import vllm.entrypoints.common.cli_args, vllm.config, vllm.engine.arg_utils' >&2 ||
  judge_fail 4 "vllm==$VLLM_VERSION's parser does not import with these modules"
judge_done
