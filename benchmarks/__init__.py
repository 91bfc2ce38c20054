"""Benchmarks: `python -m benchmarks` (agent workload) and `python -m benchmarks compaction`."""
