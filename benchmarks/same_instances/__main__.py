"""`python -m benchmarks.same_instances`: the benchmark of `benchmarks.same_instances.compare`."""

from benchmarks.same_instances.compare import main

main()
