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
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "torchtitan-$TT_VERSION"
"${pip[@]}" --no-deps "torchtitan==$TT_VERSION" "torch==$torch_version" torchdata triton >&2 ||
  judge_fail 3 "could not install torchtitan==$TT_VERSION and torch==$torch_version (is the package registry reachable?)"
# What torchtitan.config.manager, torchtitan.trainer and torchtitan.models.llama3.config_registry
# import (found by importing them), and torch's own imports.
"${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 numpy tyro "spmd_types==0.2.3" \
    tensorboard tokenizers "datasets>=3.6.0,<4.8.0" safetensors einops pillow >&2 ||
  judge_fail 3 "could not install torchtitan's config modules (is the package registry reachable?)"
"$venv.tmp/bin/python" -c \
    'import torchtitan.config.manager, torchtitan.trainer, torchtitan.models.llama3.config_registry, torchtitan.distributed.parallel_dims' >&2 ||
  judge_fail 4 "torchtitan==$TT_VERSION's config parser does not import with these modules"
judge_done
