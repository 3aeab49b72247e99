#!/usr/bin/env bash
# mypy over the installed layout (scripts/package_tree.sh), then the layering contracts of
# pyproject.toml ([tool.importlinter]: the server's rooms, arrows pointing down) with
# lint-imports over the same tree; and the example plugin against the installed names.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
# A relative path (.venv/bin/python) must survive the cd into the tree below.
if [[ "$python" == */* ]]; then python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"; fi
tree="$("$root/scripts/package_tree.sh")"
trap 'rm -rf "$tree"' EXIT
cd "$tree"
"$python" -m mypy --config-file "$root/pyproject.toml" -p hpcdispatch
# The benchmarks import the installed names too.
cd "$root"
MYPYPATH="$tree" "$python" -m mypy --config-file "$root/pyproject.toml" benchmarks
# The example plugin too: it imports only the public interface, as any plugin (docs/plugins.md).
MYPYPATH="$tree" "$python" -m mypy --config-file "$root/pyproject.toml" \
  examples/sjf-backfill-plugin/src/sjf_backfill_plugin
cd "$tree"
ln -s "$root/benchmarks" "$tree/benchmarks"  # the contract on what the benchmarks import
PYTHONPATH="$tree" "$(dirname "$python")/lint-imports" --config "$root/pyproject.toml"
