#!/usr/bin/env bash
# Print the path of a temporary tree of links laid out as the installed packages: the
# top-level folders (server/, client/, ...) install as hpcdispatch.server, hpcdispatch.client,
# ... (pyproject.toml's package-dir), and tools that read packages from paths (mypy,
# lint-imports) need that layout. The caller removes the tree.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tree="$(mktemp -d)"
mkdir -p "$tree/hpcdispatch"
for f in "$root"/hpcdispatch/*; do ln -s "$f" "$tree/hpcdispatch/"; done
ln -s "$root/proto/hpcdispatch/v1" "$tree/hpcdispatch/v1"
for pkg in server client sim_adapter slurm_bridge; do
  [ -d "$root/$pkg" ] && ln -s "$root/$pkg" "$tree/hpcdispatch/$pkg"
done
echo "$tree"
