#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with SGLang's own argument parser and ServerArgs
# checks, and sglang_router's parser, for tests/test_sglang_judge.py; prints the environment's
# python on the last line. SGLang pins its own torch and CUDA stack: it is installed with
# --no-deps, beside the CPU torch that parc's tests use and the modules that
# sglang.srt.server_args and its resolution pipeline import (found by importing them).
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path (PARC_JUDGES_ONLY_CACHED=1: only that, exit status 5 when
# there is none yet). Exit status 3 when the registry cannot be reached, 4 when
# the installed parser does not import.
set -euo pipefail

SGLANG_VERSION="${PARC_SGLANG_VERSION:-0.5.23}"
ROUTER_VERSION="${PARC_SGLANG_ROUTER_VERSION:-0.3.2}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "sglang-$SGLANG_VERSION"
"${pip[@]}" --no-deps "sglang==$SGLANG_VERSION" "sglang-router==$ROUTER_VERSION" "torch==$torch_version" >&2 ||
  judge_fail 3 "could not install sglang==$SGLANG_VERSION and torch==$torch_version (is the package registry reachable?)"
# What sglang.srt.server_args, its resolution pipeline (sglang/srt/arg_groups/pipeline.py) and
# sglang_router.launch_router import. torchvision is left out: the CPU torch has no matching
# wheel, and the judge stands in for it (only image preprocessing uses it).
{ "${pip[@]}" numpy msgspec "transformers==5.19.0" psutil pyzmq requests pydantic packaging orjson pybase64 \
    aiohttp fastapi uvicorn uvloop setproctitle regex pillow prometheus-client partial_json_parser python-multipart \
    sympy networkx jinja2 pyyaml >&2 &&
    "${pip[@]}" --no-deps triton ipython traitlets dill "apache-tvm-ffi==0.1.11" sentencepiece \
    "compressed-tensors==0.18.0" loguru gguf >&2; } ||
  judge_fail 3 "could not install SGLang's parser modules (is the package registry reachable?)"
"$venv.tmp/bin/python" -c 'import sglang.srt.server_args, sglang_router.launch_router' >&2 ||
  judge_fail 4 "sglang==$SGLANG_VERSION's parser does not import with these modules"
judge_done
