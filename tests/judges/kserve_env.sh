#!/usr/bin/env bash
# The environment of tests/test_kserve_judge.py: kubernetes-validate (the Kubernetes API's own
# OpenAPI schemas for the built-in objects, strict) and jsonschema with PyYAML for the
# LLMInferenceService CRD's schema (tests/data/kserve). Those are exactly the LeaderWorkerSet
# judge's modules, so this is that environment (made once and cached by tests/judges/lws_env.sh,
# with its pins and exit statuses). Prints the environment's python on the last line.
set -euo pipefail
exec bash "$(dirname "$0")/lws_env.sh"
