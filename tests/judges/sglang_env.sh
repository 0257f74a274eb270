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
cache="${PARC_JUDGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parc-judges}"
venv="$cache/sglang-$SGLANG_VERSION"
py="${PYTHON:-python3}"

if [[ -f "$venv/.ready" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
if [[ -n "${PARC_JUDGES_ONLY_CACHED:-}" ]]; then
  echo "the SGLang environment is not created yet: bash tests/judges/sglang_env.sh creates it (several minutes)" >&2
  exit 5
fi
mkdir -p "$cache"
rm -rf "$venv.tmp"
"$py" -m venv "$venv.tmp"
pip=("$venv.tmp/bin/python" -m pip install -q --disable-pip-version-check)
torch_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)"
if ! "${pip[@]}" --no-deps "sglang==$SGLANG_VERSION" "sglang-router==$ROUTER_VERSION" "torch==$torch_version" >&2; then
  echo "could not install sglang==$SGLANG_VERSION and torch==$torch_version (is the package registry reachable?)" >&2
  rm -rf "$venv.tmp"
  exit 3
fi
# What sglang.srt.server_args, its resolution pipeline (sglang/srt/arg_groups/pipeline.py) and
# sglang_router.launch_router import. torchvision is left out: the CPU torch has no matching
# wheel, and the judge stands in for it (only image preprocessing uses it).
if ! "${pip[@]}" numpy msgspec "transformers==5.19.0" psutil pyzmq requests pydantic packaging orjson pybase64 \
    aiohttp fastapi uvicorn uvloop setproctitle regex pillow prometheus-client partial_json_parser python-multipart \
    sympy networkx jinja2 pyyaml >&2 ||
   ! "${pip[@]}" --no-deps triton ipython traitlets dill "apache-tvm-ffi==0.1.11" sentencepiece \
    "compressed-tensors==0.18.0" loguru gguf >&2; then
  echo "could not install SGLang's parser modules (is the package registry reachable?)" >&2
  rm -rf "$venv.tmp"
  exit 3
fi
if ! "$venv.tmp/bin/python" -c 'import sglang.srt.server_args, sglang_router.launch_router' >&2; then
  echo "sglang==$SGLANG_VERSION's parser does not import with these modules" >&2
  rm -rf "$venv.tmp"
  exit 4
fi
touch "$venv.tmp/.ready"
rm -rf "$venv"
mv "$venv.tmp" "$venv"
echo "$venv/bin/python"
