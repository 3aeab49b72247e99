#!/usr/bin/env bash
# The container's entry point, exercised without Docker: copy the build context (honouring
# .dockerignore), install it into a brand-new virtual environment as the image's build stage
# does (`pip install .`, `pip check`), then run the Dockerfile's ENTRYPOINT with its ENV, pass
# its HEALTHCHECK, make one decision, read /metrics, SIGTERM, expect a clean exit.
# Usage: deploy/check_entrypoint.sh [--ports auto|exact|remap]    (PYTHON=python3.11 to choose)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" "$root/deploy/check_entrypoint.py" context "$root" "$work/context"
"$python" -m venv "$work/venv"
start=$SECONDS
"$work/venv/bin/python" -m pip install --quiet --no-cache-dir "$work/context"
"$work/venv/bin/python" -m pip check
echo "clean install: $((SECONDS - start)) s"
"$work/venv/bin/python" "$root/deploy/check_entrypoint.py" run --bin-dir "$work/venv/bin" \
  --dockerfile "$root/Dockerfile" "$@"
