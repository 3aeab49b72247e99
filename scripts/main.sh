#!/usr/bin/env bash
# The main job on the embedded default: set up .venv, then run it (no server to start by hand).
# Extra arguments go to the command. It runs where it is started: paths given (--trace, --out)
# and printed (the run folder, the report command) are relative to that folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$("$root/scripts/bootstrap.sh" | tail -n 1)"
exec "$venv/bin/hpcdispatch" simulate "$@"
