#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with Megatron-LM's own argument parsing
# (megatron.training.arguments parse_args and validate_args, and the TransformerConfig its
# arguments build) for tests/test_megatron_judge.py; prints the environment's python on the last
# line. megatron-core's wheel carries megatron.training since 0.17; 0.19.2 is the newest on the
# package registry (parc follows the repository at core 0.20.0). Its metadata asks for Python 3.12
# while the wheel is built for this Python too: it is installed with --ignore-requires-python and
# no dependencies, beside the CPU torch parc's tests use, triton (imported by its MoE kernels at
# module level; no kernel runs) and packaging. The judge supplies the one 3.12 name it imports
# (typing.override, from typing_extensions).
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path. Exit status 3 when the registry cannot be reached, 4 when
# the installed parser does not import.
set -euo pipefail

MEG_VERSION="${PARC_MEGATRON_VERSION:-0.19.2}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "megatron-$MEG_VERSION"
"${pip[@]}" --no-deps --ignore-requires-python "megatron-core==$MEG_VERSION" "torch==$torch_version" triton >&2 ||
  judge_fail 3 "could not install megatron-core==$MEG_VERSION and torch==$torch_version (is the package registry reachable?)"
# What megatron.training.arguments imports (found by importing it), and torch's own imports.
"${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 numpy "packaging>=24.2" >&2 ||
  judge_fail 3 "could not install megatron-core's modules (is the package registry reachable?)"
"$venv.tmp/bin/python" -c \
    'import typing, typing_extensions; typing.override = typing_extensions.override; import megatron.training.arguments' >&2 ||
  judge_fail 4 "megatron-core==$MEG_VERSION's argument parser does not import with these modules"
judge_done
