#!/usr/bin/env bash
# Create .venv (if missing) and install hpcdispatch into it, editable, with the given extras.
# Re-running is cheap: the install is redone only when pyproject.toml changed. It says what it
# installs, and shows pip's output only when the install fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
extras="${1:-}"
venv="${HPCDISPATCH_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating the virtual environment $venv (nothing is installed outside it)" >&2
  "$python" -m venv "$venv"
fi
stamp="$venv/.hpcdispatch-installed${extras:+-$extras}"
want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)"
# Without extras, an install with any extras (test.sh's 'dev') of this pyproject.toml will do.
if [ -z "$extras" ]; then
  for done_stamp in "$venv"/.hpcdispatch-installed*; do
    if [ -f "$done_stamp" ] && [ "$(cat "$done_stamp")" = "$want" ]; then stamp="$done_stamp"; fi
  done
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing hpcdispatch${extras:+ with its '$extras' extras} and its Python" \
    "dependencies (grpcio, ortools, ...) into $venv with pip: 1-3 min the first time" >&2
  # pip's and setuptools' output (some 35 lines) only if the install fails.
  log="$(mktemp "${TMPDIR:-/tmp}/hpcdispatch-install.XXXXXX")"
  if ! { "$venv/bin/python" -m pip install --upgrade pip &&
         "$venv/bin/python" -m pip install -e "$root${extras:+[$extras]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "== the install into $venv failed: pip's output is above" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  echo "$want" > "$stamp"
fi
echo "$venv"
