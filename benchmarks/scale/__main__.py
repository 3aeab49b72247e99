"""`python -m benchmarks.scale`: the benchmark of `benchmarks.scale.snapshots`."""

from benchmarks.scale.snapshots import main

main()
