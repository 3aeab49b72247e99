#!/usr/bin/env bash
# mypy over the installed layout. The top-level folders (server/, client/, ...) install as
# hpcdispatch.server, hpcdispatch.client, ... so mypy checks a tree of links that mirrors
# the package names.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/hpcdispatch"
for f in "$root"/hpcdispatch/*; do ln -s "$f" "$tree/hpcdispatch/"; done
ln -s "$root/proto/hpcdispatch/v1" "$tree/hpcdispatch/v1"
for pkg in server client sim_adapter slurm_bridge; do
  [ -d "$root/$pkg" ] && ln -s "$root/$pkg" "$tree/hpcdispatch/$pkg"
done
cd "$tree"
"$python" -m mypy --config-file "$root/pyproject.toml" -p hpcdispatch
# The benchmarks import the installed names too.
cd "$root"
MYPYPATH="$tree" "$python" -m mypy --config-file "$root/pyproject.toml" benchmarks
