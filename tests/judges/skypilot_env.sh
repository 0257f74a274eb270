#!/usr/bin/env bash
# Creates (once) an isolated virtual environment with SkyPilot's own task parser (sky.Task,
# whose from_yaml_config validates the task against sky/utils/schemas.py get_task_schema and
# builds its Resources), for tests/test_skypilot_judge.py; prints the environment's python on the
# last line. SkyPilot pulls every cloud's SDK and a web server: it is installed with --no-deps
# and only the modules `import sky` imports (found by importing it). Cached under
# $PARC_JUDGES_CACHE (default $XDG_CACHE_HOME/parc-judges, ~/.cache/parc-judges): a second run
# only prints the path. Exit status 3 when the registry cannot be reached, 4 when the installed
# parser does not import.
set -euo pipefail

SKYPILOT_VERSION="${PARC_SKYPILOT_VERSION:-0.14.1}"
# shellcheck source=tests/judges/venv_lib.sh
. "$(dirname "$0")/venv_lib.sh"
judge_venv "skypilot-$SKYPILOT_VERSION"
{ "${pip[@]}" --no-deps "skypilot==$SKYPILOT_VERSION" >&2 &&
    "${pip[@]}" typing_extensions colorama packaging cachetools sqlalchemy greenlet aiosqlite jsonschema pydantic \
     prometheus_client filelock httpx psutil alembic prettytable pyyaml requests psycopg2-binary click passlib ijson \
     paramiko aiohttp fastapi orjson casbin sqlalchemy_adapter numpy tqdm >&2; } ||
  judge_fail 3 "could not install skypilot==$SKYPILOT_VERSION and the modules it imports (is the package registry reachable?)"
HOME="$venv.tmp" "$venv.tmp/bin/python" -c 'import sky, sky.utils.schemas; sky.Task.from_yaml_config({"run": "true"})' >&2 ||
  judge_fail 4 "skypilot==$SKYPILOT_VERSION's task parser does not import with these modules"
judge_done
