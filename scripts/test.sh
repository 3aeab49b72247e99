#!/usr/bin/env bash
# The test command: set up .venv with the dev extras, then run the whole test suite.
#   scripts/test.sh [--quick] [PYTEST ARGS...]     e.g. scripts/test.sh -k grpc
# --quick: skip the integration tests that need Debian packages (Slurm, Prometheus,
# PostgreSQL) and install nothing outside .venv (QUICK_TESTS=1 does the same).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ "${1:-}" = "--quick" ]; then
  shift
  export QUICK_TESTS=1
fi
venv="$("$root/scripts/bootstrap.sh" dev | tail -n 1)"
cd "$root"
if [ "${QUICK_TESTS:-0}" != "0" ]; then
  echo "== quick run: the Slurm, Prometheus and PostgreSQL integration tests are skipped" >&2
else
  missing=""
  command -v slurmctld >/dev/null || missing="$missing slurmctld slurmd slurm-client"
  command -v prometheus >/dev/null || missing="$missing prometheus"
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null \
    || missing="$missing postgresql"
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "== the integration tests need Debian packages missing here:$missing" >&2
      echo "   running as root, the tests install them system-wide with apt-get when they" >&2
      echo "   first need them (a few minutes); the whole suite then takes 10-15 min." >&2
      echo "   scripts/test.sh --quick skips those tests and installs nothing." >&2
    else
      echo "== Debian packages missing here:$missing; the tests that need them are skipped" >&2
      echo "   (apt-get install them as root to run those tests too)" >&2
    fi
  fi
fi
exec "$venv/bin/python" -m pytest "$@"
