#!/usr/bin/env bash
# Creates (once) an isolated virtual environment for tests/test_lws_judge.py: kubernetes-validate
# (the Kubernetes API's own OpenAPI schemas for the built-in objects, strict) and jsonschema with
# PyYAML for the LeaderWorkerSet CRD's schema (tests/data/lws). Prints the environment's python on
# the last line. Cached under $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges,
# ~/.cache/parc-judges): a second run only prints the path. Exit status 3 when the registry cannot
# be reached, 4 when the installed modules do not import.
set -euo pipefail

KV_VERSION="${PARC_KUBERNETES_VALIDATE_VERSION:-1.37.0}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "lws-kv$KV_VERSION"
"${pip[@]}" "kubernetes-validate==$KV_VERSION" "jsonschema>=4.18" pyyaml >&2 ||
  judge_fail 3 "could not install kubernetes-validate==$KV_VERSION (is the package registry reachable?)"
"$venv.tmp/bin/python" -c 'import kubernetes_validate, jsonschema, yaml' >&2 ||
  judge_fail 4 "kubernetes-validate==$KV_VERSION does not import"
judge_done
