"""The mutants benchmark: seeded resiliency bugs in a copy of the trainer, and which of the catalogue's
scenarios and `chaos explore` catch each (`python -m benchmarks mutants`; docs/performance.md)."""
