"""Benchmarks of the resiliency stack under the chaos harness: `python -m benchmarks` (docs/performance.md)."""
