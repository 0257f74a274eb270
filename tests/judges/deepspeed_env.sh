#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with DeepSpeed's own launcher parser and config
# class, for tests/test_deepspeed_judge.py; prints the environment's python on the last line.
# DeepSpeed is installed with --no-deps (no ops are built: DS_BUILD_OPS=0), beside the CPU torch
# that parc's tests use and the few modules deepspeed.launcher.runner and
# deepspeed.runtime.config import (DeepSpeed's own requirements, less ninja).
# Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges):
# a second run only prints the path. Exit status 3 when the registry cannot be reached, 4 when
# the installed config class does not import.
set -euo pipefail

DS_VERSION="${PARC_DEEPSPEED_VERSION:-0.19.8}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "deepspeed-$DS_VERSION"
DS_BUILD_OPS=0 "${pip[@]}" --no-deps "deepspeed==$DS_VERSION" "torch==$torch_version" >&2 ||
  judge_fail 3 "could not install deepspeed==$DS_VERSION and torch==$torch_version (is the package registry reachable?)"
# torch's own imports, then DeepSpeed's requirements (setup.py's requirements.txt) but ninja.
"${pip[@]}" typing_extensions sympy networkx filelock fsspec jinja2 "setuptools>=77.0.3" \
    packaging numpy "pydantic>=2" psutil py-cpuinfo hjson msgpack tqdm einops >&2 ||
  judge_fail 3 "could not install DeepSpeed's config modules (is the package registry reachable?)"
DS_ACCELERATOR=cpu DS_BUILD_OPS=0 "$venv.tmp/bin/python" -c \
    'import deepspeed.launcher.runner, deepspeed.runtime.config, deepspeed.runtime.pipe.topology' >&2 ||
  judge_fail 4 "deepspeed==$DS_VERSION's config class does not import with these modules"
judge_done
