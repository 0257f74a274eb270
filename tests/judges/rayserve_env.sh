#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with Ray Serve LLM's own config models
# (ray.serve.llm.LLMConfig, the prefill/decode builder's arguments) for tests/test_rayserve_judge.py;
# prints the environment's python on the last line. Ray Serve LLM's config models import the
# engine's OpenAI protocol models, so the environment holds the vLLM release Ray pins for its
# `llm` extra (ray 2.60.0: vllm==0.29.0), installed as tests/judges/vllm_env.sh installs vLLM:
# with --no-deps, beside the CPU torch parc's tests use and the modules its parser imports.
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path. Exit status 3 when the registry cannot be reached, 4 when
# the config models do not import.
set -euo pipefail

RAY_VERSION="${PARC_RAY_VERSION:-2.60.0}"
RAY_VLLM_VERSION="${PARC_RAY_VLLM_VERSION:-0.29.0}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "rayserve-$RAY_VERSION"
# ray[serve] and what ray.llm's config modules import beyond it (found by importing them)
"${pip[@]}" "ray[serve]==$RAY_VERSION" pyarrow smart_open >&2 ||
  judge_fail 3 "could not install ray[serve]==$RAY_VERSION (is the package registry reachable?)"
{ "${pip[@]}" --no-deps "vllm==$RAY_VLLM_VERSION" "torch==$torch_version" >&2 &&
  "${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 packaging huggingface_hub regex \
    numpy cbor2 psutil pyzmq requests "transformers<5.21" aiohttp openai openai-harmony msgspec \
    "fastapi[standard]>=0.133.0,<0.137.0" \
    cloudpickle pillow py-cpuinfo prometheus_client partial-json-parser opentelemetry-api \
    pybase64 pyyaml cachetools uvloop einops loguru httpx >&2 &&
  "${pip[@]}" --no-deps xgrammar "apache-tvm-ffi==0.1.11" "llguidance>=1.7.0,<1.8.0" "compressed-tensors==0.17.0" >&2; } ||
  judge_fail 3 "could not install vllm==$RAY_VLLM_VERSION beside ray (is the package registry reachable?)"
VLLM_TARGET_DEVICE=cpu "$venv.tmp/bin/python" -c \
    'from ray.serve.llm import LLMConfig, build_pd_openai_app, build_openai_app' >&2 ||
  judge_fail 4 "ray==$RAY_VERSION's Serve LLM config models do not import with vllm==$RAY_VLLM_VERSION"
judge_done
