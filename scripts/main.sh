#!/usr/bin/env bash
# The main job on the embedded default: set up .venv, then run it (no server to start by hand).
# Extra arguments go to the command.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$("$root/scripts/bootstrap.sh" | tail -n 1)"
cd "$root"
exec "$venv/bin/hpcdispatch" simulate "$@"
