#!/usr/bin/env bash
# Creates (once) an isolated virtual environment for tests/test_trainjob_judge.py: kubernetes-validate
# (the Kubernetes API's own OpenAPI schemas for the built-in objects, strict) and jsonschema with
# PyYAML for the TrainJob CRD's schema (tests/data/trainjob). Prints the environment's python on
# the last line. Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges,
# ~/.cache/parc-judges): a second run only prints the path. Exit status 3 when the registry cannot
# be reached, 4 when the installed modules do not import.
set -euo pipefail

KV_VERSION="${PARC_KUBERNETES_VALIDATE_VERSION:-1.37.0}"
cache="${PARC_JUDGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parc-judges}"
venv="$cache/trainjob-kv$KV_VERSION"
py="${PYTHON:-python3}"

if [[ -f "$venv/.ready" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache"
rm -rf "$venv.tmp"
"$py" -m venv "$venv.tmp"
pip=("$venv.tmp/bin/python" -m pip install -q --disable-pip-version-check)
if ! "${pip[@]}" "kubernetes-validate==$KV_VERSION" "jsonschema>=4.18" pyyaml >&2; then
  echo "could not install kubernetes-validate==$KV_VERSION (is the package registry reachable?)" >&2
  rm -rf "$venv.tmp"
  exit 3
fi
if ! "$venv.tmp/bin/python" -c 'import kubernetes_validate, jsonschema, yaml' >&2; then
  echo "kubernetes-validate==$KV_VERSION does not import" >&2
  rm -rf "$venv.tmp"
  exit 4
fi
touch "$venv.tmp/.ready"
rm -rf "$venv"
mv "$venv.tmp" "$venv"
echo "$venv/bin/python"
