#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with torchtitan's own config parsing
# (ConfigManager, tyro) and ParallelDims, for tests/test_torchtitan_judge.py; prints the
# environment's python on the last line. torchtitan is installed with --no-deps beside the CPU
# torch that parc's tests use, with the modules its config registry and Trainer import (triton is
# imported by its MoE kernels at module level; no kernel runs).
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path. Exit status 3 when the registry cannot be reached, 4 when
# the installed config parser does not import.
set -euo pipefail

TT_VERSION="${PARC_TORCHTITAN_VERSION:-0.3.0}"
cache="${PARC_JUDGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parc-judges}"
venv="$cache/torchtitan-$TT_VERSION"
py="${PYTHON:-python3}"

if [[ -f "$venv/.ready" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache"
rm -rf "$venv.tmp"
"$py" -m venv "$venv.tmp"
pip=("$venv.tmp/bin/python" -m pip install -q --disable-pip-version-check)
torch_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)"
if ! "${pip[@]}" --no-deps "torchtitan==$TT_VERSION" "torch==$torch_version" torchdata triton >&2; then
  echo "could not install torchtitan==$TT_VERSION and torch==$torch_version (is the package registry reachable?)" >&2
  rm -rf "$venv.tmp"
  exit 3
fi
# What torchtitan.config.manager, torchtitan.trainer and torchtitan.models.llama3.config_registry
# import (found by importing them), and torch's own imports.
if ! "${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 numpy tyro "spmd_types==0.2.3" \
    tensorboard tokenizers "datasets>=3.6.0,<4.8.0" safetensors einops pillow >&2; then
  echo "could not install torchtitan's config modules (is the package registry reachable?)" >&2
  rm -rf "$venv.tmp"
  exit 3
fi
if ! "$venv.tmp/bin/python" -c \
    'import torchtitan.config.manager, torchtitan.trainer, torchtitan.models.llama3.config_registry, torchtitan.distributed.parallel_dims' >&2; then
  echo "torchtitan==$TT_VERSION's config parser does not import with these modules" >&2
  rm -rf "$venv.tmp"
  exit 4
fi
touch "$venv.tmp/.ready"
rm -rf "$venv"
mv "$venv.tmp" "$venv"
echo "$venv/bin/python"
