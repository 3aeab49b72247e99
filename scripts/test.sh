#!/usr/bin/env bash
# The test command: set up .venv with the dev extras, then run the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k grpc).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$("$root/scripts/bootstrap.sh" dev | tail -n 1)"
cd "$root"
exec "$venv/bin/python" -m pytest "$@"
