"""The benchmarks (benchmarks/): targets, campaigns, reports."""
