# shellcheck shell=bash disable=SC2034
# Sourced by tests/judges/*_env.sh: the isolated, cached virtual environment a judge runs in.
#
# judge_venv NAME   the environment $PARC_JUDGES_CACHE/NAME (default cache: $XDG_CACHE_HOME or
#                   ~/.cache, then parc-judges). When it is ready, prints its python and exits 0
#                   (a second run only prints the path). Otherwise, with PARC_JUDGES_ONLY_CACHED
#                   set, exits 5; else makes "$venv.tmp" and sets `pip` (an install command in it)
#                   and `torch_version` (the CPU torch parc's tests use, to pin beside the tool).
# judge_fail CODE MESSAGE
#                   says why on stderr, drops the half-made environment and exits CODE: 3 when
#                   the registry cannot be reached, 4 when the installed modules do not import.
# judge_done        marks the environment ready, moves it in place and prints its python.

judge_cache="${PARC_JUDGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parc-judges}"
py="${PYTHON:-python3}"

judge_venv() {
  venv="$judge_cache/$1"
  if [[ -f "$venv/.ready" ]]; then
    echo "$venv/bin/python"
    exit 0
  fi
  if [[ -n "${PARC_JUDGES_ONLY_CACHED:-}" ]]; then
    echo "the $1 environment is not created yet: bash $0 creates it (several minutes)" >&2
    exit 5
  fi
  mkdir -p "$judge_cache"
  rm -rf "$venv.tmp"
  "$py" -m venv "$venv.tmp"
  pip=("$venv.tmp/bin/python" -m pip install -q --disable-pip-version-check)
  torch_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)"
}

judge_fail() {
  echo "$2" >&2
  rm -rf "$venv.tmp"
  exit "$1"
}

judge_done() {
  touch "$venv.tmp/.ready"
  rm -rf "$venv"
  mv "$venv.tmp" "$venv"
  echo "$venv/bin/python"
}
